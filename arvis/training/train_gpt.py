"""Train arvis's shipped LlamaGen-architecture GPTs on VQ codes of the offline data.

Presets (``--preset``):

- ``c2i``: the class-conditional model (the default of ``arvis generate``): photo crops labelled by
  source photo (:mod:`arvis.data.crops`), 22 classes + the null class for CFG; with ``--data emoji`` the
  OpenMoji emoji of :mod:`arvis.data.emoji` (52 classes, validation on held-out emoji);
- ``draft``: a much smaller class-conditional GPT on the same data (draft-model speculative decoding);
- ``lowres``: a small class-conditional GPT on the same crops at 64 px, an 8x8 grid of the same VQ codes
  (the low-resolution drafter of multi-scale local drafting, :mod:`arvis.drafting.multiscale`);
- ``t2i``: the caption-conditioned model (LlamaGen's t2i layout: caption features through
  ``cls_embedding.cap_proj``, an unconditional embedding, left padding + embedding mask) trained jointly
  with a small word-level text encoder (:class:`arvis.models.text_encoder.WordTextEncoder`) on the
  captioned scenes of :mod:`arvis.data.scenes`;
- ``smoke``: a tiny config that runs a few steps in seconds (the CI test).

Images are tokenised once by the shipped VQ tokenizer (cached in the scratch folder). Training is
teacher-forced cross-entropy with LlamaGen's condition dropout for CFG, AdamW, cosine schedule and an
EMA of the weights; the better of the raw and EMA weights on held-out validation loss is exported
in fp16 safetensors. Checkpoints are atomic; a rerun with the
same ``--scratch`` resumes. Example::

    python -m arvis.training.train_gpt --preset c2i --out arvis/weights/llamagen-c2i-transformer \\
        --scratch runs/gpt-c2i --threads 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from arvis.data.sources import DATA_CHOICES, EMOJI_POOL, check_data, class_names, labelled_images
from arvis.models.llamagen import LlamaGenTransformer
from arvis.models.protocol import Condition
from arvis.models.text_encoder import WordTextEncoder
from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
from arvis.training.common import (
    EMA,
    dumps,
    export_modules,
    portable_command,
    setup_logging,
    training_command,
)
from arvis.training.loop import LoopSettings, TrainingLoop


@dataclass(frozen=True)
class GPTTrainConfig:
    kind: str = "c2i"  # "c2i" or "t2i"
    data: str = "photos"  # arvis.data.sources: "photos", "emoji" or "emoji-names" (class-conditional only)
    augment: bool = True  # emoji: training views zoomed and shifted (validation views always are)
    dim: int = 256
    n_layer: int = 6
    n_head: int = 4
    multiple_of: int = 64
    dropout: float = 0.1  # LlamaGen's token / residual / FFN dropout
    class_dropout: float = 0.1  # condition dropout for classifier-free guidance
    steps: int = 2000
    batch_size: int = 32
    lr: float = 6e-4
    warmup: int = 100
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    ema_decay: float = 0.999
    num_train: int = 30000
    num_val: int = 1000
    data_seed: int = 0
    resolution: int = 128
    text_dim: int = 128
    text_layers: int = 2
    caption_length: int = 32
    log_every: int = 25
    eval_every: int = 250
    checkpoint_every: int = 50

    def __post_init__(self) -> None:
        if self.kind not in ("c2i", "t2i"):
            raise ValueError(f"kind must be 'c2i' or 't2i', got {self.kind!r}")
        check_data(self.data)
        if self.kind == "t2i" and self.data != "photos":
            raise ValueError("data: the t2i presets train on the captioned scenes; emoji captions are the Emu3 "
                             "trainer's (arvis.training.train_emu3)")
        if not self.augment and self.data == "photos":
            raise ValueError("augment: photo crops are random crops by nature; only emoji views can be unaugmented")
        for name in ("dropout", "class_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        for name in ("dim", "n_layer", "n_head", "steps", "batch_size", "num_train", "num_val"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")


PRESETS: dict[str, GPTTrainConfig] = {
    "c2i": GPTTrainConfig(),
    "draft": GPTTrainConfig(dim=128, n_layer=2, n_head=2, steps=1500),
    "lowres": GPTTrainConfig(dim=192, n_layer=3, n_head=3, resolution=64, steps=2000),
    "t2i": GPTTrainConfig(kind="t2i"),
    "smoke": GPTTrainConfig(dim=32, n_layer=1, n_head=2, steps=3, batch_size=4, num_train=8, num_val=4,
                            log_every=1, eval_every=3, checkpoint_every=2, text_dim=16, text_layers=1),
    "smoke-t2i": GPTTrainConfig(kind="t2i", dim=32, n_layer=1, n_head=2, steps=3, batch_size=4, num_train=8,
                                num_val=4, log_every=1, eval_every=3, checkpoint_every=2, text_dim=16, text_layers=1),
}


# ----------------------------------------------------------------------------- data
def encode_codes(vq: LlamaGenVQModel, images: np.ndarray, batch: int = 64) -> np.ndarray:
    """VQ codes ``[n, h*w]`` int16 of ``uint8 [n, R, R, 3]`` images (batched, no gradients)."""
    codes = []
    with torch.no_grad():
        for i in tqdm(range(0, len(images), batch), desc="tokenising", unit="batch", disable=len(images) < 256):
            x = torch.from_numpy(images[i:i + batch]).permute(0, 3, 1, 2).float() / 127.5 - 1.0
            codes.append(vq.encode(x).reshape(len(x), -1).to(torch.int16).numpy())
    return np.concatenate(codes)


def build_dataset(cfg: GPTTrainConfig, vq: LlamaGenVQModel, scratch: Path, split: str, n: int) -> dict[str, np.ndarray]:
    """Codes ``[n, 256]`` plus labels (c2i) or captions (t2i), cached in ``scratch``."""
    augment = cfg.augment or split != "train"
    exact = "" if augment else "-unaugmented"
    path = scratch / f"data-{cfg.kind}-{cfg.data}-{split}-{n}-{cfg.data_seed}-{cfg.resolution}{exact}.npz"
    if path.exists():
        data = dict(np.load(path, allow_pickle=False))
        return data
    seed = cfg.data_seed if split == "train" else cfg.data_seed + 1
    if cfg.kind == "c2i":
        images, labels, _ = labelled_images(cfg.data, n, split, cfg.resolution, seed, augment=augment)
        data = {"codes": encode_codes(vq, images), "labels": labels.astype(np.int64)}
    else:
        from arvis.data.scenes import build_scenes

        images, captions, _ = build_scenes(n, split, cfg.resolution, seed=seed)
        data = {"codes": encode_codes(vq, images), "captions": np.array(captions)}
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **data)
    tmp.replace(path)
    return data


# ----------------------------------------------------------------------------- models
def build_models(cfg: GPTTrainConfig, vocab_size: int, grid: int) -> tuple[LlamaGenTransformer, WordTextEncoder | None]:
    from arvis.data.scenes import VOCABULARY

    common = dict(dim=cfg.dim, n_layer=cfg.n_layer, n_head=cfg.n_head, multiple_of=cfg.multiple_of,
                  vocab_size=vocab_size, block_size=grid * grid, token_dropout_p=cfg.dropout,
                  resid_dropout_p=cfg.dropout, ffn_dropout_p=cfg.dropout, class_dropout_prob=cfg.class_dropout)
    g = torch.Generator().manual_seed(cfg.data_seed)
    if cfg.kind == "c2i":
        names = class_names(cfg.data)
        model = LlamaGenTransformer(model_type="c2i", num_classes=len(names), class_names=list(names), **common)
        text = None
    else:
        model = LlamaGenTransformer(model_type="t2i", caption_dim=cfg.text_dim, cls_token_num=cfg.caption_length,
                                    **common)
        # nn.Module default initialisation draws from the global RNG: seed it for this build only, so that the
        # same command trains the same text encoder (it was unseeded before, the shipped t2i model included).
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.data_seed)
            text = WordTextEncoder(vocabulary=list(VOCABULARY[1:]), dim=cfg.text_dim, num_layers=cfg.text_layers,
                                   num_heads=max(1, cfg.text_dim // 32), max_length=cfg.caption_length)
    model.init_weights(g)
    return model, text


def condition_for(cfg: GPTTrainConfig, text: WordTextEncoder | None, batch: dict[str, Any]) -> Condition:
    if cfg.kind == "c2i":
        return Condition(class_labels=batch["labels"])
    emb = text(batch["ids"], batch["mask"])
    return Condition(embeddings=emb, mask=batch["mask"])


def make_batch(cfg: GPTTrainConfig, data: dict[str, np.ndarray], index: np.ndarray,
               text: WordTextEncoder | None) -> dict[str, torch.Tensor]:
    batch = {"tokens": torch.from_numpy(data["codes"][index].astype(np.int64))}
    if cfg.kind == "c2i":
        batch["labels"] = torch.from_numpy(data["labels"][index])
    else:
        ids, mask = text.tokenize([str(c) for c in data["captions"][index]], cfg.caption_length)
        batch["ids"], batch["mask"] = ids, mask
    return batch


def loss_on(cfg, model, text, batch, drop: torch.Tensor | None) -> torch.Tensor:
    logits = model(batch["tokens"], condition_for(cfg, text, batch), drop_condition=drop)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["tokens"].reshape(-1))


@torch.no_grad()
def validation_loss(cfg, model, text, data, batch_size: int = 64) -> float:
    model.eval()
    if text is not None:
        text.eval()
    total, count = 0.0, 0
    for i in range(0, len(data["codes"]), batch_size):
        index = np.arange(i, min(i + batch_size, len(data["codes"])))
        batch = make_batch(cfg, data, index, text)
        total += float(loss_on(cfg, model, text, batch, None)) * len(index)
        count += len(index)
    model.train()
    if text is not None:
        text.train()
    return total / max(count, 1)


def warm_start(model: torch.nn.Module, text: WordTextEncoder | None, folder: Path) -> None:
    """Copy the weights of a saved class-conditional transformer folder into ``model``: same parameter names and
    shapes and the same class names, or an error. The folder's class need not be ``model``'s: a LlamaGen c2i
    transformer warm-starts a :class:`~arvis.models.video.VideoTransformer` of its width and depth (they share
    their blocks; only the rotary positions differ, and training adapts to them)."""
    from safetensors.torch import load_file

    if text is not None:
        raise ValueError("--init-from: warm starts are for class-conditional presets (a t2i model has a text "
                         "encoder too)")
    weights = folder / "diffusion_pytorch_model.safetensors"
    if not (folder / "config.json").is_file() or not weights.is_file():
        raise FileNotFoundError(f"--init-from: {folder} is not a transformer folder (no config.json and "
                                f"{weights.name})")
    saved_config = json.loads((folder / "config.json").read_text())
    ours, theirs = list(model.config.class_names or []), list(saved_config.get("class_names") or [])
    if ours != theirs:
        raise ValueError(f"--init-from: {folder} was trained on other classes ({len(theirs)} names, "
                         f"this run has {len(ours)})")
    saved = {k: v.float() for k, v in load_file(weights).items()}
    try:
        model.load_state_dict(saved)
    except RuntimeError as err:  # names or shapes differ: another width, depth or vocabulary
        raise ValueError(f"--init-from: {folder} has another architecture than this run's config: {err}") from None


# ----------------------------------------------------------------------------- training
def train(cfg: GPTTrainConfig, vq_path: str, scratch: Path, threads: int = 1,
          dataset_fn: Callable[..., dict[str, np.ndarray]] | None = None,
          models_fn: Callable[..., tuple[Any, Any]] | None = None, init_from: Path | None = None) -> dict[str, Any]:
    """Train (or resume) a GPT; ``dataset_fn`` / ``models_fn`` replace :func:`build_dataset` / :func:`build_models`
    (same signatures: other model families reuse this loop, e.g. :mod:`arvis.training.train_video`).
    ``init_from`` (a c2i transformer folder) warm-starts a new run from its weights with a fresh optimiser and
    schedule; a run that resumes from its checkpoint ignores it (the checkpoint already holds those weights)."""
    torch.set_num_threads(threads)
    scratch.mkdir(parents=True, exist_ok=True)
    log = setup_logging(scratch / "train.log", f"train_gpt.{cfg.kind}")
    vq = LlamaGenVQModel.from_pretrained(vq_path, dtype=torch.float32).eval()
    grid = cfg.resolution // vq.downsample_factor
    train_data = (dataset_fn or build_dataset)(cfg, vq, scratch, "train", cfg.num_train)
    val_data = (dataset_fn or build_dataset)(cfg, vq, scratch, "heldout", cfg.num_val)
    model, text = (models_fn or build_models)(cfg, vq.codebook_size, grid)
    ckpt = scratch / "checkpoint.pt"
    if init_from is not None and not ckpt.exists():
        warm_start(model, text, init_from)
        log.info(f"warm start from the weights in {init_from}")
    params = list(model.parameters()) + (list(text.parameters()) if text is not None else [])
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    ema_tensors = lambda: [t for m in (model, text) if m is not None for t in m.state_dict().values()  # noqa: E731
                           if t.is_floating_point()]
    ema = EMA(ema_tensors(), cfg.ema_decay)
    rng = np.random.default_rng([cfg.data_seed, 7, 0])  # the stream a run from step 0 always had
    gen = torch.Generator()  # condition dropout
    init_record = portable_command(str(init_from)) if init_from else None

    def loss_fn(step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        index = rng.integers(0, len(train_data["codes"]), cfg.batch_size)
        batch = make_batch(cfg, train_data, index, text)
        drop = torch.rand(cfg.batch_size, generator=gen) < cfg.class_dropout
        return loss_on(cfg, model, text, batch, drop), {}

    parts = torch.nn.ModuleDict({"transformer": model, **({"text": text} if text is not None else {})})
    loop = TrainingLoop(f"train {cfg.kind}", LoopSettings.of(cfg), cfg,
                        ("steps", "eval_every", "checkpoint_every", "log_every"), ckpt, parts, opt, params, ema,
                        ema_tensors, rng, loss_fn, log, history="loss",
                        eval_fn=lambda step: {"val_loss": validation_loss(cfg, model, text, val_data)},
                        checkpoint_extra=lambda: {"init_from": init_record or ""}, generators=[gen])
    ck = loop.resume()
    if ck is not None:
        init_record = ck.get("init_from") or None
    else:
        n_params = sum(p.numel() for p in model.parameters())
        log.info(f"new run: {n_params} GPT parameters, config {dumps(dataclasses.asdict(cfg))}")
    gen.manual_seed(cfg.data_seed * 1000 + loop.step)
    model.train()
    if text is not None:
        text.train()
    torch.manual_seed(cfg.data_seed + loop.step)  # nn.Dropout draws from the global RNG (training script)
    loop.run()
    state = {"step": loop.step, "seconds": loop.elapsed, "history": loop.records, "init_from": init_record}
    return finish(cfg, model, text, ema, ema_tensors, val_data, vq, state, log)


def finish(cfg: GPTTrainConfig, model: LlamaGenTransformer, text: WordTextEncoder | None, ema: EMA,
           ema_tensors: Callable[[], list[torch.Tensor]], val_data: dict[str, np.ndarray], vq: LlamaGenVQModel,
           state: dict[str, Any], log: logging.Logger) -> dict[str, Any]:
    """Keep the better of the raw and the EMA weights by held-out loss (a short run's EMA can lag)."""
    raw_val = validation_loss(cfg, model, text, val_data)
    raw = [t.clone() for t in ema_tensors()]
    ema.copy_to(ema_tensors())
    ema_val = validation_loss(cfg, model, text, val_data)
    use_ema = ema_val <= raw_val
    if not use_ema:
        for dst, src in zip(ema_tensors(), raw, strict=True):
            dst.copy_(src)
    log.info(f"done: {state['step']} steps, {state['seconds'] / 3600:.2f} h, validation loss raw {raw_val:.4f}, "
             f"EMA {ema_val:.4f}; exporting the {'EMA' if use_ema else 'raw'} weights")
    model.eval()
    return {"model": model, "text": text, "vq": vq, "state": state, "val_loss": min(raw_val, ema_val),
            "raw_val_loss": raw_val, "ema_only_val_loss": ema_val, "exported_weights": "ema" if use_ema else "raw"}


def export(result: dict[str, Any], cfg: GPTTrainConfig, out: Path, command: str) -> dict[str, Any]:
    """fp16 safetensors folders: ``out/transformer`` (+ ``out/text_encoder``), metrics and the command."""
    out.mkdir(parents=True, exist_ok=True)
    metrics = {
        "preset_config": dataclasses.asdict(cfg),
        "params": sum(p.numel() for p in result["model"].parameters()),
        "text_encoder_params": sum(p.numel() for p in result["text"].parameters()) if result["text"] else 0,
        "steps": result["state"]["step"],
        "train_hours": result["state"]["seconds"] / 3600,
        "final_train_loss": result["state"]["history"][-1]["loss"] if result["state"]["history"] else None,
        "validation_loss": result["val_loss"],
        "validation_loss_raw": result["raw_val_loss"],
        "validation_loss_ema": result["ema_only_val_loss"],
        "exported_weights": result["exported_weights"],
        "validation_perplexity": math.exp(result["val_loss"]),
        "history": result["state"]["history"],
        "command": command,
        "init_from": result["state"].get("init_from"),  # the warm start's folder, as given
    }
    export_modules(out, {"transformer": result["model"], "text_encoder": result["text"]}, metrics)
    return metrics


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m arvis.training.train_gpt", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="c2i")
    p.add_argument("--out", required=True, help="export folder (gets transformer/ and text_encoder/)")
    p.add_argument("--scratch", required=True, help="checkpoints, logs and the tokenised data cache")
    p.add_argument("--vq", default="arvis/weights/vq-photos", help="the VQ tokenizer folder")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--num-train", type=int, default=None,
                   help=f"training images (default: the preset's; with --data emoji the {EMOJI_POOL}-view pool)")
    p.add_argument("--data", choices=DATA_CHOICES, default="photos", help="class-conditional training data")
    p.add_argument("--dim", type=int, default=None, help="model width (default: the preset's)")
    p.add_argument("--n-layer", type=int, default=None)
    p.add_argument("--n-head", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--dropout", type=float, default=None,
                   help="token / residual / FFN dropout (default: the preset's, LlamaGen's 0.1)")
    p.add_argument("--num-val", type=int, default=None)
    p.add_argument("--eval-every", type=int, default=None)
    p.add_argument("--no-augment", action="store_true",
                   help="emoji: unaugmented training views (each emoji as drawn; validation views stay augmented)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--init-from", type=Path, default=None,
                   help="c2i: start from the weights of this transformer folder (fresh optimiser and schedule)")
    args = p.parse_args(argv)
    cfg = PRESETS[args.preset]
    # Options named like the config's fields override the preset when given.
    overrides = {k: getattr(args, k) for k in ("steps", "batch_size", "num_train", "dim", "n_layer", "n_head", "lr",
                                               "dropout", "num_val", "eval_every") if getattr(args, k) is not None}
    overrides["data"] = args.data
    if args.no_augment:
        overrides["augment"] = False
    if args.data == "emoji" and args.num_train is None:
        from arvis.data import sources

        overrides["num_train"] = sources.EMOJI_POOL  # the cached pool of augmented training views
    cfg = dataclasses.replace(cfg, **overrides)
    command = training_command("train_gpt", argv)
    result = train(cfg, args.vq, Path(args.scratch), args.threads, init_from=args.init_from)
    metrics = export(result, cfg, Path(args.out), command)
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}, indent=2))
    return metrics


if __name__ == "__main__":
    main()
