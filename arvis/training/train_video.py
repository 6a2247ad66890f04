"""Train arvis's shipped video GPT (:class:`arvis.models.video.VideoTransformer`) on tokenised offline clips.

Data: :func:`arvis.data.video.build_video_clips` — camera motion over the photos, moving / growing /
orbiting / morphing OpenMoji emoji and bouncing scikit-learn digits, 8 frames of 64 px, class = one of
the 24 video classes. Every frame is tokenised by the shipped per-frame VQ (``vq-photos``: 8x8 codes at
64 px), so a clip is ``8 x 8 x 8 = 512`` tokens in frame-major raster order. The training loop is
:func:`arvis.training.train_gpt.train` (teacher-forced cross-entropy, class dropout for CFG, AdamW,
cosine schedule, EMA, atomic resumable checkpoints, better-of raw/EMA export), with this module's data
and model builders. Example::

    python -m arvis.training.train_video --preset video --data emoji-names --vq arvis/weights/vq-emoji \\
        --num-train 4096 --steps 5000 --out runs/video/export --scratch runs/video/run --threads 1

then ``python -m arvis.training.train_video assemble --transformer .../export/transformer --vq
arvis/weights/vq-emoji-64 --out arvis/weights/video-emoji`` writes the pipeline folder (the 64 px decoder shares
``vq-emoji``'s encoder and codebook, so the codes the transformer learnt are the same).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arvis.training import train_gpt
from arvis.training.common import command_option, ship_training_metrics, training_command
from arvis.training.train_gpt import GPTTrainConfig
from arvis.utils.files import atomic_directory
from arvis.utils.model_card import ModelCard, Section, Training, table

#: Frames per clip (``T``) of the shipped model; the frame side in pixels is the preset's ``resolution``.
NUM_FRAMES = 8

PRESETS: dict[str, GPTTrainConfig] = {
    # Sized for this shared CPU (one niced thread): 1.6M parameters, ~6 s per step of 8 clips unloaded; the
    # per-frame tokenisation of the clips (~0.15 s a frame) costs as much as several hundred steps.
    "video": GPTTrainConfig(dim=160, n_layer=4, n_head=2, resolution=64, num_train=800, num_val=64, batch_size=8,
                            steps=600, warmup=40, eval_every=150, log_every=25),
    "smoke": GPTTrainConfig(dim=32, n_layer=1, n_head=2, resolution=16, steps=3, batch_size=4, num_train=8,
                            num_val=4, log_every=1, eval_every=3, checkpoint_every=2),
}


def clip_codes(vq: Any, clips: np.ndarray, batch: int = 64) -> np.ndarray:
    """Per-frame VQ codes of ``uint8 [n, T, R, R, 3]`` clips → ``int16 [n, T * h * w]`` (frame-major raster)."""
    n, T = clips.shape[:2]
    codes = train_gpt.encode_codes(vq, clips.reshape(n * T, *clips.shape[2:]), batch)
    return codes.reshape(n, -1)


def build_video_dataset(cfg: GPTTrainConfig, vq: Any, scratch: Path, split: str, n: int) -> dict[str, np.ndarray]:
    """Codes ``[n, T*h*w]`` and video-class labels of ``n`` clips of ``split``, cached in ``scratch``."""
    from arvis.data.video import build_video_clips

    named = cfg.data == "emoji-names"
    path = scratch / f"data-video-{split}-{n}-{cfg.data_seed}-{cfg.resolution}-{NUM_FRAMES}{'-named' if named else ''}.npz"
    if path.exists():
        return dict(np.load(path, allow_pickle=False))
    seed = cfg.data_seed if split == "train" else cfg.data_seed + 1
    clips = build_video_clips(n, split, NUM_FRAMES, cfg.resolution, seed=seed, cache=True, progress=n > 100,
                              **({"kinds": ("emoji",), "named": True} if named else {}))
    data = {"codes": clip_codes(vq, clips.clips), "labels": clips.labels.astype(np.int64)}
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **data)
    tmp.replace(path)
    return data


def video_class_names(data: str) -> tuple[str, ...]:
    """The video classes of ``--data``: the 24 motion / digit classes (``photos``, the mixed clips) or the named
    emoji (``emoji-names``: moving emoji, one class per emoji)."""
    from arvis.data.sources import class_names
    from arvis.data.video import VIDEO_CLASSES

    if data not in ("photos", "emoji-names"):
        raise ValueError(f"data: the video clips are 'photos' (mixed clips, 24 classes) or 'emoji-names', got {data!r}")
    return VIDEO_CLASSES if data == "photos" else class_names(data)


def build_video_models(cfg: GPTTrainConfig, vocab_size: int, grid: int) -> tuple[Any, None]:
    """The video GPT for ``grid x grid`` tokens per frame (no text encoder)."""
    from arvis.models.video import VideoTransformer

    names = video_class_names(cfg.data)

    model = VideoTransformer(dim=cfg.dim, n_layer=cfg.n_layer, n_head=cfg.n_head, multiple_of=cfg.multiple_of,
                             token_dropout_p=cfg.dropout, resid_dropout_p=cfg.dropout, ffn_dropout_p=cfg.dropout,
                             num_classes=len(names), class_dropout_prob=cfg.class_dropout,
                             vocab_size=vocab_size, num_frames=NUM_FRAMES, frame_size=grid, class_names=list(names))
    model.init_weights(torch.Generator().manual_seed(cfg.data_seed))
    return model, None


def assemble(transformer: str, vq: str, out: str, sampling_defaults: dict[str, Any]) -> Path:
    """Write the :class:`~arvis.pipelines.pipeline_video.VideoPipeline` folder ``out`` (atomically replaced).

    The tokenizer is a relative link to ``vq`` (stored once, as the image pipelines do); the model card
    and metrics of an existing folder are kept.
    """
    from arvis.models.video import VideoTransformer
    from arvis.pipelines.pipeline_video import VideoPipeline
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel

    out_path = Path(out)
    pipe = VideoPipeline(transformer=VideoTransformer.from_pretrained(transformer, torch_dtype=torch.float16),
                         vqvae=LlamaGenVQModel.from_pretrained(vq, torch_dtype=torch.float16))
    with atomic_directory(out_path, keep=("README.md", "metrics.json", "training_metrics.json")) as staged:
        pipe.save_pretrained(staged, safe_serialization=True)
        shutil.rmtree(staged / "vqvae")
        os.symlink(os.path.relpath(Path(vq).resolve(), out_path.resolve()), staged / "vqvae")
        (staged / "sampling_defaults.json").write_text(json.dumps(sampling_defaults, indent=2) + "\n")
    return out_path


def subject_rows(naming: dict[str, Any]) -> list[str]:
    """Where the samples' subject is and how big, beside the real clips' (lines of a card; none if not measured)."""
    if "sample_subject" not in naming or "real_clip_subject" not in naming:
        return []
    rows = [(label, f"{100 * st['subject_share']:.1f}%", f"{100 * st['subject_share_change']:.1f} points",
             f"{100 * st['border_share']:.2f}%", f"{st['centre_offset']:.1f} px")
            for label, st in (("samples", naming["sample_subject"]),
                              (f"{naming['real_clips']} real clips", naming["real_clip_subject"]))]
    fid = naming.get("sample_per_frame_fid")
    return ["Where the subject is (`arvis.eval.video_metrics.subject_statistics`; a pixel is the subject's where "
            "its darkest channel is below 0.85):", "",
            table(("frames of", "subject's share of a frame", "its change between frames", "border pixels that are "
                   "the subject's", "centroid from the centre"), rows), "",
            *([f"The per-frame FID of these {naming['num']} clips against held-out moving named emoji (the quality "
               f"figures' measure, emoji domain network): {fid:.2f}. A subject larger than the data's is easier to "
               "name and further from the data's frames: guidance trades one for the other (docs/video.md).", ""]
              if fid is not None else [])]


def model_card(folder: Path, records: Path) -> ModelCard:
    """The model card of an assembled video pipeline folder, from its ``training_metrics.json`` and the figure
    records (``eval/figures.py --suite video``) when present."""
    m = json.loads((folder / "training_metrics.json").read_text())
    c = m["preset_config"]
    config = json.loads((folder / "transformer" / "config.json").read_text())
    weights = folder / "transformer" / "diffusion_pytorch_model.safetensors"
    T, side = config["num_frames"], config["frame_size"]
    vals = [(h["step"], h["val_loss"]) for h in m["history"] if "val_loss" in h]
    named = c.get("data", "photos") == "emoji-names"
    names = video_class_names(c.get("data", "photos"))
    example = names[0] if named else "emoji orbit"
    vq_link = folder / "vqvae"
    vq_name = Path(os.readlink(vq_link)).name if vq_link.is_symlink() else "vq-photos"
    trained_on = Path(command_option(m["command"], "--vq", "arvis/weights/vq-photos")).name
    export = command_option(m["command"], "--out", "runs/video/export")
    tokenised = f"`{trained_on}`" + (
        f" (the linked `{vq_name}` has the same encoder and codebook, so the same codes; only its decoder differs)"
        if trained_on != vq_name else "")
    if named:
        from arvis.data.sources import data_recipe
        from arvis.data.video import NAMED_EMOJI_MOTIONS

        data = (f"`arvis.data.video.build_video_clips(named=True)`: {c['num_train']:,} training clips (seed "
                f"{c['data_seed']}) of {T} frames at {c['resolution']} px, each one of the {len(names)} named emoji on "
                f"white under one motion ({', '.join(m.replace('_', ' ') for m in NAMED_EMOJI_MOTIONS)}); the class "
                f"is the emoji, the motion is the model's to choose. " + data_recipe("emoji-names", c["resolution"])
                + f" Every frame tokenised by {tokenised} ({side} x {side} codes). Validation: {c['num_val']} other "
                "clips of the same emoji (seed 1).")
    else:
        data = (f"`arvis.data.video.build_video_clips`: {c['num_train']:,} training clips (seed {c['data_seed']}) of "
                f"{T} frames at {c['resolution']} px, a third each of camera motion over the 22 offline photos (pans "
                "and zooms), OpenMoji emoji (slides, growth, shrinking, orbits, cross-dissolves into another emoji; "
                "**all emojis designed by OpenMoji - the open-source emoji and icon project, License: CC BY-SA 4.0**) "
                f"and bouncing scikit-learn digits; every frame tokenised by `{vq_name}` ({side} x {side} codes). "
                f"Validation: {c['num_val']} held-out clips (held-out photo strips, held-out emoji, held-out digit "
                "samples).")
    training = table(("", ""), [
        ("steps", m["steps"]),
        ("wall time", f"{m['train_hours']:.2f} h (on a shared 2-core machine)"),
        ("final training loss", f"{m['final_train_loss']:.3f}"),
        ("validation loss (raw / EMA)", f"{m['validation_loss_raw']:.3f} / {m['validation_loss_ema']:.3f}"),
        ("validation perplexity", f"{m['validation_perplexity']:.1f}"),
        ("validation loss by step", ", ".join(f"{s}: {v:.3f}" for s, v in vals))])
    warm = ""
    if m.get("init_from"):  # the start's weights are those at its path in the commit that ships this model
        warm = (f" The transformer was warm-started (`--init-from`) from `{m['init_from']}`, a LlamaGen c2i transformer "
                "of the same width, depth, vocabulary and classes (the blocks are shared; its 2-D rotary positions "
                "become 3-D here, and training adapts to them), with a fresh optimiser and schedule. Those weights "
                "are the ones at that path in the commit that ships this model (`git log -1 --format=%h -- "
                f"arvis/weights/{folder.name}/transformer`): on a checkout of it, the command runs as written.")
    quality = records / "quality.json"
    if quality.is_file():
        q = json.loads(quality.read_text())
        ars = [r for r in q["rows"] if r["method"] == "ar"]
        f, v = ars[0]["per_frame_fid"], ars[0]["domain_fvd"]
        if len(ars) > 1:  # one AR row per seed set: the seed-to-seed spread beside the figures
            fids = " / ".join(format(r["per_frame_fid"]["fid"], ".2f") for r in ars)
            fvds = " / ".join(format(r["domain_fvd"]["fvd"], ".2f") for r in ars)
            bases = ", ".join(str(r["seed_base"]) for r in ars)
            others = (f"; on the {len(ars)} seed sets (bases {bases}) per-frame FID {fids} and domain FVD {fvds} "
                      "(the seed-to-seed noise)")
        elif "ar_second_seed" in q:
            others = (f"; with other seeds {q['ar_second_seed']['per_frame_fid']['fid']:.2f} and "
                      f"{q['ar_second_seed']['domain_fvd']['fvd']:.2f} (the seed-to-seed noise)")
        else:
            others = ""
        evaluation = (f"{q['num_clips']} AR clips (CFG {q['sampling']['guidance_scale']}): per-frame "
                      f"FID {f['fid']:.2f} (real-vs-real floor {f['real_vs_real_floor']:.2f}), domain FVD {v['fvd']:.2f} "
                      f"(floor {v['real_vs_real_floor']:.2f}){others}"
                      ". Decoding speed and the other methods: docs/figures/video.md.")
    else:
        evaluation = (f"Held-out validation loss {m['validation_loss']:.3f} (perplexity "
                      f"{m['validation_perplexity']:.1f}; a uniform model scores {math.log(config['vocab_size']):.2f}) "
                      f"on {c['num_val']} held-out clips. Per-frame FID and domain FVD are not measured yet: "
                      "`python eval/figures.py --suite video --only quality` writes them (docs/figures/video.md), and this card picks "
                      f"them up when rebuilt (`python eval/cards.py --model arvis/weights/{folder.name}`).")
    naming_path = Path("docs/figures/naming") / f"{folder.name}.json"
    if named and naming_path.is_file():
        n = json.loads(naming_path.read_text())
        evaluation += "\n\n" + "\n".join([
            "Can a reader name the emoji in every frame? `python eval/naming_card.py --model video --samples-dir "
            f"<scratch>/naming-video --json {naming_path} --grid {n.get('grid', '<grid>')} --columns 2`: one AR "
            f"clip per emoji (seed {n['seed']}), every frame named by the emoji CLIP among the {len(names)} names.",
            "", table(("", "named right"), [
                (f"frames of the samples ({n['images']} frames of {n['num']} clips)",
                 f"**{100 * n['class_consistency']:.1f}%**"),
                (f"real renders of the emoji at {n['resolution']} px (the CLIP's ceiling; chance "
                 f"{100 * n['chance']:.1f}%)", f"{100 * n['clip_real_renders_named']:.1f}%"),
                (f"those renders round-tripped through `{vq_name}` (the tokenizer's ceiling)",
                 f"{100 * n['clip_vq_reconstructions_named']:.1f}%"),
                *([(f"frames of {n['real_clips']} held-out real clips of the emoji (the data's own frames: a moving "
                    "emoji is drawn at 0.5-1.15 of a render's size, off-centre)",
                    f"{100 * n['clip_real_clip_frames_named']:.1f}%"),
                   (f"those frames round-tripped through `{vq_name}`",
                    f"{100 * n['clip_real_clip_frames_roundtrip_named']:.1f}%")]
                  if "clip_real_clip_frames_named" in n else [])]), "",
            *subject_rows(n),
            f"Sample clips, one strip of {T} frames per emoji, captioned: `{n.get('grid', 'not drawn')}`."])
    return ModelCard(
        title=f"{folder.name}: arvis's class-conditional video model",
        summary="A `VideoPipeline` folder: a LlamaGen-style GPT with 3-D rotary positions over a "
                f"{T} x {side} x {side} token layout (`transformer`, `arvis.models.video.VideoTransformer`) and the "
                f"per-frame VQ tokenizer (`vqvae`, a relative link to `../{vq_name}`, stored once). It is the "
                "model of `arvis generate --model video`, of the video figures (docs/figures/video.md) and of the "
                "demo's video tab.",
        usage="\n".join([
            "from arvis import VideoPipeline",
            "from arvis.pipelines.pipeline_video import export_frames",
            f'pipe = VideoPipeline.from_pretrained("arvis/weights/{folder.name}")',
            f'out = pipe(class_labels=["{example}"], method="mc-sjd", coupling="gumbel", window=128,',
            '           init="previous_frame_distribution")',
            f'export_frames(out.frames[0], "{example.replace(" ", "-")}.gif", fps=4)']),
        architecture=Section("Architecture", (
            f"{config['n_layer']} layers, {config['n_head']} heads, width {config['dim']}, SwiGLU (multiple of "
            f"{config['multiple_of']}), RMSNorm, no biases, untied head; 3-D RoPE (a quarter of each head's rotary "
            f"pairs rotate with the frame index, the rest with row and column); one class slot ({len(names)} "
            f"{'emoji' if named else 'video classes'} + the null class for CFG); vocabulary {config['vocab_size']} "
            f"(the VQ's codebook). {m['params']:,} parameters, {weights.stat().st_size / 1e6:.1f} MB as fp16 "
            "safetensors.")),
        data=Section("Data", data),
        training=Training(
            [m["command"], f"python -m arvis.training.train_video assemble --transformer {export}/transformer --vq "
             f"arvis/weights/{vq_name} --out arvis/weights/{folder.name}"],
            "`arvis.training.train_gpt`'s loop: teacher-forced cross-entropy, 10% class dropout (CFG), token / "
            f"residual / FFN dropout {c['dropout']}, AdamW (lr {c['lr']}, weight decay {c['weight_decay']}), "
            f"{c['warmup']} warm-up steps, cosine to {c['min_lr_ratio']}x, batch {c['batch_size']} clips, EMA "
            f"{c['ema_decay']}; the better of raw and EMA weights on validation loss is exported "
            f"({m['exported_weights']})." + warm + "\n\n" + training),
        evaluation=Section("Evaluation", evaluation),
        limits=("A small model trained for an hour on a shared CPU: 64 px clips whose emoji are 8 x 8 codes per frame, "
                "so most read as a coloured shape of the right outline and colours rather than a drawing (the emoji "
                "CLIP's rate above), and motion is learned only as far as the figures show. It exists to make the "
                "video path and its speed and quality figures real, not to be a good video generator."
                if named else
                "A small model trained briefly on a shared CPU: clips are 64 px and blurry (the per-frame VQ "
                "reconstructs emoji and digits at 64 px poorly: see the tokenizer table in docs/figures/video.md), "
                "and motion is learned only as far as the figures show. It exists to make the video path and its "
                "speed figures real, not to be a good video generator."))


def _command(argv: list[str] | None) -> str:
    return training_command("train_video", argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["assemble"]:
        p = argparse.ArgumentParser(prog="python -m arvis.training.train_video assemble")
        p.add_argument("--transformer", required=True, help="an exported transformer folder")
        p.add_argument("--vq", default="arvis/weights/vq-photos")
        p.add_argument("--out", required=True)
        p.add_argument("--guidance-scale", type=float, default=3.0)
        p.add_argument("--top-k", type=int, default=0)
        a = p.parse_args(args_list[1:])
        path = assemble(a.transformer, a.vq, a.out, {"guidance_scale": a.guidance_scale, "top_k": a.top_k})
        ship_training_metrics(a.transformer, path / "training_metrics.json")
        print(f"assembled {path}")
        return {"out": str(path)}
    p = argparse.ArgumentParser(prog="python -m arvis.training.train_video", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="video")
    p.add_argument("--out", required=True, help="export folder (gets transformer/ and training_metrics.json)")
    p.add_argument("--scratch", required=True, help="checkpoints, logs and the tokenised clips")
    p.add_argument("--vq", default="arvis/weights/vq-photos", help="the per-frame VQ tokenizer folder")
    for name in ("steps", "batch_size", "num_train", "num_val", "dim", "n_layer", "n_head"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--data", choices=("photos", "emoji-names"), default=None,
                   help="mixed clips (camera, emoji, digits; 24 classes) or moving named emoji (one class per emoji)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--init-from", type=Path, default=None,
                   help="start from the weights of this transformer folder (fresh optimiser and schedule): a video "
                        "transformer, or a LlamaGen c2i transformer of the same width, depth, vocabulary and classes")
    args = p.parse_args(args_list)
    overrides = {k: getattr(args, k) for k in ("steps", "batch_size", "num_train", "num_val", "dim", "n_layer",
                                               "n_head", "lr", "data") if getattr(args, k) is not None}
    cfg = dataclasses.replace(PRESETS[args.preset], **overrides)
    video_class_names(cfg.data)
    result = train_gpt.train(cfg, args.vq, Path(args.scratch), args.threads, dataset_fn=build_video_dataset,
                             models_fn=build_video_models, init_from=args.init_from)
    metrics = train_gpt.export(result, cfg, Path(args.out), _command(argv))
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}, indent=2))
    return metrics


if __name__ == "__main__":
    main()
