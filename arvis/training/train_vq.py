"""Train the small LlamaGen-style VQ tokenizer that arvis ships (``arvis/weights/vq-photos``).

128x128 RGB -> 16x16 codes (3 down-samplings, like LlamaGen's VQ-8 layout) with an l2-normalised
codebook of 1024 x 8, on the class-conditional photo crops of :mod:`arvis.data.crops` (train region
only; held-out crops are used for evaluation only).

Recipe:
* data: fresh random crops every step (crop side 0.25-1.0 of the region's short side, random flips),
  rendered at 128 px; most steps train on random 64x64 patches of those renders (4x cheaper, the
  network is convolutional), the last ``full_res_fraction`` of steps on whole 128x128 crops so the
  lowest-resolution attention sees the full 16x16 grid;
* loss: ``l1 * |x - x'| + l2 * (x - x')^2`` + LlamaGen's vq + commitment losses (no perceptual or
  adversarial loss: no VGG/LPIPS weights are available offline);
* codebook: dead-code restarts (entries unused since the last check are re-seeded from current encoder
  outputs) until ``restart_until`` of training;
* AdamW, warm-up + cosine learning rate, EMA of the weights (the EMA weights are evaluated and exported);
* checkpoints every ``ckpt_every`` steps into ``--scratch`` (atomic) and automatic resume.

Usage::

    python -m arvis.training.train_vq --out arvis/weights/vq-photos --scratch runs/vq --steps 3000
    python -m arvis.training.train_vq --out /tmp/vq-smoke --smoke       # a few tiny steps, seconds
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from arvis.data.sources import DATA_CHOICES, check_data, data_recipe, labelled_images, stream_batch
from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
from arvis.training.common import (
    EMA,
    dumps,
    export_only_steps,
    reseed_rows,
    setup_logging,
    training_command,
)
from arvis.training.loop import LoopSettings, TrainingLoop
from arvis.utils.files import atomic_directory, atomic_path
from arvis.utils.images import to_tensor, to_uint8  # noqa: F401  (re-exported: the trainers import them from here)
from arvis.utils.model_card import ModelCard, Section, Training, table, write_card

__all__ = ["SMOKE_CONFIG", "VQTrainConfig", "evaluate", "export", "main", "train"]


@dataclass(frozen=True)
class VQTrainConfig:
    """Everything that determines a tokenizer training run (model shape, data, optimisation)."""

    # model
    base_channels: int = 32
    ch_mult: tuple[int, ...] = (1, 2, 2, 4)
    encoder_num_res_blocks: int = 2
    decoder_num_res_blocks: int = 2
    z_channels: int = 128
    codebook_size: int = 1024
    codebook_embed_dim: int = 8
    norm_num_groups: int = 8
    commit_loss_beta: float = 0.25
    # data
    data: str = "photos"  # arvis.data.sources: "photos" or "emoji"
    resolution: int = 128
    patch_size: int = 64
    batch_size: int = 32
    full_res_batch_size: int = 8
    full_res_fraction: float = 0.2
    crop_scale: tuple[float, float] = (0.25, 1.0)
    data_seed: int = 0
    # optimisation
    steps: int = 3000
    lr: float = 3e-4
    warmup: int = 200
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.0
    l1_weight: float = 1.0
    l2_weight: float = 1.0
    ema_decay: float = 0.998
    restart_every: int = 200
    restart_until: float = 0.75
    init_seed: int = 0
    init_from: str = ""  # a VQ folder to fine-tune from (same architecture), e.g. arvis/weights/vq-photos
    # train only post_quant_conv + decoder of init_from: encoder and codebook stay frozen, so every code grid (and
    # every transformer trained on them) stays valid and only the pictures decoded from the codes change
    decoder_only: bool = False
    # bookkeeping
    eval_size: int = 256
    final_eval_size: int = 1024
    eval_every: int = 500
    ckpt_every: int = 100
    log_every: int = 25

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        check_data(self.data)
        f = 2 ** (len(self.ch_mult) - 1)
        for name in ("resolution", "patch_size"):
            v = getattr(self, name)
            if v < f or v % f:
                raise ValueError(f"{name} must be a positive multiple of {f}, got {v}")
        if self.patch_size > self.resolution:
            raise ValueError(f"patch_size must be <= resolution={self.resolution}, got {self.patch_size}")
        if not 0.0 <= self.full_res_fraction <= 1.0:
            raise ValueError(f"full_res_fraction must be in [0, 1], got {self.full_res_fraction}")
        if min(self.batch_size, self.full_res_batch_size, self.eval_size, self.final_eval_size) < 1:
            raise ValueError("batch sizes and eval sizes must be >= 1")
        if self.decoder_only and not self.init_from:
            raise ValueError("decoder_only fine-tunes the decoder of an existing tokenizer: set init_from")

    def trainable(self, model: LlamaGenVQModel) -> list[torch.nn.Parameter]:
        """The parameters this run optimises (and averages): all, or only the decoder side."""
        if self.decoder_only:
            return [*model.post_quant_conv.parameters(), *model.decoder.parameters()]
        return list(model.parameters())

    def model_kwargs(self) -> dict[str, Any]:
        """Arguments of :class:`LlamaGenVQModel` for this configuration."""
        return dict(
            codebook_size=self.codebook_size,
            codebook_embed_dim=self.codebook_embed_dim,
            codebook_l2_norm=True,
            codebook_show_usage=True,
            commit_loss_beta=self.commit_loss_beta,
            entropy_loss_ratio=0.0,
            encoder_ch_mult=tuple(self.ch_mult),
            decoder_ch_mult=tuple(self.ch_mult),
            z_channels=self.z_channels,
            dropout_p=0.0,
            base_channels=self.base_channels,
            encoder_num_res_blocks=self.encoder_num_res_blocks,
            decoder_num_res_blocks=self.decoder_num_res_blocks,
            norm_num_groups=self.norm_num_groups,
        )


SMOKE_CONFIG = VQTrainConfig(
    base_channels=8,
    ch_mult=(1, 2),
    encoder_num_res_blocks=1,
    decoder_num_res_blocks=0,
    z_channels=8,
    codebook_size=32,
    codebook_embed_dim=4,
    norm_num_groups=4,
    resolution=32,
    patch_size=16,
    batch_size=4,
    full_res_batch_size=2,
    full_res_fraction=0.5,
    steps=4,
    warmup=1,
    restart_every=2,
    eval_size=4,
    final_eval_size=8,
    eval_every=2,
    ckpt_every=2,
    log_every=1,
)


# ---------------------------------------------------------------------------------------------- data
def train_batch(rng: np.random.Generator, cfg: VQTrainConfig, full_res: bool) -> torch.Tensor:
    """One batch of training images of ``cfg.data`` (random patches unless ``full_res``), ``[B, 3, S, S]``."""
    n = cfg.full_res_batch_size if full_res else cfg.batch_size
    images, _, _ = stream_batch(cfg.data, rng, n, cfg.resolution, cfg.crop_scale)
    if not full_res and cfg.patch_size < cfg.resolution:
        p = cfg.patch_size
        offs = rng.integers(0, cfg.resolution - p + 1, size=(n, 2))
        images = np.stack([im[y : y + p, x : x + p] for im, (y, x) in zip(images, offs, strict=True)])
    return to_tensor(images)


# ---------------------------------------------------------------------------------------------- eval
@torch.no_grad()
def evaluate(model: LlamaGenVQModel, images: np.ndarray, batch_size: int = 32) -> dict[str, Any]:
    """Reconstruction and codebook statistics of ``model`` on ``uint8 [N, H, W, 3]`` images.

    Returns a dict with ``psnr`` (mean over images of the per-image PSNR in dB of the uint8
    reconstruction), ``psnr_of_mean_mse``, ``l1`` and ``mse`` (on ``[-1, 1]``), ``usage`` (fraction of
    codebook entries used at least once), ``perplexity`` (exp of the entropy of the code histogram),
    and the reconstructions ``recon`` (uint8, same shape as ``images``).
    """
    was_training = model.training
    model.eval()
    counts = torch.zeros(model.codebook_size, dtype=torch.float64)
    recon = np.empty_like(images)
    l1 = mse = 0.0
    for i in range(0, len(images), batch_size):
        x = to_tensor(images[i : i + batch_size])
        codes = model.encode(x)
        y = model.decode_codes(codes)
        counts += torch.bincount(codes.flatten(), minlength=model.codebook_size).double()
        l1 += float((y - x).abs().mean()) * len(x)
        mse += float((y - x).pow(2).mean()) * len(x)
        recon[i : i + batch_size] = to_uint8(y)
    model.train(was_training)
    err = (recon.astype(np.float64) - images.astype(np.float64)) / 255.0
    per_image_mse = np.maximum((err**2).mean(axis=(1, 2, 3)), 1e-10)
    p = counts / counts.sum()
    entropy = float(-(p[p > 0] * p[p > 0].log()).sum())
    return {
        "psnr": float(np.mean(10 * np.log10(1.0 / per_image_mse))),
        "psnr_of_mean_mse": float(10 * np.log10(1.0 / per_image_mse.mean())),
        "l1": l1 / len(images),
        "mse": mse / len(images),
        "usage": float((counts > 0).double().mean()),
        "perplexity": math.exp(entropy),
        "recon": recon,
    }


# ---------------------------------------------------------------------------------------------- training
def _restart_dead_codes(
    model: LlamaGenVQModel,
    opt: torch.optim.Optimizer,
    counts: torch.Tensor,
    x: torch.Tensor,
    rng: np.random.Generator,
    ema: EMA,
) -> int:
    """Re-seed codebook rows with zero ``counts`` from encoder outputs on ``x``; returns how many.

    The optimiser moments of those rows are zeroed and the EMA copy of the codebook takes the new rows
    too, so the averaged model does not keep stale entries.
    """
    dead = torch.nonzero(counts == 0).flatten()
    if dead.numel() == 0:
        return 0
    with torch.no_grad():
        z = model.quant_conv(model.encoder(x))  # [B, D, h, w]
        z = F.normalize(z.permute(0, 2, 3, 1).reshape(-1, z.shape[1]), dim=-1)
        pick = torch.from_numpy(rng.integers(0, z.shape[0], size=dead.numel()))
        noise = torch.from_numpy(rng.standard_normal((dead.numel(), z.shape[1])).astype(np.float32))
    return reseed_rows(model.quantize.embedding.weight, dead, F.normalize(z[pick] + 0.01 * noise, dim=-1), opt, ema,
                       list(model.parameters()))


def _new_state(cfg: VQTrainConfig) -> dict[str, Any]:
    model = LlamaGenVQModel(**cfg.model_kwargs()).init_weights(torch.Generator().manual_seed(cfg.init_seed))
    if cfg.init_from:
        start = LlamaGenVQModel.from_pretrained(cfg.init_from, torch_dtype=torch.float32)
        model.load_state_dict(start.state_dict())  # strict: the architectures must match
    return {"model": model, "step": 0, "rng": np.random.default_rng([cfg.data_seed, 12345]), "history": [],
            "elapsed": 0.0}


def train(
    cfg: VQTrainConfig,
    scratch: str | os.PathLike,
    log_file: str | os.PathLike | None = None,
    threads: int | None = None,
) -> tuple[LlamaGenVQModel, dict[str, Any]]:
    """Train (resuming from ``scratch/checkpoint.pt`` if present) and return the EMA model and a summary.

    The checkpoint stores model, EMA, optimiser, step, the data RNG state and the log history, so a
    killed run continues where it stopped (to the last checkpoint) with the same data stream.
    """
    scratch = Path(scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    log = setup_logging(log_file, "arvis.train_vq")
    if threads:
        torch.set_num_threads(threads)
    ckpt_path = scratch / "checkpoint.pt"

    state = _new_state(cfg)
    model: LlamaGenVQModel = state["model"].train()
    params = cfg.trainable(model)
    ema_tensors = params  # buffers (codebook_used) are bookkeeping, not averaged
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.99), weight_decay=cfg.weight_decay)
    ema = EMA(ema_tensors, cfg.ema_decay)
    rng = state["rng"]
    counts = torch.zeros(cfg.codebook_size)  # code usage since the last restart check
    full_res_from = int(round(cfg.steps * (1.0 - cfg.full_res_fraction)))
    batch: dict[str, torch.Tensor] = {}  # the last step's images (codebook restarts encode them)

    def loss_fn(step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        x = batch["x"] = train_batch(rng, cfg, step >= full_res_from)
        if cfg.decoder_only:
            with torch.no_grad():  # frozen encoder and codebook: the codes of an image never change
                quant, _, losses = model.encode_with_quant(x)
            rec = model.decode(quant)
        else:
            rec, losses = model(x)
        l1 = (rec - x).abs().mean()
        l2 = (rec - x).pow(2).mean()
        loss = cfg.l1_weight * l1 + cfg.l2_weight * l2 + losses.total
        return loss, {"l1": l1, "l2": l2, "vq": losses.vq_loss, "commit": losses.commit_loss}

    def restart_codes(step: int) -> None:
        x = batch["x"]
        n_tok = x.shape[0] * (x.shape[2] // model.downsample_factor) * (x.shape[3] // model.downsample_factor)
        recent = model.quantize.codebook_used[-n_tok:].long()
        counts.add_(torch.bincount(recent, minlength=cfg.codebook_size).float())
        if cfg.restart_every and not cfg.decoder_only and step % cfg.restart_every == 0:
            restarted = 0
            if step <= cfg.restart_until * cfg.steps:
                restarted = _restart_dead_codes(model, opt, counts, x, rng, ema)
            log.info("step %d codebook: %d/%d used since last check, %d restarted", step, int((counts > 0).sum()),
                     cfg.codebook_size, restarted)
            counts.zero_()

    def usage() -> dict[str, Any]:
        return {"res": batch["x"].shape[-1],
                "usage_window": model.quantize.codebook_used.unique().numel() / cfg.codebook_size}

    ema_model = LlamaGenVQModel(**cfg.model_kwargs()).eval()

    def ema_eval(step: int) -> dict[str, Any]:
        ema_model.load_state_dict(model.state_dict())
        ema.copy_to(cfg.trainable(ema_model))
        m = evaluate(ema_model, eval_images)
        m.pop("recon")
        return m

    loop = TrainingLoop("train_vq", LoopSettings.of(cfg, grad_clip=1.0), cfg,
                        ("steps", "eval_every", "ckpt_every", "log_every"), ckpt_path, model, opt, params, ema,
                        lambda: ema_tensors, rng, loss_fn, log, eval_fn=ema_eval, after_step=restart_codes,
                        log_extra=usage, checkpoint_extra=lambda: {"counts": counts})
    ck = loop.resume()
    if ck is not None:
        counts.copy_(ck["counts"])
    else:
        n_params = sum(p.numel() for p in params)
        log.info("new run: %d parameters, config %s", n_params, dumps(dataclasses.asdict(cfg)))
    eval_images, _, _ = labelled_images(cfg.data, cfg.eval_size, "heldout", cfg.resolution, cfg.data_seed + 1,
                                        cfg.crop_scale)
    history = loop.run()
    step, elapsed = loop.step, loop.elapsed

    ema_model.load_state_dict(model.state_dict())
    ema.copy_to(cfg.trainable(ema_model))
    summary = {"steps": step, "train_seconds": elapsed, "history": history,
               "final_train": history[-2] if len(history) > 1 and "eval" in history[-1] else history[-1]}
    return ema_model.eval(), summary


# ---------------------------------------------------------------------------------------------- export
def _save_grid(originals: np.ndarray, recon: np.ndarray, path: Path, cols: int = 8) -> None:
    """PNG grid: rows alternate ``cols`` originals and their reconstructions (atomic write)."""
    from PIL import Image

    n = min(len(originals), cols * 2)
    n -= n % cols
    rows = []
    for i in range(0, n, cols):
        rows.append(np.concatenate(list(originals[i : i + cols]), axis=1))
        rows.append(np.concatenate(list(recon[i : i + cols]), axis=1))
    grid = np.concatenate(rows, axis=0)
    with atomic_path(path) as tmp:
        Image.fromarray(grid).save(tmp, format="PNG")


def decode_ms(model: LlamaGenVQModel, grid: int, repeats: int = 10) -> float:
    """Median wall time (ms) of decoding one ``grid x grid`` code map with ``model`` (fp32, current threads)."""
    codes = torch.zeros(1, grid, grid, dtype=torch.long)
    times = []
    with torch.no_grad():
        model.decode_codes(codes)
        for _ in range(repeats):
            t = time.perf_counter()
            model.decode_codes(codes)
            times.append((time.perf_counter() - t) * 1000)
    return float(np.median(times))


def export(
    model: LlamaGenVQModel,
    cfg: VQTrainConfig,
    out: str | os.PathLike,
    summary: dict[str, Any],
    command: str,
    grid_png: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Evaluate on ``cfg.final_eval_size`` held-out crops, write fp16 safetensors + README + metrics to ``out``.

    The fp16 copy is what gets evaluated (reloaded through ``from_pretrained``), so the reported numbers
    are those of the shipped file. ``out`` is replaced whole (its other files kept) by :func:`atomic_directory`.
    """
    out = Path(out)
    with atomic_directory(out, keep="all") as tmp:
        fp16 = LlamaGenVQModel(**cfg.model_kwargs())
        fp16.load_state_dict(model.state_dict())
        fp16.half().save_pretrained(tmp, safe_serialization=True)
        shipped = LlamaGenVQModel.from_pretrained(tmp, torch_dtype=torch.float32).eval()
        images, _, _ = labelled_images(cfg.data, cfg.final_eval_size, "heldout", cfg.resolution, cfg.data_seed + 2,
                                       cfg.crop_scale)
        metrics = evaluate(shipped, images)
        recon = metrics.pop("recon")
        size_mb = os.path.getsize(Path(tmp) / "diffusion_pytorch_model.safetensors") / 1e6
        metrics.update(
            params=sum(p.numel() for p in shipped.parameters()),
            safetensors_mb=size_mb,
            decode_ms_16x16=decode_ms(shipped, cfg.resolution // shipped.downsample_factor),
            torch_threads=torch.get_num_threads(),
            eval_crops=cfg.final_eval_size,
            steps=summary["steps"],
            train_hours=summary["train_seconds"] / 3600,
            final_train_losses={k: v for k, v in summary["final_train"].items() if k not in ("step",)},
            # what the card states beside the figures, so that eval/cards.py rebuilds it from this record alone
            config=dataclasses.asdict(cfg), command=command,
            grid_png=Path(grid_png).as_posix() if grid_png is not None else None,
        )
        (Path(tmp) / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        write_card(tmp, model_card(cfg, metrics, command, out.name, grid_png))
    if grid_png is not None:
        _save_grid(images[:16], recon[:16], Path(grid_png))
    return metrics


def _data_section(cfg: VQTrainConfig) -> str:
    if cfg.data in ("emoji", "emoji-names"):
        return (data_recipe(cfg.data, cfg.resolution) + f" The first {100 * (1 - cfg.full_res_fraction):.0f}% of "
                f"steps use random {cfg.patch_size}x{cfg.patch_size} patches of those renders (batch {cfg.batch_size}), "
                f"the rest whole {cfg.resolution}px images (batch {cfg.full_res_batch_size}).")
    return f"""`arvis.data.crops`: the {len(__import__('arvis.data.photos', fromlist=['x']).PHOTO_CLASSES)} photos of
`arvis.data.photos.PHOTO_CLASSES` (scikit-image and scikit-learn sample images, all offline). Each photo
is split into a train region and a disjoint held-out vertical strip on the right (25% of the width,
at least 128 px). Training draws fresh crops every step from the train regions only: square crops of
side {cfg.crop_scale[0]}-{cfg.crop_scale[1]} x the region's short side, random position, random
horizontal flip, resized to {cfg.resolution} px (PIL bicubic, antialiased); the first
{100 * (1 - cfg.full_res_fraction):.0f}% of steps use random {cfg.patch_size}x{cfg.patch_size} patches of those renders
(batch {cfg.batch_size}), the rest whole {cfg.resolution}px crops (batch {cfg.full_res_batch_size})."""


def _objective_sentence(cfg: VQTrainConfig) -> str:
    """The loss, what was trained from what (restarts, EMA, initialisation), as the card states it."""
    ema = f"EMA {cfg.ema_decay} of the weights (the EMA weights are shipped)."
    pixels = f"{cfg.l1_weight} x L1 + {cfg.l2_weight} x L2"
    if cfg.decoder_only:
        return (f"loss = {pixels} (the quantiser's terms carry no gradient with the encoder frozen), {ema} "
                f"Initialised from `{cfg.init_from}`; decoder only: `post_quant_conv` and the decoder were trained, the "
                f"encoder, `quant_conv` and codebook were frozen (no dead-code restarts), so this tokenizer gives every "
                f"image the same codes as `{cfg.init_from}` and only decodes them better.")
    init = f" Initialised from `{cfg.init_from}` (fine-tuned)." if cfg.init_from else ""
    return (f"loss = {pixels} + vq + {cfg.commit_loss_beta} x commitment, dead-code restarts every "
            f"{cfg.restart_every} steps for the first {100 * cfg.restart_until:.0f}% of training, {ema}{init}")


def model_card(cfg: VQTrainConfig, m: dict[str, Any], command: str, name: str = "vq-photos",
               grid_png: str | os.PathLike | None = None) -> ModelCard:
    """Model card of the exported tokenizer (``name``: the folder's name)."""
    f = 2 ** (len(cfg.ch_mult) - 1)
    g = cfg.resolution // f
    tl = m["final_train_losses"]
    source = {"emoji": "OpenMoji emoji", "emoji-names": "the 123 named OpenMoji emoji"}.get(cfg.data,
                                                                                        "offline natural photos")
    held = {"emoji": "held-out emoji (never rendered for training)",
            "emoji-names": "held-out views of the named emoji (other augmentations of the same emoji)"}.get(
        cfg.data, "held-out crops (never overlapping training pixels)")
    grid = f"`{Path(grid_png).as_posix()}`" if grid_png else "not written by this export"
    return ModelCard(
        title=f"{name}: arvis's small LlamaGen-style VQ tokenizer",
        summary=f"""A `LlamaGenVQModel` (`arvis.tokenizers.llamagen_vq`, the architecture of LlamaGen's VQ-8 at reduced
width) trained by `arvis.training.train_vq` on {source}. It turns a
{cfg.resolution}x{cfg.resolution} RGB image into a {g}x{g} grid of codes from a {cfg.codebook_size}-entry,
l2-normalised codebook of dimension {cfg.codebook_embed_dim}, and back.""",
        usage=f"""from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
vq = LlamaGenVQModel.from_pretrained("arvis/weights/{name}")    # fp16 file, loads as fp32
codes = vq.encode(images)          # images [B, 3, {cfg.resolution}, {cfg.resolution}] in [-1, 1] -> [B, {g}, {g}]
images = vq.decode_codes(codes)    # -> [B, 3, {cfg.resolution}, {cfg.resolution}] in [-1, 1]""",
        architecture=Section("Architecture", f"""base_channels {cfg.base_channels}, ch_mult {list(cfg.ch_mult)} (down-sampling {f}), encoder
{cfg.encoder_num_res_blocks} / decoder {cfg.decoder_num_res_blocks}+1 residual blocks per level,
attention at the lowest resolution, z_channels {cfg.z_channels}, GroupNorm groups {cfg.norm_num_groups},
codebook {cfg.codebook_size} x {cfg.codebook_embed_dim} (l2-normalised). {m['params']:,} parameters,
{m['safetensors_mb']:.1f} MB as fp16 safetensors. Decoding one {g}x{g} grid: {m['decode_ms_16x16']:.0f} ms
(fp32, {m['torch_threads']} CPU threads, median of 10)."""),
        data=Section("Data", _data_section(cfg)),
        training=Training([command], f"""AdamW (betas 0.9/0.99, lr {cfg.lr}, {cfg.warmup} warm-up steps, cosine to {cfg.min_lr_ratio}x), grad-norm
clip 1.0, {_objective_sentence(cfg)} No perceptual (LPIPS/VGG) or adversarial
loss: no pretrained feature network is available offline. {m['steps']} steps, {m['train_hours']:.2f} h of
training wall time at {m['torch_threads']} CPU threads.

Final training losses (mean of the last logging window): L1 {tl.get('l1', float('nan')):.4f},
L2 {tl.get('l2', float('nan')):.5f}, vq {tl.get('vq', float('nan')):.5f}, commitment
{tl.get('commit', float('nan')):.5f}."""),
        evaluation=Section("Evaluation (the shipped fp16 weights)", f"""{m['eval_crops']} {held} ({cfg.resolution} px, seed {cfg.data_seed + 2}):

{table(("metric", "value"), [
    ("PSNR (mean of per-image, uint8)", f"{m['psnr']:.2f} dB"),
    ("PSNR of mean MSE", f"{m['psnr_of_mean_mse']:.2f} dB"),
    ("L1 on [-1, 1]", f"{m['l1']:.4f}"),
    (f"codebook usage (entries used / {cfg.codebook_size})", f"{100 * m['usage']:.1f}%"),
    ("code perplexity", f"{m['perplexity']:.0f}")])}

rFID (in the domain feature network's space; Inception is not available offline):
`python eval/vq_rfid.py --data {cfg.data} --vq <this folder>`. Reconstructions of held-out images (originals above
reconstructions): {grid}."""))


# ---------------------------------------------------------------------------------------------- CLI
def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m arvis.training.train_vq", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="export directory (diffusers layout)")
    p.add_argument("--scratch", default=None, help="checkpoint / log directory (default: <out>/../.vq-scratch)")
    p.add_argument("--steps", type=int, default=None, help="training steps")
    p.add_argument("--smoke", action="store_true", help="tiny model, a few steps (seconds)")
    p.add_argument("--data", choices=DATA_CHOICES, default="photos", help="training data (default photos)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--base-channels", type=int, default=None)
    p.add_argument("--codebook-size", type=int, default=None)
    p.add_argument("--init-from", default=None, help="fine-tune from this VQ folder (same architecture)")
    p.add_argument("--decoder-only", action="store_true",
                   help="with --init-from: train only the decoder; encoder and codebook (so all codes) stay as they are")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--ema-decay", type=float, default=None)
    p.add_argument("--eval-size", type=int, default=None, help="held-out images of the periodic evaluations")
    p.add_argument("--final-eval-size", type=int, default=None, help="held-out images of the exported figures")
    p.add_argument("--full-res-batch-size", type=int, default=None)
    p.add_argument("--resolution", type=int, default=None,
                   help="image side (default 128; e.g. 64 to fine-tune a decoder for 64 px frames)")
    p.add_argument("--patch-size", type=int, default=None, help="side of the random training patches (default 64)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--grid-png", default=None, help="write a reconstruction grid PNG here")
    p.add_argument("--export-only", action="store_true", help="export the checkpoint in --scratch without training")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """CLI entry point; returns the exported metrics."""
    args = _parse(argv)
    cfg = SMOKE_CONFIG if args.smoke else VQTrainConfig()
    overrides = {k: v for k, v in (("steps", args.steps), ("batch_size", args.batch_size), ("lr", args.lr),
                                   ("base_channels", args.base_channels), ("codebook_size", args.codebook_size),
                                   ("warmup", args.warmup), ("full_res_batch_size", args.full_res_batch_size),
                                   ("ema_decay", args.ema_decay), ("eval_size", args.eval_size),
                                   ("final_eval_size", args.final_eval_size), ("resolution", args.resolution),
                                   ("patch_size", args.patch_size))
                 if v is not None}
    if args.init_from:
        overrides["init_from"] = args.init_from
    if args.decoder_only:
        overrides["decoder_only"] = True
    for name, value in overrides.items():
        if isinstance(value, (int, float)) and value <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be > 0, got {value}")
    cfg = dataclasses.replace(cfg, **overrides, data=args.data)
    out = Path(args.out)
    scratch = Path(args.scratch) if args.scratch else out.parent / f".{out.name}-scratch"
    command = training_command("train_vq", argv)
    if args.export_only:
        cfg = dataclasses.replace(cfg, steps=export_only_steps(scratch))
    model, summary = train(cfg, scratch, log_file=scratch / "train.log", threads=args.threads)
    metrics = export(model, cfg, out, summary, command, args.grid_png)
    print(json.dumps({k: v for k, v in metrics.items() if k != "final_train_losses"}, indent=2))
    return metrics


if __name__ == "__main__":
    main()
