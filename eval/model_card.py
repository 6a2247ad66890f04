#!/usr/bin/env python
"""Evaluation figures of a shipped AR pipeline, for its model card.

    python eval/model_card.py --model c2i --samples-dir samples/c2i-ar --json docs/figures/model_card_c2i.json \
        --grid docs/llamagen-c2i-photos-samples.png [--num 440 --fid-record docs/figures/fid/ar-seed0-n1000.json]
    python eval/model_card.py --model t2i --samples-dir samples/t2i-ar --json docs/figures/model_card_t2i.json \
        --grid docs/llamagen-t2i-scenes-samples.png
    python eval/model_card.py --model arvis/weights/llamagen-c2i-emoji --samples-dir samples/emoji-ar \
        --json docs/figures/model_card_emoji.json --grid docs/llamagen-c2i-emoji-samples.png

Draws N plain-AR samples with ``eval/sample.py`` (resumable; class i mod classes, or the held-out scene
captions for text-conditional models), then reports: FID (domain network) against held-out real crops
with the real-vs-real floor at the same N (class-conditional models); class consistency (the domain classifier's accuracy on the
samples, beside its accuracy on held-out real crops) or CLIP score against the shuffled-caption
baseline; the latency of one 16x16 image with CFG by plain AR (fp32, median of 5); the next-token
statistics (class-conditional: :mod:`arvis.eval.token_stats`); and a sample grid PNG.

The data set of the model (its folder's ``evaluation.json``: photos, emoji or emoji-names) picks the held-out
images, the domain network (FID and class consistency; for emoji-names, whose classes are single emoji, class
consistency is the emoji CLIP naming each sample among the class names) and, for emoji, a grid captioned with
the class names.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image


def draw_samples(model: str, folder: Path, num: int, seed: int, prompts: Path | None, method: str = "ar") -> None:
    cmd = [sys.executable, str(Path(__file__).with_name("sample.py")), "--model", model, "--num-images", str(num),
           "--seed", str(seed), "--output", str(folder), "--no-progress", "--method", method]
    if prompts is not None:
        cmd += ["--prompts", str(prompts)]
    if (folder / "manifest.json").exists():
        cmd.append("--resume")
    subprocess.run(cmd, check=True)


def class_consistency(folder: Path, network: str = "domain") -> dict[str, float]:
    """Top-1 accuracy of a shipped domain classifier on generated images against their class labels."""
    from arvis.eval.domain import load_domain_network

    net = load_domain_network(network).eval()
    records = json.loads((folder / "manifest.json").read_text())["images"]
    correct = []
    with torch.no_grad():
        for start in range(0, len(records), 64):
            chunk = records[start:start + 64]
            x = torch.from_numpy(np.stack([np.asarray(Image.open(folder / r["file"]).convert("RGB"))
                                           for r in chunk])).permute(0, 3, 1, 2).float()
            pred = net(x).argmax(-1)
            correct += (pred == torch.tensor([r["label"] for r in chunk])).tolist()
    return {"class_consistency": sum(correct) / len(correct), "images": len(correct)}


def naming_accuracy(folder: Path, names: list[str], pipe: Any, clip: str = "clip-emoji") -> dict[str, float]:
    """Class consistency of a one-class-per-emoji model (:func:`arvis.eval.naming.naming_rates`): how often the
    emoji CLIP picks a sample's own class name among all the class names, beside the real renders of those emoji
    (the CLIP's ceiling) and those renders round-tripped through ``pipe``'s tokenizer (the tokenizer's reference:
    samples are drawn by the same decoder, so its blur and texture limit them as they limit these)."""
    from arvis.eval.naming import naming_rates, tokenizer_roundtrip

    records = sorted(json.loads((folder / "manifest.json").read_text())["images"], key=lambda r: r["file"])
    images = np.stack([np.asarray(Image.open(folder / r["file"]).convert("RGB")) for r in records])
    return naming_rates(images, [r["label"] for r in records], names, tokenizer_roundtrip(pipe), clip)


def sample_grid(folder: Path, path: Path, count: int, columns: int, captions: list[str] | None = None) -> Path:
    """The first ``count`` samples in rows of ``columns``; with ``captions`` (one per sample, in file order) each
    tile gets its caption written under it."""
    from PIL import ImageDraw, ImageFont

    files = sorted(folder.glob("[0-9]*.png"))[:count]
    tiles = [Image.open(f).convert("RGB") for f in files]
    w, h = tiles[0].size
    band = 30 if captions else 0
    rows = -(-len(tiles) // columns)
    grid = Image.new("RGB", (columns * w, rows * (h + band)), "white")
    draw = ImageDraw.Draw(grid)
    font = ImageFont.load_default(size=12) if captions else None
    for i, tile in enumerate(tiles):
        x, y = (i % columns) * w, (i // columns) * (h + band)
        grid.paste(tile, (x, y))
        if captions:
            words, lines = captions[i].split(), [""]
            for word in words:  # wrap to the tile width, two lines at most
                trial = f"{lines[-1]} {word}".strip()
                if draw.textlength(trial, font=font) <= w - 4 or not lines[-1]:
                    lines[-1] = trial
                else:
                    lines.append(word)
            for k, line in enumerate(lines[:2]):
                draw.text((x + w // 2, y + h + 1 + 14 * k), line, fill="black", font=font, anchor="mt")
    path.parent.mkdir(parents=True, exist_ok=True)
    grid.save(path)
    return path


def one_image_latency(pipe: Any, defaults: dict[str, Any], repeats: int = 5) -> dict[str, Any]:
    """Wall time of ``pipe(...)`` for one image with CFG by plain AR (tokens + VQ decode), fp32."""
    pipe.set_progress_bar_config(disable=True)
    call = ({"class_labels": [0]} if pipe.transformer.is_class_conditional else {"prompt": ["a red circle"]})
    times = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        pipe(**call, generator=torch.Generator().manual_seed(i), method="ar", **defaults)
        times.append(time.perf_counter() - t0)
    return {"one_image_ar_cfg_s": statistics.median(times[1:]), "one_image_ar_cfg_repeats_s": times[1:],
            "sampling_defaults": defaults}


def build_scenes_images(num: int) -> list[np.ndarray]:
    """The real held-out scenes whose captions the text-conditional samples used (the ceiling)."""
    from arvis.data.scenes import render_scene, sample_scene

    return [render_scene(sample_scene(3, i, split="heldout"), 128) for i in range(num)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="c2i")
    p.add_argument("--samples-dir", required=True, type=Path)
    p.add_argument("--num", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", required=True, type=Path)
    p.add_argument("--grid", type=Path, default=None)
    p.add_argument("--fid-record", type=Path, default=None,
                   help="take FID from this `arvis fid --model ... --floor --json` record (e.g. the plain-AR record "
                        "of eval/figures.py) instead of computing it on the --num samples")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from arvis.data.sources import model_data
    from arvis.eval.fid import DATA_EXTRACTORS, compute_fid
    from arvis.eval.provenance import provenance
    from arvis.hub import load_pipeline

    pipe, defaults, model = load_pipeline(args.model, torch.float32, "cpu")
    data = model_data(model.path)
    class_conditional = pipe.transformer.is_class_conditional
    prompts = None
    if not class_conditional:  # held-out captions (never seen in training) cycled over indices
        from arvis.data.scenes import sample_scene

        prompts = args.samples_dir.with_suffix(".prompts.txt")
        prompts.parent.mkdir(parents=True, exist_ok=True)
        prompts.write_text("\n".join(sample_scene(3, i, split="heldout").caption for i in range(args.num)) + "\n")
    draw_samples(args.model, args.samples_dir, args.num, args.seed, prompts)

    from arvis.utils.paths import display_path

    result: dict = {"model": args.model, "data": data, "samples_dir": display_path(args.samples_dir), "num": args.num,
                    "seed": args.seed}
    # FID against held-out photo crops says nothing about scene images: text-conditional models get CLIP score.
    if class_conditional:
        if args.fid_record:
            rec = json.loads(args.fid_record.read_text())
            result.update(fid=rec["fid"], real_vs_real_floor=rec["real_vs_real_floor"], fid_num=rec["num_generated"],
                          extractor=rec["extractor"], fid_record=str(args.fid_record))
        else:
            fid = compute_fid(args.samples_dir, floor=True, progress=False, data=data)
            result.update(fid=fid.fid, real_vs_real_floor=fid.floor, fid_num=args.num,
                          extractor=fid.generated.extractor)
        if data == "emoji-names":  # classes are single emoji: the emoji CLIP names them
            result.update(naming_accuracy(args.samples_dir, list(pipe.transformer.config.class_names), pipe))
        else:
            from arvis.eval.domain import resolve_domain_path

            result.update(class_consistency(args.samples_dir, DATA_EXTRACTORS[data]))
            metrics = json.loads((resolve_domain_path(DATA_EXTRACTORS[data]) / "metrics.json").read_text())
            result["classifier_heldout_real_accuracy"] = metrics["heldout_accuracy"]
        from arvis.engine.sampling import SamplingConfig
        from arvis.eval.token_stats import class_requests, token_statistics

        sampling = SamplingConfig(**{k: v for k, v in defaults.items() if k in ("guidance_scale", "top_k",
                                                                                  "top_p", "temperature")})
        n_cls = int(pipe.transformer.config.num_classes)
        result["token_stats"] = token_statistics(class_requests(pipe.transformer, [i % n_cls for i in range(64)]),
                                                 sampling)
    else:
        from arvis.eval.clip_score import folder_captions, load_clip

        scorer = load_clip()
        files, texts = folder_captions(args.samples_dir)
        images = [Image.open(f).convert("RGB") for f in files]
        shuffled = [texts[i] for i in np.random.default_rng(0).permutation(len(texts))]
        matched, mismatched = scorer.score(images, texts), scorer.score(images, shuffled)
        result["clip_score"] = matched.score
        result["clip_score_shuffled_captions"] = mismatched.score  # clamped at 0, as CLIP score is defined
        result["clip_cosine_x100_shuffled_mean"] = float(np.mean(mismatched.per_pair))  # before clamping
        result["matched_beats_shuffled"] = float(np.mean(np.array(matched.per_pair) > np.array(mismatched.per_pair)))
        real = [Image.fromarray(x) for x in build_scenes_images(len(texts))]
        result["clip_score_real_heldout_scenes"] = scorer.score(real, texts).score
    result.update(one_image_latency(pipe, defaults))
    if args.grid and data != "photos":  # emoji: every class (twice for the 52 groups), captioned with its name
        names = list(pipe.transformer.config.class_names)
        records = json.loads((args.samples_dir / "manifest.json").read_text())["images"]
        captions = [names[r["label"]] for r in sorted(records, key=lambda r: r["file"])]
        per_class, columns = (2, 13) if data == "emoji" else (1, 12)
        result["grid"] = str(sample_grid(args.samples_dir, args.grid, per_class * len(names), columns, captions))
    elif args.grid:
        result["grid"] = str(sample_grid(args.samples_dir, args.grid, 44 if class_conditional else 32, 11
                                         if class_conditional else 8))
    result.update(provenance())
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("token_stats", "versions", "machine")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
