"""Train arvis's shipped video GPT (:class:`arvis.models.video.VideoTransformer`) on tokenised offline clips.

Data: :func:`arvis.data.video.build_video_clips` — camera motion over the photos, moving / growing /
orbiting / morphing OpenMoji emoji and bouncing scikit-learn digits, 8 frames of 64 px, class = one of
the 24 video classes. Every frame is tokenised by the shipped per-frame VQ (``vq-photos``: 8x8 codes at
64 px), so a clip is ``8 x 8 x 8 = 512`` tokens in frame-major raster order. The training loop is
:func:`arvis.training.train_gpt.train` (teacher-forced cross-entropy, class dropout for CFG, AdamW,
cosine schedule, EMA, atomic resumable checkpoints, better-of raw/EMA export), with this module's data
and model builders. Example::

    python -m arvis.training.train_video --preset video --out /work/scratch/video/export \\
        --scratch /work/scratch/video/run --threads 1

then ``python -m arvis.training.train_video assemble --transformer .../export/transformer --out
arvis/weights/video-clips`` writes the pipeline folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arvis.training import train_gpt
from arvis.training.train_gpt import GPTTrainConfig

#: Frames per clip (``T``) of the shipped model; the frame side in pixels is the preset's ``resolution``.
NUM_FRAMES = 8

PRESETS: dict[str, GPTTrainConfig] = {
    # Sized for this shared CPU (one niced thread): 1.6M parameters, ~6 s per step of 8 clips unloaded; the
    # per-frame tokenisation of the clips (~0.15 s a frame) costs as much as several hundred steps.
    "video": GPTTrainConfig(dim=160, n_layer=4, n_head=2, resolution=64, num_train=1500, num_val=120, batch_size=8,
                            steps=1000, warmup=50, eval_every=200, log_every=25),
    "smoke": GPTTrainConfig(dim=32, n_layer=1, n_head=2, resolution=16, steps=3, batch_size=4, num_train=8,
                            num_val=4, log_every=1, eval_every=3, checkpoint_every=2),
}


def clip_codes(vq: Any, clips: np.ndarray, batch: int = 64) -> np.ndarray:
    """Per-frame VQ codes of ``uint8 [n, T, R, R, 3]`` clips → ``int16 [n, T * h * w]`` (frame-major raster)."""
    n, T = clips.shape[:2]
    codes = train_gpt._encode(vq, clips.reshape(n * T, *clips.shape[2:]), batch)
    return codes.reshape(n, -1)


def build_video_dataset(cfg: GPTTrainConfig, vq: Any, scratch: Path, split: str, n: int) -> dict[str, np.ndarray]:
    """Codes ``[n, T*h*w]`` and video-class labels of ``n`` clips of ``split``, cached in ``scratch``."""
    from arvis.data.video import build_video_clips

    path = scratch / f"data-video-{split}-{n}-{cfg.data_seed}-{cfg.resolution}-{NUM_FRAMES}.npz"
    if path.exists():
        return dict(np.load(path, allow_pickle=False))
    seed = cfg.data_seed if split == "train" else cfg.data_seed + 1
    clips = build_video_clips(n, split, NUM_FRAMES, cfg.resolution, seed=seed, cache=True, progress=n > 100)
    data = {"codes": clip_codes(vq, clips.clips), "labels": clips.labels.astype(np.int64)}
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **data)
    tmp.replace(path)
    return data


def build_video_models(cfg: GPTTrainConfig, vocab_size: int, grid: int) -> tuple[Any, None]:
    """The video GPT for ``grid x grid`` tokens per frame (no text encoder)."""
    from arvis.data.video import VIDEO_CLASSES
    from arvis.models.video import VideoTransformer

    model = VideoTransformer(dim=cfg.dim, n_layer=cfg.n_layer, n_head=cfg.n_head, multiple_of=cfg.multiple_of,
                             token_dropout_p=cfg.dropout, resid_dropout_p=cfg.dropout, ffn_dropout_p=cfg.dropout,
                             num_classes=len(VIDEO_CLASSES), class_dropout_prob=cfg.class_dropout,
                             vocab_size=vocab_size, num_frames=NUM_FRAMES, frame_size=grid,
                             class_names=list(VIDEO_CLASSES))
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
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_path.parent, prefix=f".{out_path.name}.") as tmp:
        staged = Path(tmp) / "pipeline"
        pipe.save_pretrained(staged, safe_serialization=True)
        shutil.rmtree(staged / "vqvae")
        os.symlink(os.path.relpath(Path(vq).resolve(), out_path.resolve()), staged / "vqvae")
        (staged / "sampling_defaults.json").write_text(json.dumps(sampling_defaults, indent=2) + "\n")
        if out_path.exists():
            for name in ("README.md", "metrics.json", "training_metrics.json"):
                if (out_path / name).exists():
                    shutil.copy2(out_path / name, staged / name)
            shutil.rmtree(out_path)
        staged.replace(out_path)
    return out_path


def _command(argv: list[str] | None) -> str:
    return "python -m arvis.training.train_video " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))


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
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(args_list)
    overrides = {k: getattr(args, k) for k in ("steps", "batch_size", "num_train", "num_val", "dim", "n_layer",
                                               "n_head", "lr") if getattr(args, k) is not None}
    cfg = dataclasses.replace(PRESETS[args.preset], **overrides)
    result = train_gpt.train(cfg, args.vq, Path(args.scratch), args.threads, dataset_fn=build_video_dataset,
                             models_fn=build_video_models)
    metrics = train_gpt.export(result, cfg, Path(args.out), _command(argv))
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}, indent=2))
    return metrics


if __name__ == "__main__":
    main()
