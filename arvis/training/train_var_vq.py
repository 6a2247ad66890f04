"""Train the small multi-scale VQ tokenizers of arvis's VAR pairs (``arvis/weights/var-vq-emoji``, shipped; its
defaults rebuild the retired photo tokenizer ``var-vq-photos``).

A :class:`~arvis.tokenizers.var_vq.VARVQModel` (VAR's residual multi-scale quantiser, shared codebook,
partially shared φ convolutions) at reduced width: 64 px → an 8x8 latent, quantised at
``patch_nums = (1, 2, 3, 4, 6, 8)`` (130 tokens). 64 px, not 128: on this shared CPU a 128 px VAR pair
(341 tokens) could not be trained in the session's budget (measured: one 128 px VQ step at batch 8 took
~30 s on one contended core).

Recipe (what differs from the LlamaGen tokenizer recipe of :mod:`arvis.training.train_vq`, whose data
stream, evaluation and export helpers are reused):

* warm start: the encoder and decoder bodies have the same shapes as the shipped LlamaGen tokenizer
  (``arvis/weights/vq-photos``: base 32, ``ch_mult`` (1, 2, 2, 4), GroupNorm 8), so they start from its
  weights (:func:`warm_start_from_llamagen_vq`); the layers around the quantiser (encoder ``conv_out``,
  decoder ``conv_in``, ``quant_conv``, ``post_quant_conv``), the codebook and φ start fresh; the
  warm-started encoder body stays frozen (``freeze_encoder_body``), so no backward pass runs through it;
* data: fresh train-region crops every step (:func:`arvis.training.train_vq.train_batch`), whole crops
  rendered at 64 px (the coarsest scales need the whole latent);
* loss: ``L1 + L2`` on pixels + VAR's quantiser losses (mean over scales of ``‖f̂_s − sg(f)‖²`` and
  ``0.25 · ‖sg(f̂_s) − f‖²``), no perceptual / adversarial loss (no such network offline);
* codebook: entries unused since the last check are re-seeded from residual vectors of the current
  batch (all scales), until ``restart_until`` of training;
* AdamW, warm-up + cosine, EMA of the weights (exported), atomic checkpoints and resume.

Usage::

    python -m arvis.training.train_var_vq --data emoji --warm-start arvis/weights/vq-emoji --steps 300 \\
        --out /tmp/var-vq-emoji --scratch /tmp/var-vq-emoji-scratch      # var-vq-emoji: its card has the full command
    python -m arvis.training.train_var_vq --out /tmp/var-vq-photos --scratch /tmp/var-vq   # the retired var-vq-photos
    python -m arvis.training.train_var_vq --out /tmp/var-vq-smoke --smoke      # seconds
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from arvis.data.sources import check_data, labelled_images
from arvis.tokenizers.var_vq import VARVQModel
from arvis.training.common import (
    EMA,
    cosine_lr,
    dumps,
    reseed_rows,
    setup_logging,
    training_command,
)
from arvis.training.loop import LoopSettings, TrainingLoop
from arvis.training.train_vq import _save_grid, evaluate, train_batch
from arvis.utils.files import atomic_directory

__all__ = ["SMOKE_CONFIG", "VARVQTrainConfig", "main", "train", "warm_start_from_llamagen_vq"]


@dataclass(frozen=True)
class VARVQTrainConfig:
    """Everything that determines a run (model shape, data, optimisation)."""

    # model
    ch: int = 32
    ch_mult: tuple[int, ...] = (1, 2, 2, 4)
    num_res_blocks: int = 2
    norm_num_groups: int = 8
    z_channels: int = 8  # the LlamaGen tokenizer's code dimension: its latent layers fold in exactly
    vocab_size: int = 1024
    patch_nums: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    share_quant_resi: int = 4
    beta: float = 0.25
    warm_start: str | None = "arvis/weights/vq-photos"
    freeze_encoder_body: bool = True  # with a warm start: train the encoder's conv_out only (no body backward)
    # fine-tune an existing multi-scale tokenizer folder (same architecture) instead of a warm start
    init_from: str = ""
    # with init_from: train only post_quant_conv and the decoder (encoder, quant_conv, codebook and φ frozen), so
    # every code pyramid (and every transformer trained on them) stays valid and only the decoded pictures change
    decoder_only: bool = False
    # data (field names read by train_vq.train_batch)
    data: str = "photos"  # arvis.data.sources: "photos" (the first shipped tokenizer) or "emoji"
    resolution: int = 64
    batch_size: int = 16
    crop_scale: tuple[float, float] = (0.25, 1.0)
    data_seed: int = 0
    # optimisation
    steps: int = 0  # pixel-space steps (encoder conv_out, decoder, codebook, φ) after the latent fit
    latent_steps: int = 500  # codebook + φ fitted to precomputed latents (cheap: no encoder/decoder passes)
    latent_crops: int = 1024
    latent_batch: int = 128
    latent_lr: float = 3e-3
    lr: float = 2e-4
    warmup: int = 50
    min_lr_ratio: float = 0.05
    l1_weight: float = 1.0
    l2_weight: float = 1.0
    ema_decay: float = 0.995
    restart_every: int = 50
    restart_until: float = 0.7
    init_seed: int = 0
    # bookkeeping
    eval_size: int = 128
    final_eval_size: int = 512
    eval_every: int = 200
    ckpt_every: int = 25
    log_every: int = 25

    def __post_init__(self) -> None:
        if self.steps < 0 or self.latent_steps < 0 or self.steps + self.latent_steps < 1:
            raise ValueError(f"steps and latent_steps must be >= 0 and not both 0, got {self.steps}, {self.latent_steps}")
        f = 2 ** (len(self.ch_mult) - 1)
        if self.resolution != self.patch_nums[-1] * f:
            raise ValueError(f"resolution must be patch_nums[-1] * {f} = {self.patch_nums[-1] * f}, got {self.resolution}")
        if min(self.batch_size, self.eval_size, self.final_eval_size) < 1:
            raise ValueError("batch and eval sizes must be >= 1")
        if self.init_from and self.warm_start:
            raise ValueError("init_from fine-tunes a multi-scale tokenizer; set warm_start to None with it")
        if self.decoder_only and not self.init_from:
            raise ValueError("decoder_only fine-tunes the decoder of an existing tokenizer: set init_from")
        if self.decoder_only and self.latent_steps:
            raise ValueError("decoder_only keeps the codebook and φ: set latent_steps to 0")
        check_data(self.data)
        if self.data == "emoji-names":
            raise ValueError("data: tokenizers train on 'emoji' (every training emoji); 'emoji-names' is for the "
                             "transformers")

    def trainable(self, model: VARVQModel) -> list[torch.nn.Parameter]:
        """The parameters this run optimises: the decoder side only, or all but a frozen warm-started encoder body."""
        if self.decoder_only:
            return [*model.post_quant_conv.parameters(), *model.decoder.parameters()]
        return [p for p in model.parameters() if p.requires_grad]

    # train_vq.train_batch reads these two: whole crops at full resolution, every step.
    @property
    def full_res_batch_size(self) -> int:
        return self.batch_size

    @property
    def patch_size(self) -> int:
        return self.resolution

    def model_kwargs(self) -> dict[str, Any]:
        return dict(vocab_size=self.vocab_size, z_channels=self.z_channels, ch=self.ch, ch_mult=tuple(self.ch_mult),
                    num_res_blocks=self.num_res_blocks, norm_num_groups=self.norm_num_groups, beta=self.beta,
                    share_quant_resi=self.share_quant_resi, v_patch_nums=tuple(self.patch_nums))


SMOKE_CONFIG = VARVQTrainConfig(ch=8, ch_mult=(1, 2), num_res_blocks=1, norm_num_groups=4, z_channels=4,
                                vocab_size=32, patch_nums=(1, 2, 4), resolution=8, batch_size=2, warm_start=None,
                                latent_steps=100, latent_crops=8, latent_batch=4,
                                steps=4, warmup=1, restart_every=2, eval_size=4, final_eval_size=4, eval_every=2,
                                ckpt_every=2, log_every=1)


# ---------------------------------------------------------------------------------------------- warm start
def warm_start_from_llamagen_vq(model: VARVQModel, source: str | os.PathLike,
                                images: torch.Tensor | None = None) -> list[str]:
    """Copy the encoder and decoder bodies of an arvis LlamaGen tokenizer folder into ``model``.

    The two families share the taming/LDM networks; names differ (``conv_blocks.i.res`` vs ``down.i.block``,
    the decoder's level order, separate ``q``/``k``/``v`` vs a fused ``qkv``). When the code dimensions
    agree, the latent layers are folded in too (:func:`_composed_latent_layers`); with ``images``
    (``[B, 3, H, W]`` in ``[-1, 1]``) the encoder's last layer is then rescaled so that latent vectors have
    unit mean norm, the norm of the l2-normalised codes the decoder was trained on. Tensors whose shapes
    differ are left as they are. Returns the names of the tensors copied.
    """
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel

    src = LlamaGenVQModel.from_pretrained(str(source), torch_dtype=torch.float32).state_dict()
    n_levels = len(model.config.ch_mult)
    mapped: dict[str, torch.Tensor] = {}
    for key, value in src.items():
        parts = key.split(".")
        if parts[0] in ("encoder", "decoder") and parts[1] == "conv_blocks":
            level = int(parts[2]) if parts[0] == "encoder" else n_levels - 1 - int(parts[2])
            kind = {"res": "block"}.get(parts[3], parts[3])
            parts = [parts[0], "down" if parts[0] == "encoder" else "up", str(level), kind, *parts[4:]]
        elif parts[0] in ("encoder", "decoder") and parts[1] == "mid":
            parts = [parts[0], "mid", ("block_1", "attn_1", "block_2")[int(parts[2])], *parts[3:]]
        mapped[".".join(parts)] = value
    # Separate q/k/v 1x1 convolutions → one fused qkv convolution.
    for key in [k for k in mapped if k.endswith(".q.weight") or k.endswith(".q.bias")]:
        stem, leaf = key[: -len(".q.weight" if key.endswith("weight") else ".q.bias")], key.rsplit(".", 1)[1]
        mapped[f"{stem}.qkv.{leaf}"] = torch.cat([mapped.pop(f"{stem}.{n}.{leaf}") for n in ("q", "k", "v")])
    target = model.state_dict()
    copied = [k for k, v in mapped.items() if k in target and target[k].shape == v.shape]
    weights = {k: mapped[k] for k in copied}
    if model.config.z_channels == src["quant_conv.weight"].shape[0] and model.config.quant_conv_ks == 3:
        weights.update(_composed_latent_layers(src, model.config.z_channels))
        copied += ["encoder.conv_out", "decoder.conv_in", "quant_conv", "post_quant_conv", "quantize.embedding"]
    model.load_state_dict(weights, strict=False)
    if "quant_conv" in copied:
        with torch.no_grad():
            for phi in model.quantize.quant_resi.modules():  # φ starts as the identity: plain residual VQ
                if isinstance(phi, torch.nn.Conv2d):
                    phi.weight.copy_(_identity_conv(phi.weight.shape[0]))
                    phi.bias.zero_()
            if images is not None:
                scale = 1.0 / model.latent(images).norm(dim=1).mean()
                model.encoder.conv_out.weight.mul_(scale)
                model.encoder.conv_out.bias.mul_(scale)
    return sorted(copied)


def _identity_conv(dim: int) -> torch.Tensor:
    w = torch.zeros(dim, dim, 3, 3)
    w[:, :, 1, 1] = torch.eye(dim)
    return w


def _composed_latent_layers(src: dict[str, torch.Tensor], dim: int) -> dict[str, torch.Tensor]:
    """LlamaGen's latent layers folded into VAR's when the code dimensions agree (both linear maps).

    LlamaGen: ``conv_out`` (3x3, → z) then ``quant_conv`` (1x1, z → D); VAR: ``conv_out`` (3x3, → D) then
    ``quant_conv`` (3x3, D → D). The composition of the first pair becomes VAR's ``conv_out`` and VAR's
    ``quant_conv`` starts as the identity; likewise ``post_quant_conv`` (1x1) ∘ decoder ``conv_in`` (3x3)
    becomes the decoder's ``conv_in`` (exact away from the border, where LlamaGen's zero padding sees the
    1x1 layer's bias and the composed layer does not). The codebook is copied l2-normalised, the form
    LlamaGen looks codes up in; VAR's residual quantiser then refines what one code leaves.
    """
    wq, bq = src["quant_conv.weight"][:, :, 0, 0], src["quant_conv.bias"]  # [D, z], [D]
    w1, b1 = src["encoder.conv_out.weight"], src["encoder.conv_out.bias"]  # [z, c, 3, 3], [z]
    wp, bp = src["post_quant_conv.weight"][:, :, 0, 0], src["post_quant_conv.bias"]  # [z, D], [z]
    w2, b2 = src["decoder.conv_in.weight"], src["decoder.conv_in.bias"]  # [c, z, 3, 3], [c]
    identity = _identity_conv(dim)
    return {
        "encoder.conv_out.weight": torch.einsum("dz,zcij->dcij", wq, w1), "encoder.conv_out.bias": wq @ b1 + bq,
        "decoder.conv_in.weight": torch.einsum("czij,zd->cdij", w2, wp),
        "decoder.conv_in.bias": b2 + torch.einsum("czij,z->c", w2, bp),
        "quant_conv.weight": identity, "quant_conv.bias": torch.zeros(dim),
        "post_quant_conv.weight": identity.clone(), "post_quant_conv.bias": torch.zeros(dim),
        "quantize.embedding.weight": F.normalize(src["quantize.embedding.weight"], dim=-1),
    }


# ---------------------------------------------------------------------------------------------- training
def fit_quantizer(model: VARVQModel, cfg: VARVQTrainConfig, rng: np.random.Generator, log: Any) -> list[dict]:
    """Fit the codebook and φ to the latents of ``cfg.latent_crops`` train crops (encoder and decoder fixed).

    The loss is VAR's codebook loss (mean over scales of ``‖f̂_s − f‖²``); unused entries are re-seeded
    from residual vectors every 100 steps until 70% of the fit. Returns the log entries.
    """
    latents = []
    with torch.no_grad():
        for start in range(0, cfg.latent_crops, 64):
            n = min(64, cfg.latent_crops - start)
            latents.append(model.latent(train_batch(rng, dataclasses.replace(cfg, batch_size=n), full_res=True)))
    latents = torch.cat(latents)
    q = model.quantize
    params = [q.embedding.weight, *(p for p in q.quant_resi.parameters())]
    opt = torch.optim.Adam(params, lr=cfg.latent_lr)
    counts = torch.zeros(cfg.vocab_size)
    history = []
    q.train()
    for step in range(1, cfg.latent_steps + 1):
        f = latents[torch.from_numpy(rng.integers(0, len(latents), cfg.latent_batch))]
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step - 1, cfg.latent_steps, cfg.latent_lr, 50, 0.05)
        _, ids, losses = q(f)
        opt.zero_grad(set_to_none=True)
        losses.vq_loss.backward()
        opt.step()
        counts += torch.bincount(torch.cat([i.flatten() for i in ids]), minlength=cfg.vocab_size).float()
        if step % 100 == 0:
            with torch.no_grad():
                last = F.mse_loss(q.quantize(latents[:512])[1][-1], latents[:512]).item()
            restarted = _reseed(q, opt, counts, f, rng) if step <= cfg.restart_until * cfg.latent_steps else 0
            entry = {"latent_step": step, "vq": float(losses.vq_loss.detach()), "final_scale_mse": last,
                     "used": int((counts > 0).sum()), "restarted": restarted}
            history.append(entry)
            log.info("latent fit %s", dumps(entry))
            counts.zero_()
    q.eval()
    return history


def _reseed(q: Any, opt: torch.optim.Optimizer, counts: torch.Tensor, f: torch.Tensor, rng: np.random.Generator,
            ema: EMA | None = None, params: list[torch.Tensor] | None = None) -> int:
    """Unused codebook rows ← residual vectors of the latents ``f`` at random scales; their Adam moments are
    zeroed and (with ``ema``) their EMA copies replaced, so no average keeps a stale entry."""
    dead = torch.nonzero(counts == 0).flatten()
    if dead.numel() == 0:
        return 0
    with torch.no_grad():
        pool = torch.cat(_residual_vectors(q, f))
    values = pool[torch.from_numpy(rng.integers(0, pool.shape[0], size=dead.numel()))]
    return reseed_rows(q.embedding.weight, dead, values, opt, ema if params is not None else None, params)


def _residual_vectors(q: Any, f: torch.Tensor) -> list[torch.Tensor]:
    """What each scale quantised on the latents ``f``: ``[N_s, C]`` residual vectors per scale."""
    _, f_hats = q.quantize(f)
    out = []
    for s, pn in enumerate(q.patch_nums):
        rest = f if s == 0 else f - f_hats[s - 1]
        rest = rest if pn == rest.shape[-1] else F.interpolate(rest, size=(pn, pn), mode="area")
        out.append(rest.permute(0, 2, 3, 1).reshape(-1, rest.shape[1]))
    return out


def train(cfg: VARVQTrainConfig, scratch: str | os.PathLike, threads: int | None = None
          ) -> tuple[VARVQModel, dict[str, Any]]:
    """Train (resuming from ``scratch/checkpoint.pt``) and return the EMA model and a summary."""
    scratch = Path(scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    log = setup_logging(scratch / "train.log", "arvis.train_var_vq")
    if threads:
        torch.set_num_threads(threads)
    model = VARVQModel(**cfg.model_kwargs()).init_weights(torch.Generator().manual_seed(cfg.init_seed)).train()
    rng = np.random.default_rng([cfg.data_seed, 4242])
    copied = warm_start_from_llamagen_vq(model, cfg.warm_start, train_batch(rng, cfg, True)) if cfg.warm_start else []
    if cfg.init_from:
        start = VARVQModel.from_pretrained(cfg.init_from, torch_dtype=torch.float32)
        model.load_state_dict(start.state_dict())  # strict: the architectures must match
        copied = list(start.state_dict())
    if copied and cfg.freeze_encoder_body:
        for name, p in model.encoder.named_parameters():
            p.requires_grad_(name.startswith("conv_out."))
    if cfg.decoder_only:
        model.quantize.eval()  # frozen: not even its usage statistics (a buffer) change
    params = list(model.parameters())
    trainable = cfg.trainable(model)
    opt = torch.optim.AdamW(trainable, lr=cfg.lr, betas=(0.9, 0.99), weight_decay=0.0)
    ema = EMA(params, cfg.ema_decay)
    counts = torch.zeros(cfg.vocab_size)  # code usage since the last restart check
    batch: dict[str, Any] = {}  # the last step's images and codes (counted and restarted after the step)

    def loss_fn(step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        x = batch["x"] = train_batch(rng, cfg, full_res=True)
        if cfg.decoder_only:
            with torch.no_grad():  # frozen encoder, codebook and φ: the codes of an image never change
                f_hat, ids, losses = model.quantize(model.latent(x))
            rec = model.decode(f_hat)
        else:
            rec, losses, ids = model(x)
        batch["ids"] = ids
        l1, l2 = (rec - x).abs().mean(), (rec - x).pow(2).mean()
        loss = cfg.l1_weight * l1 + cfg.l2_weight * l2 + losses.total
        return loss, {"l1": l1, "l2": l2, "vq": losses.vq_loss, "commit": losses.commit_loss}

    def restart_codes(step: int) -> None:
        counts.add_(torch.bincount(torch.cat([i.flatten() for i in batch["ids"]]), minlength=cfg.vocab_size).float())
        if cfg.restart_every and not cfg.decoder_only and step % cfg.restart_every == 0:
            restarted = 0
            if step <= cfg.restart_until * cfg.steps:
                with torch.no_grad():
                    restarted = _reseed(model.quantize, opt, counts, model.latent(batch["x"]), rng, ema, params)
            log.info("step %d codebook: %d/%d used since last check, %d restarted", step, int((counts > 0).sum()),
                     cfg.vocab_size, restarted)
            counts.zero_()

    def ema_model() -> VARVQModel:
        m = VARVQModel(**cfg.model_kwargs())
        m.load_state_dict(model.state_dict())
        ema.copy_to(list(m.parameters()))
        return m.eval()

    def ema_eval(step: int) -> dict[str, Any]:
        m = evaluate(ema_model(), eval_images)
        m.pop("recon")
        return m

    loop = TrainingLoop("train_var_vq", LoopSettings.of(cfg, grad_clip=1.0), cfg,
                        ("steps", "eval_every", "ckpt_every", "log_every"), scratch / "checkpoint.pt", model, opt,
                        trainable, ema, lambda: params, rng, loss_fn, log, eval_fn=ema_eval, after_step=restart_codes,
                        checkpoint_extra=lambda: {"counts": counts, "latent_fitted": bool(cfg.latent_steps)})
    ck = loop.resume()
    if ck is not None:
        counts.copy_(ck["counts"])
    else:
        log.info("new run: %d parameters (%d trainable), %d tensors warm-started from %s, config %s",
                 sum(p.numel() for p in params), sum(p.numel() for p in trainable), len(copied), cfg.warm_start,
                 dumps(dataclasses.asdict(cfg)))
    eval_images, _, _ = labelled_images(cfg.data, cfg.eval_size, "heldout", cfg.resolution, cfg.data_seed + 1,
                                        cfg.crop_scale)
    if cfg.latent_steps and (ck is None or not ck.get("latent_fitted")):
        t0 = time.time()
        loop.records += fit_quantizer(model, cfg, rng, log)
        ema.shadow = [p.detach().clone() for p in params]  # the fit is the starting point of the pixel steps
        loop.elapsed += time.time() - t0
        m = evaluate(model.eval(), eval_images)
        m.pop("recon")
        loop.records.append({"step": 0, "eval": m})
        log.info("eval after the latent fit (%d held-out crops): %s", cfg.eval_size, dumps(m))
        model.train()
    history = loop.run()
    step, elapsed = loop.step, loop.elapsed
    train_entries = [h for h in history if "eval" not in h]
    return ema_model(), {"steps": step, "train_seconds": elapsed, "history": history,
                         "final_train": train_entries[-1] if train_entries else {}, "warm_started": len(copied)}


# ---------------------------------------------------------------------------------------------- export
def export(model: VARVQModel, cfg: VARVQTrainConfig, out: str | os.PathLike, summary: dict[str, Any], command: str,
           grid_png: str | os.PathLike | None = None) -> dict[str, Any]:
    """Evaluate the fp16 copy on held-out crops; write safetensors + ``metrics.json`` into ``out`` atomically."""
    out = Path(out)
    with atomic_directory(out, keep="all") as tmp:
        model.to(torch.float16).save_pretrained(tmp, safe_serialization=True)
        shipped = VARVQModel.from_pretrained(tmp, torch_dtype=torch.float32).eval()
        images, _, _ = labelled_images(cfg.data, cfg.final_eval_size, "heldout", cfg.resolution, cfg.data_seed + 2,
                                       cfg.crop_scale)
        metrics = evaluate(shipped, images)
        recon = metrics.pop("recon")
        codes = torch.cat([shipped.encode(torch.from_numpy(images[i:i + 64]).permute(0, 3, 1, 2).float() / 127.5 - 1)
                           for i in range(0, min(len(images), 256), 64)])
        per_scale = [float((torch.bincount(codes[:, b:e].flatten(), minlength=cfg.vocab_size) > 0).float().mean())
                     for b, e in _bounds(cfg.patch_nums)]
        metrics.update(
            params=sum(p.numel() for p in shipped.parameters()),
            safetensors_mb=os.path.getsize(Path(tmp) / "diffusion_pytorch_model.safetensors") / 1e6,
            decode_ms=decode_ms_codes(shipped), torch_threads=torch.get_num_threads(),
            usage_per_scale=per_scale, eval_crops=cfg.final_eval_size, steps=summary["steps"],
            train_hours=summary["train_seconds"] / 3600, warm_started_tensors=summary.get("warm_started", 0),
            final_train_losses={k: v for k, v in summary["final_train"].items() if k != "step"},
            command=command, config=dataclasses.asdict(cfg),
        )
        (Path(tmp) / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    if grid_png is not None:
        _save_grid(images[:16], recon[:16], Path(grid_png))
    return metrics


def _bounds(patch_nums: tuple[int, ...]) -> list[tuple[int, int]]:
    from arvis.tokenizers.var_vq import scale_bounds

    return scale_bounds(patch_nums)


def decode_ms_codes(model: VARVQModel, repeats: int = 10) -> float:
    """Median ms to decode one image's codes ``[1, L]`` (fp32, current threads, after one warm-up)."""
    codes = torch.zeros(1, model.num_tokens, dtype=torch.long)
    times = []
    with torch.no_grad():
        for i in range(repeats + 1):
            t = time.perf_counter()
            model.decode_codes(codes)
            if i:
                times.append((time.perf_counter() - t) * 1000)
    return float(np.median(times))


# ---------------------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m arvis.training.train_var_vq", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="export folder (diffusers layout)")
    p.add_argument("--scratch", required=True, help="checkpoints and log (resumes from here)")
    p.add_argument("--steps", type=int, default=None, help="pixel-space steps")
    p.add_argument("--latent-steps", type=int, default=None, help="codebook + φ fit before the pixel steps (0: none)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--ema-decay", type=float, default=None)
    p.add_argument("--eval-size", type=int, default=None)
    p.add_argument("--final-eval-size", type=int, default=None)
    p.add_argument("--data", choices=("photos", "emoji"), default=None, help="training images (arvis.data.sources)")
    p.add_argument("--warm-start", default=None, help="LlamaGen tokenizer folder to start from ('none' to start fresh)")
    p.add_argument("--init-from", default=None, help="a multi-scale tokenizer folder to fine-tune (no warm start)")
    p.add_argument("--decoder-only", action="store_true",
                   help="with --init-from: train post_quant_conv and the decoder only (codes stay the same)")
    p.add_argument("--smoke", action="store_true", help="tiny model, a few steps (seconds)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--grid-png", default=None, help="write a reconstruction grid PNG here")
    args = p.parse_args(argv)
    cfg = SMOKE_CONFIG if args.smoke else VARVQTrainConfig()
    overrides: dict[str, Any] = {k: v for k, v in (
        ("steps", args.steps), ("latent_steps", args.latent_steps), ("batch_size", args.batch_size), ("lr", args.lr),
        ("warmup", args.warmup), ("ema_decay", args.ema_decay), ("eval_size", args.eval_size),
        ("final_eval_size", args.final_eval_size), ("data", args.data), ("init_from", args.init_from))
        if v is not None}
    if args.warm_start is not None:
        overrides["warm_start"] = None if args.warm_start == "none" else args.warm_start
    if args.init_from is not None:
        overrides["warm_start"] = None
    if args.decoder_only:
        overrides.update(decoder_only=True, latent_steps=0)
    cfg = dataclasses.replace(cfg, **overrides)
    command = training_command("train_var_vq", argv)
    model, summary = train(cfg, args.scratch, threads=args.threads)
    metrics = export(model, cfg, args.out, summary, command, args.grid_png)
    print(json.dumps({k: v for k, v in metrics.items() if k not in ("final_train_losses", "config")}, indent=2))
    return metrics


if __name__ == "__main__":
    main()
