"""CLIP score with open_clip: the shipped small CLIP by default, official open_clip weights from a local file.

Definition (torchmetrics' ``CLIPScore``): for each image/caption pair ``s_i = 100 * cos(E_I, E_C)`` with
L2-normalised open_clip embeddings; the score is ``max(mean_i s_i, 0)``. The per-pair values are
reported too. Higher is better; 0 … 100.

Model sources (:func:`load_clip`), nothing is downloaded:

- ``None`` / ``"clip"``: the shipped small CLIP, ``arvis/weights/clip-scenes``;
- a folder in open_clip's own local format (read with ``open_clip``'s ``local-dir:`` schema)::

      clip-scenes/
          open_clip_config.json       # {"model_cfg": {embed_dim, vision_cfg, text_cfg, ...},
                                      #  "preprocess_cfg": {mean, std, interpolation, resize_mode, ...}}
          open_clip_model.safetensors # the CLIP state dict

  Tokenizer: open_clip's ``SimpleTokenizer`` (its BPE vocabulary ships inside the open_clip wheel, so it
  works offline) with ``text_cfg.context_length``; ``text_cfg.vocab_size`` must then be 49408. Written
  by :func:`save_clip_folder`.
- an official architecture name plus a local weights file: ``load_clip("ViT-B-32",
  weights="/path/open_clip_pytorch_model.bin")`` (open_clip reads ``.bin``/``.pt`` with
  ``torch.load(weights_only=True)``, ``.safetensors`` with safetensors);
- a ``model_cfg`` dict plus a weights file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from tqdm.auto import tqdm

from arvis.eval.files import atomic_directory, list_images
from arvis.utils.paths import display_path

CLIP_ALIAS = "clip"
CLIP_DIR = Path(__file__).resolve().parents[1] / "weights" / "clip-scenes"
CONFIG_FILE = "open_clip_config.json"
WEIGHTS_FILE = "open_clip_model.safetensors"
SIMPLE_TOKENIZER_VOCAB = 49408


@dataclass
class ClipScoreResult:
    """``score`` = max(mean(per_pair), 0); ``per_pair``: 100 * cosine per image/caption pair."""

    score: float
    per_pair: list[float]
    model: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"clip_score": self.score, "num_pairs": len(self.per_pair), "clip_model": self.model,
                "per_pair": self.per_pair, **self.extra}


class ClipScorer:
    """An open_clip model, its eval preprocessing and tokenizer; :meth:`score` computes CLIP score."""

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

    def score(self, images: Sequence[Image.Image] | np.ndarray, texts: Sequence[str], batch_size: int = 32,
              progress: bool = False) -> ClipScoreResult:
        """CLIP score of image ``i`` against caption ``i`` (module docstring)."""
        if len(images) != len(texts):
            raise ValueError(f"texts: {len(texts)} captions for {len(images)} images; pass one caption per image")
        if len(images) == 0:
            raise ValueError("images: empty")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        per_pair: list[float] = []
        for start in tqdm(range(0, len(images), batch_size), desc="clip score", unit="batch", disable=not progress):
            img = self.image_embeddings(images[start:start + batch_size])
            txt = self.text_embeddings(texts[start:start + batch_size])
            per_pair += (100.0 * (img * txt).sum(-1)).tolist()
        return ClipScoreResult(score=max(float(np.mean(per_pair)), 0.0), per_pair=per_pair, model=self.name)


# ----------------------------------------------------------------------------- loading and saving
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


def load_clip(model: str | os.PathLike | dict[str, Any] | None = None, weights: str | os.PathLike | None = None,
              device: str | torch.device = "cpu") -> ClipScorer:
    """A :class:`ClipScorer` from the shipped CLIP, a local folder, an architecture + weights file, or a
    ``model_cfg`` dict + weights file (module docstring).
    """
    import open_clip
    from open_clip.transform import PreprocessCfg, image_transform_v2, merge_preprocess_dict

    if isinstance(model, dict):
        if weights is None:
            raise ValueError("weights: required with a model_cfg dict")
        net = _model_from_cfg(model)
        open_clip.load_checkpoint(net, _check_weights(weights))
        size = model.get("vision_cfg", {}).get("image_size", 224)
        pre_cfg = PreprocessCfg(**merge_preprocess_dict(PreprocessCfg(), {"size": size}))
        return ClipScorer(net, image_transform_v2(pre_cfg, is_train=False), _simple_tokenizer(model),
                          name=f"open_clip:custom+{Path(weights).name}", device=device)

    text = CLIP_ALIAS if model is None else str(model)
    folder = CLIP_DIR if text == CLIP_ALIAS else Path(text).expanduser()
    if text == CLIP_ALIAS and not (folder / CONFIG_FILE).is_file():
        raise ValueError(f"clip_model: the shipped CLIP is not present at {folder} (not trained yet?); pass a "
                         f"folder with {CONFIG_FILE}, or an open_clip architecture with a weights file")
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
        name = "clip-scenes" if text == CLIP_ALIAS else f"open_clip:{display_path(folder)}"
        return ClipScorer(net, preprocess, tokenizer, name=name, device=device)

    if text not in open_clip.list_models():
        raise ValueError(f"clip_model: {text!r} is neither a folder nor an open_clip architecture "
                         f"(e.g. ViT-B-32; see open_clip.list_models())")
    if weights is None:
        raise ValueError(f"weights: pass the local weights file for {text!r} (nothing is downloaded)")
    net, _, preprocess = open_clip.create_model_and_transforms(text, pretrained=_check_weights(weights))
    return ClipScorer(net, preprocess, open_clip.get_tokenizer(text), name=f"open_clip:{text}+{Path(weights).name}",
                      device=device)


def save_clip_folder(model: torch.nn.Module, model_cfg: dict[str, Any], path: str | os.PathLike,
                     preprocess_cfg: dict[str, Any] | None = None) -> Path:
    """Write an open_clip model as a local folder (config + safetensors), atomically replacing ``path``.

    ``model_cfg`` is the dict the model was built from (``open_clip.model.CLIP(**model_cfg)``).
    """
    from arvis.utils.serialization import save_safetensors

    _simple_tokenizer(model_cfg)  # the folder must be loadable offline
    path = Path(path)
    with atomic_directory(path) as tmp:
        (tmp / CONFIG_FILE).write_text(json.dumps({"model_cfg": model_cfg, "preprocess_cfg": preprocess_cfg or {}},
                                                  indent=2))
        save_safetensors(model.state_dict(), tmp / WEIGHTS_FILE)
    return path


# ----------------------------------------------------------------------------- folders
def folder_captions(folder: str | os.PathLike, captions: str | os.PathLike | None = None) -> tuple[list[Path], list[str]]:
    """Image files of ``folder`` and one caption each.

    Captions come from ``captions`` (a JSON object ``{file name: caption}``) or, by default, from the
    folder's ``manifest.json`` written by ``eval/sample.py`` (its ``prompt`` per image).
    """
    files = list_images(folder)
    if captions is not None:
        cpath = Path(captions)
        if not cpath.is_file():
            raise ValueError(f"captions: no such file {str(cpath)!r}")
        try:
            mapping = json.loads(cpath.read_text())
        except ValueError as err:
            raise ValueError(f"captions: {str(cpath)!r} is not JSON ({err})") from None
        if not isinstance(mapping, dict):
            raise ValueError("captions: expected a JSON object {file name: caption}")
    else:
        manifest = Path(folder) / "manifest.json"
        if not manifest.is_file():
            raise ValueError(f"captions: {str(folder)!r} has no manifest.json; pass a captions file")
        images = json.loads(manifest.read_text()).get("images", [])
        mapping = {r["file"]: r["prompt"] for r in images if "prompt" in r}
    missing = [f.name for f in files if f.name not in mapping]
    if missing:
        raise ValueError(f"captions: no caption for {len(missing)} images (e.g. {missing[0]})")
    return files, [str(mapping[f.name]) for f in files]


def clip_score_folder(folder: str | os.PathLike, scorer: ClipScorer, captions: str | os.PathLike | None = None,
                      batch_size: int = 32, progress: bool = True) -> ClipScoreResult:
    """CLIP score of every image in ``folder`` against its caption (see :func:`folder_captions`)."""
    files, texts = folder_captions(folder, captions)
    per_pair: list[float] = []
    for start in tqdm(range(0, len(files), batch_size), desc="clip score", unit="batch", disable=not progress):
        chunk = files[start:start + batch_size]
        images = []
        for f in chunk:
            with Image.open(f) as im:
                images.append(im.convert("RGB"))
        per_pair += scorer.score(images, texts[start:start + batch_size], batch_size=batch_size).per_pair
    result = ClipScoreResult(score=max(float(np.mean(per_pair)), 0.0), per_pair=per_pair, model=scorer.name)
    result.extra["folder"] = display_path(folder)
    return result
