"""Train arvis's shipped Janus-architecture text-to-image model on OpenMoji emoji names (:mod:`arvis.data.emoji`).

Three stages, each a repo command with atomic checkpoints and automatic resume (rerun with the same
``--scratch``):

1. ``vq``: a ``JanusVQVAE`` (transformers' Janus VQ: LlamaGen's VQ16 architecture, l2-normalised codebook) on
   emoji renders, with ``train_emu3``'s VQ recipe (L1 + L2 + codebook + commitment, dead-code restarts, EMA;
   :data:`JANUS_VQ` plugs Janus's classes into it);
2. ``lm``: a byte-level BPE with Janus's special tokens (:func:`arvis.tokenizers.janus_text.build_janus_tokenizer`)
   trained on the captions, then a ``JanusForConditionalGeneration`` holding the trained VQ (frozen) whose Llama
   decoder, generation embeddings, aligner and head learn ``<bos>caption<begin_of_image>`` + the image codes in
   raster order — cross-entropy of the generation head over the codes; 10% of the prompts are replaced by Janus's
   unconditional prompt (every token but BOS and BOI turned into PAD: what ``generate`` feeds the unconditional
   rows of classifier-free guidance). Data (``--data``): ``names`` (default), augmented views of the 123 named
   emoji (:func:`arvis.data.emoji.named_emoji`) with their caption phrasings, validated on other views of the same
   emoji; or ``all``, every training-split emoji (``train_emu3``'s recipe), validated on held-out emoji. The
   export is a complete official-layout ``JanusForConditionalGeneration`` folder (fp16) with its tokenizer;
3. ``assemble``: that folder as a :class:`~arvis.pipelines.JanusPipeline` folder (transformer + tokenizer, and
   optionally a draft trained with ``lm --tokenizer <target's> --draft``), with ``sampling_defaults.json`` and the
   training records.

``extract`` turns an assembled folder back into the stages' exports, so that ``lm --init-from`` can continue a
shipped model's training with a fresh schedule (its tokenizer and VQ kept).

Example::

    python -m arvis.training.train_janus vq --out runs/janus/vq --scratch runs/janus/vq-run
    python -m arvis.training.train_janus lm --vq runs/janus/vq --out runs/janus/lm --scratch runs/janus/lm-run
    python -m arvis.training.train_janus assemble --lm runs/janus/lm --out arvis/weights/janus-emoji
    python -m arvis.training.train_janus extract --folder arvis/weights/janus-emoji --out runs/janus/start
    python -m arvis.training.train_janus lm --vq runs/janus/start/vq --init-from runs/janus/start/lm ...
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

from arvis.tokenizers.janus_vq import JanusImageTokenizer, downsample_factor, quantized_forward
from arvis.training.common import (
    EMA,
    atomic_write_text,
    dumps,
    setup_logging,
    shipped_record,
    training_command,
)
from arvis.training.loop import LoopSettings, TrainingLoop
from arvis.training.train_emu3 import (
    VQ_SMOKE,
    VQArchitecture,
    VQTrainConfig,
    _emoji,
    _to_tensor,
    caption_corpus,
    export_vq,
    train_vq,
)
from arvis.utils.files import atomic_directory

__all__ = ["JANUS_VQ", "JanusLMConfig", "JanusVQTrainConfig", "janus_lm_loss", "main"]

JANUS_VQ = VQArchitecture("JanusVQVAE", "JanusVQVAEConfig", quantized_forward, JanusImageTokenizer)
DATA_SETS = ("names", "all")


# ============================================================================================== VQ
@dataclass(frozen=True)
class JanusVQTrainConfig(VQTrainConfig):
    """A ``JanusVQVAE`` run: ``train_emu3``'s VQ recipe with Janus's model fields (LlamaGen's 8-dim codes)."""

    embed_dim: int = 8
    latent_channels: int = 64
    channel_multiplier: tuple[int, ...] = (1, 2, 4)
    resolution: int = 64
    late_batch_size: int = 8
    steps: int = 2000
    lr: float = 1e-3
    warmup: int = 50
    ema_decay: float = 0.99
    eval_every: int = 500

    def vq_config(self) -> dict[str, Any]:
        """``JanusVQVAEConfig`` fields (the decode grid is the full-resolution image's)."""
        return dict(embed_dim=self.embed_dim, num_embeddings=self.codebook_size, latent_channels=self.latent_channels,
                    base_channels=self.base_channels, channel_multiplier=list(self.channel_multiplier),
                    num_res_blocks=self.num_res_blocks,
                    num_patches=self.resolution // 2 ** (len(self.channel_multiplier) - 1))


JANUS_VQ_SMOKE = JanusVQTrainConfig(**{f.name: getattr(VQ_SMOKE, f.name) for f in dataclasses.fields(VQ_SMOKE)})


# ============================================================================================== LM
@dataclass(frozen=True)
class JanusLMConfig:
    """A Janus decoder training run on VQ codes of emoji renders with their captions."""

    hidden_size: int = 192
    num_layers: int = 6
    num_heads: int = 6
    num_kv_heads: int = 2
    intermediate_size: int = 512
    text_vocab_size: int = 512
    max_positions: int = 512
    rope_theta: float = 10000.0
    caption_dropout: float = 0.1
    data: str = "names"
    num_train: int = 16384  # augmented views with random caption phrasings, tokenised once
    num_val: int = 256  # names: other views of the same emoji; all: every held-out emoji once (num_val unused)
    resolution: int = 64
    draft: bool = False  # a draft model: the VQ inside it is a minimal placeholder (the pipeline decodes with its target's)
    steps: int = 3000
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
    init_from: str = ""  # an lm export (official-layout Janus folder with its tokenizer) to warm-start from

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "steps", "batch_size", "num_train",
                     "num_val"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError("hidden_size must divide by num_heads, and num_heads by num_kv_heads")
        if not 0.0 <= self.caption_dropout < 1.0:
            raise ValueError(f"caption_dropout must be in [0, 1), got {self.caption_dropout}")
        if self.data not in DATA_SETS:
            raise ValueError(f"data must be one of {DATA_SETS}, got {self.data!r}")


LM_SMOKE = JanusLMConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64,
                         text_vocab_size=300, num_train=8, num_val=4, resolution=32, steps=3, batch_size=4, warmup=1,
                         eval_every=3, ckpt_every=2, log_every=1)


def names_corpus() -> list[str]:
    """Every caption phrasing of the 123 named emoji (the tokenizer's corpus for ``--data names``)."""
    from arvis.data.emoji import captions_of, load_catalog, named_emoji

    return [c for e in named_emoji(load_catalog()) for c in captions_of(e)]


def encode_codes(vq, images: np.ndarray, batch: int = 32) -> np.ndarray:
    """``uint8 [N, R, R, 3]`` images → ``int16 [N, h, w]`` codes of a ``JanusVQVAE`` (normalised nearest code)."""
    tokenizer = JanusImageTokenizer(vq.float().eval())
    return np.concatenate([tokenizer.encode(_to_tensor(images[i:i + batch])).to(torch.int16).numpy()
                           for i in range(0, len(images), batch)])


def lm_dataset(cfg: JanusLMConfig, vq, scratch: Path, split: str, smoke: bool) -> dict[str, np.ndarray]:
    """VQ codes ``[n, h, w]`` and captions of emoji renders, cached in ``scratch``."""
    from arvis.data.emoji import build_emoji

    train = split == "train"
    path = scratch / f"codes-{cfg.data}-{split}-{cfg.num_train if train else cfg.num_val}-{cfg.data_seed}-" \
                     f"{cfg.resolution}.npz"
    if path.exists():
        return dict(np.load(path, allow_pickle=False))
    if cfg.data == "names":  # views of the same 123 emoji; the held-out split is another random stream
        data = build_emoji(cfg.num_train if train else cfg.num_val, split, cfg.resolution,
                           seed=cfg.data_seed if train else cfg.data_seed + 1, cache=not smoke, named=True,
                           progress=False)
    else:
        data = _emoji(cfg.num_train if train else None, split, cfg.resolution, cfg.data_seed if train else 0, smoke)
    out = {"codes": encode_codes(vq, data.images), "captions": data.captions.astype(str)}
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **out)
    tmp.replace(path)
    return out


def unconditional_prompts(ids: torch.Tensor, bos: int, boi: int, pad: int) -> torch.Tensor:
    """Janus's unconditional prompt of each row: every token but BOS and BOI replaced by PAD (same length)."""
    keep = (ids == bos) | (ids == boi)
    return torch.where(keep, ids, torch.full_like(ids, pad))


def janus_lm_loss(model, ids: torch.Tensor, valid: torch.Tensor, codes: torch.Tensor,
                  per_token: bool = False) -> torch.Tensor:
    """Cross-entropy of the generation head over the codes for prompts ``ids [B, C]`` (left-padded, ``valid``) and
    code grids ``codes [B, h, w]``: the mean, or with ``per_token`` the ``[B, h * w]`` negative log-likelihoods."""
    B, C = ids.shape
    codes = codes.reshape(B, -1).long()
    inner = model.model
    text = inner.language_model.embed_tokens(ids)
    image = inner.generation_aligner(inner.generation_embeddings(codes[:, :-1]))
    h = torch.cat([text, image], dim=1)
    valid = torch.cat([valid, torch.ones_like(codes[:, :-1], dtype=torch.bool)], dim=1)
    L = h.shape[1]
    positions = (valid.long().cumsum(1) - 1).clamp_min(0)
    causal = torch.ones(L, L, dtype=torch.bool, device=h.device).tril()
    mask = (causal & valid[:, None, :]) | torch.eye(L, dtype=torch.bool, device=h.device)
    additive = torch.zeros(mask.shape, dtype=h.dtype, device=h.device).masked_fill_(~mask, torch.finfo(h.dtype).min)
    hidden = inner.language_model(inputs_embeds=h, attention_mask=additive[:, None],
                                  position_ids=positions).last_hidden_state
    logits = inner.generation_head(hidden[:, C - 1:]).float()  # [B, N, K]: the query before each code
    if per_token:
        return F.cross_entropy(logits.transpose(1, 2), codes, reduction="none")
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), codes.reshape(-1))


def _build_model(cfg: JanusLMConfig, tokenizer, vq):
    """A ``JanusForConditionalGeneration`` of the run's shape around ``vq`` (its weights loaded, frozen), or with a
    minimal placeholder VQ of the same codebook and grid for a draft."""
    from transformers import JanusForConditionalGeneration

    from arvis.models.janus import JanusPromptTokens, janus_config, janus_generation_config

    special = JanusPromptTokens.from_tokenizer(tokenizer)
    grid = cfg.resolution // downsample_factor(vq)
    fields = {k: v for k, v in vq.config.to_dict().items()
              if k in ("embed_dim", "latent_channels", "base_channels", "channel_multiplier", "num_res_blocks")}
    if cfg.draft:
        fields = dict(embed_dim=int(vq.config.embed_dim), latent_channels=8, base_channels=32, channel_multiplier=[1],
                      num_res_blocks=1)
    config = janus_config(len(tokenizer), cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads,
                          cfg.intermediate_size, num_codes=int(vq.config.num_embeddings), grid=grid, vq=fields,
                          max_positions=cfg.max_positions, pad_token_id=special.pad, bos_token_id=special.bos,
                          eos_token_id=tokenizer.eos_token_id,
                          image_token_id=tokenizer.convert_tokens_to_ids(tokenizer.image_token),
                          rope_theta=cfg.rope_theta)
    with torch.random.fork_rng():
        torch.manual_seed(cfg.init_seed)  # transformers initialises from the global stream
        model = JanusForConditionalGeneration(config)
    if not cfg.draft:
        model.model.vqmodel.load_state_dict(vq.state_dict())
    else:  # the placeholder shares the codebook (its decoder is never used)
        model.model.vqmodel.quantize.embedding.weight.data.copy_(vq.quantize.embedding.weight)
    model.generation_config = janus_generation_config(special, tokenizer.eos_token_id)
    for part in (model.model.vqmodel, model.model.vision_model, model.model.aligner):
        part.requires_grad_(False)  # only the decoder and the generation parts learn
    return model, special


def trainable_parameters(model) -> list[torch.nn.Parameter]:
    inner = model.model
    return [p for part in (inner.language_model, inner.generation_embeddings, inner.generation_aligner,
                           inner.generation_head) for p in part.parameters()]


@torch.no_grad()
def lm_validation_loss(model, tokenizer, data: dict[str, np.ndarray], batch_size: int = 32) -> float:
    from arvis.tokenizers.janus_text import prompt_batch

    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(data["codes"]), batch_size):
        codes = torch.from_numpy(data["codes"][i:i + batch_size].astype(np.int64))
        ids, valid = prompt_batch(tokenizer, [str(c) for c in data["captions"][i:i + batch_size]])
        total += float(janus_lm_loss(model, ids, valid, codes)) * len(codes)
        count += len(codes)
    model.train()
    return total / max(count, 1)


def train_lm(cfg: JanusLMConfig, vq_path: Path, scratch: Path, threads: int, smoke: bool = False,
             tokenizer_from: Path | None = None) -> dict[str, Any]:
    """Build the tokenizer (or copy ``tokenizer_from``'s: a draft shares its target's ids), tokenise the data,
    train the decoder and the generation parts (resumable); returns the parts."""
    from transformers import AutoTokenizer, JanusVQVAE

    from arvis.tokenizers.janus_text import build_janus_tokenizer, prompt_batch

    torch.set_num_threads(threads)
    scratch.mkdir(parents=True, exist_ok=True)
    log = setup_logging(scratch / "train.log", "arvis.train_janus.lm")
    vq = JanusVQVAE.from_pretrained(vq_path, dtype=torch.float32).eval()
    tok_dir = scratch / "tokenizer"
    if tokenizer_from is None and cfg.init_from:
        tokenizer_from = Path(cfg.init_from)  # a warm start keeps the token ids it was trained with
    if tokenizer_from is not None and not (tok_dir / "tokenizer.json").exists():
        AutoTokenizer.from_pretrained(tokenizer_from).save_pretrained(tok_dir)
    if not (tok_dir / "tokenizer.json").exists():
        corpus = (["red apple", "grinning face", "dog face"] if smoke
                  else names_corpus() if cfg.data == "names" else caption_corpus())
        build_janus_tokenizer(corpus, cfg.text_vocab_size).save_pretrained(tok_dir)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    train_data = lm_dataset(cfg, vq, scratch, "train", smoke)
    val_data = lm_dataset(cfg, vq, scratch, "heldout", smoke)
    model, special = _build_model(cfg, tokenizer, vq)
    if cfg.init_from and not (scratch / "checkpoint.pt").exists():  # a resumed run's checkpoint holds these weights
        from transformers import JanusForConditionalGeneration

        start = JanusForConditionalGeneration.from_pretrained(cfg.init_from, dtype=torch.float32)
        if not torch.equal(start.model.vqmodel.quantize.embedding.weight.float(), vq.quantize.embedding.weight):
            raise ValueError(f"--init-from {cfg.init_from} was trained on another VQ's codes than --vq {vq_path}")
        model.load_state_dict(start.state_dict())  # strict: the same shapes
        log.info("warm start from the model in %s", cfg.init_from)
    model.train()
    params = trainable_parameters(model)
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    ema = EMA(params, cfg.ema_decay)
    rng = np.random.default_rng([cfg.data_seed, 59])

    def loss_fn(step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        index = rng.integers(0, len(train_data["codes"]), cfg.batch_size)
        ids, valid = prompt_batch(tokenizer, [str(c) for c in train_data["captions"][index]])
        drop = torch.from_numpy(rng.random(cfg.batch_size) < cfg.caption_dropout)[:, None]
        ids = torch.where(drop, unconditional_prompts(ids, special.bos, special.boi, special.pad), ids)
        codes = torch.from_numpy(train_data["codes"][index].astype(np.int64))
        return janus_lm_loss(model, ids, valid, codes), {}

    loop = TrainingLoop("train_janus lm", LoopSettings.of(cfg), cfg, ("steps", "eval_every", "ckpt_every", "log_every"),
                        scratch / "checkpoint.pt", model, opt, params, ema, lambda: params, rng, loss_fn, log,
                        history="loss",
                        eval_fn=lambda step: {"val_loss": lm_validation_loss(model, tokenizer, val_data)})
    if loop.resume() is None:
        log.info("new LM run: %d trained parameters, vocabulary %d, %d codes, config %s", sum(p.numel() for p in params),
                 len(tokenizer), int(vq.config.num_embeddings), dumps(dataclasses.asdict(cfg)))
    history = loop.run()
    step, elapsed = loop.step, loop.elapsed
    # Keep the better of the raw and the EMA weights on the validation data (a short run's EMA can lag).
    raw_val = lm_validation_loss(model, tokenizer, val_data)
    raw = [p.detach().clone() for p in params]
    ema.copy_to(params)
    ema_val = lm_validation_loss(model, tokenizer, val_data)
    if raw_val < ema_val:
        for dst, src in zip(params, raw, strict=True):
            dst.data.copy_(src)
    log.info("done: %d steps, %.2f h, validation loss raw %.4f, EMA %.4f", step, elapsed / 3600, raw_val, ema_val)
    return {"model": model.eval(), "tokenizer": tokenizer, "steps": step, "seconds": elapsed, "history": history,
            "val_loss_raw": raw_val, "val_loss_ema": ema_val, "num_val": len(val_data["codes"]),
            "num_codes": int(vq.config.num_embeddings), "exported_weights": "ema" if ema_val <= raw_val else "raw"}


def export_lm(result: dict[str, Any], cfg: JanusLMConfig, out: Path, command: str) -> dict[str, Any]:
    """fp16 official-layout ``JanusForConditionalGeneration`` folder + tokenizer + ``training_metrics.json``."""
    val = min(result["val_loss_raw"], result["val_loss_ema"])
    model = result["model"]
    inner = model.model
    parts = {name: sum(p.numel() for p in getattr(inner, name).parameters())
             for name in ("language_model", "generation_embeddings", "generation_aligner", "generation_head",
                          "vqmodel", "vision_model", "aligner")}
    metrics = {"config": dataclasses.asdict(cfg), "params": sum(p.numel() for p in model.parameters()),
               "params_by_part": parts, "trained_params": sum(p.numel() for p in trainable_parameters(model)),
               "steps": result["steps"], "train_hours": result["seconds"] / 3600,
               "final_train_loss": result["history"][-1]["loss"] if result["history"] else None,
               "validation_loss": val, "validation_loss_raw": result["val_loss_raw"],
               "validation_loss_ema": result["val_loss_ema"], "validation_perplexity": math.exp(val),
               "validation_images": result["num_val"], "num_codes": result["num_codes"],
               "exported_weights": result["exported_weights"], "command": command, "history": result["history"]}
    with atomic_directory(out) as staged:
        model.half().save_pretrained(staged)
        result["tokenizer"].save_pretrained(staged)
        (staged / "training_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


# ============================================================================================== assemble
def assemble(lm_dir: Path, out: Path, sampling_defaults: dict[str, Any], draft_dir: Path | None = None,
             vq_dir: Path | None = None) -> Path:
    """The ``lm`` export (an official-layout Janus folder with its tokenizer) as a
    :class:`~arvis.pipelines.JanusPipeline` folder, with a draft (``lm --draft --tokenizer <target's>``) as its
    ``draft_transformer``; training records (VQ, LM, draft) are copied beside it."""
    from transformers import AutoTokenizer, JanusForConditionalGeneration

    from arvis.pipelines import JanusPipeline

    model = JanusForConditionalGeneration.from_pretrained(lm_dir, dtype=torch.float16).eval()
    tokenizer = AutoTokenizer.from_pretrained(lm_dir)
    stages = [("lm", lm_dir)] + ([("vq", vq_dir)] if vq_dir is not None else [])
    draft = None
    if draft_dir is not None:
        if AutoTokenizer.from_pretrained(draft_dir).get_vocab() != tokenizer.get_vocab():
            raise ValueError(f"draft: {draft_dir} was trained with another tokenizer; train it with --tokenizer")
        draft = JanusForConditionalGeneration.from_pretrained(draft_dir, dtype=torch.float16).eval()
        stages.append(("draft", draft_dir))
    pipe = JanusPipeline(model, tokenizer, draft_transformer=draft)
    with atomic_directory(out, keep=("README.md", "metrics.json")) as staged:
        pipe.save_pretrained(staged)
        atomic_write_text(staged / "sampling_defaults.json", json.dumps(sampling_defaults, indent=2) + "\n")
        records = staged / "training"
        records.mkdir()
        for stage, folder in stages:
            metrics = shipped_record(json.loads((folder / "training_metrics.json").read_text()))
            atomic_write_text(records / f"{stage}_training_metrics.json", json.dumps(metrics, indent=2) + "\n")
    return out


def extract(folder: Path, out: Path) -> dict[str, str]:
    """An assembled :class:`~arvis.pipelines.JanusPipeline` folder as the stages' exports, so that a run can
    warm-start from a shipped model: ``out/vq`` (a ``JanusVQVAE`` folder) and ``out/lm`` (the official-layout model
    with its tokenizer), each with the ``training_metrics.json`` recorded at assembly."""
    from transformers import AutoTokenizer, JanusForConditionalGeneration

    model = JanusForConditionalGeneration.from_pretrained(folder / "transformer", dtype=torch.float16).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    for name, part in (("vq", model.model.vqmodel), ("lm", model)):
        with atomic_directory(out / name) as staged:
            part.save_pretrained(staged)
            if name == "lm":
                tokenizer.save_pretrained(staged)
            record = folder / "training" / f"{name}_training_metrics.json"
            if record.is_file():
                atomic_write_text(staged / "training_metrics.json", record.read_text())
    return {name: str(out / name) for name in ("vq", "lm")}


# ============================================================================================== CLI
def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m arvis.training.train_janus", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="stage", required=True)
    vq = sub.add_parser("vq", help="train the JanusVQVAE on emoji renders")
    vq.add_argument("--out", required=True, help="export folder (a JanusVQVAE save_pretrained folder)")
    vq.add_argument("--scratch", required=True, help="checkpoints and log")
    for flag, kind in (("--steps", int), ("--codebook-size", int), ("--resolution", int), ("--patch-size", int),
                       ("--batch-size", int), ("--late-patch-size", int), ("--late-batch-size", int), ("--lr", float),
                       ("--warmup", int), ("--ema-decay", float), ("--eval-every", int), ("--latent-channels", int),
                       ("--num-res-blocks", int)):
        vq.add_argument(flag, type=kind, default=None)
    vq.add_argument("--channel-multiplier", type=int, nargs="+", default=None,
                    help="per-level width multipliers (x 32 channels, multiples of 32); len - 1 levels of 2x down")
    vq.add_argument("--threads", type=int, default=1)
    vq.add_argument("--smoke", action="store_true", help="a tiny model, a few steps (seconds)")
    lm = sub.add_parser("lm", help="train the Janus decoder and generation parts on the VQ codes of emoji renders")
    lm.add_argument("--vq", required=True, help="the exported JanusVQVAE folder (stage vq)")
    lm.add_argument("--out", required=True, help="export folder (an official-layout Janus folder + tokenizer)")
    lm.add_argument("--scratch", required=True, help="checkpoints, log, tokenizer and tokenised data")
    lm.add_argument("--data", choices=DATA_SETS, default=None, help="names (123 named emoji, default) or all")
    for flag, kind in (("--steps", int), ("--batch-size", int), ("--num-train", int), ("--num-val", int),
                       ("--resolution", int), ("--hidden-size", int), ("--layers", int), ("--heads", int),
                       ("--kv-heads", int), ("--intermediate-size", int), ("--lr", float), ("--eval-every", int)):
        lm.add_argument(flag, type=kind, default=None)
    lm.add_argument("--draft", action="store_true",
                    help="a draft model: a minimal placeholder VQ inside (the pipeline decodes with its target's)")
    lm.add_argument("--tokenizer", default=None, help="reuse this tokenizer folder (a draft: the target's export)")
    lm.add_argument("--init-from", default=None,
                    help="an lm export to warm-start from, with a fresh schedule (its tokenizer is reused; e.g. the lm "
                         "of `extract`, with --vq its vq)")
    lm.add_argument("--threads", type=int, default=1)
    lm.add_argument("--smoke", action="store_true", help="a tiny model, a few steps (seconds)")
    ext = sub.add_parser("extract", help="an assembled JanusPipeline folder's vq and lm as stage exports")
    ext.add_argument("--folder", required=True, help="a JanusPipeline folder, e.g. arvis/weights/janus-emoji")
    ext.add_argument("--out", required=True)
    asm = sub.add_parser("assemble", help="the JanusPipeline folder from the lm export")
    asm.add_argument("--lm", required=True)
    asm.add_argument("--vq", default=None, help="the vq export (its training record is copied)")
    asm.add_argument("--out", required=True)
    asm.add_argument("--draft-lm", default=None, help="a draft export (lm --draft --tokenizer <target's export>)")
    asm.add_argument("--guidance-scale", type=float, default=3.0)
    asm.add_argument("--top-k", type=int, default=0)
    args = p.parse_args(argv)
    command = training_command("train_janus", argv)
    if args.stage == "extract":
        parts = extract(Path(args.folder), Path(args.out))
        print(json.dumps(parts, indent=2))
        return parts
    if args.stage == "assemble":
        path = assemble(Path(args.lm), Path(args.out), {"guidance_scale": args.guidance_scale, "top_k": args.top_k},
                        Path(args.draft_lm) if args.draft_lm else None, Path(args.vq) if args.vq else None)
        sizes = {str(f.relative_to(path)): f.stat().st_size for f in path.rglob("*.safetensors")}
        print(json.dumps({"assembled": str(path), "safetensors_bytes": sizes}, indent=2))
        return {"path": str(path), "safetensors_bytes": sizes}
    if args.stage == "lm":
        cfg = LM_SMOKE if args.smoke else JanusLMConfig()
        overrides = {k: v for k, v in (("steps", args.steps), ("batch_size", args.batch_size),
                                       ("num_train", args.num_train), ("num_val", args.num_val),
                                       ("resolution", args.resolution), ("hidden_size", args.hidden_size),
                                       ("num_layers", args.layers), ("num_heads", args.heads),
                                       ("num_kv_heads", args.kv_heads), ("intermediate_size", args.intermediate_size),
                                       ("lr", args.lr), ("eval_every", args.eval_every), ("data", args.data),
                                       ("draft", True if args.draft else None),
                                       ("init_from", args.init_from)) if v is not None}
        cfg = dataclasses.replace(cfg, **overrides)
        result = train_lm(cfg, Path(args.vq), Path(args.scratch), args.threads, args.smoke,
                          Path(args.tokenizer) if args.tokenizer else None)
        metrics = export_lm(result, cfg, Path(args.out), command)
        print(json.dumps({k: v for k, v in metrics.items() if k not in ("history", "config")}, indent=2))
        return metrics
    if args.stage == "vq":
        cfg = JANUS_VQ_SMOKE if args.smoke else JanusVQTrainConfig()
        multiplier = tuple(args.channel_multiplier) if args.channel_multiplier else None
        overrides = {k: v for k, v in (("steps", args.steps), ("codebook_size", args.codebook_size),
                                       ("eval_every", args.eval_every), ("resolution", args.resolution),
                                       ("channel_multiplier", multiplier), ("patch_size", args.patch_size),
                                       ("batch_size", args.batch_size), ("late_patch_size", args.late_patch_size),
                                       ("late_batch_size", args.late_batch_size), ("lr", args.lr),
                                       ("warmup", args.warmup), ("ema_decay", args.ema_decay),
                                       ("latent_channels", args.latent_channels),
                                       ("num_res_blocks", args.num_res_blocks)) if v is not None}
        cfg = dataclasses.replace(cfg, **overrides)
        model, summary = train_vq(cfg, Path(args.scratch), args.threads, args.smoke, arch=JANUS_VQ)
        metrics = export_vq(model, cfg, summary, Path(args.out), command, args.smoke, arch=JANUS_VQ)
        print(json.dumps({k: v for k, v in metrics.items() if k not in ("history", "config")}, indent=2))
        return metrics
    raise AssertionError(args.stage)


if __name__ == "__main__":
    main()
