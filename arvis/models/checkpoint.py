"""Official LlamaGen GPT checkpoints: load (safely), infer the configuration, export.

Official files are ``torch.save`` pickles ``{"model": state_dict, "optimizer": …, "steps": int,
"args": argparse.Namespace}`` (DeepSpeed: ``"module"``; some conversions: ``"state_dict"`` or a flat
dict). They are read with ``torch.load(weights_only=True)`` and an allowlist holding only
``argparse.Namespace`` (see :mod:`arvis.utils.serialization`). Safetensors files are read directly.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

import torch

from arvis.models.llamagen import GPT_PRESETS, LlamaGenTransformer, find_multiple
from arvis.utils.serialization import (
    check_state_dict,
    extract_state_dict,
    load_state_dict_file,
    save_pickle_checkpoint,
    save_safetensors,
)

# Buffers some official checkpoints carry that are not weights: KV caches (persistent buffers once
# ``setup_caches`` ran) and the causal mask / rotary table of older versions.
IGNORED_SUBSTRINGS = (".kv_cache.", "causal_mask", "freqs_cis")

_LAYER_RE = re.compile(r"^layers\.(\d+)\.")


def infer_llamagen_config(state_dict: dict[str, torch.Tensor], args: Any = None, preset: str | None = None,
                          block_size: int | None = None) -> dict[str, Any]:
    """Derive the :class:`LlamaGenTransformer` configuration from tensor shapes (+ training args).

    Shapes give depth, width, vocabulary, condition type, classes / caption width, condition length
    and the KV-head count; the head count comes from the preset that matches (depth, width) — or
    ``preset`` when given. The token grid is not in the weights: it comes from ``block_size``, else
    from the pickled args (``image_size // downsample_size``), else it is an error.
    """
    sd = state_dict
    if "tok_embeddings.weight" not in sd:
        raise ValueError("not a LlamaGen GPT state dict: no 'tok_embeddings.weight'")
    saved = getattr(args, "arvis_config", None)
    if isinstance(saved, dict) and preset is None and block_size is None:
        return dict(saved)  # written by export_llamagen_checkpoint; shapes are checked on load
    vocab_size, dim = sd["tok_embeddings.weight"].shape
    layer_ids = {int(m.group(1)) for k in sd if (m := _LAYER_RE.match(k))}
    n_layer = max(layer_ids) + 1 if layer_ids else 0

    if preset is not None:
        if preset not in GPT_PRESETS:
            raise ValueError(f"unknown LlamaGen preset {preset!r}; known presets: {', '.join(GPT_PRESETS)}")
        p = GPT_PRESETS[preset]
        if (p.n_layer, p.dim) != (n_layer, dim):
            raise ValueError(f"preset {preset} has {p.n_layer} layers of width {p.dim}, the checkpoint "
                             f"{n_layer} layers of width {dim}")
    else:
        arg_preset = getattr(args, "gpt_model", None)
        matches = [n for n, p in GPT_PRESETS.items() if (p.n_layer, p.dim) == (n_layer, dim)]
        if arg_preset in GPT_PRESETS:
            preset = arg_preset
        elif len(matches) == 1:
            preset = matches[0]
        else:
            raise ValueError(
                f"cannot infer the head count of a {n_layer}-layer, width-{dim} GPT from its shapes (no "
                f"official preset matches); pass preset=… or load a diffusers-style folder with config.json"
            )
    n_head = GPT_PRESETS[preset].n_head
    head_dim = dim // n_head
    qkv_rows = sd["layers.0.attention.wqkv.weight"].shape[0] if n_layer else 3 * dim
    n_kv_head = (qkv_rows // head_dim - n_head) // 2
    hidden = sd["layers.0.feed_forward.w1.weight"].shape[0] if n_layer else 0
    if n_layer and hidden != find_multiple(int(2 * 4 * dim / 3), 256):
        raise ValueError(f"FFN width {hidden} is not the official one for width {dim}; "
                         f"load this model from a folder with its config.json")

    config: dict[str, Any] = dict(n_layer=n_layer, n_head=n_head, dim=dim, vocab_size=int(vocab_size),
                                  n_kv_head=None if n_kv_head == n_head else int(n_kv_head))
    if "cls_embedding.embedding_table.weight" in sd:
        config["model_type"] = "c2i"
        rows = sd["cls_embedding.embedding_table.weight"].shape[0]
        dropout = getattr(args, "class_dropout_prob", 0.1)
        config["class_dropout_prob"] = dropout
        config["num_classes"] = int(rows - (1 if dropout > 0 else 0))
        config["cls_token_num"] = 1
    elif "cls_embedding.cap_proj.fc1.weight" in sd:
        config["model_type"] = "t2i"
        config["caption_dim"] = int(sd["cls_embedding.cap_proj.fc1.weight"].shape[1])
        config["cls_token_num"] = int(sd["cls_embedding.uncond_embedding"].shape[0])
    else:
        raise ValueError("not a LlamaGen GPT state dict: no cls_embedding weights")

    if block_size is None and args is not None and hasattr(args, "image_size") and hasattr(args, "downsample_size"):
        block_size = (int(args.image_size) // int(args.downsample_size)) ** 2
    if block_size is None:
        raise ValueError("block_size (tokens per image, e.g. 256 for 256px with VQ-16, 576 for 384px) is not "
                         "stored in the weights and the checkpoint has no training args; pass block_size=…")
    config["block_size"] = int(block_size)
    return config


def load_llamagen_checkpoint(path: str | os.PathLike, preset: str | None = None, block_size: int | None = None,
                             key: str = "auto", dtype: torch.dtype | None = None) -> LlamaGenTransformer:
    """Load an official LlamaGen GPT checkpoint (``.pt``/``.pth`` or ``.safetensors``).

    Args:
        path: the checkpoint file.
        preset: ``GPT-B`` … ``GPT-7B``; inferred from shapes when omitted.
        block_size: tokens per image; inferred from the pickled args when omitted.
        key: where the weights sit in a pickle (``auto``, ``model``, ``ema``, ``module``, ``state_dict``).
        dtype: cast the model to this dtype after loading.

    Raises:
        ValueError: unreadable/unsafe file, unknown layout, or missing / unexpected / mis-shaped keys.
    """
    obj = load_state_dict_file(path)
    state_dict, args = extract_state_dict(obj, key, source=str(path))
    if args is None and Path(path).suffix == ".safetensors":
        args = _safetensors_args(path)
    config = infer_llamagen_config(state_dict, args, preset=preset, block_size=block_size)
    with torch.device("meta"):
        model = LlamaGenTransformer(**config)
    check_state_dict(model, state_dict, source=str(path), ignore_substrings=IGNORED_SUBSTRINGS)
    weights = {k: v for k, v in state_dict.items() if not any(s in k for s in IGNORED_SUBSTRINGS)}
    model.load_state_dict(weights, strict=True, assign=True)
    model.eval()
    if dtype is not None:
        model.to(dtype)
    return model


def _safetensors_args(path: str | os.PathLike) -> argparse.Namespace | None:
    """The configuration arvis stores in a safetensors header, as if it were pickled args."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    if "arvis_config" not in meta:
        return None
    return argparse.Namespace(arvis_config=json.loads(meta["arvis_config"]))


def export_llamagen_checkpoint(model: LlamaGenTransformer, path: str | os.PathLike, key: str = "model",
                               image_size: int | None = None, downsample_size: int = 16) -> None:
    """Write ``model`` in the official layout.

    ``.pt``/``.pth``: ``{key: state_dict, "steps": 0, "args": Namespace(gpt_model, gpt_type, image_size,
    downsample_size, vocab_size, cls_token_num, …)}`` — what LlamaGen's training scripts save.
    ``.safetensors``: the flat state dict. Keys are exactly the official ones; nothing else is written.
    """
    path = Path(path)
    cfg = model.config
    state_dict = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if path.suffix == ".safetensors":
        config = {k: v for k, v in cfg.items() if not k.startswith("_")}
        save_safetensors(state_dict, path, metadata={"format": "pt", "arvis_config": json.dumps(config)})
        return
    if path.suffix not in (".pt", ".pth"):
        raise ValueError(f"path must end in .pt, .pth or .safetensors, got {path.name!r}")
    preset = next((n for n, p in GPT_PRESETS.items()
                   if (p.n_layer, p.n_head, p.dim) == (cfg.n_layer, cfg.n_head, cfg.dim)), None)
    grid = model.layout.grid[0]
    args = argparse.Namespace(
        gpt_model=preset, gpt_type=cfg.model_type, vocab_size=cfg.vocab_size, cls_token_num=cfg.cls_token_num,
        num_classes=cfg.num_classes, class_dropout_prob=cfg.class_dropout_prob,
        image_size=image_size if image_size is not None else grid * downsample_size,
        downsample_size=downsample_size,
        # The full configuration, so that non-preset models (e.g. arvis's small shipped ones) reload
        # exactly; official loaders ignore unknown args.
        arvis_config={k: v for k, v in cfg.items() if not k.startswith("_")},
    )
    save_pickle_checkpoint({key: state_dict, "steps": 0, "args": args}, path)
