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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from arvis.errors import CheckpointError, ConfigError
from arvis.models.llamagen import GPT_PRESETS, LLAMAGEN_CONFIG_BOUNDS, LlamaGenTransformer, find_multiple
from arvis.utils.config_check import Bound, check_config
from arvis.utils.serialization import (
    check_state_dict,
    check_tensor_values,
    extract_state_dict,
    load_state_dict_file,
    read_safetensors_header,
    save_pickle_checkpoint,
    save_safetensors,
    to_common_dtype,
)

# Buffers some official checkpoints carry that are not weights: KV caches (persistent buffers once
# ``setup_caches`` ran) and the causal mask / rotary table of older versions.
IGNORED_SUBSTRINGS = (".kv_cache.", "causal_mask", "freqs_cis")

_LAYER_RE = re.compile(r"^layers\.(\d+)\.")

# The fields of LlamaGen's pickled training args (argparse.Namespace) that inference reads; the other
# fields (learning rate, paths…) are not looked at. ``n_head`` / ``n_kv_head`` are not official
# arguments, but fine-tuned or custom-size models record them there.
ARGS_BOUNDS: dict[str, Bound] = {
    "gpt_model": Bound.text(64, optional=True),
    "image_size": Bound.integer(1, 1 << 16),
    "downsample_size": Bound.integer(1, 1 << 10),
    "class_dropout_prob": LLAMAGEN_CONFIG_BOUNDS["class_dropout_prob"],
    "n_head": LLAMAGEN_CONFIG_BOUNDS["n_head"],
}


def _args_dict(args: Any, source: str) -> dict[str, Any]:
    """The pickled training args as a dict (``argparse.Namespace`` or a plain dict; ``None`` → ``{}``)."""
    if args is None:
        return {}
    if isinstance(args, argparse.Namespace):
        return vars(args)
    if isinstance(args, Mapping):
        return dict(args)
    raise CheckpointError(f"{source}: 'args' is a {type(args).__name__}; expected the training arguments "
                          f"(argparse.Namespace or dict)")


def _head_count(n_layer: int, dim: int, args: dict[str, Any], preset: str | None, n_head: int | None,
                source: str) -> int:
    """The head count: ``n_head`` / ``preset`` given by the caller, else the args' ``n_head``, else the
    args' ``gpt_model`` preset, else the one official preset with these (depth, width)."""
    def preset_fits(name: str) -> bool:
        return (GPT_PRESETS[name].n_layer, GPT_PRESETS[name].dim) == (n_layer, dim)

    if n_head is not None:
        check_config({"n_head": n_head}, LLAMAGEN_CONFIG_BOUNDS, source="n_head argument")
        return n_head
    if preset is not None:
        if preset not in GPT_PRESETS:
            raise ValueError(f"unknown LlamaGen preset {preset!r}; known presets: {', '.join(GPT_PRESETS)}")
        if not preset_fits(preset):
            p = GPT_PRESETS[preset]
            raise ConfigError(f"{source}: preset {preset} has {p.n_layer} layers of width {p.dim}, the checkpoint "
                              f"{n_layer} layers of width {dim}")
        return GPT_PRESETS[preset].n_head
    if args.get("n_head") is not None:
        return int(args["n_head"])
    arg_preset = args.get("gpt_model")
    if arg_preset in GPT_PRESETS:
        if not preset_fits(arg_preset):
            p = GPT_PRESETS[arg_preset]
            raise ConfigError(f"{source}: its training args say gpt_model={arg_preset} ({p.n_layer} layers of width "
                              f"{p.dim}) but the weights have {n_layer} layers of width {dim}; pass n_head=…")
        return GPT_PRESETS[arg_preset].n_head
    matches = [name for name in GPT_PRESETS if preset_fits(name)]
    if len(matches) == 1:
        return GPT_PRESETS[matches[0]].n_head
    raise ConfigError(
        f"{source}: cannot infer the head count of a {n_layer}-layer, width-{dim} GPT: no official preset has this "
        f"shape and its training args record neither n_head nor gpt_model; pass n_head=… (or load a "
        f"diffusers-style folder with its config.json)"
    )


def _rows(sd: Mapping[str, torch.Tensor], key: str, source: str) -> int:
    """Rows of a 2-D weight the configuration is read from (``CheckpointError`` when absent)."""
    value = sd.get(key)
    if not isinstance(value, torch.Tensor) or value.ndim != 2:
        raise CheckpointError(f"{source}: not a LlamaGen GPT state dict: no 2-D {key!r}")
    return int(value.shape[0])


def infer_llamagen_config(state_dict: dict[str, torch.Tensor], args: Any = None, preset: str | None = None,
                          block_size: int | None = None, n_head: int | None = None,
                          source: str = "checkpoint") -> dict[str, Any]:
    """Derive the :class:`LlamaGenTransformer` configuration from tensor shapes and training args.

    Shapes give depth, width, vocabulary, condition type, classes / caption width, condition length
    and the KV-head count. The head count comes from ``n_head`` or ``preset`` when given, else from
    the args (``n_head``, or the ``gpt_model`` preset when its shape matches), else from the one
    official preset with this depth and width. The token grid is not in the weights: it comes from
    ``block_size``, else from the args (``image_size // downsample_size``). A configuration arvis
    stored in the args (``arvis_config``) is used as is. Every value is checked against
    :data:`~arvis.models.llamagen.LLAMAGEN_CONFIG_BOUNDS` before the caller builds anything.

    Raises:
        ConfigError: a value out of bounds, args that contradict the shapes, no way to know the head
            count or the grid (naming ``source`` and the field).
        CheckpointError: not a LlamaGen GPT state dict.
    """
    sd = state_dict
    emb = sd.get("tok_embeddings.weight")
    if not isinstance(emb, torch.Tensor) or emb.ndim != 2:
        raise CheckpointError(f"{source}: not a LlamaGen GPT state dict: no 2-D 'tok_embeddings.weight'")
    a = _args_dict(args, source)
    saved = a.get("arvis_config")
    if saved is not None and preset is None and block_size is None and n_head is None:
        # Written by export_llamagen_checkpoint; shapes are checked on load.
        return check_config(saved, LLAMAGEN_CONFIG_BOUNDS, source=f"{source} (args.arvis_config)")
    a = check_config(a, ARGS_BOUNDS, source=f"{source} (training args)", prefix="args.", allow_unknown=True)
    vocab_size, dim = emb.shape
    layer_ids = {int(m.group(1)) for k in sd if (m := _LAYER_RE.match(k))}
    n_layer = max(layer_ids) + 1 if layer_ids else 0
    heads = _head_count(n_layer, dim, a, preset, n_head, source)
    if dim % heads:
        raise ConfigError(f"{source}: width {dim} is not divisible by n_head={heads}")
    head_dim = dim // heads
    qkv_rows = _rows(sd, "layers.0.attention.wqkv.weight", source) if n_layer else 3 * dim
    if qkv_rows % head_dim or (qkv_rows // head_dim - heads) % 2 or qkv_rows // head_dim <= heads:
        raise ConfigError(f"{source}: layers.0.attention.wqkv.weight has {qkv_rows} rows, which no KV-head count "
                          f"gives with n_head={heads} (head width {head_dim})")
    n_kv_head = (qkv_rows // head_dim - heads) // 2
    hidden = _rows(sd, "layers.0.feed_forward.w1.weight", source) if n_layer else 0
    if n_layer and hidden != find_multiple(int(2 * 4 * dim / 3), 256):
        raise ConfigError(f"{source}: FFN width {hidden} is not the official one for width {dim}; "
                          f"load this model from a folder with its config.json")

    config: dict[str, Any] = dict(n_layer=n_layer, n_head=heads, dim=dim, vocab_size=int(vocab_size),
                                  n_kv_head=None if n_kv_head == heads else int(n_kv_head))
    if "cls_embedding.embedding_table.weight" in sd:
        config["model_type"] = "c2i"
        rows = _rows(sd, "cls_embedding.embedding_table.weight", source)
        dropout = a.get("class_dropout_prob", 0.1)
        config["class_dropout_prob"] = dropout
        config["num_classes"] = int(rows - (1 if dropout > 0 else 0))
        config["cls_token_num"] = 1
    elif "cls_embedding.cap_proj.fc1.weight" in sd and "cls_embedding.uncond_embedding" in sd:
        config["model_type"] = "t2i"
        config["caption_dim"] = int(sd["cls_embedding.cap_proj.fc1.weight"].shape[-1])
        config["cls_token_num"] = _rows(sd, "cls_embedding.uncond_embedding", source)
    else:
        raise CheckpointError(f"{source}: not a LlamaGen GPT state dict: no cls_embedding weights")

    if block_size is None and "image_size" in a and "downsample_size" in a:
        if a["image_size"] % a["downsample_size"]:
            raise ConfigError(f"{source}: args.image_size = {a['image_size']} is not a multiple of "
                              f"args.downsample_size = {a['downsample_size']}")
        block_size = (a["image_size"] // a["downsample_size"]) ** 2
        config["block_size"] = block_size
        check_config(config, LLAMAGEN_CONFIG_BOUNDS,
                     source=f"{source} (block_size from args.image_size // args.downsample_size, squared)")
    if block_size is None:
        raise ConfigError(f"{source}: block_size (tokens per image, e.g. 256 for 256px with VQ-16, 576 for 384px) is "
                          f"not stored in the weights and the checkpoint has no training args; pass block_size=…")
    config["block_size"] = block_size
    return check_config(config, LLAMAGEN_CONFIG_BOUNDS, source=source)


def load_llamagen_checkpoint(path: str | os.PathLike, preset: str | None = None, block_size: int | None = None,
                             key: str = "auto", dtype: torch.dtype | None = None,
                             n_head: int | None = None) -> LlamaGenTransformer:
    """Load an official LlamaGen GPT checkpoint (``.pt``/``.pth`` or ``.safetensors``).

    Args:
        path: the checkpoint file.
        preset: ``GPT-B`` … ``GPT-7B``; inferred from shapes when omitted.
        block_size: tokens per image; inferred from the pickled args when omitted.
        key: where the weights sit in a pickle (``auto``, ``model``, ``ema``, ``module``, ``state_dict``).
        dtype: cast the model to this dtype after loading (a file that mixes floating dtypes loads as
            float32 otherwise).
        n_head: the head count of a model that matches no preset and whose args do not record it.

    Raises:
        CheckpointError: unreadable/unsafe file, unknown layout, values that are not floating-point
            tensors, missing / unexpected / mis-shaped keys.
        ConfigError: a configuration value out of bounds or contradicting the shapes.
    """
    source = str(path)
    obj = load_state_dict_file(path)
    state_dict, args = extract_state_dict(obj, key, source=source)
    weights = {k: v for k, v in state_dict.items() if not any(s in k for s in IGNORED_SUBSTRINGS)}
    common_dtype = check_tensor_values(weights, source)
    if args is None and Path(path).suffix == ".safetensors":
        args = _safetensors_args(path)
    config = infer_llamagen_config(weights, args, preset=preset, block_size=block_size, n_head=n_head, source=source)
    try:
        with torch.device("meta"):
            model = LlamaGenTransformer(**config)
    except (ValueError, TypeError) as err:  # cross-field constraints (c2i takes one condition slot…)
        raise ConfigError(f"{source}: {err}") from None
    check_state_dict(model, weights, source=source)
    model.load_state_dict(to_common_dtype(weights, common_dtype), strict=True, assign=True)
    model.eval()
    if dtype is not None:
        model.to(dtype)
    return model


def _safetensors_args(path: str | os.PathLike) -> argparse.Namespace | None:
    """The configuration arvis stores in a safetensors header, as if it were pickled args."""
    meta = read_safetensors_header(path).metadata
    if "arvis_config" not in meta:
        return None
    try:
        return argparse.Namespace(arvis_config=json.loads(meta["arvis_config"]))
    except ValueError as err:
        raise ConfigError(f"{path}: the safetensors metadata 'arvis_config' is not JSON ({err})") from None


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
