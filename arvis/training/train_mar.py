"""Train arvis's MAR models (a target and a small draft, masked and causal raster) on cached KL-VAE latents.

Data: the class-conditional photo crops of :mod:`arvis.data.sources` (label = source photo), encoded once by
the trained VAE (:mod:`arvis.training.train_mar_vae`) into posterior moments (mean, log-variance), cached in
the data folder under the VAE's weights hash; every step draws ``posterior.sample() · scaling_factor`` of
its crops, as MAR's cached-latent training does.

Objective: MAR's diffusion loss (LTH14/mar ``DiffLoss``; IDDPM's ``training_losses`` with a learned-range
variance): for every token to learn, the transformer's ``z`` conditions the head; a step ``t`` is drawn
uniformly from the 1000-step cosine schedule, the ground-truth token is noised to ``x_t`` and the head
predicts the noise (MSE) plus IDDPM's variational term for its variance output (the KL between the true
posterior and the head's Gaussian, with the noise prediction frozen, in bits; at ``t = 0`` a continuous
Gaussian NLL where IDDPM uses its discretised one). Each token's ``z`` is repeated ``diffusion_batch_mul``
times (4, MAR's default) with independent ``t`` and noise.

- masked MAR (``causal=False``): a random order per image, a masking ratio from MAR's truncated normal
  (mean 1, std 0.25, truncated to ``[mask_ratio_min, 1]``), ``ceil(L · ratio)`` tokens masked; the encoder
  sees the buffer and the rest; the loss is on the masked tokens.
- causal raster variant (``causal=True``): teacher forcing, ``z_j`` from the buffer and tokens ``< j``; the loss
  is on every token.

Both drop the class to the null class (``fake_latent``) with probability ``label_drop_prob`` (CFG). AdamW
(betas 0.9/0.95, weight decay on matrices), warm-up + cosine, gradient clipping, an EMA of the weights; the
better of the raw and EMA weights on a fixed held-out loss is exported (fp16 safetensors ``transformer/`` and
``head/``, ``training_metrics.json`` and a model card). Checkpoints are atomic; a rerun with the same
``--scratch`` resumes. ``assemble`` writes a :class:`~arvis.pipelines.MARPipeline` folder. Example::

    python -m arvis.training.train_mar --preset target --vae runs/mar-vae --out runs/mar-target \\
        --scratch runs/mar-target-scratch --data-cache runs/mar-latents --threads 1
    python -m arvis.training.train_mar --preset draft --vae runs/mar-vae --out runs/mar-draft \\
        --scratch runs/mar-draft-scratch --data-cache runs/mar-latents --threads 1
    python -m arvis.training.train_mar assemble --target runs/mar-target --draft runs/mar-draft \\
        --vae runs/mar-vae --out runs/mar-photos
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import json
import math
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from diffusers import AutoencoderKL
from torch import nn
from tqdm.auto import tqdm

from arvis.data.sources import (
    DATA_CHOICES,
    MODEL_DATA_FILE,
    check_data,
    class_names,
    data_recipe,
    labelled_images,
)
from arvis.models.diffusion_head import SAMPLING_SCHEDULES, TRAIN_STEPS, DDPMTables, MARDiffusionHead
from arvis.models.mar import MARTransformer
from arvis.training.common import (
    EMA,
    atomic_write_text,
    dumps,
    setup_logging,
    training_command,
)
from arvis.training.loop import LoopSettings, TrainingLoop
from arvis.utils.files import atomic_directory
from arvis.utils.model_card import ModelCard, Section, Training, write_card

__all__ = ["PRESETS", "MARTrainConfig", "assemble", "diffusion_loss", "mar_loss", "main", "sample_mask_ratio", "train"]


@dataclass(frozen=True)
class MARTrainConfig:
    causal: bool = False
    width: int = 256  # encoder and decoder width
    depth: int = 4  # encoder blocks = decoder blocks
    num_heads: int = 4
    mlp_ratio: float = 4.0
    buffer_size: int = 16
    dropout: float = 0.1  # MAR's attention and projection dropout
    label_drop_prob: float = 0.1
    mask_ratio_min: float = 0.7
    head_width: int = 256
    head_depth: int = 3
    sampling_steps: int = 50  # the head's DDPM steps at sampling (stored in its config)
    diffusion_batch_mul: int = 4
    steps: int = 3000
    batch_size: int = 32
    lr: float = 4e-4
    warmup: int = 100
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.02
    grad_clip: float = 3.0
    ema_decay: float = 0.999
    num_train: int = 8000
    num_val: int = 256
    data: str = "photos"
    data_seed: int = 0
    log_every: int = 25
    eval_every: int = 250
    checkpoint_every: int = 25

    def __post_init__(self) -> None:
        check_data(self.data)
        for name in ("width", "depth", "num_heads", "head_width", "head_depth", "sampling_steps", "diffusion_batch_mul",
                     "steps", "batch_size", "num_train", "num_val", "buffer_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.width % self.num_heads:
            raise ValueError(f"width {self.width} must be divisible by num_heads {self.num_heads}")
        if not 0.0 <= self.mask_ratio_min < 1.0:
            raise ValueError(f"mask_ratio_min must be in [0, 1), got {self.mask_ratio_min}")


_SMOKE = dict(width=32, depth=1, num_heads=2, buffer_size=4, head_width=32, head_depth=1, sampling_steps=4,
              steps=3, batch_size=4, num_train=8, num_val=4, log_every=1, eval_every=3, checkpoint_every=2, warmup=1)
PRESETS: dict[str, MARTrainConfig] = {
    "target": MARTrainConfig(),
    "draft": MARTrainConfig(width=128, depth=2, num_heads=2, head_width=128, head_depth=2, dropout=0.0),
    "causal-target": MARTrainConfig(causal=True),
    "causal-draft": MARTrainConfig(causal=True, width=128, depth=2, num_heads=2, head_width=128, head_depth=2,
                                   dropout=0.0),
    "smoke": MARTrainConfig(**_SMOKE),
    "smoke-causal": MARTrainConfig(causal=True, **_SMOKE),
}


# ----------------------------------------------------------------------------- data
def weights_hash(folder: str | os.PathLike) -> str:
    """A short hash of a model folder's safetensors weights (names the latent cache of that VAE)."""
    h = hashlib.sha256()
    for f in sorted(Path(folder).glob("*.safetensors")):
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


@torch.no_grad()
def encode_moments(vae: AutoencoderKL, images: np.ndarray, batch: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Posterior means and log-variances ``float16 [n, C, h, w]`` of ``uint8 [n, R, R, 3]`` images."""
    means, logvars = [], []
    for i in tqdm(range(0, len(images), batch), desc="encoding", unit="batch", disable=len(images) < 256):
        x = torch.from_numpy(images[i:i + batch]).permute(0, 3, 1, 2).float() / 127.5 - 1.0
        dist = vae.encode(x.to(vae.dtype)).latent_dist
        means.append(dist.mean.float().half().numpy())
        logvars.append(dist.logvar.float().half().numpy())
    return np.concatenate(means), np.concatenate(logvars)


def build_latents(cfg: MARTrainConfig, vae: AutoencoderKL, vae_path: str, folder: Path, split: str, n: int
                  ) -> dict[str, np.ndarray]:
    """``mean``, ``logvar`` (posterior moments) and ``labels`` of ``n`` crops, cached in ``folder``."""
    res = int(vae.config.sample_size)
    path = folder / f"latents-{cfg.data}-{split}-{n}-{cfg.data_seed}-{res}-{weights_hash(vae_path)}.npz"
    if path.exists():
        return dict(np.load(path, allow_pickle=False))
    seed = cfg.data_seed if split == "train" else cfg.data_seed + 1
    images, labels, _ = labelled_images(cfg.data, n, split, res, seed)
    mean, logvar = encode_moments(vae, images)
    data = {"mean": mean, "logvar": logvar, "labels": labels.astype(np.int64)}
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **data)
    tmp.replace(path)
    return data


def sample_tokens(model: MARTransformer, data: dict[str, np.ndarray], index: np.ndarray, scale: float,
                  generator: torch.Generator) -> torch.Tensor:
    """Tokens ``[B, L, C]``: posterior samples of the cached moments times the VAE's ``scaling_factor``."""
    mean = torch.from_numpy(data["mean"][index]).float()
    std = torch.from_numpy(data["logvar"][index]).float().mul(0.5).exp()
    latents = mean + std * torch.randn(mean.shape, generator=generator)
    return model.patchify(latents * scale)


# ----------------------------------------------------------------------------- the objective
_TABLES = DDPMTables(TRAIN_STEPS, TRAIN_STEPS)  # the full 1000-step cosine schedule the head trains on


def _table(name: str, t: torch.Tensor) -> torch.Tensor:
    return getattr(_TABLES, name)[t].float()[:, None]


def diffusion_loss(head: MARDiffusionHead, target: torch.Tensor, z: torch.Tensor, generator: torch.Generator
                   ) -> torch.Tensor:
    """MAR's ``DiffLoss`` per token (``[N]``) for tokens ``target [N, D]`` under conditions ``z [N, C]``.

    ``t ~ U{0 … 999}``, ``x_t = √ᾱ_t·x_0 + √(1−ᾱ_t)·ε``; loss = ``mean‖ε − ε̂‖²`` + the variational term of the
    head's learned-range variance (IDDPM's hybrid loss; its mean term uses a frozen ``ε̂``).
    """
    N, D = target.shape
    target = target.float()
    t = torch.randint(0, TRAIN_STEPS, (N,), generator=generator)
    noise = torch.randn(N, D, generator=generator)
    ab = _table("alphas_cumprod", t)
    x_t = ab.sqrt() * target + (1 - ab).sqrt() * noise
    out = head(x_t.to(head.dtype), t, z.to(head.dtype)).float()
    eps, v = out[:, :D], out[:, D:]
    mse = (noise - eps).pow(2).mean(dim=1)
    c1, c2 = _table("posterior_mean_coef1", t), _table("posterior_mean_coef2", t)
    x0 = _table("sqrt_recip_alphas_cumprod", t) * x_t - _table("sqrt_recipm1_alphas_cumprod", t) * eps.detach()
    mean = c1 * x0 + c2 * x_t
    min_log, max_log = _table("posterior_log_variance_clipped", t), _table("log_betas", t)
    frac = (v + 1) / 2
    log_var = frac * max_log + (1 - frac) * min_log
    true_mean = c1 * target + c2 * x_t
    kl = 0.5 * (-1.0 + log_var - min_log + torch.exp(min_log - log_var) + (true_mean - mean).pow(2) * torch.exp(-log_var))
    nll = 0.5 * (math.log(2 * math.pi) + log_var + (target - mean).pow(2) * torch.exp(-log_var))
    vb = torch.where(t[:, None] == 0, nll, kl).mean(dim=1) / math.log(2.0)
    return mse + vb


def sample_mask_ratio(mask_ratio_min: float, generator: torch.Generator) -> float:
    """MAR's masking ratio: a normal (mean 1, std 0.25) truncated to ``[mask_ratio_min, 1]`` (inverse CDF)."""
    lo = torch.special.ndtr(torch.tensor((mask_ratio_min - 1.0) / 0.25, dtype=torch.float64))
    hi = 0.5  # Φ(0)
    u = lo + (hi - lo) * torch.rand((), generator=generator, dtype=torch.float64)
    return float(1.0 + 0.25 * torch.special.ndtri(u))


def loss_conditions(model: MARTransformer, tokens: torch.Tensor, labels: torch.Tensor, drop: torch.Tensor | None,
                    generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The head's training pairs of a batch, ``(z [B, n, C], target tokens [B, n, D])``: masked MAR's masked
    tokens (MAR's masking ratio and random orders), the causal variant's every token (teacher forcing)."""
    B, L, _ = tokens.shape
    cond = model.class_embedding(labels)
    if drop is not None:
        cond = torch.where(drop[:, None], model.class_embedding(None, B).to(cond.dtype), cond)
    if model.is_causal:
        return model(tokens, None, cond), tokens
    ratio = sample_mask_ratio(model.config.mask_ratio_min, generator)
    n = min(L, max(1, math.ceil(L * ratio)))
    orders = model.sample_orders(B, generator)
    mask = torch.zeros(B, L, dtype=torch.bool).scatter_(1, orders[:, :n], True)
    z = model(tokens, mask, cond, n)
    return z[mask].view(B, n, -1), tokens[mask].view(B, n, -1)


def mar_loss(model: MARTransformer, head: MARDiffusionHead, tokens: torch.Tensor, labels: torch.Tensor,
             drop: torch.Tensor | None, generator: torch.Generator, diffusion_batch_mul: int) -> torch.Tensor:
    """The mean diffusion loss of a batch: masked MAR on its masked tokens, the causal variant on every token."""
    z, target = loss_conditions(model, tokens, labels, drop, generator)
    z = z.reshape(-1, z.shape[-1]).repeat(diffusion_batch_mul, 1)
    target = target.reshape(-1, target.shape[-1]).repeat(diffusion_batch_mul, 1)
    return diffusion_loss(head, target, z, generator).mean()


# ----------------------------------------------------------------------------- models
def build_models(cfg: MARTrainConfig, vae: AutoencoderKL) -> nn.ModuleDict:
    """``{"transformer": MARTransformer, "head": MARDiffusionHead}`` sized by ``cfg`` for ``vae``'s latents."""
    names = class_names(cfg.data)
    stride = 2 ** (len(vae.config.block_out_channels) - 1)
    transformer = MARTransformer(
        img_size=int(vae.config.sample_size), vae_stride=stride, patch_size=1, encoder_embed_dim=cfg.width,
        encoder_depth=cfg.depth, encoder_num_heads=cfg.num_heads, decoder_embed_dim=cfg.width, decoder_depth=cfg.depth,
        decoder_num_heads=cfg.num_heads, mlp_ratio=cfg.mlp_ratio, vae_embed_dim=int(vae.config.latent_channels),
        num_classes=len(names), buffer_size=cfg.buffer_size, attn_dropout=cfg.dropout, proj_dropout=cfg.dropout,
        label_drop_prob=cfg.label_drop_prob, mask_ratio_min=cfg.mask_ratio_min, causal=cfg.causal,
        class_names=list(names))
    g = torch.Generator().manual_seed(cfg.data_seed)
    transformer.init_weights(g)
    head = transformer.default_head(width=cfg.head_width, depth=cfg.head_depth, sampling_steps=cfg.sampling_steps)
    head.init_weights(g)
    return nn.ModuleDict({"transformer": transformer, "head": head})


@torch.no_grad()
def validation_loss(cfg: MARTrainConfig, models: nn.ModuleDict, data: dict[str, np.ndarray], scale: float,
                    batch_size: int = 64) -> float:
    """The held-out loss with fixed noise, masks and steps (seed 0), no class dropout."""
    models.eval()
    g = torch.Generator().manual_seed(0)
    total, n = 0.0, len(data["labels"])
    for i in range(0, n, batch_size):
        index = np.arange(i, min(i + batch_size, n))
        tokens = sample_tokens(models["transformer"], data, index, scale, g)
        loss = mar_loss(models["transformer"], models["head"], tokens, torch.from_numpy(data["labels"][index]), None,
                        g, cfg.diffusion_batch_mul)
        total += float(loss) * len(index)
    models.train()
    return total / n


# ----------------------------------------------------------------------------- training
def train(cfg: MARTrainConfig, vae_path: str, scratch: Path, threads: int = 1, data_cache: Path | None = None
          ) -> dict[str, Any]:
    """Train (resuming from ``scratch``); the latents are cached in ``data_cache`` (default ``scratch``), which the
    four runs on one VAE may share."""
    torch.set_num_threads(threads)
    scratch.mkdir(parents=True, exist_ok=True)
    data_cache = data_cache or scratch
    data_cache.mkdir(parents=True, exist_ok=True)
    log = setup_logging(scratch / "train.log", "arvis.train_mar")
    vae = AutoencoderKL.from_pretrained(vae_path, torch_dtype=torch.float32).eval()
    scale = float(vae.config.scaling_factor)
    train_data = build_latents(cfg, vae, vae_path, data_cache, "train", cfg.num_train)
    val_data = build_latents(cfg, vae, vae_path, data_cache, "heldout", cfg.num_val)
    models = build_models(cfg, vae)
    params = list(models.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg.weight_decay},
                             {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.95))
    ema = EMA(params, cfg.ema_decay)
    rng = np.random.default_rng([cfg.data_seed, 13])
    gen = torch.Generator()  # noise, steps, masks

    def loss_fn(step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        index = rng.integers(0, len(train_data["labels"]), cfg.batch_size)
        tokens = sample_tokens(models["transformer"], train_data, index, scale, gen)
        drop = torch.rand(cfg.batch_size, generator=gen) < cfg.label_drop_prob
        return mar_loss(models["transformer"], models["head"], tokens, torch.from_numpy(train_data["labels"][index]),
                        drop, gen, cfg.diffusion_batch_mul), {}

    loop = TrainingLoop(f"train mar{' causal' if cfg.causal else ''}", LoopSettings.of(cfg), cfg,
                        ("steps", "eval_every", "checkpoint_every", "log_every"), scratch / "checkpoint.pt", models, opt,
                        params, ema, lambda: params, rng, loss_fn, log, history="loss",
                        eval_fn=lambda step: {"val_loss": validation_loss(cfg, models, val_data, scale)},
                        generators=[gen])
    if loop.resume() is None:
        log.info("new run: %d transformer + %d head parameters, config %s",
                 sum(p.numel() for p in models["transformer"].parameters()),
                 sum(p.numel() for p in models["head"].parameters()), dumps(dataclasses.asdict(cfg)))
    gen.manual_seed(cfg.data_seed * 1000 + loop.step)
    torch.manual_seed(cfg.data_seed + loop.step)  # nn.Dropout draws from the global RNG (training script)
    models.train()
    history = loop.run()
    step, elapsed = loop.step, loop.elapsed
    # Keep the better of the raw and the EMA weights by held-out loss (a short run's EMA can lag).
    raw_val = validation_loss(cfg, models, val_data, scale)
    averaged = copy.deepcopy(models)
    ema.copy_to(list(averaged.parameters()))
    ema_val = validation_loss(cfg, averaged, val_data, scale)
    use_ema = ema_val <= raw_val
    chosen = averaged if use_ema else models
    log.info(f"done: {step} steps, {elapsed / 3600:.2f} h, validation loss raw {raw_val:.4f}, EMA {ema_val:.4f}; "
             f"exporting the {'EMA' if use_ema else 'raw'} weights")
    return {"models": chosen.eval(), "steps": step, "seconds": elapsed, "history": history, "val_loss": min(raw_val, ema_val),
            "raw_val_loss": raw_val, "ema_val_loss": ema_val, "exported_weights": "ema" if use_ema else "raw"}


def export(result: dict[str, Any], cfg: MARTrainConfig, out: Path, command: str) -> dict[str, Any]:
    """fp16 safetensors ``out/transformer`` and ``out/head``, ``training_metrics.json`` and ``README.md``."""
    out.mkdir(parents=True, exist_ok=True)
    models = result["models"]
    sizes = {}
    for name in ("transformer", "head"):  # each entry replaced whole, never half-written
        with atomic_directory(out / name) as staged:
            models[name].half().save_pretrained(staged, safe_serialization=True)
        sizes[name] = sum(f.stat().st_size for f in (out / name).glob("*.safetensors")) / 1e6
    train_entries = result["history"]
    metrics = {
        "preset_config": dataclasses.asdict(cfg),
        "params": sum(p.numel() for p in models["transformer"].parameters()),
        "head_params": sum(p.numel() for p in models["head"].parameters()),
        "safetensors_mb": sizes,
        "steps": result["steps"],
        "train_hours": result["seconds"] / 3600,
        "final_train_loss": train_entries[-1]["loss"] if train_entries else None,
        "validation_loss": result["val_loss"],
        "validation_loss_raw": result["raw_val_loss"],
        "validation_loss_ema": result["ema_val_loss"],
        "exported_weights": result["exported_weights"],
        "history": result["history"],
        "command": command,
    }
    atomic_write_text(out / "training_metrics.json", json.dumps(metrics, indent=2) + "\n")
    write_card(out, model_card(cfg, metrics, models["transformer"]))
    return metrics


def model_card(cfg: MARTrainConfig, m: dict[str, Any], transformer: MARTransformer) -> ModelCard:
    """Model card of an exported transformer + head pair (the run's export folder, before assembling)."""
    kind = "causal raster-order (AR) variant" if cfg.causal else "masked MAR"
    g = transformer.seq_h
    objective = ("teacher forcing, loss on every token" if cfg.causal else
                 f"random order, masking ratio from MAR's truncated normal on [{cfg.mask_ratio_min}, 1], loss on the "
                 f"masked tokens")
    return ModelCard(
        title=f"MAR {kind}: transformer + diffusion head",
        summary=f"""Class-conditional MAR on the KL VAE's {g}x{g}x{transformer.config.vae_embed_dim} latents (`transformer/`:
`MARTransformer`, `head/`: `MARDiffusionHead`, fp16 safetensors). Width {cfg.width}, {cfg.depth} encoder + {cfg.depth}
decoder blocks, {cfg.num_heads} heads, buffer {cfg.buffer_size}; head width {cfg.head_width}, {cfg.head_depth} blocks,
{cfg.sampling_steps} sampling steps. {m['params']:,} + {m['head_params']:,} parameters
({m['safetensors_mb']['transformer']:.1f} + {m['safetensors_mb']['head']:.1f} MB).""",
        data=Section("Data", f"""{data_recipe(cfg.data, int(transformer.config.img_size))} {cfg.num_train} training crops encoded once (posterior
moments cached), a fresh posterior sample every step; {cfg.num_val} held-out crops for the validation loss."""),
        training=Training([m["command"]], f"""MAR's diffusion loss ({objective}; ×{cfg.diffusion_batch_mul} head batch), {cfg.label_drop_prob:.0%} class dropout
to the null class, AdamW (betas 0.9/0.95, lr {cfg.lr}, weight decay {cfg.weight_decay}, {cfg.warmup} warm-up steps,
cosine to {cfg.min_lr_ratio}x), batch {cfg.batch_size}, grad clip {cfg.grad_clip}, EMA {cfg.ema_decay}.
{m['steps']} steps, {m['train_hours']:.2f} h of training wall time. Final training loss {m['final_train_loss']:.4f};
held-out loss {m['validation_loss']:.4f} ({m['exported_weights']} weights exported; raw {m['validation_loss_raw']:.4f},
EMA {m['validation_loss_ema']:.4f})."""))


# ----------------------------------------------------------------------------- assembling a pipeline folder
def assemble(target: str, vae: str, out: str, draft: str | None = None, sampling_defaults: dict | None = None,
             data: str = "photos", sampling_schedule: str = "linear") -> Path:
    """Write the :class:`~arvis.pipelines.MARPipeline` folder ``out`` (replacing it atomically): the target's
    ``transformer`` and ``head``, the draft's (if any) as ``draft_transformer`` / ``draft_head``, ``vae`` a relative
    link to the VAE folder, ``sampling_defaults.json`` and ``evaluation.json``.

    ``sampling_schedule`` goes into both heads' configs: ``linear`` by default, because a head trained for hours
    (not MAR's 400 ImageNet epochs) is not accurate enough at the cosine schedule's last noise level, where the
    first transition multiplies its ε error by ~300 (see :mod:`arvis.models.diffusion_head`)."""
    from arvis.pipelines import MARPipeline

    def pair(folder: str) -> tuple[MARTransformer, MARDiffusionHead]:
        return (MARTransformer.from_pretrained(Path(folder) / "transformer", torch_dtype=torch.float16),
                MARDiffusionHead.from_pretrained(Path(folder) / "head", torch_dtype=torch.float16,
                                                 sampling_schedule=sampling_schedule))

    transformer, head = pair(target)
    draft_transformer, draft_head = pair(draft) if draft else (None, None)
    if draft_transformer is not None and draft_transformer.is_causal != transformer.is_causal:
        raise ValueError("--draft: the target and the draft must both be masked or both causal")
    vae_model = AutoencoderKL.from_pretrained(vae, torch_dtype=torch.float16)
    pipe = MARPipeline(transformer, head, vae_model, draft_transformer, draft_head)
    defaults = dict(sampling_defaults or default_sampling(transformer.is_causal))
    if transformer.is_causal:
        defaults.pop("num_iter", None)
    out_path = Path(out)
    with atomic_directory(out_path, keep=("README.md", "metrics.json", "samples.png")) as staged:
        pipe.save_pretrained(staged, safe_serialization=True)
        shutil.rmtree(staged / "vae")
        os.symlink(os.path.relpath(Path(vae).resolve(), out_path.resolve()), staged / "vae")
        (staged / "sampling_defaults.json").write_text(json.dumps(defaults, indent=2) + "\n")
        (staged / MODEL_DATA_FILE).write_text(json.dumps({"data": check_data(data)}, indent=2) + "\n")
    return out_path


def default_sampling(causal: bool) -> dict[str, Any]:
    """Sampling defaults of an assembled folder: MAR's linear CFG schedule for masked MAR (16 iterations for the
    64 tokens); constant guidance for the causal variant (what ``cspd-exact`` requires, and its AR baseline)."""
    if causal:
        return {"guidance_scale": 3.0, "temperature": 1.0, "cfg_schedule": "constant"}
    return {"num_iter": 16, "guidance_scale": 3.0, "temperature": 1.0, "cfg_schedule": "linear"}


def _assemble_main(argv: list[str]) -> Path:
    p = argparse.ArgumentParser(prog="python -m arvis.training.train_mar assemble",
                                description="Write a MARPipeline folder from trained parts.")
    p.add_argument("--target", required=True, help="export folder of the target (transformer/, head/)")
    p.add_argument("--draft", default=None, help="export folder of the draft (same kind: masked or causal)")
    p.add_argument("--vae", required=True, help="the VAE folder (linked, not copied)")
    p.add_argument("--out", required=True)
    p.add_argument("--num-iter", type=int, default=None, help="masked MAR's iterations (default 16)")
    p.add_argument("--guidance-scale", type=float, default=None)
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--cfg-schedule", choices=("linear", "constant"), default=None)
    p.add_argument("--data", choices=DATA_CHOICES, default="photos")
    p.add_argument("--sampling-schedule", choices=SAMPLING_SCHEDULES, default="linear",
                   help="the heads' sampling noise levels (cosine = MAR's; see arvis.models.diffusion_head)")
    args = p.parse_args(argv)
    causal = json.loads((Path(args.target) / "transformer" / "config.json").read_text()).get("causal", False)
    defaults = default_sampling(bool(causal))
    for key in ("num_iter", "guidance_scale", "temperature", "cfg_schedule"):
        if getattr(args, key) is not None:
            defaults[key] = getattr(args, key)
    path = assemble(args.target, args.vae, args.out, args.draft, defaults, args.data, args.sampling_schedule)
    from arvis.pipelines import MARPipeline

    loaded = MARPipeline.from_pretrained(str(path))
    print(f"assembled {path}: components {sorted(k for k, v in loaded.components.items() if v is not None)}")
    return path


def main(argv: list[str] | None = None) -> dict[str, Any] | Path:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["assemble"]:
        return _assemble_main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m arvis.training.train_mar", description=__doc__.split("\n\n")[0],
                                epilog="python -m arvis.training.train_mar assemble --help: write a pipeline folder")
    p.add_argument("--preset", choices=sorted(PRESETS), default="target")
    p.add_argument("--vae", required=True, help="the trained VAE folder (arvis.training.train_mar_vae)")
    p.add_argument("--out", required=True, help="export folder (gets transformer/ and head/)")
    p.add_argument("--scratch", required=True, help="checkpoints and log (resumes from here)")
    p.add_argument("--data-cache", default=None, help="latent cache folder (default: --scratch; share it between runs)")
    p.add_argument("--data", choices=DATA_CHOICES, default="photos")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--num-train", type=int, default=None)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    overrides = {k: v for k, v in (("steps", args.steps), ("batch_size", args.batch_size),
                                   ("num_train", args.num_train)) if v is not None}
    cfg = dataclasses.replace(PRESETS[args.preset], data=args.data, **overrides)
    command = training_command("train_mar", argv)
    result = train(cfg, args.vae, Path(args.scratch), args.threads, Path(args.data_cache) if args.data_cache else None)
    metrics = export(result, cfg, Path(args.out), command)
    print(json.dumps({k: v for k, v in metrics.items() if k not in ("history", "preset_config")}, indent=2))
    return metrics


if __name__ == "__main__":
    main()
