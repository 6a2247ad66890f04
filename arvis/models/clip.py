"""The small CLIPs arvis ships (open_clip architecture) and their offline folder format.

Shipped aliases (:data:`CLIP_MODELS`): ``"clip"`` → ``arvis/weights/clip-scenes`` (captioned shape scenes),
``"clip-emoji"`` → ``arvis/weights/clip-emoji`` (OpenMoji emoji and their Unicode-name captions). Other sources,
nothing downloaded: a folder in open_clip's own local format (read with ``open_clip``'s ``local-dir:`` schema)::

    clip-scenes/
        open_clip_config.json       # {"model_cfg": {embed_dim, vision_cfg, text_cfg, ...},
                                    #  "preprocess_cfg": {mean, std, interpolation, resize_mode, ...}}
        open_clip_model.safetensors # the CLIP state dict

with open_clip's ``SimpleTokenizer`` (its BPE vocabulary ships inside the open_clip wheel, so it works
offline; ``text_cfg.vocab_size`` must then be 49408); an official architecture name plus a local weights file
(``load_clip_model("ViT-B-32", weights="/path/open_clip_pytorch_model.bin")``: open_clip reads ``.bin``/``.pt``
with ``torch.load(weights_only=True)``, ``.safetensors`` with safetensors); or a ``model_cfg`` dict plus a
weights file.

CLIP *score* (and the atomic folder writer) live in :mod:`arvis.eval.clip_score`; training builds and saves
through this module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from arvis.errors import CheckpointError, ConfigError
from arvis.utils.config_check import Bound, check_config, expected_shapes
from arvis.utils.files import read_json_object
from arvis.utils.paths import WEIGHTS_DIR, display_path
from arvis.utils.serialization import compare_shapes, read_safetensors_header

#: Shipped CLIPs: alias -> folder under arvis/weights.
CLIP_MODELS = {"clip": "clip-scenes", "clip-emoji": "clip-emoji"}
CLIP_ALIAS = "clip"
CLIP_DIR = WEIGHTS_DIR / CLIP_MODELS[CLIP_ALIAS]
CONFIG_FILE = "open_clip_config.json"
WEIGHTS_FILE = "open_clip_model.safetensors"
SIMPLE_TOKENIZER_VOCAB = 49408


# What an open_clip ``model_cfg`` may hold (arvis.utils.config_check), checked before open_clip
# allocates anything. Sizes are bounded generously (ViT-bigG: width 1664, 48 layers); the other
# fields of open_clip's CLIPVisionCfg / CLIPTextCfg are accepted as they come (they select options,
# they do not size tensors).
_ANY = Bound("any")
_WIDTH = Bound.integer(1, 16384)
_LAYERS = Bound.integer(1, 256)
_HEADS = Bound.integer(1, 256)
_RATIO = Bound.number(0.0, 64.0, open_low=True)
_CLIP_VISION_BOUNDS = {
    "layers": _LAYERS, "width": _WIDTH, "head_width": _WIDTH, "mlp_ratio": _RATIO,
    "patch_size": Bound.integer(1, 4096), "image_size": Bound.integer(1, 8192),
    "attn_pooler_queries": Bound.integer(1, 4096), "attn_pooler_heads": _HEADS,
    **{k: _ANY for k in ("ls_init_value", "patch_dropout", "attentional_pool", "no_ln_pre", "pos_embed_type",
                         "final_ln_after_pool", "pool_type", "output_tokens", "act_kwargs", "norm_kwargs",
                         "block_type", "qk_norm", "scaled_cosine_attn", "scale_heads", "scale_attn_inner",
                         "scale_attn", "scale_fc", "timm_model_name", "timm_model_pretrained", "timm_pool",
                         "timm_proj", "timm_proj_bias", "timm_drop", "timm_drop_path")},
}
_CLIP_TEXT_BOUNDS = {
    "context_length": Bound.integer(1, 65536), "vocab_size": Bound.integer(2, 1 << 20), "width": _WIDTH,
    "heads": _HEADS, "layers": _LAYERS, "mlp_ratio": _RATIO,
    **{k: _ANY for k in ("hf_tokenizer_name", "tokenizer_mode", "tokenizer_kwargs", "ls_init_value", "embed_cls",
                         "pad_id", "eos_id", "no_causal_mask", "final_ln_after_pool", "pool_type", "proj_bias",
                         "proj_type", "output_tokens", "act_kwargs", "norm_kwargs", "block_type", "qk_norm",
                         "scaled_cosine_attn", "scale_heads", "scale_attn_inner", "scale_attn", "scale_fc",
                         "hf_model_name", "hf_model_pretrained", "hf_proj_type", "hf_pooler_type")},
}
CLIP_CONFIG_BOUNDS: dict[str, Bound] = {
    "embed_dim": _WIDTH,
    "vision_cfg": Bound.mapping(_CLIP_VISION_BOUNDS),
    "text_cfg": Bound.mapping(_CLIP_TEXT_BOUNDS),
    "quick_gelu": Bound.boolean(),
    "init_logit_scale": Bound.number(-1e3, 1e3),
    "init_logit_bias": Bound.number(-1e3, 1e3, optional=True),
    "nonscalar_logit_scale": Bound.boolean(),
    "custom_text": Bound.boolean(),
}
# open_clip's PreprocessCfg: what an image becomes before the vision tower (its size must be the tower's).
_CLIP_PREPROCESS_BOUNDS = {
    "size": _CLIP_VISION_BOUNDS["image_size"],
    "mode": Bound.choice("RGB"),
    "mean": Bound.numbers(-10.0, 10.0, max_items=3, min_items=3),
    "std": Bound.numbers(0.0, 10.0, max_items=3, min_items=3, open_low=True),
    "interpolation": Bound.choice("bicubic", "bilinear", "random"),
    "resize_mode": Bound.choice("shortest", "longest", "squash"),
    "fill_color": Bound.integer(0, 255),
}
#: The whole of a CLIP folder's open_clip_config.json (``model_cfg``: :data:`CLIP_CONFIG_BOUNDS`, checked with the weights).
CLIP_FILE_BOUNDS: dict[str, Bound] = {
    "model_cfg": Bound("any"),
    "preprocess_cfg": Bound.mapping(_CLIP_PREPROCESS_BOUNDS, optional=True),
}


class ClipModel:
    """An open_clip model with its eval preprocessing and tokenizer: normalised image and text embeddings."""

    def __init__(self, model: torch.nn.Module, preprocess: Any, tokenizer: Any, name: str,
                 device: str | torch.device = "cpu"):
        self.model = model.to(device).eval()
        self.preprocess = preprocess
        self.tokenizer = tokenizer
        self.name = name
        self.device = torch.device(device)

    @torch.no_grad()
    def image_embeddings(self, images: Sequence[Image.Image] | np.ndarray, batch_size: int = 100) -> torch.Tensor:
        """L2-normalised ``[B, D]`` embeddings of PIL images or ``uint8 [B, H, W, 3]``, ``batch_size`` at a time."""
        out = []
        for start in range(0, len(images), batch_size):
            pils = [Image.fromarray(im) if isinstance(im, np.ndarray) else im.convert("RGB")
                    for im in images[start:start + batch_size]]
            batch = torch.stack([self.preprocess(im) for im in pils]).to(self.device)
            out.append(self.model.encode_image(batch, normalize=True).float())
        return torch.cat(out)

    @torch.no_grad()
    def text_embeddings(self, texts: Sequence[str], batch_size: int = 100) -> torch.Tensor:
        """L2-normalised ``[B, D]`` embeddings of ``texts``, ``batch_size`` at a time."""
        texts = list(texts)
        return torch.cat([self.model.encode_text(self.tokenizer(texts[i:i + batch_size]).to(self.device),
                                                 normalize=True).float() for i in range(0, len(texts), batch_size)])


def naming_top1(img: torch.Tensor, names: torch.Tensor, labels: torch.Tensor) -> float:
    """How often image ``i`` is closest to its own name ``names[labels[i]]`` among all ``names``: L2-normalised
    image embeddings ``[N, D]``, name embeddings ``[K, D]``, labels ``[N]`` (chance: ``1 / K``)."""
    return float(((img @ names.T).argmax(1) == labels.to(img.device)).float().mean())


def retrieval(img: torch.Tensor, txt: torch.Tensor, group: int) -> dict[str, float]:
    """Top-1 caption retrieval within consecutive groups of ``group`` image/caption pairs (chance: ``1 / group``):
    L2-normalised embeddings ``[N, D]``, pair ``i`` = image ``i`` and caption ``i``."""
    i2t, t2i, n = 0, 0, 0
    for s in range(0, img.shape[0] - group + 1, group):
        sim = img[s:s + group] @ txt[s:s + group].T
        target = torch.arange(sim.shape[0])
        i2t += int((sim.argmax(1) == target).sum())
        t2i += int((sim.argmax(0) == target).sum())
        n += sim.shape[0]
    return {"image_to_text_top1": i2t / n, "text_to_image_top1": t2i / n, "group": group, "pairs": n}


def _model_from_cfg(**model_cfg: Any) -> torch.nn.Module:
    from open_clip.model import CLIP, CustomTextCLIP

    cfg = dict(model_cfg)
    custom = bool(cfg.pop("custom_text", False)) or "hf_model_name" in cfg.get("text_cfg", {})
    if "hf_model_name" in cfg.get("text_cfg", {}):
        raise ValueError("model_cfg: Hugging Face text towers are not supported offline")
    return (CustomTextCLIP if custom else CLIP)(**cfg)


def _simple_tokenizer(model_cfg: dict[str, Any]) -> Any:
    from open_clip.tokenizer import SimpleTokenizer

    text_cfg = model_cfg.get("text_cfg", {})
    vocab = text_cfg.get("vocab_size", SIMPLE_TOKENIZER_VOCAB)
    if vocab != SIMPLE_TOKENIZER_VOCAB:
        raise ValueError(f"model_cfg: text_cfg.vocab_size is {vocab}, but the offline tokenizer (open_clip's "
                         f"SimpleTokenizer) has {SIMPLE_TOKENIZER_VOCAB} tokens")
    return SimpleTokenizer(context_length=int(text_cfg.get("context_length", 77)))


def _check_weights(weights: str | os.PathLike) -> str:
    path = Path(weights).expanduser()
    if not path.is_file():
        raise CheckpointError(f"weights: no such file {str(path)!r}")
    return str(path)


def check_clip_files(model_cfg: Any, weights: str | os.PathLike, source: str) -> dict[str, Any]:
    """Check an open_clip ``model_cfg`` (bounds, then, for safetensors weights, the parameter shapes it
    implies against the file's header) before open_clip allocates anything; return the checked config.

    Raises:
        ConfigError: the configuration, naming ``source`` and the field.
        CheckpointError: the weights do not fit it.
    """
    config = check_config(model_cfg, CLIP_CONFIG_BOUNDS, source=source)
    if "hf_model_name" in config.get("text_cfg", {}):
        raise ValueError("model_cfg: Hugging Face text towers are not supported offline")
    if str(weights).endswith(".safetensors"):
        header = read_safetensors_header(weights)
        header.check_floating(str(weights))
        shapes = expected_shapes(_model_from_cfg, config, source)
        compare_shapes(shapes, header.shapes, f"{str(weights)!r} does not fit the CLIP {source} describes")
    return config


def read_clip_config(path: Path) -> dict[str, Any]:
    """A CLIP folder's ``open_clip_config.json`` checked against :data:`CLIP_FILE_BOUNDS`; returns its ``model_cfg``
    (for :func:`check_clip_files`).

    Raises:
        ConfigError: not a JSON object, an unknown key, a value out of bounds, no ``model_cfg``, or a
            preprocessing size other than the vision tower's (naming the file and the field).
        CheckpointError: the file cannot be read.
    """
    config = check_config(read_json_object(path), CLIP_FILE_BOUNDS, source=str(path))
    if "model_cfg" not in config:
        raise ConfigError(f"{str(path)!r} has no model_cfg (the open_clip architecture)")
    size = (config.get("preprocess_cfg") or {}).get("size")
    vision = config["model_cfg"].get("vision_cfg", {}) if isinstance(config["model_cfg"], dict) else {}
    tower = vision.get("image_size", 224) if isinstance(vision, dict) else None
    if size is not None and size != tower:
        raise ConfigError(f"{str(path)!r}: preprocess_cfg.size = {size} differs from the vision tower's image_size "
                          f"{tower}")
    return config["model_cfg"]


def load_clip_model(model: str | os.PathLike | dict[str, Any] | None = None, weights: str | os.PathLike | None = None,
                    device: str | torch.device = "cpu", cls: type[ClipModel] | None = None) -> ClipModel:
    """A :class:`ClipModel` (or ``cls``, a subclass) from a shipped alias (:data:`CLIP_MODELS`), a local folder,
    an architecture + weights file, or a ``model_cfg`` dict + weights file (module docstring).
    """
    cls = cls or ClipModel
    import open_clip
    from open_clip.transform import PreprocessCfg, image_transform_v2, merge_preprocess_dict

    if isinstance(model, dict):
        if weights is None:
            raise ValueError("weights: required with a model_cfg dict")
        model = check_clip_files(model, _check_weights(weights), source="model_cfg")
        net = _model_from_cfg(**model)
        try:
            open_clip.load_checkpoint(net, _check_weights(weights))
        except (RuntimeError, OSError, KeyError) as err:  # torch's load_state_dict / unpickling failures
            raise CheckpointError(f"weights {str(weights)!r} could not be loaded into this CLIP "
                                  f"({str(err).splitlines()[0]})") from None
        size = model.get("vision_cfg", {}).get("image_size", 224)
        pre_cfg = PreprocessCfg(**merge_preprocess_dict(PreprocessCfg(), {"size": size}))
        return cls(net, image_transform_v2(pre_cfg, is_train=False), _simple_tokenizer(model),
                          name=f"open_clip:custom+{Path(weights).name}", device=device)

    text = CLIP_ALIAS if model is None else str(model)
    shipped = text in CLIP_MODELS
    folder = WEIGHTS_DIR / CLIP_MODELS[text] if shipped else Path(text).expanduser()
    if shipped and not (folder / CONFIG_FILE).is_file():
        raise ValueError(f"clip_model: the shipped CLIP {text!r} is not present at {folder} (not trained yet?); pass "
                         f"a folder with {CONFIG_FILE}, or an open_clip architecture with a weights file")
    if folder.is_dir():
        if weights is not None:
            raise ValueError("weights: a CLIP folder carries its own weights; pass one or the other")
        config_path = folder / CONFIG_FILE
        if not config_path.is_file():
            raise ValueError(f"clip_model: {str(folder)!r} has no {CONFIG_FILE}")
        model_cfg = read_clip_config(config_path)
        if not (folder / WEIGHTS_FILE).is_file():
            raise CheckpointError(f"clip_model: {str(folder)!r} has no {WEIGHTS_FILE}")
        model_cfg = check_clip_files(model_cfg, folder / WEIGHTS_FILE, source=f"{config_path} model_cfg")
        tokenizer = _simple_tokenizer(model_cfg)
        net, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{folder}")
        name = CLIP_MODELS[text] if shipped else f"open_clip:{display_path(folder)}"
        return cls(net, preprocess, tokenizer, name=name, device=device)

    if text not in open_clip.list_models():
        raise ValueError(f"clip_model: {text!r} is neither a folder nor an open_clip architecture "
                         f"(e.g. ViT-B-32; see open_clip.list_models())")
    if weights is None:
        raise ValueError(f"weights: pass the local weights file for {text!r} (nothing is downloaded)")
    net, _, preprocess = open_clip.create_model_and_transforms(text, pretrained=_check_weights(weights))
    return cls(net, preprocess, open_clip.get_tokenizer(text), name=f"open_clip:{text}+{Path(weights).name}",
                      device=device)


def write_clip_folder(model: torch.nn.Module, model_cfg: dict[str, Any], folder: str | os.PathLike,
                      preprocess_cfg: dict[str, Any] | None = None) -> Path:
    """Write an open_clip model into ``folder`` (config + safetensors; see :func:`arvis.eval.clip_score.save_clip_folder`
    for the atomic replacement of an existing folder). ``model_cfg`` is the dict the model was built from
    (``open_clip.model.CLIP(**model_cfg)``)."""
    from arvis.utils.serialization import save_safetensors

    _simple_tokenizer(model_cfg)  # the folder must be loadable offline
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps({"model_cfg": model_cfg, "preprocess_cfg": preprocess_cfg or {}},
                                                 indent=2))
    save_safetensors(model.state_dict(), folder / WEIGHTS_FILE)
    return folder
