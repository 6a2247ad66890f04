"""Train the token up-sampler of multi-scale local drafting (``arvis.models.upsampler.TokenUpsampler``).

Data: the class-conditional photo crops of :mod:`arvis.data.crops`, rendered twice from the *same* crop
boxes — at ``low_resolution`` (64 px: an 8x8 grid of the shipped VQ's codes) and at ``high_resolution``
(128 px: the 16x16 grid the c2i target generates) — and tokenised by the shipped VQ
(:func:`arvis.training.train_gpt.build_dataset`, so the 64 px codes are the very data the low-resolution
GPT is trained on). The up-sampler learns ``q(high token at j | low-res map, class)`` by cross-entropy
against the 128 px codes; a fraction ``token_noise`` of the low-res input ids is replaced by random ids
during training, since at generation time the map is a sample of the low-resolution GPT, not a real crop.

Evaluation (held-out crops from the disjoint held-out strips): NLL and top-1 / top-10 accuracy of ``q``
against the real 16x16 codes, beside the trivial up-samplers (nearest and bicubic interpolation of the
coarse latents, re-quantised to the codebook) and the class's per-position token frequencies. The
better of the raw and EMA weights by held-out NLL is exported in fp16 safetensors with ``metrics.json``
and a model card. Checkpoints are atomic; a rerun with the same ``--scratch`` resumes. Example::

    python -m arvis.training.train_upsampler --out arvis/weights/upsampler-photos \\
        --scratch runs/mulo/upsampler --data-cache runs/mulo/gpt-lowres --threads 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from arvis.models.upsampler import TokenUpsampler
from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
from arvis.training.common import (
    EMA,
    dumps,
    export_note,
    recorded_command,
    setup_logging,
    training_command,
)
from arvis.training.loop import LoopSettings, TrainingLoop
from arvis.training.train_gpt import GPTTrainConfig, build_dataset, encode_codes
from arvis.utils.files import atomic_directory, atomic_path
from arvis.utils.model_card import ModelCard, Section, Training, table, write_card


@dataclass(frozen=True)
class UpsamplerTrainConfig:
    dim: int = 96
    low_blocks: int = 2
    high_blocks: int = 1
    groups: int = 8
    dropout: float = 0.1
    token_noise: float = 0.05  # share of low-res input ids replaced by random ids (training only)
    steps: int = 1500
    batch_size: int = 16
    lr: float = 1e-3
    warmup: int = 100
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    ema_decay: float = 0.998
    num_train: int = 3000  # paired crops: the first num_train of the low-resolution GPT's pool_train crops
    num_val: int = 500
    pool_train: int = 16000
    pool_val: int = 1000
    data_seed: int = 0
    low_resolution: int = 64
    high_resolution: int = 128
    log_every: int = 25
    eval_every: int = 250
    checkpoint_every: int = 50

    def __post_init__(self) -> None:
        for name in ("dim", "steps", "batch_size", "num_train", "num_val", "low_resolution", "high_resolution"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.high_resolution % self.low_resolution:
            raise ValueError(f"high_resolution must be a multiple of low_resolution, got "
                             f"{self.high_resolution} and {self.low_resolution}")
        if not 0.0 <= self.token_noise < 1.0:
            raise ValueError(f"token_noise must be in [0, 1), got {self.token_noise}")


PRESETS: dict[str, UpsamplerTrainConfig] = {
    "default": UpsamplerTrainConfig(),
    "smoke": UpsamplerTrainConfig(dim=16, low_blocks=1, high_blocks=1, groups=4, steps=3, batch_size=4, num_train=8,
                                  num_val=4, pool_train=10, pool_val=4, log_every=1, eval_every=3, checkpoint_every=2),
}
# Fields that may differ when a run is resumed (the rest must match the checkpoint).
_RESUMABLE = ("steps", "log_every", "eval_every", "checkpoint_every")


# ----------------------------------------------------------------------------- data
def paired_codes(cfg: UpsamplerTrainConfig, vq: LlamaGenVQModel, cache: Path, split: str, pool: int, n: int
                 ) -> dict[str, np.ndarray]:
    """Codes of the first ``n`` of the ``pool`` crops the low-resolution GPT trains on, at both resolutions.

    The low-resolution codes are :func:`arvis.training.train_gpt.build_dataset`'s (the same file in a shared
    ``cache``: the ``pool`` crops at ``low_resolution``, tokenised once); the same boxes are rendered at
    ``high_resolution`` and tokenised here. Returns ``low [n, h*w]``, ``high [n, H*W]`` int64 and ``labels [n]``.
    """
    high = high_codes(cfg, vq, cache, split, pool, n)
    low = build_dataset(GPTTrainConfig(kind="c2i", resolution=cfg.low_resolution, data_seed=cfg.data_seed),
                        vq, cache, split, pool)
    return {"low": low["codes"][:n].astype(np.int64), "high": high.astype(np.int64), "labels": low["labels"][:n]}


def high_codes(cfg: UpsamplerTrainConfig, vq: LlamaGenVQModel, cache: Path, split: str, pool: int, n: int
               ) -> np.ndarray:
    """``[n, H*W]`` codes of the first ``n`` of ``build_dataset``'s ``pool`` crops rendered at ``high_resolution``
    (cached in ``cache``)."""
    from arvis.data.crops import CropSpecs, render_crops, sample_crop_specs

    if not 0 < n <= pool:
        raise ValueError(f"the paired crops must be a part of the pool: got {n} of {pool}")
    seed = cfg.data_seed if split == "train" else cfg.data_seed + 1  # build_dataset's seeds
    path = cache / f"upsampler-high-{split}-{pool}-{n}-{seed}-{cfg.high_resolution}.npz"
    if path.exists():
        return np.load(path, allow_pickle=False)["codes"]
    specs = sample_crop_specs(pool, split, seed)
    first = CropSpecs(split, *(getattr(specs, f)[:n] for f in ("labels", "top", "left", "side", "flip")))
    codes = encode_codes(vq, render_crops(first, cfg.high_resolution))
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, codes=codes)
    return codes


def noisy_low(low: torch.Tensor, rate: float, vocab_size: int, generator: torch.Generator) -> torch.Tensor:
    """``low`` with a share ``rate`` of its ids replaced by uniform random ids."""
    if rate <= 0:
        return low
    replace = torch.rand(low.shape, generator=generator) < rate
    return torch.where(replace, torch.randint(0, vocab_size, low.shape, generator=generator), low)


# ----------------------------------------------------------------------------- evaluation
@torch.no_grad()
def heldout_figures(model: TokenUpsampler, data: dict[str, np.ndarray], batch_size: int = 100) -> dict[str, float]:
    """NLL (nats per token), top-1 and top-10 accuracy of the up-sampler's ``q`` against the high-res codes."""
    model.eval()
    nll, top1, top10, count = 0.0, 0.0, 0.0, 0
    for i in range(0, len(data["labels"]), batch_size):
        low = torch.from_numpy(data["low"][i:i + batch_size])
        high = torch.from_numpy(data["high"][i:i + batch_size])
        labels = torch.from_numpy(data["labels"][i:i + batch_size])
        logits = model(low, labels if model.config.num_classes else None).float()
        nll += float(F.cross_entropy(logits.flatten(0, 1), high.flatten(), reduction="sum"))
        top1 += float((logits.argmax(-1) == high).sum())
        top10 += float((logits.topk(10, dim=-1).indices == high[..., None]).any(-1).sum())
        count += high.numel()
    return {"nll": nll / count, "top1": top1 / count, "top10": top10 / count}


@torch.no_grad()
def trivial_upsampler_top1(vq: LlamaGenVQModel, data: dict[str, np.ndarray], mode: str) -> float:
    """Top-1 of re-quantising the coarse latents interpolated to the fine grid (``nearest`` or ``bicubic``)."""
    low = torch.from_numpy(data["low"])
    high = torch.from_numpy(data["high"])
    g, G = math.isqrt(low.shape[1]), math.isqrt(high.shape[1])
    codebook = vq.codebook_embeddings().float()  # [V, D] (l2-normalised for this VQ)
    latents = codebook[low].view(-1, g, g, codebook.shape[1]).permute(0, 3, 1, 2)
    up = F.interpolate(latents, size=(G, G), mode=mode, **({} if mode == "nearest" else {"align_corners": False}))
    flat = up.permute(0, 2, 3, 1).reshape(-1, codebook.shape[1])
    if vq.config.codebook_l2_norm:
        flat = F.normalize(flat, dim=-1)
    tokens = torch.cdist(flat, codebook).argmin(-1).view_as(high)
    return float((tokens == high).double().mean())


def class_frequency_figures(train: dict[str, np.ndarray], val: dict[str, np.ndarray], vocab_size: int,
                            num_classes: int) -> dict[str, float]:
    """NLL / top-1 of a class's token frequencies (add-one smoothed, same at every position) on held-out codes."""
    counts = np.ones((num_classes, vocab_size))
    np.add.at(counts, (np.repeat(train["labels"], train["high"].shape[1]), train["high"].ravel()), 1)
    logq = np.log(counts / counts.sum(1, keepdims=True))
    lab = np.repeat(val["labels"], val["high"].shape[1])
    tok = val["high"].ravel()
    return {"nll": float(-logq[lab, tok].mean()), "top1": float((logq.argmax(1)[lab] == tok).mean())}


# ----------------------------------------------------------------------------- training
def _new_model(cfg: UpsamplerTrainConfig, vocab_size: int, low_grid: int, num_classes: int) -> TokenUpsampler:
    torch.manual_seed(cfg.data_seed)  # default nn.Module initialisation draws from the global RNG (training script)
    return TokenUpsampler(vocab_size=vocab_size, low_grid=low_grid, scale=cfg.high_resolution // cfg.low_resolution,
                          dim=cfg.dim, low_blocks=cfg.low_blocks, high_blocks=cfg.high_blocks,
                          num_classes=num_classes, groups=cfg.groups, dropout=cfg.dropout)


def train(cfg: UpsamplerTrainConfig, vq_path: str, scratch: Path, data_cache: Path | None = None, threads: int = 1,
          command: str = "") -> dict[str, Any]:
    """Train (resuming from ``scratch/checkpoint.pt``); returns the model with the better weights and a summary."""
    from arvis.data.photos import PHOTO_CLASSES

    torch.set_num_threads(threads)
    scratch.mkdir(parents=True, exist_ok=True)
    log = setup_logging(scratch / "train.log", "arvis.train_upsampler")
    vq = LlamaGenVQModel.from_pretrained(vq_path, dtype=torch.float32).eval()
    cache = data_cache or scratch
    cache.mkdir(parents=True, exist_ok=True)
    # The high-resolution codes of both splits first: the low-resolution GPT, started at the same time on the
    # same cache, has then long finished writing the low-resolution ones.
    for split, pool, n in (("heldout", cfg.pool_val, cfg.num_val), ("train", cfg.pool_train, cfg.num_train)):
        high_codes(cfg, vq, cache, split, pool, n)
    val_data = paired_codes(cfg, vq, cache, "heldout", cfg.pool_val, cfg.num_val)
    train_data = paired_codes(cfg, vq, cache, "train", cfg.pool_train, cfg.num_train)
    low_grid = cfg.low_resolution // vq.downsample_factor
    model = _new_model(cfg, vq.codebook_size, low_grid, len(PHOTO_CLASSES)).train()
    params = list(model.parameters())
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    ema = EMA(params, cfg.ema_decay)
    rng = np.random.default_rng([cfg.data_seed, 77])
    gen = torch.Generator()  # token noise
    train_command = command

    def loss_fn(step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        index = rng.integers(0, len(train_data["labels"]), cfg.batch_size)
        low = noisy_low(torch.from_numpy(train_data["low"][index]), cfg.token_noise, vq.codebook_size, gen)
        high = torch.from_numpy(train_data["high"][index])
        logits = model(low, torch.from_numpy(train_data["labels"][index]))
        return F.cross_entropy(logits.flatten(0, 1), high.flatten()), {}

    def evaluation(step: int) -> dict[str, Any]:
        figures = heldout_figures(model, val_data)
        model.train()
        return {"val": figures}

    loop = TrainingLoop("train upsampler", LoopSettings.of(cfg), cfg, _RESUMABLE, scratch / "checkpoint.pt", model,
                        opt, params, ema, lambda: params, rng, loss_fn, log, history="loss", eval_fn=evaluation,
                        checkpoint_extra=lambda: {"command": train_command}, generators=[gen])
    ck = loop.resume()
    if ck is not None:
        train_command = command or str(ck.get("command", ""))
    else:
        log.info("new run: %d parameters, config %s", sum(p.numel() for p in params), dumps(dataclasses.asdict(cfg)))
    gen.manual_seed(cfg.data_seed * 1000 + loop.step)
    torch.manual_seed(cfg.data_seed + loop.step)  # nn.Dropout draws from the global RNG (training script)
    history = loop.run()
    step, elapsed = loop.step, loop.elapsed
    # Keep the better of the raw and the EMA weights by held-out NLL (a short run's EMA can lag).
    raw = heldout_figures(model, val_data)
    raw_state = {k: v.clone() for k, v in model.state_dict().items()}
    ema.copy_to(params)
    ema_figures = heldout_figures(model, val_data)
    use_ema = ema_figures["nll"] <= raw["nll"]
    if not use_ema:
        model.load_state_dict(raw_state)
    log.info("done: %d steps, %.2f h; held-out NLL raw %.4f, EMA %.4f; exporting the %s weights", step,
             elapsed / 3600, raw["nll"], ema_figures["nll"], "EMA" if use_ema else "raw")
    model.eval()
    baselines = {
        "nearest_requantised_top1": trivial_upsampler_top1(vq, val_data, "nearest"),
        "bicubic_requantised_top1": trivial_upsampler_top1(vq, val_data, "bicubic"),
        "class_frequencies": class_frequency_figures(train_data, val_data, vq.codebook_size, len(PHOTO_CLASSES)),
    }
    return {"model": model, "steps": step, "train_seconds": elapsed, "history": history, "command": train_command,
            "heldout_raw": raw, "heldout_ema": ema_figures, "exported_weights": "ema" if use_ema else "raw",
            "baselines": baselines}


def export(result: dict[str, Any], cfg: UpsamplerTrainConfig, out: Path, command: str) -> dict[str, Any]:
    """fp16 safetensors folder ``out`` (config, weights, ``metrics.json``, ``README.md``), replaced atomically."""
    out.parent.mkdir(parents=True, exist_ok=True)
    model = result["model"]
    heldout = result["heldout_ema" if result["exported_weights"] == "ema" else "heldout_raw"]
    metrics = {
        "params": sum(p.numel() for p in model.parameters()),
        "steps": result["steps"],
        "train_hours": result["train_seconds"] / 3600,
        "final_train_loss": result["history"][-1]["loss"] if result["history"] else None,
        "heldout": heldout,
        "heldout_raw": result["heldout_raw"],
        "heldout_ema": result["heldout_ema"],
        "exported_weights": result["exported_weights"],
        "heldout_crops": cfg.num_val,
        "baselines": result["baselines"],
        "config": dataclasses.asdict(cfg),
        "history": result["history"],
        "command": recorded_command(result["command"], out),
        "export_command": command,
    }
    with atomic_directory(out) as staged:
        model.half().save_pretrained(staged, safe_serialization=True)
        model.float()
        metrics["safetensors_mb"] = os.path.getsize(staged / "diffusion_pytorch_model.safetensors") / 1e6
        (staged / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        write_card(staged, model_card(cfg, metrics))
    return metrics


def model_card(cfg: UpsamplerTrainConfig, m: dict[str, Any]) -> ModelCard:
    """Model card of the exported up-sampler."""
    h, b = m["heldout"], m["baselines"]
    low = cfg.low_resolution // 8
    return ModelCard(
        title="upsampler-photos: the token up-sampler of multi-scale drafting",
        summary=f"""A `TokenUpsampler` (`arvis.models.upsampler`) trained by `arvis.training.train_upsampler`: it maps an
{low}x{low} map of the shipped VQ's codes (a {cfg.low_resolution} px image; at generation time a sample of the
low-resolution GPT `lowres_transformer`) and the class to a distribution `q` over the 1024 codes at every
position of the {2 * low}x{2 * low} grid the c2i target generates. `arvis.drafting.multiscale` draws the
multi-scale drafts from `q`; see docs/mulo.md.""",
        architecture=Section("Architecture", f"""Token + class + learned position embeddings ({cfg.dim} channels) at {low}x{low}, {cfg.low_blocks} residual
3x3-conv blocks, pixel-shuffle up-sampling x{cfg.high_resolution // cfg.low_resolution}, {cfg.high_blocks}
residual blocks, GroupNorm + SiLU + 1x1 head over the codebook. {m['params']:,} parameters,
{m['safetensors_mb']:.2f} MB as fp16 safetensors."""),
        data=Section("Data", f"""`arvis.data.crops` (the 22 offline photos, label = photo): the first {cfg.num_train:,} of the
{cfg.pool_train:,} train-region crops (seed {cfg.data_seed}) the low-resolution GPT is trained on, each rendered
at {cfg.low_resolution} px and at {cfg.high_resolution} px from the same box and tokenised by `vq-photos`; held
out: {cfg.num_val:,} crops (seed {cfg.data_seed + 1}) of the disjoint held-out strips. During training {100 * cfg.token_noise:.0f}% of the input codes are replaced by random codes (the input
at generation time is a model sample, not a real crop)."""),
        training=Training([m["command"]], f"""{export_note(m)}Cross-entropy against the {cfg.high_resolution} px codes, AdamW (betas 0.9/0.95, lr {cfg.lr},
weight decay {cfg.weight_decay}), {cfg.warmup} warm-up steps, cosine to {cfg.min_lr_ratio}x, batch
{cfg.batch_size}, dropout {cfg.dropout}, EMA {cfg.ema_decay}; {m['steps']} steps, {60 * m['train_hours']:.0f} min
on one CPU thread (2-core machine shared with other trainings). Exported: the {m['exported_weights']} weights
(better held-out NLL: raw {m['heldout_raw']['nll']:.4f}, EMA {m['heldout_ema']['nll']:.4f}). Final training
loss {m['final_train_loss']:.4f}."""),
        evaluation=Section(f"Evaluation on held-out crops (real {cfg.high_resolution} px codes)", table(
            (f"predictor of the {2 * low}x{2 * low} codes", "NLL (nats / token)", "top-1", "top-10"), [
                ("this up-sampler", f"**{h['nll']:.3f}**", f"**{100 * h['top1']:.1f}%**", f"{100 * h['top10']:.1f}%"),
                ("nearest interpolation of the coarse latents, re-quantised", "–",
                 f"{100 * b['nearest_requantised_top1']:.1f}%", "–"),
                ("bicubic interpolation of the coarse latents, re-quantised", "–",
                 f"{100 * b['bicubic_requantised_top1']:.1f}%", "–"),
                ("the class's token frequencies (same at every position)", f"{b['class_frequencies']['nll']:.3f}",
                 f"{100 * b['class_frequencies']['top1']:.1f}%", "–")])
            + """

What matters for drafting is not top-1 but the per-token acceptance `α = E[1 − TV(p_target, q)]` against the
c2i target's own distributions on its own samples: measured in docs/figures/mulo.md."""))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m arvis.training.train_upsampler", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="default")
    p.add_argument("--out", required=True, help="export folder (config, fp16 weights, metrics.json, README.md)")
    p.add_argument("--scratch", required=True, help="checkpoints and the training log")
    p.add_argument("--data-cache", default=None, help="folder of tokenised crops (default: --scratch); pass the "
                   "low-resolution GPT's scratch to reuse its 64 px codes")
    p.add_argument("--vq", default="arvis/weights/vq-photos", help="the VQ tokenizer folder")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--num-train", type=int, default=None)
    p.add_argument("--num-val", type=int, default=None)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    overrides = {k: v for k, v in (("steps", args.steps), ("num_train", args.num_train),
                                                   ("num_val", args.num_val)) if v is not None}
    cfg = dataclasses.replace(PRESETS[args.preset], **overrides)
    command = training_command("train_upsampler", argv)
    result = train(cfg, args.vq, Path(args.scratch), Path(args.data_cache) if args.data_cache else None,
                   args.threads, command)
    metrics = export(result, cfg, Path(args.out), command)
    print(json.dumps({k: v for k, v in metrics.items() if k not in ("history", "config")}, indent=2))
    return metrics


if __name__ == "__main__":
    main()
