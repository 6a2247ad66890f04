"""Train the small CLIPs arvis ships for CLIP score (``arvis/weights/clip-scenes``, ``arvis/weights/clip-emoji``).

``--data scenes`` (default) trains on the captioned scenes described below; ``--data emoji`` on the OpenMoji
emoji of :mod:`arvis.data.emoji` (CC BY-SA 4.0) and their Unicode-name captions (the pool of augmented
training views with caption variants, plain CLIP loss), evaluated by caption retrieval over every held-out
emoji (never seen in training) and matched vs shuffled captions.

An open_clip ``CLIP`` (ViT image tower, causal text transformer, open_clip's own code and state-dict
layout) built by ``open_clip.create_model`` from a small custom config, trained contrastively on the
captioned scenes of :mod:`arvis.data.scenes` (train split; held-out scenes for evaluation only) and saved in
the folder format of :mod:`arvis.models.clip` (``open_clip_config.json`` + fp16
``open_clip_model.safetensors``), which ``arvis clip-score`` and ``arvis.eval.clip_score.load_clip()`` read
by default. Text goes through open_clip's ``SimpleTokenizer`` (BPE vocabulary of 49408 shipped inside the
open_clip wheel), so the folder works offline.

Recipe:

* data: ``num_train`` scenes rendered once at 128 px (cached in ``--scratch``), no image augmentation
  (a flip or crop would falsify the captions' "left" / "top" words);
* loss: the symmetric CLIP (InfoNCE) loss with a learned temperature, plus NegCLIP-style hard negatives
  (Yuksekgonul et al. 2023, arXiv:2210.01936): every caption also yields a copy with one attribute
  changed (colour, shape, size, place, background, or two objects' colours exchanged) that serves as an
  extra negative in the image-to-text direction, so the model must bind attributes instead of matching
  bags of words;
* AdamW, warm-up + cosine learning rate, EMA of the weights (the EMA is evaluated and shipped);
* checkpoints every ``ckpt_every`` steps into ``--scratch`` (atomic) and automatic resume.

Usage::

    python -m arvis.training.train_clip --out arvis/weights/clip-scenes --scratch runs/clip
    python -m arvis.training.train_clip --out /tmp/clip-smoke --preset smoke        # seconds
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

from arvis.data.scenes import BACKGROUNDS, COLOURS, PLACES, SHAPES, SIZES, build_scenes, parse_caption
from arvis.models.clip import SIMPLE_TOKENIZER_VOCAB, ClipModel, load_clip_model, retrieval, write_clip_folder
from arvis.training.common import (
    EMA,
    dumps,
    export_note,
    export_only_steps,
    recorded_command,
    setup_logging,
    training_command,
)
from arvis.training.loop import LoopSettings, TrainingLoop
from arvis.utils.files import atomic_directory, atomic_path
from arvis.utils.model_card import ModelCard, Section, Training, table, write_card

__all__ = ["ATTRIBUTES", "ClipTrainConfig", "PRESETS", "evaluate", "export", "main", "swap_attribute", "train"]

#: What a hard negative may change. "bind" exchanges the colours of two objects of different colours.
ATTRIBUTES: tuple[str, ...] = ("colour", "shape", "size", "place", "background", "bind")


#: What a CLIP can be trained on: captioned scenes or emoji with their names.
CLIP_DATA: tuple[str, ...] = ("scenes", "emoji")


@dataclass(frozen=True)
class ClipTrainConfig:
    """Everything that determines a CLIP training run (architecture, data, optimisation, evaluation)."""

    # architecture (open_clip model_cfg)
    embed_dim: int = 128
    image_size: int = 128
    patch_size: int = 16
    vision_width: int = 160
    vision_layers: int = 4
    vision_head_width: int = 32
    text_width: int = 64
    text_heads: int = 4
    text_layers: int = 4
    context_length: int = 40  # longest grammar caption: 31 BPE tokens + start/end
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    # data
    data: str = "scenes"  # "scenes" (arvis.data.scenes) or "emoji" (arvis.data.emoji)
    num_train: int = 30000
    num_val: int = 500
    data_seed: int = 0
    hard_negatives: bool = True
    # optimisation
    steps: int = 1200
    batch_size: int = 128
    lr: float = 1e-3
    warmup: int = 100
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    ema_decay: float = 0.995
    init_seed: int = 0
    # evaluation
    final_eval_size: int = 1000
    retrieval_batch: int = 100
    # bookkeeping
    log_every: int = 25
    eval_every: int = 200
    ckpt_every: int = 50

    def __post_init__(self) -> None:
        for name in ("embed_dim", "image_size", "patch_size", "vision_width", "vision_layers", "text_width",
                     "text_heads", "text_layers", "num_train", "num_val", "steps", "batch_size", "final_eval_size",
                     "retrieval_batch", "log_every", "eval_every", "ckpt_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size ({self.image_size}) must be a multiple of patch_size ({self.patch_size})")
        if self.vision_width % self.vision_head_width or self.text_width % self.text_heads:
            raise ValueError("vision_width must be a multiple of vision_head_width, text_width of text_heads")
        if self.retrieval_batch > min(self.final_eval_size, self.num_val):
            raise ValueError(f"retrieval_batch ({self.retrieval_batch}) must be <= final_eval_size and num_val")
        if self.context_length < 8:
            raise ValueError(f"context_length must be >= 8, got {self.context_length}")
        if self.data not in CLIP_DATA:
            raise ValueError(f"data must be one of {CLIP_DATA}, got {self.data!r}")
        if self.data == "emoji" and self.hard_negatives:
            raise ValueError("hard_negatives: the attribute swaps follow the scene grammar; emoji train without them")

    def model_cfg(self) -> dict[str, Any]:
        """The open_clip model config (``open_clip.model.CLIP(**model_cfg)``)."""
        return {
            "embed_dim": self.embed_dim,
            "vision_cfg": {"image_size": self.image_size, "layers": self.vision_layers, "width": self.vision_width,
                           "patch_size": self.patch_size, "head_width": self.vision_head_width},
            "text_cfg": {"context_length": self.context_length, "vocab_size": SIMPLE_TOKENIZER_VOCAB,
                         "width": self.text_width, "heads": self.text_heads, "layers": self.text_layers},
        }

    def preprocess_cfg(self) -> dict[str, Any]:
        """open_clip preprocessing of the folder (resize shortest side + centre crop to ``image_size``)."""
        return {"size": self.image_size, "mean": list(self.mean), "std": list(self.std),
                "interpolation": "bicubic", "resize_mode": "shortest"}


PRESETS: dict[str, ClipTrainConfig] = {
    "default": ClipTrainConfig(),
    # Emoji: a smaller CLIP (the data is ~1.7k emoji), no hard negatives (they follow the scene grammar); the
    # training pairs are the cached pool of 8192 augmented views (arvis.data.sources.EMOJI_POOL).
    "emoji": ClipTrainConfig(data="emoji", hard_negatives=False, num_train=8192, vision_width=128, vision_layers=3,
                             text_width=64, text_layers=2, context_length=32, steps=400, batch_size=64, warmup=40,
                             ema_decay=0.98, eval_every=100, final_eval_size=500),
    "smoke": ClipTrainConfig(embed_dim=16, image_size=32, patch_size=8, vision_width=32, vision_layers=1,
                             vision_head_width=16, text_width=16, text_heads=2, text_layers=1, num_train=16,
                             num_val=8, steps=4, batch_size=4, warmup=1, final_eval_size=8, retrieval_batch=4,
                             log_every=1, eval_every=2, ckpt_every=2),
}

# Resuming may change these without invalidating a checkpoint.
_RESUMABLE = ("steps", "final_eval_size", "retrieval_batch", "log_every", "eval_every", "ckpt_every")


# ---------------------------------------------------------------------------------------------- captions
def _caption(objects: list[tuple[str, str, str, str]], background: str) -> str:
    return " and ".join(f"a {s} {c} {sh} {p}" for s, c, sh, p in objects) + f" over {background}"


def _other(rng: np.random.Generator, options: list[str], current: str) -> str:
    choices = [o for o in options if o != current]
    return choices[int(rng.integers(len(choices)))]


def swap_attribute(caption: str, kind: str, rng: np.random.Generator) -> str | None:
    """``caption`` with one attribute changed (a wrong description of its scene), or ``None`` if ``kind``
    cannot apply (``"bind"`` needs two objects of different colours).

    Args:
        caption: a caption of :mod:`arvis.data.scenes`' grammar.
        kind: one of :data:`ATTRIBUTES`. ``"colour"`` / ``"shape"`` / ``"size"`` change one random object's
            word to another value, ``"place"`` moves one object to a place no object of the scene takes,
            ``"background"`` changes the background, ``"bind"`` exchanges two objects' colours.
        rng: where the random choices come from.
    """
    objects, background = parse_caption(caption)
    objects = [list(o) for o in objects]
    k = int(rng.integers(len(objects)))
    if kind == "colour":
        objects[k][1] = _other(rng, list(COLOURS), objects[k][1])
    elif kind == "shape":
        objects[k][2] = _other(rng, list(SHAPES), objects[k][2])
    elif kind == "size":
        objects[k][0] = _other(rng, list(SIZES), objects[k][0])
    elif kind == "place":
        free = [p for p in PLACES if p not in {o[3] for o in objects}]
        objects[k][3] = free[int(rng.integers(len(free)))]
    elif kind == "background":
        background = _other(rng, list(BACKGROUNDS), background)
    elif kind == "bind":
        pairs = [(i, j) for i in range(len(objects)) for j in range(i + 1, len(objects))
                 if objects[i][1] != objects[j][1]]
        if not pairs:
            return None
        i, j = pairs[int(rng.integers(len(pairs)))]
        objects[i][1], objects[j][1] = objects[j][1], objects[i][1]
    else:
        raise ValueError(f"kind must be one of {ATTRIBUTES}, got {kind!r}")
    return _caption([tuple(o) for o in objects], background)


def hard_negative(caption: str, rng: np.random.Generator) -> str:
    """One random attribute swap of ``caption`` (:func:`swap_attribute`; "bind" falls back to "colour")."""
    kind = ATTRIBUTES[int(rng.integers(len(ATTRIBUTES)))]
    return swap_attribute(caption, kind, rng) or swap_attribute(caption, "colour", rng)


# ---------------------------------------------------------------------------------------------- data and model
def load_pairs(cfg: ClipTrainConfig, scratch: Path, split: str, n: int | None, seed: int
               ) -> tuple[np.ndarray, list[str]]:
    """Images ``uint8 [n, S, S, 3]`` and captions of ``cfg.data`` (emoji: ``n=None`` is every emoji of the split
    once, unaugmented, with its plain name; ``train`` with ``n == EMOJI_POOL``, seed 0, is the cached pool)."""
    if cfg.data == "scenes":
        if n is None:
            raise ValueError("n: scenes have no fixed list; give a count")
        return load_scenes(cfg, scratch, split, n, seed)
    from arvis.data.sources import labelled_images

    images, _, captions = labelled_images("emoji", n, split, cfg.image_size, seed)
    return images, captions


def load_scenes(cfg: ClipTrainConfig, scratch: Path, split: str, n: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """``uint8 [n, S, S, 3]`` scenes and their captions, cached as ``.npz`` in ``scratch``."""
    path = scratch / f"scenes-{split}-{n}-{seed}-{cfg.image_size}.npz"
    if path.exists():
        with np.load(path, allow_pickle=False) as z:
            return z["images"], [str(c) for c in z["captions"]]
    images, captions, _ = build_scenes(n, split, cfg.image_size, seed=seed, progress=False)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, images=images, captions=np.array(captions))
    return images, captions


def build_model(cfg: ClipTrainConfig, scratch: Path) -> torch.nn.Module:
    """``open_clip.create_model`` of ``cfg.model_cfg()``, registered under a name unique to the config."""
    import hashlib

    import open_clip

    model_cfg = cfg.model_cfg()
    name = "arvis-clip-" + hashlib.sha256(json.dumps(model_cfg, sort_keys=True).encode()).hexdigest()[:12]
    config_file = scratch / f"{name}.json"
    if not config_file.exists():
        config_file.write_text(json.dumps(model_cfg))
    open_clip.add_model_config(config_file)
    torch.manual_seed(cfg.init_seed)  # open_clip initialises from the global RNG (training script)
    return open_clip.create_model(name, pretrained=None)


def to_input(images: np.ndarray, cfg: ClipTrainConfig) -> torch.Tensor:
    """``uint8 [N, S, S, 3]`` at ``image_size`` -> normalised ``[N, 3, S, S]``, exactly the folder's eval
    preprocessing (the resize to ``image_size`` is the identity then)."""
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
    mean = torch.tensor(cfg.mean).view(1, 3, 1, 1)
    std = torch.tensor(cfg.std).view(1, 3, 1, 1)
    return (x - mean) / std


def clip_loss(model: torch.nn.Module, images: torch.Tensor, tokens: torch.Tensor, negatives: torch.Tensor | None
              ) -> tuple[torch.Tensor, dict[str, float]]:
    """Symmetric InfoNCE over ``B`` pairs; ``negatives`` (``[B, L]`` tokens) join the image->text side only."""
    b = images.shape[0]
    img = model.encode_image(images, normalize=True)  # [B, D]
    texts = tokens if negatives is None else torch.cat([tokens, negatives])
    txt = model.encode_text(texts, normalize=True)  # [B or 2B, D]
    scale = model.logit_scale.exp()
    logits = scale * img @ txt.T  # [B, B or 2B]
    target = torch.arange(b)
    i2t = F.cross_entropy(logits, target)
    t2i = F.cross_entropy(logits[:, :b].T, target)
    stats = {"i2t_acc": float((logits[:, :b].argmax(1) == target).float().mean()),
             "scale": float(scale.detach())}
    if negatives is not None:
        stats["neg_win"] = float((logits.diagonal() > logits[:, b:].diagonal()).float().mean())
    return (i2t + t2i) / 2, stats


# ---------------------------------------------------------------------------------------------- evaluation
def evaluate(scorer: ClipModel, images: np.ndarray, captions: list[str], group: int, seed: int = 0,
             attributes: bool = True) -> dict[str, Any]:
    """Retrieval, matched-vs-shuffled CLIP score and attribute sensitivity of ``scorer`` on scenes.

    CLIP score is ``100 * cos`` per pair (:mod:`arvis.eval.clip_score`). ``shuffled`` pairs image ``i`` with
    caption ``perm(i)`` of a derangement; ``attributes[kind]`` compares the right caption with the same
    caption after :func:`swap_attribute` (``margin``: mean difference; ``right_wins``: fraction of scenes
    where the right caption scores higher).
    """
    rng = np.random.default_rng([seed, 99])
    img, txt = scorer.image_embeddings(images), scorer.text_embeddings(captions)
    matched = 100 * (img * txt).sum(-1)
    n = len(captions)
    perm = (np.arange(n) + rng.integers(1, n, size=1)[0]) % n if n > 1 else np.arange(n)  # a derangement
    shuffled = 100 * (img * txt[torch.from_numpy(perm)]).sum(-1)
    out: dict[str, Any] = {
        "pairs": n,
        "retrieval": retrieval(img, txt, group),
        "clip_score_matched": max(float(matched.mean()), 0.0),
        "clip_score_shuffled": max(float(shuffled.mean()), 0.0),
        "matched_std": float(matched.std()),
        "shuffled_std": float(shuffled.std()),
        "matched_beats_shuffled": float((matched > shuffled).float().mean()),
    }
    if attributes:
        out["attributes"] = {}
        for kind in ATTRIBUTES:
            pairs = [(i, swap_attribute(c, kind, rng)) for i, c in enumerate(captions)]
            pairs = [(i, c) for i, c in pairs if c is not None]
            index = torch.tensor([i for i, _ in pairs])
            wrong_txt = scorer.text_embeddings([c for _, c in pairs])
            wrong = 100 * (img[index] * wrong_txt).sum(-1)
            right = matched[index]
            out["attributes"][kind] = {"scenes": len(pairs), "right": float(right.mean()), "wrong": float(wrong.mean()),
                                       "margin": float((right - wrong).mean()),
                                       "right_wins": float((right > wrong).float().mean())}
    return out


def _scorer_of(model: torch.nn.Module, cfg: ClipTrainConfig) -> ClipModel:
    """A :class:`ClipModel` around an in-memory model with the folder's preprocessing and tokenizer."""
    from open_clip.tokenizer import SimpleTokenizer
    from open_clip.transform import PreprocessCfg, image_transform_v2

    pre = image_transform_v2(PreprocessCfg(**cfg.preprocess_cfg()), is_train=False)
    return ClipModel(model, pre, SimpleTokenizer(context_length=cfg.context_length), name="training")


# ---------------------------------------------------------------------------------------------- training
def train(cfg: ClipTrainConfig, scratch: str | os.PathLike, threads: int = 1, command: str = ""
          ) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Train (resuming from ``scratch/checkpoint.pt`` if present); return the EMA model and a summary."""
    from open_clip.tokenizer import SimpleTokenizer

    scratch = Path(scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    log = setup_logging(scratch / "train.log", "arvis.train_clip")
    torch.set_num_threads(threads)
    ckpt_path = scratch / "checkpoint.pt"
    tokenizer = SimpleTokenizer(context_length=cfg.context_length)

    model = build_model(cfg, scratch).train()
    named = list(model.named_parameters())
    params = [p for _, p in named]
    no_decay_names = ("token_embedding", "positional_embedding", "class_embedding", "logit_scale")
    decay = [p for n, p in named if p.ndim >= 2 and not any(k in n for k in no_decay_names)]
    no_decay = [p for n, p in named if not (p.ndim >= 2 and not any(k in n for k in no_decay_names))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.98), eps=1e-6)
    ema = EMA(params, cfg.ema_decay)
    rng = np.random.default_rng([cfg.data_seed, 777])
    t_prep, train_command = time.time(), command
    ema_model = build_model(cfg, scratch).eval()

    def ema_copy() -> torch.nn.Module:
        ema_model.load_state_dict(model.state_dict())
        ema.copy_to(list(ema_model.parameters()))
        return ema_model.eval()

    # An epoch order drawn from the checkpointed RNG: index = order[step * B % N ...] (reshuffled per epoch).
    def batch_index(s: int) -> np.ndarray:
        per_epoch = max(1, cfg.num_train // cfg.batch_size)
        epoch, k = divmod(s, per_epoch)
        order = np.random.default_rng([cfg.data_seed, 31, epoch]).permutation(cfg.num_train)
        return order[k * cfg.batch_size:(k + 1) * cfg.batch_size] if cfg.num_train >= cfg.batch_size else \
            np.random.default_rng([cfg.data_seed, 32, s]).integers(0, cfg.num_train, cfg.batch_size)

    def loss_fn(step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        index = batch_index(step)
        captions = [train_captions[i] for i in index]
        x = to_input(train_images[index], cfg)
        tokens = tokenizer(captions)
        negatives = tokenizer([hard_negative(c, rng) for c in captions]) if cfg.hard_negatives else None
        return clip_loss(model, x, tokens, negatives)

    @torch.no_grad()
    def cap_temperature() -> None:
        model.logit_scale.clamp_(0, np.log(100.0))  # CLIP's cap on the temperature

    def evaluation(step: int) -> dict[str, float]:
        group = len(val_captions) if cfg.data == "emoji" else min(cfg.retrieval_batch, cfg.num_val)
        m = evaluate(_scorer_of(ema_copy(), cfg), val_images, val_captions, group, attributes=False)
        return {"i2t_top1": m["retrieval"]["image_to_text_top1"], "t2i_top1": m["retrieval"]["text_to_image_top1"],
                "matched": m["clip_score_matched"], "shuffled": m["clip_score_shuffled"]}

    loop = TrainingLoop("train_clip", LoopSettings.of(cfg), cfg, _RESUMABLE, ckpt_path, model, opt, params, ema,
                        lambda: params, rng, loss_fn, log, eval_fn=evaluation, after_update=cap_temperature,
                        checkpoint_extra=lambda: {"command": train_command})
    ck = loop.resume()
    if ck is not None:
        train_command = command or str(ck.get("command", ""))  # --export-only passes no command
    else:
        log.info("new run: %d parameters, config %s", sum(p.numel() for p in params), dumps(dataclasses.asdict(cfg)))

    train_images, train_captions = load_pairs(cfg, scratch, "train", cfg.num_train, cfg.data_seed)
    # emoji: every held-out emoji once (retrieval over all of them); scenes: num_val held-out scenes
    val_images, val_captions = load_pairs(cfg, scratch, "heldout", None if cfg.data == "emoji" else cfg.num_val,
                                          cfg.data_seed + 1)
    log.info("data: %d train / %d held-out scenes ready (%.0f s)", len(train_captions), len(val_captions),
             time.time() - t_prep)
    history = loop.run()
    step, elapsed = loop.step, loop.elapsed
    train_entries = [h for h in history if "eval" not in h]
    summary = {"steps": step, "train_seconds": elapsed, "history": history, "command": train_command,
               "final_train": train_entries[-1] if train_entries else {}}
    return ema_copy(), summary


# ---------------------------------------------------------------------------------------------- export
def export(model: torch.nn.Module, cfg: ClipTrainConfig, out: str | os.PathLike, summary: dict[str, Any],
           command: str, scratch: str | os.PathLike) -> dict[str, Any]:
    """Write the folder (fp16 weights), evaluate the reloaded shipped folder, add ``metrics.json`` + ``README.md``.

    The folder is assembled in a temporary directory and moved onto ``out`` by rename, so ``out`` is never
    half-written.
    """
    import copy

    out = Path(out)
    with atomic_directory(out) as staged:
        write_clip_folder(copy.deepcopy(model).half(), cfg.model_cfg(), staged, preprocess_cfg=cfg.preprocess_cfg())
        scorer = load_clip_model(staged)  # what users get: fp16 file, fp32 model, the folder's own preprocessing
        t0 = time.time()
        extra: dict[str, Any] = {}
        if cfg.data == "emoji":
            # Headline: every held-out emoji once with its plain name, retrieval over all of them; then augmented
            # held-out views with caption variants (matched vs shuffled; the same emoji can recur, so no retrieval).
            images, captions = load_pairs(cfg, Path(scratch), "heldout", None, cfg.data_seed)
            metrics_eval = evaluate(scorer, images, captions, len(captions), seed=cfg.data_seed, attributes=False)
            views, view_captions = load_pairs(cfg, Path(scratch), "heldout", cfg.final_eval_size, cfg.data_seed + 2)
            extra["heldout_views"] = evaluate(scorer, views, view_captions, 1, seed=cfg.data_seed, attributes=False)
        else:
            images, captions = load_scenes(cfg, Path(scratch), "heldout", cfg.final_eval_size, cfg.data_seed + 2)
            metrics_eval = evaluate(scorer, images, captions, cfg.retrieval_batch, seed=cfg.data_seed)
        weights = staged / "open_clip_model.safetensors"
        n_params = sum(p.numel() for p in scorer.model.parameters())
        metrics = {
            "heldout": metrics_eval,
            **extra,
            "params": n_params,
            "token_embedding_params": int(scorer.model.token_embedding.weight.numel()),
            "safetensors_mb": os.path.getsize(weights) / 1e6,
            "steps": summary["steps"],
            "train_pairs_seen": summary["steps"] * cfg.batch_size,
            "epochs": summary["steps"] * cfg.batch_size / cfg.num_train,
            "train_minutes": summary["train_seconds"] / 60,
            "eval_minutes": (time.time() - t0) / 60,
            "torch_threads": torch.get_num_threads(),
            "final_train": summary["final_train"],
            "config": dataclasses.asdict(cfg),
            "command": summary.get("command") or command,
            "export_command": command,
        }
        (staged / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        write_card(staged, model_card(cfg, metrics) if cfg.data == "scenes" else
                   emoji_model_card(cfg, metrics, out.name))
        metrics["eval_history"] = [h for h in summary["history"] if "eval" in h]
    return metrics


def model_card(cfg: ClipTrainConfig, m: dict[str, Any]) -> ModelCard:
    """Model card of the exported CLIP folder trained on scenes."""
    e = m["heldout"]
    r = e["retrieval"]
    tl = m["final_train"]
    n_tok = cfg.image_size // cfg.patch_size
    attributes = table(("attribute changed", "scenes", "right", "wrong", "margin", "right wins"),
                       [(k, v["scenes"], f"{v['right']:.2f}", f"{v['wrong']:.2f}", f"{v['margin']:+.2f}",
                         f"{100 * v['right_wins']:.1f}%") for k, v in e["attributes"].items()])
    return ModelCard(
        title="clip-scenes: arvis's small CLIP for CLIP score",
        summary="""An open_clip `CLIP` (open_clip's own ViT image tower and causal text transformer; state dict in open_clip's
layout) trained by `arvis.training.train_clip` on the captioned scenes of `arvis.data.scenes` (1-3 flat
shapes over natural-texture backgrounds, captions such as "a large red circle on the left and a small blue
square at the top over grass"). It is what `arvis clip-score` and `arvis.eval.clip_score.load_clip()` use
by default (no CLIP weights can be downloaded here). Scores are only meaningful for images and captions of
that scene grammar, and are not comparable with CLIP scores of OpenAI/LAION models.""",
        usage="""from arvis.eval.clip_score import load_clip
scorer = load_clip()                       # this folder; fp16 file, fp32 model
result = scorer.score(images_uint8, captions)   # 100 * cosine per pair, mean""",
        architecture=Section("Architecture (`open_clip_config.json`)", f"""Image tower: ViT, {cfg.image_size} px input, patch {cfg.patch_size} ({n_tok}x{n_tok} tokens + class token), width
{cfg.vision_width}, {cfg.vision_layers} layers, head width {cfg.vision_head_width}. Text tower: width {cfg.text_width},
{cfg.text_layers} layers, {cfg.text_heads} heads, context length {cfg.context_length} (the longest grammar caption is
31 BPE tokens + start/end), open_clip's `SimpleTokenizer` (vocabulary 49408, shipped inside the open_clip
wheel, works offline). Embedding dimension {cfg.embed_dim}. Preprocessing: bicubic resize of the shortest side
+ centre crop to {cfg.image_size} px, normalisation mean {list(cfg.mean)} / std {list(cfg.std)}. {m['params']:,}
parameters, of which {m['token_embedding_params']:,} are the token-embedding table the 49408-token vocabulary
requires; {m['safetensors_mb']:.2f} MB as fp16 safetensors."""),
        data=Section("Data (no leakage)", f"""`arvis.data.scenes.build_scenes`: {cfg.num_train:,} train-split scenes (seed {cfg.data_seed}, backgrounds cut
from the photos' train regions) rendered once at {cfg.image_size} px; no image augmentation (flips and crops
would falsify "left" / "top"). Evaluation uses held-out scenes only (held-out split: other random
stream, backgrounds from the photos' held-out strips): {cfg.num_val} (seed {cfg.data_seed + 1}) for monitoring,
{e['pairs']} (seed {cfg.data_seed + 2}) for the figures below."""),
        training=Training([m["command"]], f"""{export_note(m)}Symmetric CLIP (InfoNCE) loss with a learned temperature (capped at 100), batch {cfg.batch_size}, plus
NegCLIP-style hard negatives (arXiv:2210.01936){'' if cfg.hard_negatives else ' (disabled in this run)'}: each
caption also gives a copy with one attribute changed (colour, shape, size, place, background, or two
objects' colours exchanged), an extra negative for the image-to-text direction. AdamW (betas 0.9/0.98, lr
{cfg.lr}, weight decay {cfg.weight_decay} on matrices, {cfg.warmup} warm-up steps, cosine to {cfg.min_lr_ratio}x),
grad-norm clip {cfg.grad_clip}, EMA {cfg.ema_decay} (the EMA weights are shipped). {m['steps']} steps
({m['train_pairs_seen']:,} pairs, {m['epochs']:.1f} epochs), {m['train_minutes']:.1f} min of training wall time on one CPU
thread (2-core machine shared with other trainings). Final training figures (mean of the last
{cfg.log_every} steps): loss {tl.get('loss', float('nan')):.4f}, in-batch image-to-text accuracy
{100 * tl.get('i2t_acc', float('nan')):.1f}%, right caption beats its hard negative
{100 * tl.get('neg_win', float('nan')):.1f}%, logit scale {tl.get('scale', float('nan')):.1f}."""),
        evaluation=Section("Evaluation (the shipped fp16 folder, reloaded through `load_clip`)", f"""{e['pairs']} held-out scenes.

{table(("metric", "value"), [
    (f"image-to-text top-1 within batches of {r['group']} (chance {100 / r['group']:.0f}%)",
     f"**{100 * r['image_to_text_top1']:.1f}%**"),
    (f"text-to-image top-1 within batches of {r['group']}", f"{100 * r['text_to_image_top1']:.1f}%"),
    ("CLIP score, matched captions", f"**{e['clip_score_matched']:.2f}** (std {e['matched_std']:.2f})"),
    ("CLIP score, shuffled captions (another scene's caption)",
     f"**{e['clip_score_shuffled']:.2f}** (std {e['shuffled_std']:.2f})"),
    ("matched > shuffled, per image", f"{100 * e['matched_beats_shuffled']:.1f}%")])}

Attribute sensitivity: the CLIP score of each image with its right caption vs the same caption with one
attribute made wrong (`train_clip.swap_attribute`: one object's colour / shape / size / place changed, the
background changed, or two objects' colours exchanged; the wrong captions are drawn independently of the
training negatives, on held-out scenes):

{attributes}"""))


def emoji_model_card(cfg: ClipTrainConfig, m: dict[str, Any], name: str) -> ModelCard:
    """Model card of a CLIP folder trained on emoji (``name``: the folder's name)."""
    from arvis.data.sources import data_recipe

    e, v = m["heldout"], m["heldout_views"]
    r = e["retrieval"]
    tl = m["final_train"]
    n_tok = cfg.image_size // cfg.patch_size
    return ModelCard(
        title=f"{name}: arvis's small CLIP for emoji",
        summary="""An open_clip `CLIP` (open_clip's own ViT image tower and causal text transformer; state dict in open_clip's
layout) trained by `arvis.training.train_clip --data emoji` on OpenMoji emoji and their Unicode-name captions
("red apple", "an emoji of a red apple", "a fruit emoji: red apple"). It scores emoji images against captions:
`arvis clip-score --clip-model clip-emoji`, or `arvis.eval.clip_score.load_clip("clip-emoji")`. Scores are only
meaningful for OpenMoji-style emoji and their names; they are not comparable with OpenAI/LAION CLIP scores.""",
        usage="""from arvis.eval.clip_score import load_clip
scorer = load_clip("clip-emoji")                 # this folder; fp16 file, fp32 model
result = scorer.score(images_uint8, captions)     # 100 * cosine per pair, mean""",
        architecture=Section("Architecture (`open_clip_config.json`)", f"""Image tower: ViT, {cfg.image_size} px input, patch {cfg.patch_size} ({n_tok}x{n_tok} tokens + class token), width
{cfg.vision_width}, {cfg.vision_layers} layers, head width {cfg.vision_head_width}. Text tower: width {cfg.text_width},
{cfg.text_layers} layers, {cfg.text_heads} heads, context length {cfg.context_length}, open_clip's `SimpleTokenizer`
(vocabulary 49408, shipped inside the open_clip wheel). Embedding dimension {cfg.embed_dim}. {m['params']:,}
parameters, of which {m['token_embedding_params']:,} are the token-embedding table; {m['safetensors_mb']:.2f} MB as
fp16 safetensors."""),
        data=Section("Data (no leakage)", data_recipe("emoji", cfg.image_size)
                     + " Each view carries one of five caption variants of its emoji's name."),
        training=Training([m["command"]], f"""{export_note(m)}Symmetric CLIP (InfoNCE) loss with a learned temperature (capped at 100), batch {cfg.batch_size}, no hard
negatives. AdamW (betas 0.9/0.98, lr {cfg.lr}, weight decay {cfg.weight_decay} on matrices, {cfg.warmup} warm-up
steps, cosine to {cfg.min_lr_ratio}x), grad-norm clip {cfg.grad_clip}, EMA {cfg.ema_decay} (the EMA weights are
shipped). {m['steps']} steps ({m['train_pairs_seen']:,} pairs, {m['epochs']:.1f} passes over the pool),
{m['train_minutes']:.1f} min of training wall time on one CPU thread (2-core machine shared with other
trainings). Final training figures (mean of the last {cfg.log_every} steps): loss {tl.get('loss', float('nan')):.4f},
in-batch image-to-text accuracy {100 * tl.get('i2t_acc', float('nan')):.1f}%, logit scale
{tl.get('scale', float('nan')):.1f}."""),
        evaluation=Section("Evaluation (the shipped fp16 folder, reloaded through `load_clip_model`)", f"""Held-out emoji only: emoji whose SVG was never rendered for training.

{table(("metric", "value"), [
    (f"caption retrieval: image-to-text top-1 over all {r['group']} held-out emoji, plain names (chance "
     f"{100 / r['group']:.2f}%)", f"**{100 * r['image_to_text_top1']:.1f}%**"),
    (f"text-to-image top-1 over the same {r['group']}", f"{100 * r['text_to_image_top1']:.1f}%"),
    ("CLIP score, matched plain names", f"**{e['clip_score_matched']:.2f}** (std {e['matched_std']:.2f})"),
    ("CLIP score, shuffled names (another held-out emoji's)",
     f"**{e['clip_score_shuffled']:.2f}** (std {e['shuffled_std']:.2f})"),
    ("matched > shuffled, per emoji", f"{100 * e['matched_beats_shuffled']:.1f}%"),
    (f"{v['pairs']} augmented held-out views with caption variants: CLIP score matched / shuffled",
     f"{v['clip_score_matched']:.2f} / {v['clip_score_shuffled']:.2f} (matched wins "
     f"{100 * v['matched_beats_shuffled']:.1f}%)")])}"""))


# ---------------------------------------------------------------------------------------------- CLI
def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m arvis.training.train_clip", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="export folder (arvis.eval.clip_score folder format)")
    p.add_argument("--scratch", default=None, help="checkpoints, log and rendered scenes (default: <out>/../.<name>-scratch)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="default")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--num-train", type=int, default=None)
    p.add_argument("--no-hard-negatives", action="store_true", help="plain CLIP loss")
    p.add_argument("--data", choices=CLIP_DATA, default="scenes",
                   help="training pairs: captioned scenes (default) or emoji (no hard negatives)")
    p.add_argument("--final-eval-size", type=int, default=None)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--export-only", action="store_true", help="export the checkpoint in --scratch without training")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """CLI entry point; returns the exported metrics."""
    args = _parse(argv)
    cfg = PRESETS[args.preset]
    overrides: dict[str, Any] = {k: v for k, v in (("steps", args.steps), ("batch_size", args.batch_size),
                                                   ("lr", args.lr), ("num_train", args.num_train),
                                                   ("final_eval_size", args.final_eval_size)) if v is not None}
    for name, value in overrides.items():
        if value <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be > 0, got {value}")
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    if args.no_hard_negatives or args.data == "emoji":
        overrides["hard_negatives"] = False
    if args.data == "emoji":
        from arvis.data.sources import EMOJI_POOL

        overrides["data"] = "emoji"
        overrides.setdefault("num_train", EMOJI_POOL)  # the cached pool of augmented training views
    cfg = dataclasses.replace(cfg, **overrides)
    out = Path(args.out)
    scratch = Path(args.scratch) if args.scratch else out.parent / f".{out.name}-scratch"
    if args.export_only:
        cfg = dataclasses.replace(cfg, steps=export_only_steps(scratch))
    command = training_command("train_clip", argv)
    model, summary = train(cfg, scratch, threads=args.threads, command="" if args.export_only else command)
    summary["command"] = recorded_command(summary["command"], out)
    metrics = export(model, cfg, out, summary, command, scratch)
    print(json.dumps({k: v for k, v in metrics.items() if k not in ("eval_history", "config")}, indent=2))
    return metrics


if __name__ == "__main__":
    main()
