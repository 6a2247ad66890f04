"""CLIP score with open_clip: the shipped small CLIP by default, official open_clip weights from a local file.

Definition (torchmetrics' ``CLIPScore``): for each image/caption pair ``s_i = 100 * cos(E_I, E_C)`` with
L2-normalised open_clip embeddings; the score is ``max(mean_i s_i, 0)``. The per-pair values are
reported too. Higher is better; 0 … 100.

Model sources (:func:`load_clip`), nothing is downloaded: ``None`` / ``"clip"`` (the shipped scene CLIP,
``arvis/weights/clip-scenes``), ``"clip-emoji"`` (the shipped emoji CLIP, ``arvis/weights/clip-emoji``), an
open_clip folder (written by :func:`save_clip_folder`), an official open_clip architecture with a local
weights file, or a ``model_cfg`` dict with a weights file — see :mod:`arvis.models.clip`, where the model
side (loading, folder format) lives.
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

from arvis.eval.files import list_images
from arvis.models.clip import (  # noqa: F401  (re-exported: the public evaluation API)
    CLIP_ALIAS,
    CLIP_DIR,
    CLIP_MODELS,
    CONFIG_FILE,
    SIMPLE_TOKENIZER_VOCAB,
    WEIGHTS_FILE,
    ClipModel,
    load_clip_model,
    write_clip_folder,
)
from arvis.utils.files import atomic_directory
from arvis.utils.paths import display_path


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


class ClipScorer(ClipModel):
    """An open_clip model, its eval preprocessing and tokenizer; :meth:`score` computes CLIP score."""

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
def load_clip(model: str | os.PathLike | dict[str, Any] | None = None, weights: str | os.PathLike | None = None,
              device: str | torch.device = "cpu") -> ClipScorer:
    """A :class:`ClipScorer` from a shipped CLIP alias, a local folder, an architecture + weights file, or a
    ``model_cfg`` dict + weights file (:func:`arvis.models.clip.load_clip_model`)."""
    return load_clip_model(model, weights, device, cls=ClipScorer)  # type: ignore[return-value]


def save_clip_folder(model: torch.nn.Module, model_cfg: dict[str, Any], path: str | os.PathLike,
                     preprocess_cfg: dict[str, Any] | None = None) -> Path:
    """Write an open_clip model as a local folder (config + safetensors), atomically replacing ``path``.

    ``model_cfg`` is the dict the model was built from (``open_clip.model.CLIP(**model_cfg)``).
    """
    path = Path(path)
    with atomic_directory(path) as tmp:
        write_clip_folder(model, model_cfg, tmp, preprocess_cfg)
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
