"""Train the video feature network of arvis's domain FVD (``arvis/weights/video-features``).

A :class:`arvis.models.video_features.VideoFeatureNet` learns the 24 video classes of
:mod:`arvis.data.video` from 8-frame 64-px clips — the training clips of the video GPT (same cache) —
with plain cross-entropy, AdamW, warm-up + cosine learning rate and an EMA of the weights (the EMA is
evaluated and shipped). Classes differ by motion (``camera pan left`` / ``pan right``, ``emoji grow`` /
``shrink``...) as much as by content, so the features must encode motion. No augmentation that could
change a class (no flips, no time reversal). Checkpoints are atomic and a rerun resumes.

Export: fp16 safetensors and the training metrics. ``eval/cards.py --evaluate`` then reloads the
shipped weights and evaluates them on held-out clips (never trained on): accuracy, and the domain FVD of
controls against held-out clips — an independent held-out draw (the floor), the same clips with their
frames shuffled in time, frozen on their first frame, and reconstructed by the per-frame VQ tokenizer —
and writes ``metrics.json`` and the model card. Usage::

    python -m arvis.training.train_video_features --out arvis/weights/video-features --scratch runs/video/features
    python eval/cards.py --model arvis/weights/video-features --evaluate
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from arvis.training.common import (
    EMA,
    setup_logging,
    training_command,
)
from arvis.training.loop import LoopSettings, TrainingLoop
from arvis.utils.files import atomic_directory


@dataclass(frozen=True)
class VideoFeatureConfig:
    channels: tuple[int, ...] = (16, 32, 64, 96)
    num_train: int = 4000  # the video GPT's training clips (shared cache)
    num_val: int = 400
    resolution: int = 64
    num_frames: int = 8
    data_seed: int = 0
    steps: int = 600
    batch_size: int = 16
    lr: float = 2e-3
    warmup: int = 50
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.05
    ema_decay: float = 0.99
    log_every: int = 25
    eval_every: int = 200
    ckpt_every: int = 50


PRESETS = {
    "default": VideoFeatureConfig(),
    "smoke": VideoFeatureConfig(channels=(4, 8), num_train=8, num_val=4, resolution=16, steps=3, batch_size=4,
                                log_every=1, eval_every=3, ckpt_every=2),
}


def _clips(cfg: VideoFeatureConfig, split: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from arvis.data.video import build_video_clips

    data = build_video_clips(n, split, cfg.num_frames, cfg.resolution, seed=seed, cache=True, progress=n > 500)
    return data.clips, data.labels


def _batch(clips: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(clips).permute(0, 1, 4, 2, 3).float()  # [B, T, 3, R, R] in [0, 255]


@torch.no_grad()
def accuracy(net: Any, clips: np.ndarray, labels: np.ndarray, batch_size: int = 50) -> float:
    net.eval()
    hits = 0
    for i in range(0, len(clips), batch_size):
        hits += int((net(_batch(clips[i:i + batch_size])).argmax(-1).numpy() == labels[i:i + batch_size]).sum())
    return hits / max(len(clips), 1)


def train(cfg: VideoFeatureConfig, scratch: Path, threads: int = 1) -> tuple[Any, dict[str, Any]]:
    from arvis.data.video import VIDEO_CLASSES
    from arvis.models.video_features import VideoFeatureNet

    torch.set_num_threads(threads)
    scratch.mkdir(parents=True, exist_ok=True)
    log = setup_logging(scratch / "train.log", "train_video_features")
    train_clips, train_labels = _clips(cfg, "train", cfg.num_train, cfg.data_seed)
    val_clips, val_labels = _clips(cfg, "heldout", cfg.num_val, cfg.data_seed + 11)
    torch.manual_seed(cfg.data_seed)  # conv init draws from the global RNG (training script only)
    net = VideoFeatureNet(num_classes=len(VIDEO_CLASSES), class_names=list(VIDEO_CLASSES), image_size=cfg.resolution,
                          num_frames=cfg.num_frames, channels=cfg.channels)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    ema = EMA(net.state_dict().values(), cfg.ema_decay)
    rng = np.random.default_rng([cfg.data_seed, 31, 0])  # the stream a run from step 0 always had

    def loss_fn(step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        index = rng.integers(0, len(train_clips), cfg.batch_size)
        return F.cross_entropy(net(_batch(train_clips[index])), torch.from_numpy(train_labels[index])), {}

    def evaluation(step: int) -> dict[str, float]:
        figures = {"val_accuracy": accuracy(net, val_clips, val_labels)}
        net.train()
        return figures

    loop = TrainingLoop("train video features", LoopSettings.of(cfg, grad_clip=None), cfg, (), scratch / "checkpoint.pt",
                        net, opt, list(net.parameters()), ema, lambda: net.state_dict().values(), rng, loss_fn, log,
                        history="loss", eval_fn=evaluation)
    loop.resume()
    net.train()
    loop.run()
    state = {"step": loop.step, "seconds": loop.elapsed, "history": loop.records}
    ema.copy_to(net.state_dict().values())
    net.eval()
    return net, state


def export(net: Any, cfg: VideoFeatureConfig, state: dict[str, Any], out: Path, command: str) -> dict[str, Any]:
    """fp16 safetensors folder + ``training_metrics.json``, written atomically (staged, then one rename).

    Evaluation (held-out accuracy, domain FVD controls) and the model card are the eval layer's:
    ``python eval/cards.py --model OUT --evaluate``.
    """
    metrics = {"config": dataclasses.asdict(cfg), "params": sum(p.numel() for p in net.parameters()),
               "steps": state["step"], "train_hours": state["seconds"] / 3600,
               "final_train_loss": state["history"][-1]["loss"] if state["history"] else None,
               "history": state["history"], "command": command}
    with atomic_directory(out) as staged:
        net.half().save_pretrained(str(staged), safe_serialization=True)
        (staged / "training_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m arvis.training.train_video_features", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="default")
    p.add_argument("--out", required=True)
    p.add_argument("--scratch", required=True)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    cfg = PRESETS[args.preset]
    if args.steps is not None:
        cfg = dataclasses.replace(cfg, steps=args.steps)
    command = training_command("train_video_features", argv)
    net, state = train(cfg, Path(args.scratch), args.threads)
    metrics = export(net, cfg, state, Path(args.out), command)
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}, indent=2))
    return metrics


if __name__ == "__main__":
    main()
