"""Train arvis's shipped VAR transformers (a target and a small draft/refiner) on multi-scale VQ codes.

Data (``--data``, :mod:`arvis.data.sources`): the class-conditional photo crops of :mod:`arvis.data.crops`
(label = source photo), or ``emoji-names`` (one class per emoji, augmented views), tokenised once by the
multi-scale tokenizer (:func:`arvis.training.train_gpt.build_dataset`, cached in the
scratch folder): every crop becomes its 130-token pyramid (scales 1, 2, 3, 4, 6, 8 at 64 px).

Training follows VAR's trainer (``trainer.py``): teacher forcing with the tokenizer's inputs (the
running reconstruction down-sampled to each next scale, :meth:`~arvis.tokenizers.var_vq.MultiScaleQuantizer.teacher_inputs`),
block-causal attention, cross-entropy averaged over all tokens of the pyramid, 10% class dropout to
the null class (CFG), AdamW (betas 0.9/0.95, weight decay 0.05), gradient clipping at 2.0 and VAR's
initialisation; plus a warm-up + cosine schedule and an EMA of the weights. The better of the raw and
EMA weights on held-out validation loss is exported (fp16 safetensors). Checkpoints are atomic and a
rerun with the same ``--scratch`` resumes. Example (the shipped ``var-emoji`` target: its card has the exact
commands; the retired photo pair ``var-photos`` is rebuilt by the commands docs/models.md names)::

    python -m arvis.training.train_var --preset target --data emoji-names --vq arvis/weights/var-vq-emoji \\
        --out /tmp/var-target --scratch /tmp/var-target-scratch --threads 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from arvis.data.sources import DATA_CHOICES, check_data, class_names
from arvis.models.var import VARTransformer
from arvis.tokenizers.var_vq import VARVQModel
from arvis.training.common import (
    EMA,
    dumps,
    export_modules,
    setup_logging,
    training_command,
)
from arvis.training.loop import LoopSettings, TrainingLoop
from arvis.training.train_gpt import build_dataset


@dataclass(frozen=True)
class VARTrainConfig:
    depth: int = 4
    embed_dim: int = 192
    num_heads: int = 3
    mlp_ratio: float = 4.0
    drop_path_rate: float = 0.05
    cond_drop_rate: float = 0.1
    steps: int = 400
    batch_size: int = 32
    lr: float = 6e-4
    warmup: int = 50
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.05
    grad_clip: float = 2.0
    ema_decay: float = 0.998
    num_train: int = 8000
    num_val: int = 512
    data_seed: int = 0
    resolution: int = 64
    kind: str = "c2i"  # read by train_gpt.build_dataset (class-conditional images)
    data: str = "photos"  # arvis.data.sources, read by train_gpt.build_dataset: "photos" or "emoji-names"
    augment: bool = True  # read by train_gpt.build_dataset (photo crops are random crops anyway)
    log_every: int = 25
    eval_every: int = 250
    checkpoint_every: int = 25

    def __post_init__(self) -> None:
        for name in ("depth", "embed_dim", "num_heads", "steps", "batch_size", "num_train", "num_val"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.embed_dim % self.num_heads:
            raise ValueError(f"embed_dim {self.embed_dim} must be divisible by num_heads {self.num_heads}")
        check_data(self.data)


PRESETS: dict[str, VARTrainConfig] = {
    "target": VARTrainConfig(),
    "draft": VARTrainConfig(depth=2, embed_dim=128, num_heads=2, drop_path_rate=0.0, steps=2000, warmup=100),
    "smoke": VARTrainConfig(depth=1, embed_dim=32, num_heads=2, steps=3, batch_size=4, num_train=8, num_val=4,
                            log_every=1, eval_every=3, checkpoint_every=2, warmup=1),
}


def build_model(cfg: VARTrainConfig, vq: VARVQModel) -> VARTransformer:
    names = class_names(cfg.data)
    model = VARTransformer(vocab_size=vq.codebook_size, Cvae=vq.config.z_channels, num_classes=len(names),
                           depth=cfg.depth, embed_dim=cfg.embed_dim, num_heads=cfg.num_heads, mlp_ratio=cfg.mlp_ratio,
                           drop_path_rate=cfg.drop_path_rate, cond_drop_rate=cfg.cond_drop_rate,
                           patch_nums=vq.patch_nums, class_names=list(names))
    model.init_weights(torch.Generator().manual_seed(cfg.data_seed))
    return model


def batch_loss(model: VARTransformer, vq: VARVQModel, codes: torch.Tensor, labels: torch.Tensor,
               drop: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy over every token of the pyramids ``codes [B, L]``, and the last scale's."""
    with torch.no_grad():
        inputs = vq.quantize.teacher_inputs(vq.split_codes(codes))
    logits = model(labels, inputs, drop)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), codes.reshape(-1), reduction="none").view(codes.shape)
    last = model.scale_layout.patch_nums[-1] ** 2
    return ce.mean(), ce[:, -last:].mean()


@torch.no_grad()
def validation(model: VARTransformer, vq: VARVQModel, data: dict[str, np.ndarray], batch_size: int = 64
               ) -> dict[str, float]:
    model.eval()
    total = tail = 0.0
    n = len(data["codes"])
    for i in range(0, n, batch_size):
        codes = torch.from_numpy(data["codes"][i:i + batch_size].astype(np.int64))
        labels = torch.from_numpy(data["labels"][i:i + batch_size])
        a, b = batch_loss(model, vq, codes, labels, None)
        total += float(a) * len(codes)
        tail += float(b) * len(codes)
    model.train()
    return {"val_loss": total / n, "val_loss_last_scale": tail / n}


def train(cfg: VARTrainConfig, vq_path: str, scratch: Path, threads: int = 1, data: Path | None = None) -> dict[str, Any]:
    """Train (resuming from ``scratch``); the tokenised crops are cached in ``data`` (default ``scratch``),
    which the target and the draft run may share."""
    torch.set_num_threads(threads)
    scratch.mkdir(parents=True, exist_ok=True)
    data = data or scratch
    data.mkdir(parents=True, exist_ok=True)
    log = setup_logging(scratch / "train.log", "train_var")
    vq = VARVQModel.from_pretrained(vq_path, torch_dtype=torch.float32).eval()
    cfg = dataclasses.replace(cfg, resolution=vq.image_size)  # crops are rendered at the tokenizer's size
    train_data = build_dataset(cfg, vq, data, "train", cfg.num_train)  # type: ignore[arg-type]
    val_data = build_dataset(cfg, vq, data, "heldout", cfg.num_val)  # type: ignore[arg-type]
    model = build_model(cfg, vq)
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg.weight_decay},
                             {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.95))
    ema = EMA(params, cfg.ema_decay)
    rng = np.random.default_rng([cfg.data_seed, 11, 0])  # the stream a run from step 0 always had
    gen = torch.Generator()  # class dropout

    def loss_fn(step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        index = rng.integers(0, len(train_data["codes"]), cfg.batch_size)
        codes = torch.from_numpy(train_data["codes"][index].astype(np.int64))
        labels = torch.from_numpy(train_data["labels"][index])
        drop = torch.rand(cfg.batch_size, generator=gen) < cfg.cond_drop_rate
        return batch_loss(model, vq, codes, labels, drop)[0], {}

    loop = TrainingLoop("train var", LoopSettings.of(cfg), cfg, ("steps", "eval_every", "checkpoint_every", "log_every"),
                        scratch / "checkpoint.pt", model, opt, params, ema, lambda: params, rng, loss_fn, log,
                        history="loss", eval_fn=lambda step: validation(model, vq, val_data), generators=[gen])
    if loop.resume() is None:
        log.info(f"new run: {sum(p.numel() for p in params)} parameters, config {dumps(dataclasses.asdict(cfg))}")
    gen.manual_seed(cfg.data_seed * 1000 + loop.step)
    torch.manual_seed(cfg.data_seed + loop.step)  # drop-path draws from the global RNG (training script)
    model.train()
    loop.run()
    state = {"step": loop.step, "seconds": loop.elapsed, "history": loop.records}
    # Keep the better of the raw and the EMA weights by held-out loss (a short run's EMA can lag).
    raw = validation(model, vq, val_data)
    raw_weights = [p.detach().clone() for p in params]
    ema.copy_to(params)
    averaged = validation(model, vq, val_data)
    use_ema = averaged["val_loss"] <= raw["val_loss"]
    if not use_ema:
        with torch.no_grad():
            for p, w in zip(params, raw_weights, strict=True):
                p.copy_(w)
    log.info(f"done: {state['step']} steps, {state['seconds'] / 3600:.2f} h, validation loss raw {raw['val_loss']:.4f}, "
             f"EMA {averaged['val_loss']:.4f}; exporting the {'EMA' if use_ema else 'raw'} weights")
    return {"model": model.eval(), "state": state, "raw": raw, "ema": averaged, "exported": "ema" if use_ema else "raw"}


def export(result: dict[str, Any], cfg: VARTrainConfig, out: Path, command: str) -> dict[str, Any]:
    """fp16 safetensors ``out/transformer`` and ``out/training_metrics.json`` (written atomically)."""
    out.mkdir(parents=True, exist_ok=True)
    chosen = result[result["exported"]]
    metrics = {
        "preset_config": dataclasses.asdict(cfg),
        "params": sum(p.numel() for p in result["model"].parameters()),
        "steps": result["state"]["step"],
        "train_hours": result["state"]["seconds"] / 3600,
        "final_train_loss": result["state"]["history"][-1]["loss"] if result["state"]["history"] else None,
        **chosen,
        "validation_loss_raw": result["raw"]["val_loss"],
        "validation_loss_ema": result["ema"]["val_loss"],
        "exported_weights": result["exported"],
        "validation_perplexity": math.exp(chosen["val_loss"]),
        "history": result["state"]["history"],
        "command": command,
    }
    export_modules(out, {"transformer": result["model"]}, metrics)
    return metrics


def tokenizer_data(vq: str | Path) -> str | None:
    """The class-conditional data set matching what the tokenizer at ``vq`` was fitted on (its ``metrics.json``:
    emoji → the named emoji, one class each), ``None`` when it records none."""
    try:
        data = json.loads((Path(vq) / "metrics.json").read_text())["config"]["data"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {"emoji": "emoji-names"}.get(data, data)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m arvis.training.train_var", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="target")
    p.add_argument("--out", required=True, help="export folder (gets transformer/)")
    p.add_argument("--scratch", required=True, help="checkpoints and log")
    p.add_argument("--data-cache", default=None,
                   help="tokenised data cache folder (default: --scratch; share it between runs on one tokenizer)")
    p.add_argument("--vq", default="arvis/weights/var-vq-emoji",
                   help="the multi-scale tokenizer folder (default: the shipped one, fitted on emoji)")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--num-train", type=int, default=None)
    p.add_argument("--num-val", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--eval-every", type=int, default=None)
    p.add_argument("--data", choices=DATA_CHOICES, default=None,
                   help="class-conditional training images (arvis.data.sources; default: what --vq was fitted on, "
                        "emoji → emoji-names; else the preset's)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if args.data is None:  # a tokenizer meets the images it was fitted on
        args.data = tokenizer_data(args.vq)
    overrides = {k: v for k, v in (("steps", args.steps), ("batch_size", args.batch_size), ("num_train", args.num_train),
                                   ("num_val", args.num_val), ("lr", args.lr), ("eval_every", args.eval_every),
                                   ("data", args.data)) if v is not None}
    cfg = dataclasses.replace(PRESETS[args.preset], **overrides)
    command = training_command("train_var", argv)
    result = train(cfg, args.vq, Path(args.scratch), args.threads, Path(args.data_cache) if args.data_cache else None)
    metrics = export(result, cfg, Path(args.out), command)
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}, indent=2))
    return metrics


if __name__ == "__main__":
    main()
