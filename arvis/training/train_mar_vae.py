"""Train the small KL VAE of arvis's MAR models (16 latent channels, 128 px → an 8x8 latent grid).

A diffusers ``AutoencoderKL`` in MAR's KL-16 architecture (:func:`arvis.tokenizers.mar_vae.build_kl_vae`: LDM
encoder/decoder, stride 16, self-attention at the lowest level and in the middle blocks) at reduced width:
``block_out_channels (32, 64, 64, 128, 128)``, one residual block per level, 4,289,523 parameters (8.6 MB as
fp16 safetensors). Stride 16 keeps MAR's tokenizer layout; at 128 px it gives an 8x8 grid, 64 tokens. 64, not
256 (a stride-8 VAE's 16x16): on this CPU the transformers' training cost and the causal variant's one
forward per token both grow with the token count (a causal decode is 64 forwards instead of 256), and the
shipped MAR pair must be trainable in hours on one core.

Recipe:

* data: fresh train-region crops every step (:func:`arvis.training.train_vq.train_batch`) of the offline
  photos (``--data``), rendered at ``resolution``; most steps train on random ``patch_size`` patches of them
  (64 px: about 4x cheaper, the network is convolutional), the last ``full_res_fraction`` of the steps on whole
  crops so that the attention at the lowest level sees the full 8x8 grid (the VQ tokenizer's recipe);
* loss: ``L1 + L2`` on pixels + ``kl_weight ·`` KL(posterior ‖ N(0, I)) (summed over latent values, divided by
  the pixel values, i.e. LDM's per-image sums with weight ``kl_weight``); no perceptual or adversarial loss
  (no pretrained feature network offline; the domain classifier of ``arvis/weights`` is trained on the same
  crops and was not tried as one);
* AdamW, warm-up + cosine, an EMA of the weights (exported), atomic checkpoints and resume;
* export: the EMA weights in fp16; ``scaling_factor`` (MAR's ``0.2325`` for KL-16) set to ``1 / std`` of
  posterior samples of training crops, so that the transformer sees unit-variance tokens.

Usage::

    python -m arvis.training.train_mar_vae --out runs/mar-vae --scratch runs/mar-vae-scratch --threads 1
    python -m arvis.training.train_mar_vae --preset smoke --out /tmp/vae --scratch /tmp/vae-s   # seconds
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
from diffusers import AutoencoderKL

from arvis.data.sources import DATA_CHOICES, check_data, data_recipe, labelled_images
from arvis.tokenizers.mar_vae import build_kl_vae
from arvis.training.common import (
    EMA,
    dumps,
    portable_command,
    setup_logging,
    training_command,
    warm_start_commands,
)
from arvis.training.loop import LoopSettings, TrainingLoop
from arvis.training.train_vq import to_tensor, to_uint8, train_batch
from arvis.utils.files import atomic_directory
from arvis.utils.images import mean_psnr
from arvis.utils.model_card import ModelCard, Section, Training, write_card

__all__ = ["PRESETS", "MARVAETrainConfig", "evaluate", "export", "main", "opponent_chroma", "train"]


@dataclass(frozen=True)
class MARVAETrainConfig:
    """Everything that determines a VAE training run."""

    # model
    block_out_channels: tuple[int, ...] = (32, 64, 64, 128, 128)
    layers_per_block: int = 1
    norm_num_groups: int = 16
    latent_channels: int = 16
    attn_resolutions: tuple[int, ...] = (8,)  # feature-map sizes with encoder attention (the lowest level)
    # data (field names read by train_vq.train_batch)
    data: str = "photos"
    resolution: int = 128
    batch_size: int = 8
    patch_size: int = 64  # most steps train on random patches of this side
    full_res_batch_size: int = 4
    full_res_fraction: float = 0.2  # the last steps train on whole crops
    crop_scale: tuple[float, float] = (0.25, 1.0)
    data_seed: int = 0
    # optimisation
    steps: int = 4000
    lr: float = 3e-4
    warmup: int = 100
    min_lr_ratio: float = 0.05
    l1_weight: float = 1.0
    l2_weight: float = 1.0
    kl_weight: float = 1e-6
    # Weight of an L1 loss on the opponent-colour channels (red-green, yellow-blue) of the reconstruction: plain
    # L1 + L2 on RGB lets a small VAE trade an emoji's colours for its outline, and colour is much of what names it.
    chroma_weight: float = 0.0
    grad_clip: float = 1.0
    ema_decay: float = 0.998
    init_seed: int = 0
    init_from: str = ""  # a VAE folder of the same architecture to fine-tune (e.g. arvis/weights/mar-vae-emoji)
    # bookkeeping
    eval_size: int = 64
    final_eval_size: int = 256
    scale_crops: int = 256  # training crops whose latent std sets scaling_factor
    eval_every: int = 500
    ckpt_every: int = 50
    log_every: int = 25

    def __post_init__(self) -> None:
        check_data(self.data)
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        stride = 2 ** (len(self.block_out_channels) - 1)
        if self.resolution % stride:
            raise ValueError(f"resolution must be a multiple of the stride {stride}, got {self.resolution}")
        if self.patch_size % stride or not stride <= self.patch_size <= self.resolution:
            raise ValueError(f"patch_size must be a multiple of {stride} in [{stride}, {self.resolution}], got "
                             f"{self.patch_size}")
        if not 0.0 <= self.full_res_fraction <= 1.0:
            raise ValueError(f"full_res_fraction must be in [0, 1], got {self.full_res_fraction}")
        if min(self.batch_size, self.full_res_batch_size, self.eval_size, self.final_eval_size, self.scale_crops) < 1:
            raise ValueError("batch, eval and scale sizes must be >= 1")
        if self.kl_weight < 0:
            raise ValueError(f"kl_weight must be >= 0, got {self.kl_weight}")
        if self.chroma_weight < 0:
            raise ValueError(f"chroma_weight must be >= 0, got {self.chroma_weight}")

    @property
    def stride(self) -> int:
        return 2 ** (len(self.block_out_channels) - 1)

    def build(self) -> AutoencoderKL:
        return build_kl_vae(self.block_out_channels, self.latent_channels, self.resolution, self.attn_resolutions,
                            self.layers_per_block, self.norm_num_groups, scaling_factor=1.0)


PRESETS: dict[str, MARVAETrainConfig] = {
    "vae": MARVAETrainConfig(),
    # Emoji at 64 px, stride 8: the same 8x8 grid (64 tokens, the transformers' cost unchanged) with 4x the latent
    # values per pixel. The 128 px stride-16 VAE fine-tuned on emoji tops out near 16.8 dB, and the emoji CLIP names
    # 15% of its round trips (real renders 71%): a ceiling below what MAR samples must reach.
    "emoji-64": MARVAETrainConfig(block_out_channels=(32, 64, 128, 128), data="emoji", resolution=64,
                                  batch_size=8, patch_size=64, full_res_batch_size=8, full_res_fraction=0.0,
                                  steps=2500, lr=5e-4, ema_decay=0.995),
    "smoke": MARVAETrainConfig(block_out_channels=(8, 8, 8, 8), norm_num_groups=4, latent_channels=4,
                               attn_resolutions=(), resolution=32, batch_size=2, patch_size=16,
                               full_res_batch_size=2, full_res_fraction=0.5, steps=3, warmup=1, eval_size=4,
                               final_eval_size=4, scale_crops=4, eval_every=3, ckpt_every=2, log_every=1),
}


# ---------------------------------------------------------------------------------------------- loss and eval
def opponent_chroma(x: torch.Tensor) -> torch.Tensor:
    """The two opponent-colour channels of RGB images ``[B, 3, H, W]``: red − green and (red + green) / 2 − blue
    (``[B, 2, H, W]``; zero on greys, so that the term weighs colour only)."""
    r, g, b = x.unbind(1)
    return torch.stack((r - g, (r + g) / 2 - b), dim=1)


def vae_loss(vae: AutoencoderKL, x: torch.Tensor, cfg: MARVAETrainConfig, generator: torch.Generator
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``l1·|x − x̂| + l2·(x − x̂)² + chroma·|C(x) − C(x̂)| + kl_weight · KL / (pixel values)`` with ``x̂`` decoded
    from a posterior sample and ``C`` the opponent-colour channels (:func:`opponent_chroma`)."""
    posterior = vae.encode(x).latent_dist
    recon = vae.decode(posterior.sample(generator=generator)).sample
    l1 = (recon - x).abs().mean()
    l2 = (recon - x).pow(2).mean()
    kl = posterior.kl().mean() / x[0].numel()
    loss = cfg.l1_weight * l1 + cfg.l2_weight * l2 + cfg.kl_weight * kl
    terms = {"l1": l1, "l2": l2, "kl": kl}
    if cfg.chroma_weight:
        terms["chroma"] = (opponent_chroma(recon) - opponent_chroma(x)).abs().mean()
        loss = loss + cfg.chroma_weight * terms["chroma"]
    return loss, terms


@torch.no_grad()
def evaluate(vae: AutoencoderKL, images: np.ndarray, batch_size: int = 32) -> dict[str, Any]:
    """Reconstruction of ``uint8 [N, H, W, 3]`` images through the posterior means: PSNR (mean of per-image, uint8),
    L1 / MSE on ``[-1, 1]``, the latent means' std, and ``recon`` (uint8)."""
    was_training = vae.training
    vae.eval()
    recon = np.empty_like(images)
    l1 = mse = 0.0
    latents = []
    for i in range(0, len(images), batch_size):
        x = to_tensor(images[i:i + batch_size]).to(vae.dtype)
        mean = vae.encode(x).latent_dist.mean
        y = vae.decode(mean).sample.float()
        latents.append(mean.float())
        l1 += float((y - x.float()).abs().mean()) * len(x)
        mse += float((y - x.float()).pow(2).mean()) * len(x)
        recon[i:i + batch_size] = to_uint8(y)
    vae.train(was_training)
    return {"psnr": mean_psnr(images, recon), "l1": l1 / len(images), "mse": mse / len(images),
            "latent_mean_std": float(torch.cat(latents).std()), "recon": recon}


@torch.no_grad()
def latent_scale(vae: AutoencoderKL, images: np.ndarray, generator: torch.Generator, batch_size: int = 32) -> float:
    """``1 / std`` of posterior samples of ``images`` (LDM's way of choosing ``scaling_factor``)."""
    samples = [vae.encode(to_tensor(images[i:i + batch_size]).to(vae.dtype)).latent_dist.sample(generator=generator)
               for i in range(0, len(images), batch_size)]
    return float(1.0 / torch.cat(samples).float().std())


# ---------------------------------------------------------------------------------------------- training
def train(cfg: MARVAETrainConfig, scratch: str | os.PathLike, threads: int | None = None
          ) -> tuple[AutoencoderKL, dict[str, Any]]:
    """Train (resuming from ``scratch/checkpoint.pt``) and return the EMA model and a summary."""
    scratch = Path(scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    log = setup_logging(scratch / "train.log", "arvis.train_mar_vae")
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(cfg.init_seed)  # diffusers' default initialisation draws from the global RNG
    vae = cfg.build().train()
    if cfg.init_from:
        start = AutoencoderKL.from_pretrained(cfg.init_from, torch_dtype=torch.float32)
        vae.load_state_dict(start.state_dict())  # strict: the architectures must match
    params = list(vae.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.5, 0.9), weight_decay=0.0)  # LDM's autoencoder betas
    ema = EMA(params, cfg.ema_decay)
    rng = np.random.default_rng([cfg.data_seed, 16, 16])
    gen = torch.Generator()  # posterior samples

    def loss_fn(step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        x = train_batch(rng, cfg, full_res=step >= (1.0 - cfg.full_res_fraction) * cfg.steps)  # type: ignore[arg-type]
        return vae_loss(vae, x, cfg, gen)

    def ema_eval(step: int) -> dict[str, Any]:
        m = evaluate(_ema_copy(vae, ema, params), eval_images)
        m.pop("recon")
        return m

    loop = TrainingLoop("train mar vae", LoopSettings.of(cfg), cfg, ("steps", "eval_every", "ckpt_every", "log_every"),
                        scratch / "checkpoint.pt", vae, opt, params, ema, lambda: params, rng, loss_fn, log,
                        eval_fn=ema_eval, generators=[gen])
    if loop.resume() is None:
        log.info("new run: %d parameters, config %s", sum(p.numel() for p in params), dumps(dataclasses.asdict(cfg)))
    gen.manual_seed(cfg.data_seed * 1000 + loop.step)
    eval_images = labelled_images(cfg.data, cfg.eval_size, "heldout", cfg.resolution, cfg.data_seed + 2)[0]
    history = loop.run()
    step, elapsed = loop.step, loop.elapsed
    train_entries = [h for h in history if "eval" not in h]
    return _ema_copy(vae, ema, params), {"steps": step, "train_seconds": elapsed, "history": history,
                                         "final_train": train_entries[-1] if train_entries else {}}


def _ema_copy(vae: AutoencoderKL, ema: EMA, params: list[torch.Tensor]) -> AutoencoderKL:
    """A copy of ``vae`` holding the EMA weights (the training model keeps its own)."""
    import copy

    averaged = copy.deepcopy(vae).eval()
    ema.copy_to(list(averaged.parameters()))
    return averaged


# ---------------------------------------------------------------------------------------------- export
def export(vae: AutoencoderKL, cfg: MARVAETrainConfig, out: str | os.PathLike, summary: dict[str, Any],
           command: str) -> dict[str, Any]:
    """Set ``scaling_factor``, write fp16 safetensors + ``metrics.json`` + ``README.md`` into ``out`` atomically;
    the metrics are those of the reloaded fp16 folder on held-out crops."""
    out = Path(out)
    # The record and the card name the folder a fine-tune started from without this machine's absolute path.
    recorded = dataclasses.replace(cfg, init_from=portable_command(cfg.init_from) if cfg.init_from else "")
    train_images = labelled_images(cfg.data, cfg.scale_crops, "train", cfg.resolution, cfg.data_seed)[0]
    scale = latent_scale(vae.float(), train_images, torch.Generator().manual_seed(cfg.data_seed))
    vae.register_to_config(scaling_factor=scale)
    with atomic_directory(out, keep=("samples.png",)) as tmp:
        vae.to(torch.float16).save_pretrained(tmp, safe_serialization=True)
        shipped = AutoencoderKL.from_pretrained(tmp, torch_dtype=torch.float32).eval()
        images = labelled_images(cfg.data, cfg.final_eval_size, "heldout", cfg.resolution, cfg.data_seed + 2)[0]
        metrics = evaluate(shipped, images)
        metrics.pop("recon")
        metrics.update(
            params=sum(p.numel() for p in shipped.parameters()),
            safetensors_mb=os.path.getsize(Path(tmp) / "diffusion_pytorch_model.safetensors") / 1e6,
            scaling_factor=scale, latent_grid=cfg.resolution // cfg.stride, eval_crops=cfg.final_eval_size,
            steps=summary["steps"], train_hours=summary["train_seconds"] / 3600, torch_threads=torch.get_num_threads(),
            final_train_losses={k: v for k, v in summary["final_train"].items() if k != "step"},
            history=summary["history"], command=command, init_commands=warm_start_commands(cfg.init_from, "metrics.json"),
            config=dataclasses.asdict(recorded),
        )
        (Path(tmp) / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        write_card(tmp, model_card(recorded, metrics, out.name))
    return metrics


def model_card(cfg: MARVAETrainConfig, m: dict[str, Any], name: str, naming: dict[str, Any] | None = None
               ) -> ModelCard:
    """Model card of the exported VAE folder; ``naming``: its round trips' naming record
    (``eval/tokenizer_naming.py``), when measured."""
    g, tl = m["latent_grid"], m["final_train_losses"]
    return ModelCard(
        title=f"{name}: KL VAE for arvis's MAR models",
        summary=f"""A diffusers `AutoencoderKL` in MAR's KL-16 layout at reduced width: {cfg.resolution} px RGB ↔ {cfg.latent_channels}
latent channels on a {g}x{g} grid (stride {cfg.stride}). MAR's tokens are `posterior.sample() · scaling_factor`
(`scaling_factor` = {m['scaling_factor']:.4f} = 1 / std of posterior samples of {cfg.scale_crops} training crops).""",
        usage=f"""from diffusers import AutoencoderKL
vae = AutoencoderKL.from_pretrained("{name}")     # fp16 file; pass torch_dtype=torch.float32 on the CPU
latents = vae.encode(images).latent_dist.sample() * vae.config.scaling_factor   # images in [-1, 1]""",
        architecture=Section("Architecture", f"""`block_out_channels` {list(cfg.block_out_channels)}, {cfg.layers_per_block} residual block(s) per level, GroupNorm
{cfg.norm_num_groups}, encoder attention at {list(cfg.attn_resolutions)} px feature maps and in both middle blocks.
{m['params']:,} parameters, {m['safetensors_mb']:.1f} MB as fp16 safetensors."""),
        data=Section("Data", f"""{data_recipe(cfg.data, cfg.resolution)} {_views_sentence(cfg)}"""),
        training=Training([*m.get("init_commands", []), m["command"]], f"""{_steps_sentence(cfg)} AdamW (betas 0.5/0.9, lr {cfg.lr}, {cfg.warmup} warm-up steps, cosine to {cfg.min_lr_ratio}x),
grad-norm clip {cfg.grad_clip}, {_start_sentence(cfg)}loss = {cfg.l1_weight}·L1 + {cfg.l2_weight}·L2 + {_chroma_term(cfg)}{cfg.kl_weight:g}·KL (per pixel
value), EMA {cfg.ema_decay} (shipped). No perceptual or adversarial loss. {m['steps']} steps,
{m['train_hours']:.2f} h of training wall time ({m['torch_threads']} CPU thread(s) at export, shared machine).
Final training losses (last logging window): L1 {tl.get('l1', float('nan')):.4f}, L2 {tl.get('l2', float('nan')):.5f},
KL {tl.get('kl', float('nan')):.4f}{f", chroma {tl['chroma']:.4f}" if 'chroma' in tl else ''}."""),
        evaluation=Section("Evaluation (the shipped fp16 weights, posterior means)", f"""{m['eval_crops']} held-out crops ({cfg.resolution} px, seed {cfg.data_seed + 2}): PSNR {m['psnr']:.2f} dB,
L1 {m['l1']:.4f}, MSE {m['mse']:.5f} (on [-1, 1]).{_naming_sentence(naming)}"""))


def _naming_sentence(naming: dict[str, Any] | None) -> str:
    if not naming:
        return ""
    return (f"""\n\nCan the emoji still be named after a round trip? The emoji CLIP names {naming['roundtrip_named']:.1%} of the
{naming['emoji']} named emoji's {naming['resolution']} px renders passed through this VAE (posterior mean) among their names, the
renders themselves {naming['real_renders_named']:.1%} (chance {naming['chance']:.1%}); the renders' PSNR {naming['renders_psnr_db']:.2f} dB
(`python eval/tokenizer_naming.py --folder {naming['folder']} --resolution {naming['resolution']} --json <record>`).""")


def _views_sentence(cfg: MARVAETrainConfig) -> str:
    if cfg.data == "photos":
        return (f"Fresh random crops every step (crop side {cfg.crop_scale[0]}–{cfg.crop_scale[1]}\nof the region's "
                f"short side, random flips), rendered at {cfg.resolution} px.")
    return f"Each step draws its images from the stream's pool of augmented views, rendered at {cfg.resolution} px."


def _steps_sentence(cfg: MARVAETrainConfig) -> str:
    if cfg.full_res_fraction == 0 and cfg.patch_size == cfg.resolution:
        return f"Every step on whole {cfg.resolution} px images (batch {cfg.batch_size})."
    return (f"Steps on {cfg.patch_size} px patches (batch {cfg.batch_size}), the last {cfg.full_res_fraction:.0%} on "
            f"whole crops (batch\n{cfg.full_res_batch_size}).")


def _chroma_term(cfg: MARVAETrainConfig) -> str:
    return f"{cfg.chroma_weight:g}·L1 of the opponent-colour channels + " if cfg.chroma_weight else ""


def _start_sentence(cfg: MARVAETrainConfig) -> str:
    return f"initialised from `{cfg.init_from}` (every weight fine-tuned), " if cfg.init_from else ""


# ---------------------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m arvis.training.train_mar_vae", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="vae")
    p.add_argument("--out", required=True, help="export folder (diffusers AutoencoderKL layout)")
    p.add_argument("--scratch", required=True, help="checkpoints and log (resumes from here)")
    p.add_argument("--data", choices=DATA_CHOICES, default=None, help="default: the preset's (photos; emoji-64: emoji)")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--full-res-batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--ema-decay", type=float, default=None)
    p.add_argument("--init-from", default=None, help="a VAE folder of the same architecture to fine-tune")
    p.add_argument("--chroma-weight", type=float, default=None,
                   help="weight of the L1 loss on the opponent-colour channels (default: the preset's, 0)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    overrides = {k: v for k, v in (("steps", args.steps), ("batch_size", args.batch_size),
                                   ("full_res_batch_size", args.full_res_batch_size), ("lr", args.lr),
                                   ("warmup", args.warmup), ("ema_decay", args.ema_decay),
                                   ("init_from", args.init_from), ("data", args.data),
                                   ("chroma_weight", args.chroma_weight)) if v is not None}
    cfg = dataclasses.replace(PRESETS[args.preset], **overrides)
    command = training_command("train_mar_vae", argv)
    vae, summary = train(cfg, args.scratch, threads=args.threads)
    metrics = export(vae, cfg, args.out, summary, command)
    print(json.dumps({k: v for k, v in metrics.items() if k not in ("history", "config", "final_train_losses")},
                     indent=2))
    return metrics


if __name__ == "__main__":
    main()
