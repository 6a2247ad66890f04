"""Train the domain feature networks arvis ships for FID (``arvis/weights/domain-classifier``, ``domain-emoji``).

A :class:`arvis.models.domain_net.DomainClassifier` learns to tell the classes of a data set apart
(``--data photos``: the 22 photos of :data:`arvis.data.photos.PHOTO_CLASSES`, from 128-px crops;
``--data emoji``: the 52 classes of :data:`arvis.data.emoji.EMOJI_CLASSES`, from 128-px renders of the
training emoji, evaluated on held-out emoji); its pooled penultimate features are the FID feature space of
:mod:`arvis.eval.fid` (Inception weights are not reachable offline).

Recipe:

* data: a fresh stream of *train-region* crops every step (:func:`arvis.data.crops.sample_crop_specs`:
  side 0.25-1.0 of the region's short side, random position, random left-right flip, bicubic resize to
  128 px). No held-out pixel is ever seen in training. No further augmentation on purpose: the class is
  the photo's identity, colour included, and invariance to blur or noise would blind FID to exactly the
  degradations it must measure;
* plain cross-entropy (no label smoothing, which squeezes the penultimate features towards class
  centres), AdamW, warm-up + cosine learning rate, EMA of the weights (the EMA is evaluated and shipped);
* checkpoints every ``ckpt_every`` steps into ``--scratch`` (atomic) and automatic resume.

Export: fp16 safetensors and ``training_metrics.json``. ``eval/cards.py --evaluate`` then reloads the shipped
file through :func:`arvis.models.domain_net.load_domain_network` and evaluates it on data never trained on —
held-out accuracy, the real-vs-real FID floor, train-vs-held-out FID and the FID of degraded held-out crops
(blur, noise, JPEG, down/up-sampling), all through :mod:`arvis.eval.fid` — and writes ``metrics.json`` and
the model card. Usage::

    python -m arvis.training.train_domain --out arvis/weights/domain-classifier --scratch runs/domain
    python eval/cards.py --model arvis/weights/domain-classifier --evaluate
    python -m arvis.training.train_domain --out /tmp/domain-smoke --preset smoke        # seconds
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from arvis.data.sources import (
    DATA_CHOICES,
    check_data,
    class_names,
    labelled_images,
    stream_batch,
)
from arvis.models.domain_net import DomainClassifier, DomainFeatures, load_domain_network
from arvis.training.common import (
    EMA,
    dumps,
    export_only_steps,
    recorded_command,
    setup_logging,
    training_command,
)
from arvis.training.loop import LoopSettings, TrainingLoop
from arvis.utils.files import atomic_directory

__all__ = ["DomainTrainConfig", "PRESETS", "evaluate_accuracy", "export", "main", "train"]


@dataclass(frozen=True)
class DomainTrainConfig:
    """Everything that determines a domain-network training run (model shape, data, optimisation, eval)."""

    # model (DomainClassifier arguments)
    channels: tuple[int, ...] = (32, 64, 128, 256)
    convs_per_stage: int = 2
    norm_groups: int = 8
    dropout: float = 0.1
    image_size: int = 128
    # data
    data: str = "photos"  # arvis.data.sources: "photos" or "emoji"
    crop_scale: tuple[float, float] = (0.25, 1.0)
    data_seed: int = 0
    # optimisation
    steps: int = 3000
    batch_size: int = 32
    lr: float = 2e-3
    warmup: int = 100
    min_lr_ratio: float = 0.02
    weight_decay: float = 0.05
    grad_clip: float = 2.0
    ema_decay: float = 0.998
    init_seed: int = 0
    # evaluation
    eval_size: int = 1000  # held-out crops for the accuracy during training
    final_eval_size: int = 2000  # held-out crops for the final accuracy
    # evaluation of the exported file by eval/cards.py --evaluate (recorded here so that its figures reproduce)
    fid_size: int = 1000  # images per set in the FID figures
    fid_reference_size: int = 5000  # the default reference of arvis.eval.fid.compute_fid
    # bookkeeping
    log_every: int = 25
    eval_every: int = 500
    ckpt_every: int = 100

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "eval_size", "final_eval_size", "log_every", "eval_every", "ckpt_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.fid_size < 2 or self.fid_reference_size < 2:
            raise ValueError("fid_size and fid_reference_size must be >= 2")
        if self.image_size < 16:
            raise ValueError(f"image_size must be >= 16, got {self.image_size}")
        if not 0.0 < self.lr < 1.0:
            raise ValueError(f"lr must be in (0, 1), got {self.lr}")
        check_data(self.data)

    def model_kwargs(self) -> dict[str, Any]:
        names = class_names(self.data)
        return dict(num_classes=len(names), class_names=list(names), image_size=self.image_size,
                    channels=tuple(self.channels), convs_per_stage=self.convs_per_stage,
                    norm_groups=self.norm_groups, dropout=self.dropout)


PRESETS: dict[str, DomainTrainConfig] = {
    "default": DomainTrainConfig(),
    "smoke": DomainTrainConfig(channels=(8, 16), convs_per_stage=1, norm_groups=4, image_size=32, steps=4,
                               batch_size=4, warmup=1, eval_size=8, final_eval_size=8, fid_size=12,
                               fid_reference_size=12, log_every=1, eval_every=2, ckpt_every=2),
}

# Resuming may change these without invalidating a checkpoint.
_RESUMABLE = ("steps", "eval_size", "final_eval_size", "fid_size", "fid_reference_size", "log_every",
              "eval_every", "ckpt_every")


# ---------------------------------------------------------------------------------------------- data
def to_input(images: np.ndarray) -> torch.Tensor:
    """``uint8 [N, H, W, 3]`` -> ``float32 [N, 3, H, W]`` in ``[0, 255]`` (the network's input convention)."""
    return torch.from_numpy(images).permute(0, 3, 1, 2).float()


def train_batch(rng: np.random.Generator, cfg: DomainTrainConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh training images of ``cfg.data`` ``[B, 3, S, S]`` and their labels ``[B]``."""
    images, labels, _ = stream_batch(cfg.data, rng, cfg.batch_size, cfg.image_size, cfg.crop_scale)
    return to_input(images), torch.from_numpy(labels)


@torch.no_grad()
def evaluate_accuracy(net: DomainClassifier, images: np.ndarray, labels: np.ndarray, batch_size: int = 100
                      ) -> dict[str, Any]:
    """Top-1 accuracy, mean cross-entropy and per-class accuracy of ``net`` on ``uint8 [N, S, S, 3]``."""
    was_training = net.training
    net.eval()
    preds, nll = [], 0.0
    for i in range(0, len(images), batch_size):
        logits = net(to_input(images[i:i + batch_size]).to(net.dtype)).float()
        y = torch.from_numpy(labels[i:i + batch_size])
        nll += float(F.cross_entropy(logits, y, reduction="sum"))
        preds.append(logits.argmax(-1).numpy())
    net.train(was_training)
    pred = np.concatenate(preds)
    names = net.config.class_names or [str(k) for k in range(net.config.num_classes)]
    per_class = {name: float((pred[labels == k] == k).mean()) for k, name in enumerate(names) if (labels == k).any()}
    return {"accuracy": float((pred == labels).mean()), "nll": nll / len(images), "per_class": per_class}


# ---------------------------------------------------------------------------------------------- training
def _new_model(cfg: DomainTrainConfig) -> DomainClassifier:
    torch.manual_seed(cfg.init_seed)  # default nn.Module initialisation draws from the global RNG (training script)
    return DomainClassifier(**cfg.model_kwargs())


def train(cfg: DomainTrainConfig, scratch: str | os.PathLike, threads: int = 1, command: str = ""
          ) -> tuple[DomainClassifier, dict[str, Any]]:
    """Train (resuming from ``scratch/checkpoint.pt`` if present); return the EMA network and a summary.

    The checkpoint holds the model, EMA, optimiser, step, the data RNG state and the history, so a killed
    run continues from its last checkpoint with the same data stream.
    """
    scratch = Path(scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    log = setup_logging(scratch / "train.log", "arvis.train_domain")
    torch.set_num_threads(threads)
    ckpt_path = scratch / "checkpoint.pt"

    model = _new_model(cfg).train()
    params = list(model.parameters())
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.99))
    ema = EMA(params, cfg.ema_decay)
    rng = np.random.default_rng([cfg.data_seed, 4242])
    train_command = command
    ema_model = DomainClassifier(**cfg.model_kwargs()).eval()

    def ema_copy() -> DomainClassifier:
        ema_model.load_state_dict(model.state_dict())
        ema.copy_to(list(ema_model.parameters()))
        return ema_model

    def loss_fn(step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        x, y = train_batch(rng, cfg)
        logits = model(x)
        return F.cross_entropy(logits, y), {"acc": (logits.argmax(-1) == y).float().mean()}

    def evaluation(step: int) -> dict[str, float]:
        m = evaluate_accuracy(ema_copy(), eval_images, eval_labels)
        return {"accuracy": m["accuracy"], "nll": m["nll"]}

    loop = TrainingLoop("train_domain", LoopSettings.of(cfg), cfg, _RESUMABLE, ckpt_path, model, opt, params, ema,
                        lambda: params, rng, loss_fn, log, eval_fn=evaluation,
                        checkpoint_extra=lambda: {"command": train_command})
    ck = loop.resume()
    if ck is not None:
        train_command = command or str(ck.get("command", ""))  # --export-only passes no command
    else:
        log.info("new run: %d parameters, config %s", sum(p.numel() for p in params),
                 dumps(dataclasses.asdict(cfg)))
    # Held-out crops for monitoring (seed data_seed + 3: not the seeds of the exported FID figures).
    eval_images, eval_labels, _ = labelled_images(cfg.data, cfg.eval_size, "heldout", cfg.image_size,
                                                  cfg.data_seed + 3, cfg.crop_scale)
    torch.manual_seed(cfg.data_seed * 1000 + loop.step)  # nn.Dropout draws from the global RNG (training script)
    history = loop.run()
    step, elapsed = loop.step, loop.elapsed
    train_entries = [h for h in history if "eval" not in h]
    summary = {"steps": step, "train_seconds": elapsed, "history": history, "command": train_command,
               "final_train": train_entries[-1] if train_entries else {}}
    return ema_copy(), summary


# ---------------------------------------------------------------------------------------------- export
def export(model: DomainClassifier, cfg: DomainTrainConfig, out: str | os.PathLike, summary: dict[str, Any],
           command: str) -> dict[str, Any]:
    """Write fp16 weights and ``training_metrics.json`` into ``out`` (staged, then moved in one rename).

    Evaluation (accuracy, FID figures) and the model card are the eval layer's:
    ``python eval/cards.py --model OUT --evaluate``. The returned metrics add the periodic evaluations.
    """
    out = Path(out)
    with atomic_directory(out) as staged:
        fp16 = DomainClassifier(**cfg.model_kwargs())
        fp16.load_state_dict(model.state_dict())
        fp16.half().save_pretrained(str(staged), safe_serialization=True)
        shipped = load_domain_network(staged)  # what users get: fp16 file, fp32 network
        weights = staged / "diffusion_pytorch_model.safetensors"
        metrics = {
            "params": sum(p.numel() for p in shipped.parameters()),
            "safetensors_mb": os.path.getsize(weights) / 1e6,
            "fingerprint": DomainFeatures(shipped).fingerprint(),
            "steps": summary["steps"],
            "train_crops_seen": summary["steps"] * cfg.batch_size,
            "train_minutes": summary["train_seconds"] / 60,
            "torch_threads": torch.get_num_threads(),
            "final_train": summary["final_train"],
            "config": dataclasses.asdict(cfg),
            "command": summary.get("command") or command,
            "export_command": command,
        }
        (staged / "training_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return {**metrics, "eval_history": [h for h in summary["history"] if "eval" in h]}


# ---------------------------------------------------------------------------------------------- CLI
def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m arvis.training.train_domain", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="export folder (arvis.models.domain_net folder format)")
    p.add_argument("--data", choices=DATA_CHOICES, default="photos", help="training data (default photos)")
    p.add_argument("--scratch", default=None, help="checkpoints and log (default: <out>/../.<name>-scratch)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="default")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--ema-decay", type=float, default=None, help="EMA of the weights (short runs need less than 0.998)")
    p.add_argument("--channels", default=None, help="stage widths, e.g. 16,32,64,128 (default 32,64,128,256)")
    p.add_argument("--eval-size", type=int, default=None, help="held-out images of the periodic evaluations")
    p.add_argument("--final-eval-size", type=int, default=None, help="held-out images of the accuracy eval/cards.py --evaluate reports")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--export-only", action="store_true", help="export the checkpoint in --scratch without training")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """CLI entry point; returns the exported metrics."""
    args = _parse(argv)
    cfg = PRESETS[args.preset]
    overrides: dict[str, Any] = {k: v for k, v in (("steps", args.steps), ("batch_size", args.batch_size),
                                                   ("lr", args.lr), ("warmup", args.warmup), ("ema_decay", args.ema_decay),
                                                   ("eval_size", args.eval_size),
                                                   ("final_eval_size", args.final_eval_size)) if v is not None}
    for name, value in overrides.items():
        if value <= 0:  # every numeric override is a count or a rate
            raise ValueError(f"--{name.replace('_', '-')} must be > 0, got {value}")
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    if args.channels:
        overrides["channels"] = tuple(int(c) for c in args.channels.split(","))
    cfg = dataclasses.replace(cfg, **overrides, data=args.data)
    out = Path(args.out)
    scratch = Path(args.scratch) if args.scratch else out.parent / f".{out.name}-scratch"
    if args.export_only:
        cfg = dataclasses.replace(cfg, steps=export_only_steps(scratch))
    command = training_command("train_domain", argv)
    model, summary = train(cfg, scratch, threads=args.threads, command="" if args.export_only else command)
    summary["command"] = recorded_command(summary["command"], out)
    metrics = export(model, cfg, out, summary, command)
    print(json.dumps({k: v for k, v in metrics.items() if k not in ("eval_history", "config")}, indent=2))
    return metrics


if __name__ == "__main__":
    main()
