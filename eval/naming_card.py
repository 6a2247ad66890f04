#!/usr/bin/env python
"""Can a reader name what a model drew? The naming record and captioned sample grid of a model's card.

    python eval/naming_card.py --model var --samples-dir <scratch>/naming-var --json docs/figures/naming/var.json \
        --grid docs/var-emoji-samples.png
    python eval/naming_card.py --model emu3 --samples-dir <scratch>/naming-emu3 --json docs/figures/naming/emu3.json \
        --grid docs/emu3-emoji-samples.png          # text-conditional: the prompts are the emoji names
    python eval/naming_card.py --model video --samples-dir <scratch>/naming-video --json docs/figures/naming/video.json \
        --grid docs/video-emoji-samples.png --columns 2   # a clip per name; every frame is named

Draws ``--num`` plain samples with ``eval/sample.py`` (resumable; class ``i mod K`` of a one-class-per-emoji model,
or, for a text-conditional model, the named emoji's names as prompts, ``i mod K``; for a video model, clip ``i``
of class ``i mod K`` seeded ``seed * 10**6 + i``, stored as a strip of its frames, and every frame is named),
then writes the emoji CLIP's top-1 naming of the samples among the ``K`` names beside the real renders' and the tokenizer round trip's
(:mod:`arvis.eval.naming`), and a grid of the first ``K`` samples captioned with what was asked for. A record
names its model, seed and method; the figures come from it alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from model_card import draw_samples, sample_grid
from PIL import Image


def draw_clips(pipe, folder: Path, num: int, seed: int, batch: int = 4) -> list[int]:
    """Clip ``i`` (class ``i mod K``, seeded ``seed * 10**6 + i``) as ``folder/{i:06d}.png``, a strip of its frames;
    clips already there are kept (a clip is a pure function of its index). Returns the labels."""
    from arvis.utils.random import make_generators

    folder.mkdir(parents=True, exist_ok=True)
    k = len(pipe.class_names)
    labels = [i % k for i in range(num)]
    todo = [i for i in range(num) if not (folder / f"{i:06d}.png").is_file()]
    pipe.set_progress_bar_config(disable=True)
    for start in range(0, len(todo), batch):
        idx = todo[start:start + batch]
        out = pipe(class_labels=[labels[i] for i in idx], generator=make_generators([seed * 10**6 + i for i in idx]),
                   output_type="np")
        for i, clip in zip(idx, (out.frames * 255).round().astype(np.uint8), strict=True):
            path = folder / f"{i:06d}.png"
            Image.fromarray(np.concatenate(list(clip), axis=1)).save(path.with_suffix(".tmp.png"))
            path.with_suffix(".tmp.png").replace(path)
    return labels


def real_clip_frames_named(pipe, num: int, frames: int, resolution: int, names: list[str]) -> dict[str, Any]:
    """How often the emoji CLIP names the frames of ``num`` held-out real clips of the named emoji (seed 1, the
    validation clips' stream), as they are and round-tripped through ``pipe``'s tokenizer: a video model's ceiling,
    below the centred renders' (a moving emoji is drawn smaller, 0.5-1.15 of a render's size, and off-centre);
    with where their subject is and how big (:func:`arvis.eval.video_metrics.subject_statistics`)."""
    from arvis.data.video import build_video_clips
    from arvis.eval.naming import naming_rates, tokenizer_roundtrip
    from arvis.eval.video_metrics import subject_statistics

    clips = build_video_clips(num, "heldout", frames, resolution, seed=1, kinds=("emoji",), named=True)
    real = clips.clips.reshape(-1, *clips.clips.shape[2:])
    labels = [int(k) for k in clips.labels for _ in range(frames)]
    return {"real_clips": num,
            "clip_real_clip_frames_named": naming_rates(real, labels, names)["class_consistency"],
            "clip_real_clip_frames_roundtrip_named": naming_rates(tokenizer_roundtrip(pipe)(real), labels,
                                                                  names)["class_consistency"],
            "real_clip_subject": subject_statistics(clips.clips)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a shipped alias or a pipeline folder")
    p.add_argument("--samples-dir", required=True, type=Path)
    p.add_argument("--num", type=int, default=None, help="samples (default: one per name)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", required=True, type=Path)
    p.add_argument("--grid", type=Path, default=None)
    p.add_argument("--columns", type=int, default=12)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--method", default="ar", help="the decoding method and its options, as `eval/sample.py` takes "
                   "them (images only; e.g. ar:final_std=0.05 for the causal MAR sampler with a noisy last step)")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    from arvis.data.sources import class_names
    from arvis.eval.naming import naming_rates, tokenizer_roundtrip
    from arvis.eval.provenance import provenance
    from arvis.hub import load_pipeline
    from arvis.utils.paths import display_path

    pipe, defaults, model = load_pipeline(args.model, torch.float32, "cpu")
    names = list(class_names("emoji-names"))
    num = args.num or len(names)
    video = type(pipe).__name__ == "VideoPipeline"  # clips: every frame is named
    text = not video and pipe.capabilities.conditioning != "class"
    prompts = None
    if text:
        prompts = args.samples_dir.with_suffix(".prompts.txt")
        prompts.parent.mkdir(parents=True, exist_ok=True)
        prompts.write_text("\n".join(names) + "\n")
    elif list(pipe.transformer.config.class_names or []) != names:
        raise SystemExit(f"{args.model}: its classes are not the named emoji (train it with --data emoji-names)")
    if video and args.method != "ar":
        raise SystemExit("--method: a video model's clips are drawn with plain AR (its default sampling)")
    if video:
        labels = draw_clips(pipe, args.samples_dir, num, args.seed)
        strips = [np.asarray(Image.open(args.samples_dir / f"{i:06d}.png").convert("RGB")) for i in range(num)]
        side = strips[0].shape[0]
        frames = [s[:, j:j + side] for s in strips for j in range(0, s.shape[1], side)]
        per_clip = len(frames) // num
        images, frame_labels = np.stack(frames), [k for k in labels for _ in range(per_clip)]
    else:
        draw_samples(args.model, args.samples_dir, num, args.seed, prompts, args.method)
        records = sorted(json.loads((args.samples_dir / "manifest.json").read_text())["images"],
                         key=lambda r: r["file"])
        labels = [names.index(r["prompt"]) if text else r["label"] for r in records]
        images = np.stack([np.asarray(Image.open(args.samples_dir / r["file"]).convert("RGB")) for r in records])
        frame_labels = labels
    rates = naming_rates(images, frame_labels, names, tokenizer_roundtrip(pipe))
    if video:  # the data's own frames (a moving emoji is drawn smaller and off-centre), and where the subject is
        from arvis.eval.fid import load_extractor
        from arvis.eval.video_metrics import per_frame_fid, subject_statistics

        clips = images.reshape(num, per_clip, *images.shape[1:])
        rates["sample_subject"] = subject_statistics(clips)
        # the quality stage's per-frame FID (held-out moving named emoji, emoji domain network) of these clips: how
        # far the frames the CLIP names sit from the data's (guidance trades one for the other)
        rates["sample_per_frame_fid"] = per_frame_fid(clips, load_extractor("domain-emoji"), named=True,
                                                      floor=False).fid
        rates.update(real_clip_frames_named(pipe, 3 * num, per_clip, int(images.shape[1]), names))
    result = {"model": args.model, "model_sha256": model.sha256,
              "conditioning": "prompt" if text else "class", "samples_dir": display_path(args.samples_dir),
              "num": num, "seed": args.seed, "method": args.method, "sampling_defaults": defaults,
              "resolution": int(images.shape[1]), **({"frames_per_clip": per_clip} if video else {}),
              **rates}
    if args.grid:
        captions = [names[k] for k in labels]
        result["grid"] = display_path(sample_grid(args.samples_dir, args.grid, min(num, len(names)), args.columns,
                                                  captions))
    result.update(provenance())
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("versions", "machine")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
