"""Can a reader name what a model drew? The emoji CLIP's top-1 naming of samples among the named emoji.

A model trained on the one-class-per-emoji set (``--data emoji-names``, :func:`arvis.data.emoji.named_emoji`)
is judged by how often the emoji CLIP (``clip-emoji``) picks a sample's own emoji name among all the class names
(:func:`arvis.models.clip.naming_top1`; chance ``1 / K``), beside two references at the same resolution:

* the real unaugmented renders of those emoji (the CLIP's own ceiling);
* those renders passed through the model's tokenizer and back (:func:`tokenizer_roundtrip`: VQ codes, VAR's
  code pyramid, or MAR's VAE posterior mean): samples are decoded by the same decoder, so its blur and texture
  limit them as they limit these. When this is low, the decoder is what to fine-tune first.

Every family's model card and the sample grids under ``docs/`` use this one measurement (``eval/naming_card.py``,
``eval/model_card.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["named_renders", "naming_rates", "tokenizer_roundtrip"]

Roundtrip = Callable[[np.ndarray], np.ndarray]


def named_renders(resolution: int) -> tuple[list[str], np.ndarray]:
    """The named emoji's names and their unaugmented renders ``uint8 [K, R, R, 3]`` (label ``i`` = name ``i``)."""
    from arvis.data.emoji import load_catalog, named_emoji, openmoji_svg_dir, render_emoji

    emoji = list(named_emoji(load_catalog()))
    folder = openmoji_svg_dir()
    return [e.name for e in emoji], np.stack([render_emoji(folder / f"{e.code}.svg", resolution) for e in emoji])


def tokenizer_roundtrip(pipe: Any, batch_size: int = 32) -> Roundtrip:
    """``uint8 [N, R, R, 3] -> uint8 [N, R, R, 3]``: images encoded and decoded by ``pipe``'s tokenizer.

    The pipeline round-trips (:meth:`arvis.pipelines.interface.ArvisPipeline.tokenizer_roundtrip`): token families
    through their codes, MAR through its VAE's posterior mean.
    """
    from arvis.utils.images import to_tensor, to_uint8

    @torch.no_grad()
    def roundtrip(images: np.ndarray) -> np.ndarray:
        return np.concatenate([to_uint8(pipe.tokenizer_roundtrip(to_tensor(images[i:i + batch_size])))
                               for i in range(0, len(images), batch_size)])

    return roundtrip


def naming_rates(images: np.ndarray | Sequence[Any], labels: Sequence[int] | np.ndarray, names: Sequence[str],
                 roundtrip: Roundtrip | None = None, clip: str = "clip-emoji") -> dict[str, Any]:
    """How often ``clip`` names each sample (``images``, ``labels`` into ``names``) right among all ``names``.

    ``names`` must be the named emoji set (the references are its renders). Returns ``class_consistency`` (the
    samples), ``clip_real_renders_named`` (the renders at the samples' resolution), with ``roundtrip``
    ``clip_vq_reconstructions_named`` (the renders round-tripped through the model's tokenizer), ``images``,
    ``class_consistency_by`` and ``chance``.
    """
    from arvis.eval.clip_score import load_clip
    from arvis.models.clip import naming_top1

    images = np.stack([np.asarray(im.convert("RGB")) if hasattr(im, "convert") else np.asarray(im) for im in images])
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise ValueError(f"images must be uint8 [N, R, R, 3], got {images.dtype} {tuple(images.shape)}")
    labels_t = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    if labels_t.shape != (len(images),) or int(labels_t.min()) < 0 or int(labels_t.max()) >= len(names):
        raise ValueError(f"labels must be {len(images)} indices into the {len(names)} names")
    known, real = named_renders(images.shape[1])
    if list(names) != known:
        raise ValueError("names: not the named emoji set of arvis.data.emoji (the references are its renders)")
    scorer = load_clip(clip)
    text = scorer.text_embeddings(list(names))
    every = torch.arange(len(names))
    out: dict[str, Any] = {
        "class_consistency": naming_top1(scorer.image_embeddings(images), text, labels_t), "images": len(images),
        "class_consistency_by": clip,
        "clip_real_renders_named": naming_top1(scorer.image_embeddings(real), text, every),
        "chance": 1 / len(names),
    }
    if roundtrip is not None:
        out["clip_vq_reconstructions_named"] = naming_top1(scorer.image_embeddings(roundtrip(real)), text, every)
    return out
