"""Short camera-motion clips over the offline photos: data for a tiny video AR model.

A clip is ``num_frames`` square views of one photo whose viewing box moves linearly between a start
and an end box: the camera pans left / right / up / down by 25-50% of the box side, or zooms in / out
by a factor 1.3-1.8 about a fixed centre. Clips are never mirrored (a mirrored pan would contradict
its label). ``pan_left`` means the *camera* moves left (the content
slides right in the frames); ``zoom_in`` means the box shrinks (content grows). Frames are rendered with
PIL's sub-pixel box resampling (bicubic, antialiased), so motion is smooth at any speed. The whole
trajectory stays inside the photo's ``split`` region (:func:`arvis.data.crops.photo_regions`), so
held-out clips share no pixel with training clips.

Determinism: clip ``i`` of ``build_clips(n, split, seed=s)`` depends only on ``(s, split, i)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from arvis.data.crops import SPLITS, photo_regions
from arvis.data.photos import PHOTO_CLASSES, load_photo

__all__ = ["MOTIONS", "ClipSpec", "build_clips", "render_clip", "sample_clip"]

MOTIONS: tuple[str, ...] = ("pan_left", "pan_right", "pan_up", "pan_down", "zoom_in", "zoom_out")
_SPLIT_ID = {"train": 0, "heldout": 1}
_MIN_SIDE = 32.0


@dataclass(frozen=True)
class ClipSpec:
    """One clip: photo class, motion, and the viewing box of every frame ``[T, 4]`` as (x0, y0, x1, y1)."""

    label: int  # index into PHOTO_CLASSES
    motion: str  # one of MOTIONS
    boxes: np.ndarray  # float64 [T, 4], photo pixel coordinates


def _check(split: str, num_frames: int, resolution: int) -> None:
    if split not in _SPLIT_ID:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if isinstance(num_frames, bool) or not isinstance(num_frames, (int, np.integer)) or not 2 <= num_frames <= 256:
        raise ValueError(f"num_frames must be an int in [2, 256], got {num_frames!r}")
    if isinstance(resolution, bool) or not isinstance(resolution, (int, np.integer)) or not 8 <= resolution <= 2048:
        raise ValueError(f"resolution must be an int in [8, 2048], got {resolution!r}")


def sample_clip(seed: int, index: int, split: str = "train", num_frames: int = 8) -> ClipSpec:
    """Clip number ``index`` of the stream ``(seed, split)``: a photo, a motion and per-frame boxes."""
    _check(split, num_frames, 64)
    rng = np.random.default_rng([int(seed), _SPLIT_ID[split], int(index)])
    label = int(rng.integers(len(PHOTO_CLASSES)))
    motion = MOTIONS[int(rng.integers(len(MOTIONS)))]
    region = photo_regions(PHOTO_CLASSES[label])[split]
    rh, rw = float(region.height), float(region.width)
    if motion.startswith("pan"):
        shift_frac = float(rng.uniform(0.25, 0.5))
        horizontal = motion in ("pan_left", "pan_right")
        # side * (1 + shift_frac) must fit along the motion axis, side along the other one.
        max_side = min(rw / (1 + shift_frac), rh) if horizontal else min(rh / (1 + shift_frac), rw)
        side = float(rng.uniform(0.5, 1.0)) * max_side
        shift = shift_frac * side
        span_w = side + (shift if horizontal else 0.0)
        span_h = side + (0.0 if horizontal else shift)
        x = region.left + float(rng.uniform(0, rw - span_w))
        y = region.top + float(rng.uniform(0, rh - span_h))
        start = {"pan_left": (x + shift, y), "pan_right": (x, y), "pan_up": (x, y + shift), "pan_down": (x, y)}[motion]
        delta = {"pan_left": (-shift, 0), "pan_right": (shift, 0), "pan_up": (0, -shift), "pan_down": (0, shift)}[motion]
        t = np.linspace(0.0, 1.0, num_frames)
        x0 = start[0] + t * delta[0]
        y0 = start[1] + t * delta[1]
        boxes = np.stack([x0, y0, x0 + side, y0 + side], axis=1)
    else:
        zoom = float(rng.uniform(1.3, 1.8))
        big = float(rng.uniform(0.6, 1.0)) * min(rh, rw)
        small = max(big / zoom, _MIN_SIDE)
        cx = region.left + big / 2 + float(rng.uniform(0, rw - big))
        cy = region.top + big / 2 + float(rng.uniform(0, rh - big))
        t = np.linspace(0.0, 1.0, num_frames)
        # Geometric interpolation of the side: constant zoom speed.
        a, b = (big, small) if motion == "zoom_in" else (small, big)
        sides = a * (b / a) ** t
        boxes = np.stack([cx - sides / 2, cy - sides / 2, cx + sides / 2, cy + sides / 2], axis=1)
    return ClipSpec(label, motion, boxes.astype(np.float64))


def render_clip(spec: ClipSpec, resolution: int = 128) -> np.ndarray:
    """Render ``spec`` to ``uint8 [T, resolution, resolution, 3]``."""
    _check("train", len(spec.boxes), resolution)
    photo = Image.fromarray(load_photo(PHOTO_CLASSES[spec.label]))
    frames = []
    for box in spec.boxes:
        frames.append(np.asarray(photo.resize((resolution, resolution), Image.Resampling.BICUBIC, box=tuple(box))))
    return np.ascontiguousarray(np.stack(frames))


def build_clips(
    n: int,
    split: str = "train",
    num_frames: int = 8,
    resolution: int = 128,
    seed: int = 0,
    progress: bool | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Build ``n`` clips.

    Args:
        n: number of clips (>= 0).
        split: ``"train"`` or ``"heldout"``.
        num_frames: frames per clip, in ``[2, 256]``.
        resolution: frame side in pixels, in ``[8, 2048]``.
        seed: data seed.
        progress: tqdm bar (default: on for more than 500 clips).

    Returns:
        ``clips uint8 [n, T, R, R, 3]``, photo ``labels int64 [n]`` and motion ids ``int64 [n]``
        (index into :data:`MOTIONS`).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    _check(split, num_frames, resolution)
    clips = np.empty((n, num_frames, resolution, resolution, 3), dtype=np.uint8)
    labels = np.empty(n, dtype=np.int64)
    motions = np.empty(n, dtype=np.int64)
    show = n > 500 if progress is None else progress
    for i in tqdm(range(n), desc=f"{split} clips", disable=not show, unit="clip"):
        spec = sample_clip(seed, i, split, num_frames)
        clips[i] = render_clip(spec, resolution)
        labels[i] = spec.label
        motions[i] = MOTIONS.index(spec.motion)
    return clips, labels, motions
