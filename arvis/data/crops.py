"""Class-conditional crops of the offline photos: arvis's stand-in for ImageNet.

Each photo of :data:`arvis.data.photos.PHOTO_CLASSES` is one class. A sample is a square crop of a
random side (``scale`` times the short side of the region it is drawn from), at a random position,
optionally flipped left-right, resized to ``resolution`` x ``resolution`` with antialiased bicubic
resampling (PIL), labelled with its photo's class index.

Train / held-out split. Every photo is cut into two disjoint regions: the *held-out* region is the
vertical strip on the right of width ``max(ceil(0.25 * W), 128)`` px, the *train* region is everything to
its left. Train crops are drawn inside the train region only and held-out crops inside the strip only,
so no held-out crop shares a pixel with any training crop (see :func:`photo_regions`). Both regions
have a short side >= 128 px for every registered photo.

Determinism: everything is a function of ``seed`` through ``np.random.default_rng([seed, split_id])``;
the global NumPy RNG is never used.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from arvis.data.cache import cache_path, load_npz, save_npz_atomic
from arvis.data.photos import PHOTO_CLASSES, load_photo

__all__ = [
    "HELDOUT_FRACTION",
    "MIN_REGION_SIDE",
    "SPLITS",
    "CropSpecs",
    "Region",
    "build_crops",
    "heldout_crops",
    "photo_regions",
    "render_crop",
    "render_crops",
    "sample_crop_specs",
    "train_crops",
]

SPLITS: tuple[str, ...] = ("train", "heldout")
_SPLIT_ID = {"train": 0, "heldout": 1}
HELDOUT_FRACTION = 0.25
MIN_REGION_SIDE = 128
_MIN_CROP_SIDE = 16


@dataclass(frozen=True)
class Region:
    """Axis-aligned rectangle of a photo, in pixels: rows ``[top, top+height)``, cols ``[left, left+width)``."""

    top: int
    left: int
    height: int
    width: int

    def contains(self, top: int, left: int, height: int, width: int) -> bool:
        """Whether the box ``(top, left, height, width)`` lies entirely inside this region."""
        return (
            top >= self.top
            and left >= self.left
            and top + height <= self.top + self.height
            and left + width <= self.left + self.width
        )

    def overlaps(self, top: int, left: int, height: int, width: int) -> bool:
        """Whether the box shares at least one pixel with this region."""
        return (
            top < self.top + self.height
            and self.top < top + height
            and left < self.left + self.width
            and self.left < left + width
        )


def photo_regions(name: str) -> dict[str, Region]:
    """The disjoint ``{"train": Region, "heldout": Region}`` split of photo ``name``.

    The held-out region is the right strip of width ``max(ceil(HELDOUT_FRACTION * W), MIN_REGION_SIDE)``.
    """
    h, w = load_photo(name).shape[:2]
    strip = max(math.ceil(HELDOUT_FRACTION * w), MIN_REGION_SIDE)
    return {"train": Region(0, 0, h, w - strip), "heldout": Region(0, w - strip, h, strip)}


@dataclass(frozen=True)
class CropSpecs:
    """Where ``N`` crops come from (all arrays ``[N]``): class label, square box in photo pixels, flip."""

    split: str
    labels: np.ndarray  # int64 [N], index into PHOTO_CLASSES
    top: np.ndarray  # int64 [N]
    left: np.ndarray  # int64 [N]
    side: np.ndarray  # int64 [N], crop side in source pixels
    flip: np.ndarray  # bool [N], mirrored left-right after cropping

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def _check_split(split: str) -> None:
    if split not in _SPLIT_ID:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


def _check_scale(scale: Sequence[float]) -> tuple[float, float]:
    lo, hi = (float(s) for s in scale)
    if not 0.0 < lo <= hi <= 1.0:
        raise ValueError(f"scale must satisfy 0 < scale[0] <= scale[1] <= 1, got {tuple(scale)}")
    return lo, hi


def _check_count(name: str, n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"{name} must be an int >= 0, got {n!r}")


def _check_resolution(resolution: int) -> None:
    if isinstance(resolution, bool) or not isinstance(resolution, (int, np.integer)) or not 8 <= resolution <= 2048:
        raise ValueError(f"resolution must be an int in [8, 2048], got {resolution!r}")


def sample_crop_specs(
    n: int,
    split: str = "train",
    seed: int | np.random.Generator = 0,
    scale: Sequence[float] = (0.25, 1.0),
    flip: bool = True,
) -> CropSpecs:
    """Draw ``n`` crop boxes, classes uniform, inside each photo's ``split`` region.

    Args:
        n: number of crops.
        split: ``"train"`` or ``"heldout"``.
        seed: int seed (the stream is ``default_rng([seed, split_id])``), or a ``np.random.Generator``
            to draw from (e.g. an infinite training stream).
        scale: range of the crop side as a fraction of the region's short side, uniform.
        flip: mirror half of the crops left-right.
    """
    _check_count("n", n)
    _check_split(split)
    lo, hi = _check_scale(scale)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng([int(seed), _SPLIT_ID[split]])
    labels = rng.integers(0, len(PHOTO_CLASSES), size=n)
    frac = rng.uniform(lo, hi, size=n)
    u = rng.uniform(0.0, 1.0, size=(2, n))
    flips = rng.uniform(0.0, 1.0, size=n) < 0.5 if flip else np.zeros(n, dtype=bool)
    regions = [photo_regions(name)[split] for name in PHOTO_CLASSES]
    reg_top, reg_left, reg_h, reg_w = (np.array([getattr(r, f) for r in regions])[labels] for f in (
        "top", "left", "height", "width"))
    short = np.minimum(reg_h, reg_w)
    side = np.clip(np.round(frac * short).astype(np.int64), _MIN_CROP_SIDE, short)
    top = reg_top + np.floor(u[0] * (reg_h - side + 1)).astype(np.int64)
    left = reg_left + np.floor(u[1] * (reg_w - side + 1)).astype(np.int64)
    return CropSpecs(split, labels.astype(np.int64), top, left, side, flips.astype(bool))


def render_crop(
    photo: np.ndarray, top: int, left: int, side: int, flip: bool, resolution: int
) -> np.ndarray:
    """Cut ``photo[top:top+side, left:left+side]``, resize to ``resolution`` (bicubic, antialiased), flip."""
    patch = photo[top : top + side, left : left + side]
    if patch.shape[:2] != (side, side):
        raise ValueError(f"crop box ({top}, {left}, side {side}) exceeds photo of shape {photo.shape}")
    if side != resolution:
        patch = np.asarray(Image.fromarray(patch).resize((resolution, resolution), Image.Resampling.BICUBIC))
    if flip:
        patch = patch[:, ::-1]
    return np.ascontiguousarray(patch)


def render_crops(specs: CropSpecs, resolution: int = 128, progress: bool | None = None) -> np.ndarray:
    """Render ``specs`` to ``uint8 [N, resolution, resolution, 3]``.

    Args:
        progress: show a tqdm bar (default: only for more than 2000 crops).
    """
    _check_resolution(resolution)
    out = np.empty((len(specs), resolution, resolution, 3), dtype=np.uint8)
    show = len(specs) > 2000 if progress is None else progress
    for i in tqdm(range(len(specs)), desc=f"{specs.split} crops", disable=not show, unit="crop"):
        photo = load_photo(PHOTO_CLASSES[specs.labels[i]])
        out[i] = render_crop(
            photo, int(specs.top[i]), int(specs.left[i]), int(specs.side[i]), bool(specs.flip[i]), resolution
        )
    return out


def build_crops(
    n: int,
    split: str = "train",
    resolution: int = 128,
    seed: int = 0,
    scale: Sequence[float] = (0.25, 1.0),
    flip: bool = True,
    cache: bool = False,
    cache_dir: str | os.PathLike | None = None,
    progress: bool | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Build ``n`` labelled crops of ``split``.

    Args:
        n: number of crops.
        split: ``"train"`` or ``"heldout"``.
        resolution: output side in pixels, in ``[8, 2048]``.
        seed: data seed; the same arguments always give identical arrays.
        scale: crop side range as a fraction of the region's short side.
        flip: random horizontal flips.
        cache: read / write an ``.npz`` under ``cache_dir`` (default ``$ARVIS_CACHE`` or
            ``~/.cache/arvis/data``), written atomically.
        progress: tqdm bar (default: on for large ``n``).

    Returns:
        ``images uint8 [n, resolution, resolution, 3]`` and ``labels int64 [n]``.
    """
    _check_resolution(resolution)
    specs = sample_crop_specs(n, split, seed, scale, flip)
    path = None
    if cache:
        params = dict(n=int(n), split=split, resolution=int(resolution), seed=int(seed), scale=list(map(float, scale)),
                      flip=bool(flip))
        path = cache_path("crops", params, cache_dir)
        if path.exists():
            data = load_npz(path)
            return data["images"], data["labels"]
    images = render_crops(specs, resolution, progress)
    if path is not None:
        save_npz_atomic(path, images=images, labels=specs.labels)
    return images, specs.labels


def train_crops(n: int, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """``build_crops(n, "train", ...)``: ``uint8 [n, R, R, 3]`` images and ``int64 [n]`` labels."""
    return build_crops(n, "train", **kwargs)


def heldout_crops(m: int, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """``build_crops(m, "heldout", ...)``: crops disjoint from every training pixel."""
    return build_crops(m, "heldout", **kwargs)
