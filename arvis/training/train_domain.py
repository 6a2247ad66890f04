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

Export: fp16 safetensors, reloaded through :func:`arvis.models.domain_net.load_domain_network` and evaluated: held-out accuracy, the real-vs-real FID
floor, train-vs-held-out FID and the FID of degraded held-out crops (blur, noise, JPEG, down/up-sampling),
all through :mod:`arvis.eval.fid`. Usage::

    python -m arvis.training.train_domain --out arvis/weights/domain-classifier --scratch /work/scratch/domain
    python -m arvis.training.train_domain --out /tmp/domain-smoke --preset smoke        # seconds
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageFilter
from tqdm.auto import tqdm

from arvis.data.sources import (
    DATA_CHOICES,
    check_data,
    class_names,
    data_recipe,
    heldout_images_fn,
    labelled_images,
    stream_batch,
)
from arvis.models.domain_net import DomainClassifier, DomainFeatures, load_domain_network
from arvis.training.common import (
    EMA,
    atomic_torch_save,
    cosine_lr,
    dumps,
    export_note,
    load_checkpoint,
    recorded_command,
    restore_training_state,
    setup_logging,
)
from arvis.utils.serialization import atomic_directory

__all__ = ["DomainTrainConfig", "PRESETS", "degrade", "evaluate_accuracy", "export", "main", "train"]


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
    fid_size: int = 1000  # images per set in the exported FID figures
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
    step, elapsed, history, train_command = 0, 0.0, [], command
    ck = restore_training_state(ckpt_path, cfg, _RESUMABLE, model, opt, ema, rng, log)
    if ck is not None:
        step, elapsed = int(ck["step"]), float(ck["elapsed"])
        history = json.loads(ck["history"])
        train_command = command or str(ck.get("command", ""))  # --export-only passes no command
    else:
        log.info("new run: %d parameters, config %s", sum(p.numel() for p in params),
                 dumps(dataclasses.asdict(cfg)))

    def save_checkpoint() -> None:
        atomic_torch_save({"config": json.dumps(dataclasses.asdict(cfg)), "model": model.state_dict(),
                           "optimizer": opt.state_dict(), "ema": ema.shadow, "step": step, "elapsed": elapsed,
                           "rng_state": json.dumps(rng.bit_generator.state), "history": json.dumps(history),
                           "command": train_command}, ckpt_path)

    ema_model = DomainClassifier(**cfg.model_kwargs()).eval()

    def ema_copy() -> DomainClassifier:
        ema_model.load_state_dict(model.state_dict())
        ema.copy_to(list(ema_model.parameters()))
        return ema_model

    # Held-out crops for monitoring (seed data_seed + 3: not the seeds of the exported FID figures).
    eval_images, eval_labels, _ = labelled_images(cfg.data, cfg.eval_size, "heldout", cfg.image_size,
                                                  cfg.data_seed + 3, cfg.crop_scale)
    torch.manual_seed(cfg.data_seed * 1000 + step)  # nn.Dropout draws from the global RNG (training script)
    bar = tqdm(total=cfg.steps, initial=step, desc="train_domain", mininterval=10 if sys.stderr.isatty() else 60)
    window: dict[str, float] = {}
    t_last = time.time()
    while step < cfg.steps:
        x, y = train_batch(rng, cfg)
        lr = cosine_lr(step, cfg.steps, cfg.lr, cfg.warmup, cfg.min_lr_ratio)
        for g in opt.param_groups:
            g["lr"] = lr
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        ema.update(params)
        step += 1
        window["loss"] = window.get("loss", 0.0) + float(loss.detach())
        window["acc"] = window.get("acc", 0.0) + float((logits.argmax(-1) == y).float().mean())
        window["grad_norm"] = window.get("grad_norm", 0.0) + float(grad_norm)
        window["n"] = window.get("n", 0) + 1
        now = time.time()
        elapsed += now - t_last
        t_last = now
        bar.update(1)
        if step % cfg.log_every == 0 or step == cfg.steps:
            n = window.pop("n")
            entry = {k: v / n for k, v in window.items()}
            entry.update(step=step, lr=lr, sec=elapsed)
            history.append(entry)
            log.info("train %s", dumps(entry))
            window = {}
        if step % cfg.eval_every == 0 or step == cfg.steps:
            m = evaluate_accuracy(ema_copy(), eval_images, eval_labels)
            history.append({"step": step, "eval": {"accuracy": m["accuracy"], "nll": m["nll"]}})
            log.info("eval step %d (ema, %d held-out crops): accuracy %.4f nll %.4f", step, cfg.eval_size,
                     m["accuracy"], m["nll"])
            t_last = time.time()
        if step % cfg.ckpt_every == 0 or step == cfg.steps:
            save_checkpoint()
            t_last = time.time()
    bar.close()
    train_entries = [h for h in history if "eval" not in h]
    summary = {"steps": step, "train_seconds": elapsed, "history": history, "command": train_command,
               "final_train": train_entries[-1] if train_entries else {}}
    return ema_copy(), summary


# ---------------------------------------------------------------------------------------------- degradations
def _per_image(images: np.ndarray, fn: Callable[[Image.Image], Image.Image]) -> np.ndarray:
    return np.stack([np.asarray(fn(Image.fromarray(im)).convert("RGB")) for im in images])


def _jpeg(quality: int) -> Callable[[Image.Image], Image.Image]:
    def fn(im: Image.Image) -> Image.Image:
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=quality)
        buf.seek(0)
        return Image.open(buf).convert("RGB")

    return fn


def degrade(images: np.ndarray, kind: str, amount: float, seed: int = 0) -> np.ndarray:
    """Degraded copies of ``uint8 [N, S, S, 3]`` images.

    Args:
        kind: ``"blur"`` (PIL Gaussian blur, ``amount`` = sigma in px), ``"noise"`` (additive Gaussian noise,
            ``amount`` = std in 0..255 units, rounded and clipped), ``"jpeg"`` (``amount`` = quality) or
            ``"downup"`` (bicubic down-sampling by ``amount``, then back up).
        seed: noise seed.
    """
    if kind == "blur":
        return _per_image(images, lambda im: im.filter(ImageFilter.GaussianBlur(radius=amount)))
    if kind == "noise":
        noise = np.random.default_rng(seed).normal(0.0, amount, size=images.shape)
        return np.clip(np.round(images.astype(np.float64) + noise), 0, 255).astype(np.uint8)
    if kind == "jpeg":
        return _per_image(images, _jpeg(int(amount)))
    if kind == "downup":
        s = images.shape[1]
        small = max(1, round(s / amount))
        return _per_image(images, lambda im: im.resize((small, small), Image.Resampling.BICUBIC).resize(
            (s, s), Image.Resampling.BICUBIC))
    raise ValueError(f"kind must be one of 'blur', 'noise', 'jpeg', 'downup', got {kind!r}")


DEGRADATIONS: tuple[tuple[str, float], ...] = (
    ("blur", 0.5), ("blur", 1.0), ("blur", 1.5), ("blur", 2.0),
    ("noise", 4.0), ("noise", 8.0), ("noise", 16.0),
    ("jpeg", 75), ("jpeg", 30), ("jpeg", 10),
    ("downup", 2.0), ("downup", 4.0),
)


# ---------------------------------------------------------------------------------------------- export
def fid_figures(net: DomainClassifier, cfg: DomainTrainConfig, vq: str | None = None, progress: bool = True
                ) -> dict[str, Any]:
    """FID figures of ``net`` through :mod:`arvis.eval.fid` (``fid_size`` images per set)."""
    from arvis.eval import fid as fidlib

    extractor = DomainFeatures(net)
    n, s = cfg.fid_size, cfg.image_size
    kw = dict(batch_size=100, progress=False)

    def stats(images: np.ndarray, source: str) -> fidlib.FIDStatistics:
        return fidlib.array_statistics(images, extractor, source=source, **kw)

    images_fn = heldout_images_fn(cfg.data)
    held_a = images_fn(n, s, fidlib.REFERENCE_SEED)
    held_b = images_fn(n, s, fidlib.FLOOR_SEED)
    train_c, _, _ = labelled_images(cfg.data, n, "train", s, cfg.data_seed + 5, cfg.crop_scale)
    a, b, c = stats(held_a, "heldout-a"), stats(held_b, "heldout-b"), stats(train_c, "train")
    reference = fidlib.heldout_statistics(extractor, num=cfg.fid_reference_size, resolution=s, cache=False,
                                          images_fn=images_fn, **kw)
    out: dict[str, Any] = {
        "fid_size": n,
        "reference_size": cfg.fid_reference_size,
        "heldout_vs_heldout": fidlib.frechet_distance(a, b),
        "train_vs_heldout": fidlib.frechet_distance(c, a),
        "heldout_vs_reference": fidlib.frechet_distance(b, reference),
        "train_vs_reference": fidlib.frechet_distance(c, reference),
    }
    degraded: dict[str, dict[str, float]] = {}
    for kind, amount in tqdm(DEGRADATIONS, desc="degraded FID", disable=not progress):
        d = stats(degrade(held_b, kind, amount, seed=cfg.data_seed), f"{kind}-{amount}")
        degraded[f"{kind} {amount:g}"] = {"vs_heldout": fidlib.frechet_distance(d, a),
                                          "vs_reference": fidlib.frechet_distance(d, reference)}
    out["degraded"] = degraded
    if vq is not None:
        out["vq_reconstruction"] = _vq_figures(vq, held_b, a, reference, stats)
    # How spread the feature space is (a saturated space has a few dominant directions).
    eig = np.clip(np.linalg.eigvalsh(a.sigma), 0, None)
    out["feature_dim"] = int(a.mu.shape[0])
    out["participation_ratio"] = float(eig.sum() ** 2 / max((eig ** 2).sum(), 1e-30))
    return out


def _vq_figures(vq: str, images: np.ndarray, a: Any, reference: Any, stats: Callable) -> dict[str, Any]:
    """rFID of a VQ tokenizer folder's reconstructions of the held-out set ``images``."""
    from arvis.eval import fid as fidlib
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel

    model = LlamaGenVQModel.from_pretrained(vq, torch_dtype=torch.float32).eval()
    recon = []
    with torch.no_grad():
        for i in range(0, len(images), 50):
            x = torch.from_numpy(images[i:i + 50]).permute(0, 3, 1, 2).float() / 127.5 - 1.0
            y = model.decode_codes(model.encode(x))
            recon.append(((y.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).numpy())
    d = stats(np.concatenate(recon), "vq")
    return {"folder": str(vq), "vs_heldout": fidlib.frechet_distance(d, a),
            "vs_reference": fidlib.frechet_distance(d, reference)}


def export(model: DomainClassifier, cfg: DomainTrainConfig, out: str | os.PathLike, summary: dict[str, Any],
           command: str, vq: str | None = None, progress: bool = True) -> dict[str, Any]:
    """Write fp16 weights, evaluate the reloaded shipped file, add ``metrics.json`` and ``README.md``.

    The folder is assembled in a temporary directory and moved onto ``out`` in one rename, so ``out`` is
    never half-written.
    """
    out = Path(out)
    with atomic_directory(out) as staged:
        fp16 = DomainClassifier(**cfg.model_kwargs())
        fp16.load_state_dict(model.state_dict())
        fp16.half().save_pretrained(str(staged), safe_serialization=True)
        shipped = load_domain_network(staged)  # what users get: fp16 file, fp32 network
        t0 = time.time()
        images, labels, _ = labelled_images(cfg.data, cfg.final_eval_size, "heldout", cfg.image_size,
                                            cfg.data_seed + 4, cfg.crop_scale)
        acc = evaluate_accuracy(shipped, images, labels)
        train_images, train_labels, _ = labelled_images(cfg.data, cfg.final_eval_size, "train", cfg.image_size,
                                                        cfg.data_seed + 6, cfg.crop_scale)
        train_acc = evaluate_accuracy(shipped, train_images, train_labels)
        fids = fid_figures(shipped, cfg, vq=vq, progress=progress)
        weights = staged / "diffusion_pytorch_model.safetensors"
        metrics = {
            "heldout_accuracy": acc["accuracy"],
            "heldout_nll": acc["nll"],
            "heldout_per_class_accuracy": acc["per_class"],
            "train_crop_accuracy": train_acc["accuracy"],
            "accuracy_crops": cfg.final_eval_size,
            "fid": fids,
            "params": sum(p.numel() for p in shipped.parameters()),
            "safetensors_mb": os.path.getsize(weights) / 1e6,
            "fingerprint": DomainFeatures(shipped).fingerprint(),
            "steps": summary["steps"],
            "train_crops_seen": summary["steps"] * cfg.batch_size,
            "train_minutes": summary["train_seconds"] / 60,
            "eval_minutes": (time.time() - t0) / 60,
            "torch_threads": torch.get_num_threads(),
            "final_train": summary["final_train"],
            "config": dataclasses.asdict(cfg),
            "command": summary.get("command") or command,
            "export_command": command,
        }
        (staged / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        (staged / "README.md").write_text(model_card(cfg, metrics, out.name))
        history = [h for h in summary["history"] if "eval" in h]
        metrics["eval_history"] = history
    return metrics


def _data_section(cfg: DomainTrainConfig, m: dict[str, Any]) -> str:
    if cfg.data == "emoji":
        return (data_recipe("emoji", cfg.image_size) + f" {m['train_crops_seen']:,} training views seen in all "
                f"(batch {cfg.batch_size}). No colour jitter and no blur or noise augmentation (the features must "
                f"stay sensitive to them). All evaluation below uses held-out emoji only (augmented views of "
                f"emoji the network never saw), except the train-vs-held-out row: held-out accuracy measures how "
                f"well the network names the *class* of an emoji it has never seen.")
    return f"""`arvis.data.crops`: every photo is split into a train region and a disjoint held-out vertical strip on
its right (25% of the width, at least 128 px). Training sees only train-region crops, drawn fresh every
step: square side {cfg.crop_scale[0]}-{cfg.crop_scale[1]} x the region's short side, random position,
random left-right flip, PIL bicubic (antialiased) resize to {cfg.image_size} px; {m['train_crops_seen']:,}
crops in all (batch {cfg.batch_size}). No colour jitter (the class is the photo, colour included), no blur
or noise augmentation (the features must stay sensitive to them). All evaluation below uses held-out
crops only, except the train-vs-held-out row."""


def model_card(cfg: DomainTrainConfig, m: dict[str, Any], name: str = "domain-classifier") -> str:
    """Markdown model card of the exported network (``name``: the folder's name)."""
    f = m["fid"]
    tl = m["final_train"]
    rows = "\n".join(f"| {k} | {v['vs_heldout']:.2f} | {v['vs_reference']:.2f} |" for k, v in f["degraded"].items())
    vq_row = ""
    if "vq_reconstruction" in f:
        v = f["vq_reconstruction"]
        vq_row = f"| VQ reconstruction (`{v['folder']}`) | {v['vs_heldout']:.2f} | {v['vs_reference']:.2f} |\n"
    worst = sorted(m["heldout_per_class_accuracy"].items(), key=lambda kv: kv[1])[:4]
    names = class_names(cfg.data)
    what = (f"to classify {len(names)}-way which offline photo (`arvis.data.photos.PHOTO_CLASSES`) a\n"
            f"{cfg.image_size}-px crop comes from" if cfg.data == "photos" else
            f"to classify {len(names)}-way which emoji class (`arvis.data.emoji.EMOJI_CLASSES`) a\n"
            f"{cfg.image_size}-px OpenMoji render belongs to")
    alias = "domain" if cfg.data == "photos" else "domain-emoji"
    unit = "crops" if cfg.data == "photos" else "emoji views"
    return f"""# {name}: arvis's FID feature network for {cfg.data}

A `DomainClassifier` (`arvis.models.domain_net`; a small GroupNorm CNN) trained by `arvis.training.train_domain`
{what}. Its global-average-pooled last stage ({f['feature_dim']}-d) is the
feature space of arvis's FID (`arvis fid`, `arvis.eval.fid`), standing in for Inception, which cannot be
downloaded here. FIDs in this space are *not* comparable with Inception FIDs from papers; compare them with
the floor below.

```python
from arvis.eval.fid import compute_fid, load_extractor
extractor = load_extractor("{alias}")          # this folder; fp16 file, fp32 network
result = compute_fid(images_uint8, extractor=extractor, floor=True{'' if cfg.data == 'photos' else ', data="emoji"'})   # vs 5000 held-out {unit}
```

## Architecture
Stem conv (stride 2) + {len(cfg.channels)} stages of widths {list(cfg.channels)} ({cfg.convs_per_stage} x
[3x3 conv, GroupNorm({cfg.norm_groups}), SiLU], every stage after the first halving the resolution), global
average pooling, dropout {cfg.dropout}, linear head. {m['params']:,} parameters, {m['safetensors_mb']:.2f} MB
as fp16 safetensors. Input: `[B, 3, {cfg.image_size}, {cfg.image_size}]` pixel values in 0..255.

## Data (no leakage)
{_data_section(cfg, m)}

## Training
```
{m['command']}
```
{export_note(m)}Cross-entropy (no label smoothing), AdamW (betas 0.9/0.99, lr {cfg.lr}, weight decay {cfg.weight_decay},
{cfg.warmup} warm-up steps, cosine to {cfg.min_lr_ratio}x), grad-norm clip {cfg.grad_clip}, EMA {cfg.ema_decay}
(the EMA weights are shipped). {m['steps']} steps, {m['train_minutes']:.1f} min of training wall time on one
CPU thread (2-core machine shared with other trainings). Final training loss (mean of the last
{cfg.log_every} steps): cross-entropy {tl.get('loss', float('nan')):.4f}, batch accuracy
{tl.get('acc', float('nan')):.3f}.

## Evaluation (the shipped fp16 file, reloaded through `load_domain_network`)
Held-out accuracy: **{100 * m['heldout_accuracy']:.2f}%** on {m['accuracy_crops']} held-out {unit} (seed
{cfg.data_seed + 4}; NLL {m['heldout_nll']:.3f}); on {m['accuracy_crops']} training {unit}
{100 * m['train_crop_accuracy']:.2f}%. Hardest classes: {', '.join(f'{k} {100 * v:.0f}%' for k, v in worst)}.

FID (clean-fid's Fréchet distance through `arvis.eval.fid`, {f['fid_size']} images per set, {cfg.image_size}-px {unit};
"A" = held-out {unit} seed 0, "B" = held-out {unit} seed 1, "reference" = the {f['reference_size']}
held-out {unit} (seed 0) that `compute_fid` uses by default):

| sets | FID |
|---|---|
| held-out A vs held-out B (**real-vs-real floor**, 1k vs 1k) | {f['heldout_vs_heldout']:.2f} |
| held-out B vs reference (the floor `compute_fid(..., floor=True)` reports for 1k images) | {f['heldout_vs_reference']:.2f} |
| training {unit} (seed {cfg.data_seed + 5}) vs held-out A | {f['train_vs_heldout']:.2f} |
| training {unit} vs reference | {f['train_vs_reference']:.2f} |

Degraded held-out B (the same crops, degraded) against held-out A and against the reference:

| degradation | FID vs A | FID vs reference |
|---|---|---|
{rows}
{vq_row}
blur = PIL Gaussian blur (sigma in px), noise = additive Gaussian noise (std in 0..255 units), jpeg =
JPEG quality (blocky, VQ-like artefacts), downup = bicubic down-sampling by the factor and back.
Feature spread: participation ratio of the held-out covariance {f['participation_ratio']:.1f} of
{f['feature_dim']} dimensions.

Fingerprint (sha256 over config and weights; names the feature space in cached statistics):
`{m['fingerprint']}`.
"""


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
    p.add_argument("--final-eval-size", type=int, default=None, help="held-out images of the exported accuracy")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--vq", default=None, help="also report the rFID of this VQ tokenizer folder's reconstructions")
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
        ckpt = scratch / "checkpoint.pt"
        if not ckpt.exists():
            raise ValueError(f"--export-only needs a checkpoint at {ckpt}")
        cfg = dataclasses.replace(cfg, steps=int(load_checkpoint(ckpt)["step"]))
    command = "python -m arvis.training.train_domain " + " ".join(shlex.quote(a) for a in (
        argv if argv is not None else sys.argv[1:]))
    model, summary = train(cfg, scratch, threads=args.threads, command="" if args.export_only else command)
    summary["command"] = recorded_command(summary["command"], out)
    metrics = export(model, cfg, out, summary, command, vq=args.vq, progress=not args.preset == "smoke")
    print(json.dumps({k: v for k, v in metrics.items() if k not in ("eval_history", "config")}, indent=2))
    return metrics


if __name__ == "__main__":
    main()
