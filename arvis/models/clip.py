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

WEIGHTS_DIR = Path(__file__).resolve().parents[1] / "weights"
#: Shipped CLIPs: alias -> folder under arvis/weights.
CLIP_MODELS = {"clip": "clip-scenes", "clip-emoji": "clip-emoji"}
CLIP_ALIAS = "clip"
CLIP_DIR = WEIGHTS_DIR / CLIP_MODELS[CLIP_ALIAS]
CONFIG_FILE = "open_clip_config.json"
WEIGHTS_FILE = "open_clip_model.safetensors"
SIMPLE_TOKENIZER_VOCAB = 49408


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
    def image_embeddings(self, images: Sequence[Image.Image] | np.ndarray) -> torch.Tensor:
        """L2-normalised ``[B, D]`` embeddings of PIL images or ``uint8 [B, H, W, 3]``."""
        pils = [Image.fromarray(im) if isinstance(im, np.ndarray) else im.convert("RGB") for im in images]
        batch = torch.stack([self.preprocess(im) for im in pils]).to(self.device)
        return self.model.encode_image(batch, normalize=True).float()

    @torch.no_grad()
    def text_embeddings(self, texts: Sequence[str]) -> torch.Tensor:
        """L2-normalised ``[B, D]`` embeddings of ``texts``."""
        tokens = self.tokenizer(list(texts)).to(self.device)
        return self.model.encode_text(tokens, normalize=True).float()


def _model_from_cfg(model_cfg: dict[str, Any]) -> torch.nn.Module:
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
        raise ValueError(f"weights: no such file {str(path)!r}")
    return str(path)


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
        net = _model_from_cfg(model)
        open_clip.load_checkpoint(net, _check_weights(weights))
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
        try:
            model_cfg = json.loads(config_path.read_text())["model_cfg"]
        except (ValueError, KeyError) as err:
            raise ValueError(f"clip_model: {str(config_path)!r} is not an open_clip config ({err})") from None
        if not (folder / WEIGHTS_FILE).is_file():
            raise ValueError(f"clip_model: {str(folder)!r} has no {WEIGHTS_FILE}")
        tokenizer = _simple_tokenizer(model_cfg)
        net, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{folder}")
        name = CLIP_MODELS[text] if shipped else f"open_clip:{folder}"
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
