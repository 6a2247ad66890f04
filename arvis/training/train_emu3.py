"""Train arvis's shipped Emu3-architecture text-to-image model on OpenMoji emoji (:mod:`arvis.data.emoji`).

Three stages, each a repo command with atomic checkpoints and automatic resume (rerun with the same
``--scratch``):

1. ``vq``: an ``Emu3VQVAE`` (transformers' Emu3 VQ tokenizer, image-only: temporal factor 1) on emoji
   renders — L1 + L2 + codebook + commitment losses (no perceptual or adversarial loss: no pretrained
   feature network is available offline), dead-code restarts, EMA weights exported;
2. ``lm``: a byte-level BPE text tokenizer with Emu3's special and visual tokens
   (:func:`arvis.tokenizers.emu3_text.build_emu3_tokenizer`) trained on the training captions, then the
   Emu3 language model (``Emu3ForConditionalGeneration``'s text model) on
   ``<bos>caption<|image start|>16*16<|image token|>`` + the image rows with end-of-line tokens +
   end-of-frame + end-of-image, cross-entropy on the image tokens over the image-token logits (what the
   prefix-constrained sampler allows), 10% caption dropout (the empty caption: the negative prompt used
   for CFG), AdamW, cosine schedule, EMA. Data: ``--num-train`` augmented views (zoom/shift) with a random
   caption phrasing each, or with ``--no-augment`` every training emoji once, unaugmented, under each of its
   phrasings (a small model then learns each drawing rather than many shifted views); ``--classes`` keeps
   some emoji classes only; ``--input-noise`` replaces a fraction of the image tokens the model reads by
   random codes (targets clean);
3. ``assemble``: the two into one official-layout ``Emu3ForConditionalGeneration`` (config with the
   vocabulary map, fp16 safetensors) plus the tokenizer, as an ``Emu3Pipeline`` folder whose ``evaluation.json``
   names the language model's data (``emoji``, or ``emoji-names`` after ``lm --named``).

``extract`` turns an assembled folder back into the stages' exports, so that ``lm --init-from`` can continue a
shipped model; ``lm --named`` trains on the one-class-per-emoji set (the 123 named emoji of
:func:`arvis.data.emoji.named_emoji`, captioned by their names), whose samples the emoji CLIP can name.

Example::

    python -m arvis.training.train_emu3 vq --out runs/emu3/vq --scratch runs/emu3/vq-run
    python -m arvis.training.train_emu3 lm --vq runs/emu3/vq --out runs/emu3/lm \\
        --scratch runs/emu3/lm-run
    python -m arvis.training.train_emu3 assemble --vq runs/emu3/vq --lm runs/emu3/lm \\
        --out arvis/weights/emu3-emoji
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from arvis.data.sources import MODEL_DATA_FILE, check_data
from arvis.tokenizers.emu3_vq import Emu3ImageTokenizer, quantized_forward
from arvis.training.common import (
    EMA,
    atomic_write_text,
    dumps,
    reseed_rows,
    setup_logging,
    shipped_record,
    training_command,
)
from arvis.training.loop import LoopSettings, TrainingLoop
from arvis.training.train_vq import evaluate
from arvis.utils.files import atomic_directory

__all__ = ["EMU3_VQ", "LMTrainConfig", "VQArchitecture", "VQTrainConfig", "main"]


# ============================================================================================== VQ
@dataclass(frozen=True)
class VQTrainConfig:
    """An ``Emu3VQVAE`` training run (model shape, data, optimisation)."""

    codebook_size: int = 1024
    embed_dim: int = 4
    latent_channels: int = 4
    base_channels: int = 32
    channel_multiplier: tuple[int, ...] = (1, 2, 2, 4)
    num_res_blocks: int = 1
    attn_resolutions: tuple[int, ...] = (3,)
    resolution: int = 128
    pool: int = 6000  # augmented train renders, cached; patches are cut from them
    patch_size: int = 32
    batch_size: int = 16
    late_patch_size: int = 64  # the last steps see larger crops (the lowest level's attention sees more context)
    late_batch_size: int = 4
    late_fraction: float = 0.15
    steps: int = 1000
    lr: float = 3e-4
    warmup: int = 100
    min_lr_ratio: float = 0.05
    l1_weight: float = 1.0
    l2_weight: float = 1.0
    commit_beta: float = 0.25
    ema_decay: float = 0.998
    restart_every: int = 100
    restart_until: float = 0.75
    data_seed: int = 0
    init_seed: int = 0
    eval_every: int = 250
    ckpt_every: int = 25
    log_every: int = 25

    def __post_init__(self) -> None:
        f = 2 ** (len(self.channel_multiplier) - 1)
        for name in ("resolution", "patch_size", "late_patch_size"):
            v = getattr(self, name)
            if v < f or v % f:
                raise ValueError(f"{name} must be a positive multiple of {f}, got {v}")
        if self.base_channels % 32:
            raise ValueError(f"base_channels must be a multiple of 32 (GroupNorm), got {self.base_channels}")
        if max(self.patch_size, self.late_patch_size) > self.resolution:
            raise ValueError(f"patch sizes must be <= resolution={self.resolution}")
        if self.steps < 1 or min(self.batch_size, self.late_batch_size, self.pool) < 1:
            raise ValueError("steps, batch sizes and pool must be >= 1")

    def vq_config(self) -> dict[str, Any]:
        """``Emu3VQVAEConfig`` fields."""
        return dict(codebook_size=self.codebook_size, embed_dim=self.embed_dim, latent_channels=self.latent_channels,
                    base_channels=self.base_channels, channel_multiplier=list(self.channel_multiplier),
                    num_res_blocks=self.num_res_blocks, attn_resolutions=list(self.attn_resolutions),
                    hidden_size=self.base_channels * self.channel_multiplier[-1], temporal_downsample_factor=1)


@dataclass(frozen=True)
class VQArchitecture:
    """The transformers VQ classes :func:`train_vq` / :func:`export_vq` train (Emu3's by default; ``train_janus``
    passes Janus's): class names in ``transformers``, the training forward and the tokenizer adapter. The run's
    config supplies the model config's fields (``vq_config()``)."""

    model: str = "Emu3VQVAE"
    config: str = "Emu3VQVAEConfig"
    forward: Callable[[Any, torch.Tensor], Any] = quantized_forward
    tokenizer: Callable[[Any], Any] = Emu3ImageTokenizer

    def classes(self) -> tuple[Any, Any]:
        import transformers

        return getattr(transformers, self.model), getattr(transformers, self.config)


EMU3_VQ = VQArchitecture()


VQ_SMOKE = VQTrainConfig(codebook_size=32, channel_multiplier=(1, 2), resolution=32, pool=16, patch_size=16,
                         batch_size=4, late_patch_size=32, late_batch_size=2, late_fraction=0.5, steps=4, warmup=1,
                         restart_every=2, eval_every=2, ckpt_every=2, log_every=1)


def _to_tensor(images: np.ndarray) -> torch.Tensor:
    """``uint8 [N, H, W, 3]`` → ``float32 [N, 3, H, W]`` in ``[-1, 1]``."""
    return torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)


def _emoji(n: int | None, split: str, resolution: int, seed: int, smoke: bool, named: bool = False):
    from arvis.data.emoji import build_emoji

    if smoke and n is None:
        n = 8
    return build_emoji(n, split, resolution, seed=seed, cache=not smoke, progress=False, named=named)


def _vq_batch(pool: np.ndarray, cfg: VQTrainConfig, rng: np.random.Generator, late: bool) -> torch.Tensor:
    n, p = (cfg.late_batch_size, cfg.late_patch_size) if late else (cfg.batch_size, cfg.patch_size)
    images = pool[rng.integers(0, len(pool), n)]
    if p < cfg.resolution:
        offs = rng.integers(0, cfg.resolution - p + 1, size=(n, 2))
        images = np.stack([im[y:y + p, x:x + p] for im, (y, x) in zip(images, offs, strict=True)])
    return _to_tensor(images)


@torch.no_grad()
def evaluate_vq(tokenizer, images: np.ndarray, batch_size: int = 16) -> dict[str, Any]:
    """Reconstruction PSNR / L1 and codebook statistics on ``uint8`` images (see ``train_vq.evaluate``)."""
    return evaluate(tokenizer, images, batch_size)


def train_vq(cfg: VQTrainConfig, scratch: Path, threads: int, smoke: bool = False,
             arch: VQArchitecture = EMU3_VQ) -> tuple[Any, dict[str, Any]]:
    """Train (resuming from ``scratch``) and return the EMA VQ model (``arch``: an ``Emu3VQVAE`` by default) and a
    summary."""
    model_class, config_class = arch.classes()

    torch.set_num_threads(threads)
    scratch.mkdir(parents=True, exist_ok=True)
    log = setup_logging(scratch / "train.log", "arvis.train_emu3.vq")
    with torch.random.fork_rng():
        torch.manual_seed(cfg.init_seed)  # transformers initialises from the global stream
        model = model_class(config_class(**cfg.vq_config())).train()
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.99), weight_decay=0.0)
    ema = EMA(params, cfg.ema_decay)
    rng = np.random.default_rng([cfg.data_seed, 31])
    counts = torch.zeros(cfg.codebook_size)  # code usage since the last restart check
    late_from = int(round(cfg.steps * (1.0 - cfg.late_fraction)))
    last: dict[str, Any] = {}  # the last step's batch and forward (counted and restarted after the step)

    def loss_fn(step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        x = last["x"] = _vq_batch(pool, cfg, rng, step >= late_from)
        out = last["out"] = arch.forward(model, x)
        l1 = (out.reconstruction - x).abs().mean()
        l2 = (out.reconstruction - x).pow(2).mean()
        loss = cfg.l1_weight * l1 + cfg.l2_weight * l2 + out.codebook_loss + cfg.commit_beta * out.commitment_loss
        return loss, {"l1": l1, "l2": l2, "codebook": out.codebook_loss, "commit": out.commitment_loss}

    def restart_codes(step: int) -> None:
        out = last["out"]
        counts.add_(torch.bincount(out.codes.flatten(), minlength=cfg.codebook_size).float())
        if cfg.restart_every and step % cfg.restart_every == 0:
            restarted = 0
            dead = torch.nonzero(counts == 0).flatten()
            if step <= cfg.restart_until * cfg.steps and dead.numel():
                restarted = _restart_codes(model, opt, ema, dead, out.latents.detach(), rng)
            log.info("step %d codebook: %d/%d used since last check, %d restarted", step, int((counts > 0).sum()),
                     cfg.codebook_size, restarted)
            counts.zero_()

    def ema_tokenizer() -> Any:
        ema_model.load_state_dict(model.state_dict())
        ema.copy_to(list(ema_model.parameters()))
        return arch.tokenizer(ema_model)

    def ema_eval(step: int) -> dict[str, Any]:
        m = evaluate_vq(ema_tokenizer(), heldout)
        m.pop("recon")
        return m

    loop = TrainingLoop("train_emu3 vq", LoopSettings.of(cfg, grad_clip=1.0), cfg,
                        ("steps", "eval_every", "ckpt_every", "log_every"), scratch / "checkpoint.pt", model, opt,
                        params, ema, lambda: params, rng, loss_fn, log, eval_fn=ema_eval, after_step=restart_codes,
                        log_extra=lambda: {"res": last["x"].shape[-1]}, checkpoint_extra=lambda: {"counts": counts})
    ck = loop.resume()
    if ck is not None:
        counts.copy_(ck["counts"])
    else:
        log.info("new VQ run: %d parameters, config %s", sum(p.numel() for p in params),
                 dumps(dataclasses.asdict(cfg)))
    pool = _emoji(cfg.pool, "train", cfg.resolution, cfg.data_seed, smoke).images
    heldout = _emoji(None, "heldout", cfg.resolution, 0, smoke).images  # every held-out emoji once, unaugmented
    ema_model = model_class(model.config).eval()
    history = loop.run()
    step, elapsed = loop.step, loop.elapsed
    # Keep the better of the raw and the EMA weights on the held-out emoji: with a short run the EMA still
    # carries a visible share of the first, poor steps (0.998^1000 = 13%).
    ema_tok = ema_tokenizer()
    ema_l1 = next(h["eval"]["l1"] for h in reversed(history) if "eval" in h)
    raw_l1 = evaluate_vq(arch.tokenizer(model.eval()), heldout)["l1"]
    log.info("held-out L1: raw %.4f, EMA %.4f; exporting the %s weights", raw_l1, ema_l1,
             "EMA" if ema_l1 <= raw_l1 else "raw")
    chosen = ema_tok.vq if ema_l1 <= raw_l1 else model
    train_entries = [h for h in history if "eval" not in h]
    return chosen, {"steps": step, "train_seconds": elapsed, "history": history,
                    "final_train": train_entries[-1] if train_entries else {},
                    "heldout_l1_raw": raw_l1, "heldout_l1_ema": ema_l1,
                    "exported_weights": "ema" if ema_l1 <= raw_l1 else "raw"}


def _restart_codes(model, opt, ema: EMA, dead: torch.Tensor, latents: torch.Tensor, rng: np.random.Generator) -> int:
    """Re-seed unused codebook rows from current encoder outputs (optimizer moments and EMA rows too)."""
    z = latents.reshape(-1, latents.shape[-1])
    pick = torch.from_numpy(rng.integers(0, z.shape[0], size=dead.numel()))
    noise = torch.from_numpy(rng.standard_normal((dead.numel(), z.shape[1])).astype(np.float32))
    return reseed_rows(model.quantize.embedding.weight, dead, z[pick] + 0.01 * z.std() * noise, opt, ema,
                       list(model.parameters()))


def export_vq(vq, cfg: VQTrainConfig, summary: dict[str, Any], out: Path, command: str, smoke: bool = False,
              arch: VQArchitecture = EMU3_VQ) -> dict[str, Any]:
    """fp16 VQ folder (``save_pretrained``) + ``training_metrics.json``; the fp16 copy is evaluated."""
    model_class, _ = arch.classes()

    with atomic_directory(out) as tmp:
        vq.half().save_pretrained(tmp)
        shipped = model_class.from_pretrained(tmp, dtype=torch.float32).eval()
        heldout = _emoji(None, "heldout", cfg.resolution, 0, smoke).images
        metrics = evaluate_vq(arch.tokenizer(shipped), heldout)
        recon = metrics.pop("recon")
        metrics.update(params=sum(p.numel() for p in shipped.parameters()), eval_images=len(heldout),
                       exported_weights=summary["exported_weights"], heldout_l1_raw=summary["heldout_l1_raw"],
                       heldout_l1_ema=summary["heldout_l1_ema"],
                       steps=summary["steps"], train_hours=summary["train_seconds"] / 3600,
                       final_train_losses=summary["final_train"], config=dataclasses.asdict(cfg), command=command,
                       history=summary["history"])
        (Path(tmp) / "training_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        np.save(Path(tmp) / "heldout_reconstructions.npy", np.concatenate([heldout[:16], recon[:16]]))
    return metrics


# ============================================================================================== LM
@dataclass(frozen=True)
class LMTrainConfig:
    """An Emu3 language-model training run on VQ codes of emoji renders with their captions."""

    hidden_size: int = 192
    num_layers: int = 6
    num_heads: int = 6
    num_kv_heads: int = 2
    intermediate_size: int = 512
    text_vocab_size: int = 1024
    max_positions: int = 512
    rope_theta: float = 10000.0
    caption_dropout: float = 0.1
    num_train: int = 6000  # augmented renders with random caption variants (the VQ's pool), tokenised once
    # False: every training emoji once, unaugmented, paired with each of its caption variants (num_train unused):
    # a small model can learn each drawing instead of spreading its capacity over shifted views.
    augment: bool = True
    classes: tuple[str, ...] = ()  # train and validate on these emoji classes only (empty: every class)
    # The one-class-per-emoji set (arvis.data.emoji.named_emoji: 123 fruit, vegetable and animal emoji) captioned
    # with their names; validation: num_val other views of the same emoji (a drawing must be seen to be drawn).
    named: bool = False
    num_val: int = 256  # named only (otherwise every held-out emoji once)
    init_from: str = ""  # an lm export (Emu3ForCausalLM + tokenizer/) to warm-start from: same shapes and tokenizer
    # Fraction of the *input* image tokens replaced by random codes (the targets stay clean): the model cannot
    # identify the emoji from an exact prefix alone, so it must read the caption, and it sees slips like the
    # ones its own sampling makes.
    input_noise: float = 0.0
    resolution: int = 128
    steps: int = 1000
    batch_size: int = 16
    lr: float = 6e-4
    warmup: int = 100
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    ema_decay: float = 0.999
    data_seed: int = 0
    init_seed: int = 0
    eval_every: int = 100
    ckpt_every: int = 25
    log_every: int = 25

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "steps", "batch_size", "num_train"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError("hidden_size must divide by num_heads, and num_heads by num_kv_heads")
        if not 0.0 <= self.caption_dropout < 1.0:
            raise ValueError(f"caption_dropout must be in [0, 1), got {self.caption_dropout}")
        if not 0.0 <= self.input_noise < 1.0:
            raise ValueError(f"input_noise must be in [0, 1), got {self.input_noise}")
        if self.named and self.classes:
            raise ValueError("classes: the named set is one class per emoji; do not combine it with classes")


LM_SMOKE = LMTrainConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64,
                         text_vocab_size=300, num_train=8, resolution=32, steps=3, batch_size=4, warmup=1,
                         eval_every=3, ckpt_every=2, log_every=1)


def caption_corpus() -> list[str]:
    """Every caption variant of every training emoji (the tokenizer's corpus; held-out emoji excluded)."""
    from arvis.data.emoji import captions_of, emoji_split, load_catalog

    return [c for e in emoji_split(load_catalog(), "train") for c in captions_of(e)]


def encode_codes(vq, images: np.ndarray, batch: int = 32) -> np.ndarray:
    """``uint8 [N, R, R, 3]`` images → ``int16 [N, h, w]`` codes of an ``Emu3VQVAE``."""
    tokenizer = Emu3ImageTokenizer(vq.float().eval())
    out = [tokenizer.encode(_to_tensor(images[i:i + batch])).to(torch.int16).numpy() for i in range(0, len(images), batch)]
    return np.concatenate(out)


def lm_dataset(cfg: LMTrainConfig, vq, scratch: Path, split: str, smoke: bool) -> dict[str, np.ndarray]:
    """VQ codes ``[n, h, w]`` and captions of emoji renders, cached in ``scratch``."""
    from arvis.data.emoji import EMOJI_CLASSES, captions_of, load_catalog

    n = cfg.num_train if split == "train" and cfg.augment else None
    if cfg.named and split == "heldout":
        n = cfg.num_val if not smoke else 4
    subset = ("named" if cfg.named else
              hashlib.sha256("\n".join(cfg.classes).encode()).hexdigest()[:8] if cfg.classes else "all")
    path = scratch / f"codes-{split}-{n}-{cfg.data_seed}-{cfg.resolution}-{subset}.npz"
    if path.exists():
        return dict(np.load(path, allow_pickle=False))
    data = _emoji(n, split, cfg.resolution, cfg.data_seed if split == "train" else 0, smoke, cfg.named)
    keep = np.ones(len(data.images), dtype=bool)
    if cfg.classes:
        unknown = set(cfg.classes) - set(EMOJI_CLASSES)
        if unknown:
            raise ValueError(f"unknown emoji classes {sorted(unknown)}; choose from arvis.data.emoji.EMOJI_CLASSES")
        keep = np.isin(data.labels, [EMOJI_CLASSES.index(c) for c in cfg.classes])
    codes, captions = encode_codes(vq, data.images[keep]), data.captions[keep].astype(str)
    if split == "train" and not cfg.augment:  # one code grid per emoji, repeated for each caption variant
        by_code = {e.code: e for e in load_catalog()}
        variants = [captions_of(by_code[str(c)]) for c in data.codes[keep]]
        codes = np.repeat(codes, [len(v) for v in variants], axis=0)
        captions = np.array([c for v in variants for c in v], dtype=str)
    out = {"codes": codes, "captions": captions}
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **out)
    tmp.replace(path)
    return out


class SequenceBuilder:
    """Training sequences: the generation prompt (left-padded) + the image rows with Emu3's structural tokens."""

    def __init__(self, tokenizer, height: int, width: int):
        from arvis.models.emu3 import Emu3Vocabulary, emu3_layout

        self.tok, self.height, self.width = tokenizer, height, width
        self.vocab = Emu3Vocabulary.from_map(tokenizer.get_vocab())
        self.layout = emu3_layout(height, width, self.vocab.num_codes, condition_length=1)
        self.model_ids = self.vocab.model_ids()
        free = torch.ones(self.layout.num_tokens, dtype=torch.bool)
        free[list(self.layout.structural_tokens)] = False
        self.free = free  # sequence indices that are image tokens (the loss is taken there)
        forced = torch.zeros(self.layout.num_tokens, dtype=torch.long)
        for index, token in self.layout.structural_tokens.items():
            forced[index] = token
        self.forced = forced

    def layout_tokens(self, codes: torch.Tensor) -> torch.Tensor:
        """Code grids ``[B, h, w]`` → layout-id sequences ``[B, N]`` (structural tokens inserted)."""
        seq = self.forced.expand(codes.shape[0], -1).clone()
        seq[:, self.free] = codes.reshape(codes.shape[0], -1).long()
        return seq

    def batch(self, codes: torch.Tensor, captions: list[str], input_codes: torch.Tensor | None = None
              ) -> dict[str, torch.Tensor]:
        """Model ids ``[B, C + N − 1]`` (left-padded prompts), their validity, and the image targets.
        ``input_codes``: the grids fed to the model when they differ from the targets (input noise)."""
        from arvis.tokenizers.emu3_text import prompt_batch

        prompt, prompt_mask = prompt_batch(self.tok, list(captions), self.height, self.width)
        seq = self.layout_tokens(codes)  # [B, N]
        inputs = seq if input_codes is None else self.layout_tokens(input_codes)
        image = self.model_ids[inputs[:, :-1]]
        ids = torch.cat([prompt, image], dim=1)
        valid = torch.cat([prompt_mask, torch.ones_like(image, dtype=torch.bool)], dim=1)
        return {"ids": ids, "valid": valid, "targets": seq, "prompt_length": torch.tensor(prompt.shape[1])}


def lm_loss(text_model, head: torch.nn.Linear, vocab, builder: SequenceBuilder, batch: dict[str, torch.Tensor],
            per_token: bool = False) -> torch.Tensor:
    """Cross-entropy of the image tokens over the image-token logits (the sampler's allowed set): the mean, or
    with ``per_token`` the ``[B, h * w]`` negative log-likelihoods in raster order."""
    ids, valid = batch["ids"], batch["valid"]
    L = ids.shape[1]
    positions = (valid.long().cumsum(1) - 1).clamp_min(0)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    mask = (causal & valid[:, None, :]) | torch.eye(L, dtype=torch.bool)
    additive = torch.zeros(mask.shape, dtype=torch.float32).masked_fill_(~mask, torch.finfo(torch.float32).min)
    hidden = text_model(input_ids=ids, attention_mask=additive[:, None], position_ids=positions).last_hidden_state
    C = int(batch["prompt_length"])
    h = hidden[:, C - 1:]  # [B, N, D]: the query before each sequence index
    h = h[:, builder.free]  # image positions only
    lo = vocab.visual_ids[0]
    logits = F.linear(h, head.weight[lo:lo + vocab.num_codes])
    targets = batch["targets"][:, builder.free]
    if per_token:
        return F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def _lm_config(cfg: LMTrainConfig, tokenizer, vq_config: dict[str, Any]):
    from arvis.models.emu3 import emu3_config

    return emu3_config(tokenizer.get_vocab(), hidden_size=cfg.hidden_size, num_layers=cfg.num_layers,
                       num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads,
                       intermediate_size=cfg.intermediate_size, vq=vq_config, max_positions=cfg.max_positions,
                       pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                       eos_token_id=tokenizer.eos_token_id, rope_theta=cfg.rope_theta)


@torch.no_grad()
def lm_validation_loss(text_model, head, vocab, builder, data: dict[str, np.ndarray], batch_size: int = 32) -> float:
    text_model.eval()
    total, count = 0.0, 0
    for i in range(0, len(data["codes"]), batch_size):
        codes = torch.from_numpy(data["codes"][i:i + batch_size].astype(np.int64))
        batch = builder.batch(codes, [str(c) for c in data["captions"][i:i + batch_size]])
        total += float(lm_loss(text_model, head, vocab, builder, batch)) * len(codes)
        count += len(codes)
    text_model.train()
    return total / max(count, 1)


def train_lm(cfg: LMTrainConfig, vq_path: Path, scratch: Path, threads: int, smoke: bool = False,
             tokenizer_from: Path | None = None) -> dict[str, Any]:
    """Build the tokenizer (or copy ``tokenizer_from``'s: a draft shares its target's ids), tokenise the data,
    train the language model (resumable); returns the parts."""
    from transformers import AutoTokenizer, Emu3ForCausalLM, Emu3VQVAE

    from arvis.tokenizers.emu3_text import build_emu3_tokenizer

    torch.set_num_threads(threads)
    scratch.mkdir(parents=True, exist_ok=True)
    log = setup_logging(scratch / "train.log", "arvis.train_emu3.lm")
    vq = Emu3VQVAE.from_pretrained(vq_path, dtype=torch.float32).eval()
    tok_dir = scratch / "tokenizer"
    if tokenizer_from is None and cfg.init_from:
        tokenizer_from = Path(cfg.init_from) / "tokenizer"  # a warm start keeps the token ids it was trained with
    if tokenizer_from is not None and not (tok_dir / "tokenizer.json").exists():
        # A draft model must share the target's token ids: copy its tokenizer instead of training another.
        AutoTokenizer.from_pretrained(tokenizer_from).save_pretrained(tok_dir)
    if not (tok_dir / "tokenizer.json").exists():
        corpus = caption_corpus() if not smoke else ["red apple", "grinning face", "dog face"]
        build_emu3_tokenizer(corpus, int(vq.config.codebook_size), cfg.text_vocab_size).save_pretrained(tok_dir)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    grid = cfg.resolution // vq.vision_spatial_factor
    builder = SequenceBuilder(tokenizer, grid, grid)
    train_data = lm_dataset(cfg, vq, scratch, "train", smoke)
    val_data = lm_dataset(cfg, vq, scratch, "heldout", smoke)
    config = _lm_config(cfg, tokenizer, vq.config.to_dict())
    with torch.random.fork_rng():
        torch.manual_seed(cfg.init_seed)  # transformers initialises from the global stream
        model = Emu3ForCausalLM(config.text_config).train()
    ckpt_path = scratch / "checkpoint.pt"
    if cfg.init_from and not ckpt_path.exists():  # a resumed run's checkpoint already holds these weights
        start = Emu3ForCausalLM.from_pretrained(cfg.init_from, dtype=torch.float32)
        model.load_state_dict(start.state_dict())  # strict: the same shapes
        log.info("warm start from the language model in %s", cfg.init_from)
    text_model, head, vocab = model.model, model.lm_head, builder.vocab
    params = list(model.parameters())
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    ema = EMA(params, cfg.ema_decay)
    rng = np.random.default_rng([cfg.data_seed, 53])

    def loss_fn(step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        index = rng.integers(0, len(train_data["codes"]), cfg.batch_size)
        drop = rng.random(cfg.batch_size) < cfg.caption_dropout
        captions = ["" if d else str(c) for c, d in zip(train_data["captions"][index], drop, strict=True)]
        codes = torch.from_numpy(train_data["codes"][index].astype(np.int64))
        noisy = None
        if cfg.input_noise > 0:
            swap = rng.random(codes.shape) < cfg.input_noise
            noisy = torch.where(torch.from_numpy(swap), torch.from_numpy(rng.integers(0, vocab.num_codes, codes.shape)),
                                codes)
        return lm_loss(text_model, head, vocab, builder, builder.batch(codes, captions, noisy)), {}

    loop = TrainingLoop("train_emu3 lm", LoopSettings.of(cfg), cfg, ("steps", "eval_every", "ckpt_every", "log_every"),
                        ckpt_path, model, opt, params, ema, lambda: params, rng, loss_fn, log, history="loss",
                        eval_fn=lambda step: {"val_loss": lm_validation_loss(text_model, head, vocab, builder,
                                                                             val_data)})
    if loop.resume() is None:
        log.info("new LM run: %d parameters, vocabulary %d (%d codes), config %s", sum(p.numel() for p in params),
                 len(tokenizer), vocab.num_codes, dumps(dataclasses.asdict(cfg)))
    history = loop.run()
    step, elapsed = loop.step, loop.elapsed
    # Keep the better of the raw and the EMA weights on held-out emoji (a short run's EMA can lag).
    raw_val = lm_validation_loss(text_model, head, vocab, builder, val_data)
    raw = [p.detach().clone() for p in params]
    ema.copy_to(params)
    ema_val = lm_validation_loss(text_model, head, vocab, builder, val_data)
    if raw_val < ema_val:
        for dst, src in zip(params, raw, strict=True):
            dst.data.copy_(src)
    log.info("done: %d steps, %.2f h, validation loss raw %.4f, EMA %.4f", step, elapsed / 3600, raw_val, ema_val)
    return {"model": model.eval(), "tokenizer": tokenizer, "vq": vq, "steps": step, "seconds": elapsed,
            "history": history, "val_loss_raw": raw_val, "val_loss_ema": ema_val,
            "exported_weights": "ema" if ema_val <= raw_val else "raw", "num_val": len(val_data["codes"])}


def export_lm(result: dict[str, Any], cfg: LMTrainConfig, out: Path, command: str) -> dict[str, Any]:
    """fp16 ``Emu3ForCausalLM`` folder + tokenizer + ``training_metrics.json``."""
    val = min(result["val_loss_raw"], result["val_loss_ema"])
    train_entries = result["history"]
    metrics = {"config": dataclasses.asdict(cfg), "params": sum(p.numel() for p in result["model"].parameters()),
               "steps": result["steps"], "train_hours": result["seconds"] / 3600,
               "final_train_loss": train_entries[-1]["loss"] if train_entries else None,
               "validation_loss": val, "validation_loss_raw": result["val_loss_raw"],
               "validation_loss_ema": result["val_loss_ema"], "validation_perplexity": math.exp(val),
               "validation_images": result["num_val"], "exported_weights": result["exported_weights"],
               "command": command, "history": train_entries}
    with atomic_directory(out) as staged:
        result["model"].half().save_pretrained(staged)
        result["tokenizer"].save_pretrained(staged / "tokenizer")
        (staged / "training_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


# ============================================================================================== assemble
def assemble(vq_dir: Path, lm_dir: Path, out: Path, sampling_defaults: dict[str, Any],
             draft_dir: Path | None = None) -> Path:
    """One official-layout ``Emu3ForConditionalGeneration`` (LM + VQ + vocabulary map, fp16) and the tokenizer,
    saved as an :class:`~arvis.pipelines.Emu3Pipeline` folder; training records are copied beside it, and
    ``evaluation.json`` (:data:`~arvis.data.sources.MODEL_DATA_FILE`) names the language model's data: ``emoji-names``
    when it was trained ``--named``, else ``emoji``.
    ``draft_dir``: a smaller language model trained with the same tokenizer (``lm --tokenizer``), shipped as the
    pipeline's ``draft_transformer`` (an ``Emu3ForCausalLM``) for ``method="speculative"``."""
    from transformers import (
        AutoTokenizer,
        Emu3Config,
        Emu3ForCausalLM,
        Emu3ForConditionalGeneration,
        Emu3VQVAE,
    )

    from arvis.pipelines import Emu3Pipeline

    vq = Emu3VQVAE.from_pretrained(vq_dir, dtype=torch.float32)
    lm = Emu3ForCausalLM.from_pretrained(lm_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(lm_dir / "tokenizer")
    config = Emu3Config(text_config=lm.config.to_dict(), vq_config=vq.config.to_dict(),
                        vocabulary_map=tokenizer.get_vocab())
    with torch.random.fork_rng():
        torch.manual_seed(0)  # the weights below replace every initialised value
        model = Emu3ForConditionalGeneration(config).eval()
    model.model.text_model.load_state_dict(lm.model.state_dict())
    model.lm_head.load_state_dict(lm.lm_head.state_dict())
    model.model.vqmodel.load_state_dict(vq.state_dict())
    lm_config = json.loads((lm_dir / "training_metrics.json").read_text())["config"]
    grid = int(lm_config["resolution"]) // vq.vision_spatial_factor
    # What the language model was trained on (the suites evaluate it on that data's prompts and FID reference).
    data = check_data("emoji-names" if lm_config.get("named") else "emoji")
    draft = None
    stages = [("vq", vq_dir), ("lm", lm_dir)]
    if draft_dir is not None:
        if AutoTokenizer.from_pretrained(draft_dir / "tokenizer").get_vocab() != tokenizer.get_vocab():
            raise ValueError(f"draft: {draft_dir} was trained with another tokenizer; train it with --tokenizer")
        draft = Emu3ForCausalLM.from_pretrained(draft_dir, dtype=torch.float16).eval()
        stages.append(("draft", draft_dir))
    pipe = Emu3Pipeline(model.half(), tokenizer, draft_transformer=draft, default_height=grid, default_width=grid,
                        default_negative_prompt="")
    with atomic_directory(out, keep=("README.md", "metrics.json")) as staged:
        pipe.save_pretrained(staged)
        atomic_write_text(staged / "sampling_defaults.json", json.dumps(sampling_defaults, indent=2) + "\n")
        atomic_write_text(staged / MODEL_DATA_FILE, json.dumps({"data": data}, indent=2) + "\n")
        records = staged / "training"
        records.mkdir()
        for stage, folder in stages:
            metrics = shipped_record(json.loads((folder / "training_metrics.json").read_text()))
            atomic_write_text(records / f"{stage}_training_metrics.json", json.dumps(metrics, indent=2) + "\n")
    return out


def extract(folder: Path, out: Path) -> dict[str, str]:
    """The parts of an assembled ``Emu3Pipeline`` folder as the stages' exports, so that a run can warm-start from a
    shipped model: ``out/vq`` (an ``Emu3VQVAE`` folder), ``out/lm`` (an ``Emu3ForCausalLM`` with ``tokenizer/``) and,
    when the folder has one, ``out/draft``; each with the ``training_metrics.json`` recorded at assembly."""
    from transformers import AutoTokenizer, Emu3ForCausalLM, Emu3ForConditionalGeneration, Emu3VQVAE

    full = Emu3ForConditionalGeneration.from_pretrained(folder / "transformer", dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    with torch.random.fork_rng():
        torch.manual_seed(0)  # every initialised value is replaced below
        vq = Emu3VQVAE(full.config.vq_config).eval()
        lm = Emu3ForCausalLM(full.config.text_config).eval()
    vq.load_state_dict(full.model.vqmodel.state_dict())
    lm.model.load_state_dict(full.model.text_model.state_dict())
    lm.lm_head.load_state_dict(full.lm_head.state_dict())
    parts = {"vq": vq, "lm": lm}
    if (folder / "draft_transformer" / "config.json").is_file():
        parts["draft"] = Emu3ForCausalLM.from_pretrained(folder / "draft_transformer", dtype=torch.float32)
    for name, model in parts.items():
        with atomic_directory(out / name) as staged:
            model.half().save_pretrained(staged)
            if name != "vq":
                tokenizer.save_pretrained(staged / "tokenizer")
            record = folder / "training" / f"{name}_training_metrics.json"
            if record.is_file():
                atomic_write_text(staged / "training_metrics.json", record.read_text())
    return {name: str(out / name) for name in parts}


# ============================================================================================== CLI
def _command(argv: list[str] | None) -> str:
    return training_command("train_emu3", argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m arvis.training.train_emu3", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="stage", required=True)
    vq = sub.add_parser("vq", help="train the Emu3VQVAE on emoji renders")
    vq.add_argument("--out", required=True, help="export folder (an Emu3VQVAE save_pretrained folder)")
    vq.add_argument("--scratch", required=True, help="checkpoints and log")
    vq.add_argument("--steps", type=int, default=None)
    vq.add_argument("--codebook-size", type=int, default=None)
    vq.add_argument("--resolution", type=int, default=None, help="image side in pixels (emoji renders)")
    vq.add_argument("--channel-multiplier", type=int, nargs="+", default=None,
                    help="per-level width multipliers; len - 1 levels of 2x down-sampling")
    vq.add_argument("--patch-size", type=int, default=None, help="training crop side (early steps)")
    vq.add_argument("--batch-size", type=int, default=None, help="crops per step (early steps)")
    vq.add_argument("--late-patch-size", type=int, default=None, help="crop side of the last steps")
    vq.add_argument("--late-batch-size", type=int, default=None)
    vq.add_argument("--lr", type=float, default=None, help="peak learning rate")
    vq.add_argument("--warmup", type=int, default=None, help="warm-up steps")
    vq.add_argument("--ema-decay", type=float, default=None, help="EMA of the weights (the better of EMA / raw ships)")
    vq.add_argument("--eval-every", type=int, default=None, help="held-out evaluation period (steps)")
    vq.add_argument("--threads", type=int, default=1)
    vq.add_argument("--smoke", action="store_true", help="a tiny model, a few steps (seconds)")
    lm = sub.add_parser("lm", help="train the Emu3 language model on the VQ codes of emoji renders")
    lm.add_argument("--vq", required=True, help="the exported Emu3VQVAE folder (stage vq)")
    lm.add_argument("--out", required=True, help="export folder (language model + tokenizer)")
    lm.add_argument("--scratch", required=True, help="checkpoints, log, tokenizer and tokenised data")
    lm.add_argument("--steps", type=int, default=None)
    lm.add_argument("--batch-size", type=int, default=None)
    lm.add_argument("--num-train", type=int, default=None)
    lm.add_argument("--resolution", type=int, default=None, help="image side in pixels; the VQ's grid follows")
    lm.add_argument("--hidden-size", type=int, default=None)
    lm.add_argument("--layers", type=int, default=None)
    lm.add_argument("--heads", type=int, default=None)
    lm.add_argument("--kv-heads", type=int, default=None)
    lm.add_argument("--intermediate-size", type=int, default=None)
    lm.add_argument("--lr", type=float, default=None, help="peak learning rate")
    lm.add_argument("--no-augment", action="store_true",
                    help="each training emoji once, unaugmented, with every caption variant (not --num-train views)")
    lm.add_argument("--input-noise", type=float, default=None,
                    help="fraction of input image tokens replaced by random codes (targets clean; default 0)")
    lm.add_argument("--classes", nargs="+", default=None, help="emoji classes to train on (default: all)")
    lm.add_argument("--tokenizer", default=None,
                    help="reuse this tokenizer folder (a draft model: the target's export/tokenizer)")
    lm.add_argument("--named", action="store_true",
                    help="the one-class-per-emoji set (123 named emoji, captioned by their names); validation: other "
                         "views of them")
    lm.add_argument("--init-from", default=None,
                    help="an lm export to warm-start from (its tokenizer is reused; e.g. the lm of `extract`)")
    lm.add_argument("--threads", type=int, default=1)
    lm.add_argument("--smoke", action="store_true", help="a tiny model, a few steps (seconds)")
    ext = sub.add_parser("extract", help="an assembled Emu3Pipeline folder's vq, lm and draft as stage exports")
    ext.add_argument("--folder", required=True, help="an Emu3Pipeline folder, e.g. arvis/weights/emu3-emoji")
    ext.add_argument("--out", required=True)
    asm = sub.add_parser("assemble", help="the Emu3Pipeline folder from the vq and lm exports")
    asm.add_argument("--vq", required=True)
    asm.add_argument("--lm", required=True)
    asm.add_argument("--out", required=True)
    asm.add_argument("--draft-lm", default=None, help="a draft language model export (lm --tokenizer <target's>)")
    asm.add_argument("--guidance-scale", type=float, default=3.0)
    asm.add_argument("--top-k", type=int, default=0)
    args = p.parse_args(argv)
    command = _command(argv)
    if args.stage == "extract":
        parts = extract(Path(args.folder), Path(args.out))
        print(json.dumps(parts, indent=2))
        return parts
    if args.stage == "assemble":
        path = assemble(Path(args.vq), Path(args.lm), Path(args.out),
                        {"guidance_scale": args.guidance_scale, "top_k": args.top_k},
                        Path(args.draft_lm) if args.draft_lm else None)
        sizes = {str(f.relative_to(path)): f.stat().st_size for f in path.rglob("*.safetensors")}
        print(json.dumps({"assembled": str(path), "safetensors_bytes": sizes}, indent=2))
        return {"path": str(path), "safetensors_bytes": sizes}
    if args.stage == "lm":
        cfg = LM_SMOKE if args.smoke else LMTrainConfig()
        overrides = {k: v for k, v in (("steps", args.steps), ("batch_size", args.batch_size),
                                       ("num_train", args.num_train), ("resolution", args.resolution),
                                       ("hidden_size", args.hidden_size), ("num_layers", args.layers),
                                       ("num_heads", args.heads), ("num_kv_heads", args.kv_heads),
                                       ("intermediate_size", args.intermediate_size), ("lr", args.lr),
                                       ("augment", False if args.no_augment else None),
                                       ("input_noise", args.input_noise),
                                       ("classes", tuple(args.classes) if args.classes else None),
                                       ("named", True if args.named else None), ("init_from", args.init_from))
                     if v is not None}
        cfg = dataclasses.replace(cfg, **overrides)
        result = train_lm(cfg, Path(args.vq), Path(args.scratch), args.threads, args.smoke,
                          Path(args.tokenizer) if args.tokenizer else None)
        metrics = export_lm(result, cfg, Path(args.out), command)
        print(json.dumps({k: v for k, v in metrics.items() if k not in ("history", "config")}, indent=2))
        return metrics
    if args.stage == "vq":
        cfg = VQ_SMOKE if args.smoke else VQTrainConfig()
        multiplier = tuple(args.channel_multiplier) if args.channel_multiplier else None
        overrides = {k: v for k, v in (("steps", args.steps), ("codebook_size", args.codebook_size),
                                       ("eval_every", args.eval_every), ("resolution", args.resolution),
                                       ("channel_multiplier", multiplier), ("patch_size", args.patch_size),
                                       ("batch_size", args.batch_size), ("late_patch_size", args.late_patch_size),
                                       ("late_batch_size", args.late_batch_size), ("lr", args.lr),
                                       ("warmup", args.warmup), ("ema_decay", args.ema_decay)) if v is not None}
        if multiplier is not None and "attn_resolutions" not in overrides:
            overrides["attn_resolutions"] = (len(multiplier) - 1,)  # attention at the lowest level, as the default
        cfg = dataclasses.replace(cfg, **overrides)
        model, summary = train_vq(cfg, Path(args.scratch), args.threads, args.smoke)
        metrics = export_vq(model, cfg, summary, Path(args.out), command, args.smoke)
        print(json.dumps({k: v for k, v in metrics.items() if k not in ("history", "config")}, indent=2))
        return metrics
    raise AssertionError(args.stage)


if __name__ == "__main__":
    main()
