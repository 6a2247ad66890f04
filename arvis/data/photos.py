"""Registry of the natural photographs that ship offline with scikit-image and scikit-learn.

These photos are the raw material of every arvis training and evaluation set (class-conditional crops,
text-conditional scenes, camera-motion clips). Each photo is one *class*; :data:`PHOTO_CLASSES` is
the stable, ordered list of class names (label ``i`` is ``PHOTO_CLASSES[i]``) and must never be
re-ordered, since trained class-conditional models index it.

Selection rules. All loaders below work without network access (``skimage.data`` files bundled in
the wheel; ``sklearn.datasets.load_sample_images``). Excluded on purpose:

* ``skimage.data`` files fetched through pooch (brain, cells3d, eagle, kidney, lily, skin, ...): need
  a download;
* ``cat``: the same pixels as ``chelsea``;
* ``stereo_motorcycle`` right view and disparity: near-duplicates / not a photo (the left view is kept
  as ``motorcycle``);
* ``horse``, ``binary_blobs``, ``checkerboard``, ``shepp_logan_phantom``: binary or synthetic, degenerate
  as natural-image data;
* ``microaneurysms`` (102x102), ``lfw_subset`` (25x25): too small for 128x128 crops from disjoint
  train / held-out regions.

Every photo has a short side >= 172 px and a long side >= 384 px, so that both its train region and its
held-out strip (see :mod:`arvis.data.crops`) have a short side of at least 128 px.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["PHOTO_CLASSES", "PHOTOS", "PhotoSource", "load_photo", "load_photos", "photo_label"]


def _skimage(name: str) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        import skimage.data

        out = getattr(skimage.data, name)()
        return out[0] if isinstance(out, tuple) else out  # stereo_motorcycle -> left view

    return load


def _sklearn(filename: str) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        from sklearn.datasets import load_sample_images

        bunch = load_sample_images()
        for path, image in zip(bunch.filenames, bunch.images, strict=True):
            if path.endswith(filename):
                return image
        raise FileNotFoundError(f"{filename} not among sklearn sample images")

    return load


@dataclass(frozen=True)
class PhotoSource:
    """One source photo: class name, where it comes from, and a loader returning the raw array."""

    name: str
    origin: str
    loader: Callable[[], np.ndarray]


_SOURCES = [
    PhotoSource("astronaut", "skimage.data.astronaut", _skimage("astronaut")),
    PhotoSource("brick", "skimage.data.brick", _skimage("brick")),
    PhotoSource("camera", "skimage.data.camera", _skimage("camera")),
    PhotoSource("cell", "skimage.data.cell", _skimage("cell")),
    PhotoSource("chelsea", "skimage.data.chelsea", _skimage("chelsea")),
    PhotoSource("china", "sklearn.datasets.load_sample_images china.jpg", _sklearn("china.jpg")),
    PhotoSource("clock", "skimage.data.clock", _skimage("clock")),
    PhotoSource("coffee", "skimage.data.coffee", _skimage("coffee")),
    PhotoSource("coins", "skimage.data.coins", _skimage("coins")),
    PhotoSource("colorwheel", "skimage.data.colorwheel", _skimage("colorwheel")),
    PhotoSource("flower", "sklearn.datasets.load_sample_images flower.jpg", _sklearn("flower.jpg")),
    PhotoSource("grass", "skimage.data.grass", _skimage("grass")),
    PhotoSource("gravel", "skimage.data.gravel", _skimage("gravel")),
    PhotoSource("hubble_deep_field", "skimage.data.hubble_deep_field", _skimage("hubble_deep_field")),
    PhotoSource("immunohistochemistry", "skimage.data.immunohistochemistry", _skimage("immunohistochemistry")),
    PhotoSource("logo", "skimage.data.logo", _skimage("logo")),
    PhotoSource("moon", "skimage.data.moon", _skimage("moon")),
    PhotoSource("motorcycle", "skimage.data.stereo_motorcycle (left view)", _skimage("stereo_motorcycle")),
    PhotoSource("page", "skimage.data.page", _skimage("page")),
    PhotoSource("retina", "skimage.data.retina", _skimage("retina")),
    PhotoSource("rocket", "skimage.data.rocket", _skimage("rocket")),
    PhotoSource("text", "skimage.data.text", _skimage("text")),
]

#: Registry: class name -> source, in label order.
PHOTOS: dict[str, PhotoSource] = {s.name: s for s in _SOURCES}

#: Ordered class names; label ``i`` is ``PHOTO_CLASSES[i]``. Stable: append only, never re-order.
PHOTO_CLASSES: tuple[str, ...] = tuple(PHOTOS)


def photo_label(name: str) -> int:
    """Integer class label of photo ``name``."""
    if name not in PHOTOS:
        raise ValueError(f"name must be one of {list(PHOTO_CLASSES)}, got {name!r}")
    return PHOTO_CLASSES.index(name)


def _to_rgb_uint8(image: np.ndarray) -> np.ndarray:
    image = np.asarray(image)
    if image.dtype == np.bool_:
        image = image.astype(np.uint8) * 255
    elif image.dtype != np.uint8:
        image = np.clip(np.round(image.astype(np.float64) * (255.0 if image.max() <= 1.0 else 1.0)), 0, 255)
        image = image.astype(np.uint8)
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    elif image.ndim == 3 and image.shape[2] == 4:
        image = image[:, :, :3]
    elif not (image.ndim == 3 and image.shape[2] == 3):
        raise ValueError(f"unsupported photo shape {image.shape}")
    return np.ascontiguousarray(image)


@functools.cache
def load_photo(name: str) -> np.ndarray:
    """Photo ``name`` as a read-only RGB ``uint8`` array ``[H, W, 3]`` (grey replicated, alpha dropped).

    Raises:
        ValueError: ``name`` is not in :data:`PHOTO_CLASSES`.
    """
    if name not in PHOTOS:
        raise ValueError(f"name must be one of {list(PHOTO_CLASSES)}, got {name!r}")
    image = _to_rgb_uint8(PHOTOS[name].loader())
    image.setflags(write=False)
    return image


def load_photos() -> list[np.ndarray]:
    """All photos in label order (read-only ``uint8 [H, W, 3]`` arrays)."""
    return [load_photo(name) for name in PHOTO_CLASSES]
