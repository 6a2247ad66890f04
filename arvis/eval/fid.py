"""FID with clean-fid's machinery, in the shipped domain network's feature space (or Inception's).

How an FID is computed here (and why it equals clean-fid's own figure):

- Folders are read by clean-fid itself (``cleanfid.fid.get_files_features``: PIL → ``uint8 [H, W, 3]`` →
  resize → ``float32 [3, S, S]`` in ``[0, 255]`` → extractor), with ``num_workers=0`` and the CPU by
  default. Images held in memory or produced by a generator go through the same resize function and
  the same tensor layout, so a folder of PNGs and the arrays it was written from give identical
  features (PNG is lossless).
- The resize is clean-fid's "clean" one — PIL bicubic on float32 channels, no quantisation — to the
  extractor's own input side: 299 for Inception (clean-fid's ``mode="clean"`` exactly), the domain
  network's ``image_size`` (128 for the shipped one) otherwise. clean-fid's default would resize to 299
  for any custom extractor; arvis passes ``custom_fn_resize`` instead, so a 128-px network sees 128-px
  images, resized once.
- The distance is ``cleanfid.fid.frechet_distance`` over the mean and covariance (``np.cov``, float64)
  of the features.

Feature extractors (the protocol): any callable ``f(images) -> features`` with an ``input_size``
attribute, taking ``[B, 3, S, S]`` float32 pixel values in ``[0, 255]`` (``S = input_size``) and
returning ``[B, D]``; optionally a ``fingerprint()`` naming its weights (needed to cache statistics) and
a ``name``. :func:`load_extractor` builds them: the shipped domain network (``"domain"``, the default),
any domain-network folder, or the FID Inception from a local weights file (``"inception:PATH"``:
pytorch-fid's state dict or clean-fid's TorchScript, :mod:`arvis.eval.inception`; nothing is downloaded here).

The resize mode (:data:`~arvis.eval.defaults.RESIZE_MODES`): ``"clean"`` (above) or ``"bilinear"``: torch
bilinear interpolation without antialiasing (``align_corners=False``), pytorch-fid's resize and the usual
stand-in for ADM's evaluator, which resizes bilinearly inside its TensorFlow graph. Statistics record their
mode; two statistics of different modes are never compared.

Reference statistics come from held-out real data (:func:`heldout_statistics`: crops of the held-out
strips of the photos, never seen in training, :mod:`arvis.data.crops`) and are cached as ``.npz`` under
the data cache directory (``cache_dir``, else ``$ARVIS_CACHE``, else ``~/.cache/arvis/data``), named by a
hash of the extractor's fingerprint, the resize mode, the data set, split, seed, resolution and N, written
atomically. A cached file that does not hold what its name promises (unreadable, other weights, another
count, size, mode or source) is stale: it is recomputed and replaced. A user's reference batch
(ADM's layout, :mod:`arvis.eval.adm`) is cached the same way, keyed by the file's sha256; its precomputed
``mu`` / ``sigma`` are used as they are. The *real-vs-real floor* (:func:`real_floor`) is the FID of an
independent draw of held-out crops of the generated set's size against the same reference: the best FID a
perfect generator could show at that sample size.
"""

from __future__ import annotations

import inspect
import os
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from tqdm.auto import tqdm

from arvis.eval.defaults import DEFAULT_REFERENCE_COUNT, MIN_MEANINGFUL_IMAGES, RESIZE_MODES
from arvis.eval.files import check_same_size, list_images
from arvis.eval.inception import InceptionFeatures, missing_weights_message
from arvis.utils.paths import display_path

__all__ = ["DEFAULT_REFERENCE_COUNT", "MIN_MEANINGFUL_IMAGES", "RESIZE_MODES", "CallableFeatures", "FIDResult",
           "FIDStatistics", "FeatureExtractor", "InceptionFeatures", "compute_fid", "frechet_distance",
           "heldout_statistics", "load_extractor", "make_resizer", "real_floor"]

# A function producing generated images: sample indices -> uint8 [B, H, W, 3].
ImageSource = Callable[[Sequence[int]], np.ndarray]

REFERENCE_SEED = 0  # held-out crops of the reference statistics
FLOOR_SEED = 1  # held-out crops of the real-vs-real floor: an independent draw


@runtime_checkable
class FeatureExtractor(Protocol):
    """``[B, 3, S, S]`` float32 in ``[0, 255]`` → ``[B, D]`` features; ``S = input_size``."""

    input_size: int

    def __call__(self, images: torch.Tensor) -> torch.Tensor: ...


class CallableFeatures(torch.nn.Module):
    """Wrap a plain function or module as a :class:`FeatureExtractor`.

    Args:
        fn: ``[B, 3, S, S]`` float32 in ``[0, 255]`` → ``[B, D]``.
        input_size: the side ``S`` images are resized to before ``fn`` sees them.
        name: a label for reports.
        fingerprint: a string naming ``fn``'s weights (enables caching of statistics), or ``None``.
    """

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], input_size: int, name: str = "custom",
                 fingerprint: str | None = None):
        super().__init__()
        if not isinstance(input_size, int) or input_size < 1:
            raise ValueError(f"input_size must be a positive integer, got {input_size!r}")
        self.fn, self.input_size, self.name, self._fingerprint = fn, input_size, name, fingerprint

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.fn(images)

    def fingerprint(self) -> str | None:
        return self._fingerprint


def load_extractor(spec: str | os.PathLike | None = None, device: str | torch.device = "cpu") -> torch.nn.Module:
    """An FID feature extractor from a spec.

    Args:
        spec: ``None`` or ``"domain"`` (the shipped domain network), a domain-network folder, or
            ``"inception:PATH"`` / a path to a weights file of the FID Inception (pytorch-fid's
            ``pt_inception-2015-12-05-6726825d.pth`` or a safetensors copy; clean-fid's ``inception-2015-12-05.pt``).
        device: where the network runs.

    Raises:
        ValueError: an unknown spec, a missing file, or ``"inception"`` without a file (the message says what
            to supply).
    """
    from arvis.eval.domain import DomainFeatures, load_domain_network
    from arvis.eval.inception import STATE_DICT_SUFFIXES
    from arvis.models.domain_net import DOMAIN_NETWORKS

    text = None if spec is None else str(spec)
    if text in ("inception", "inception:"):
        raise ValueError("extractor: " + missing_weights_message("'inception'"))
    if text is not None and (text.startswith("inception:") or text.endswith((".pt", *STATE_DICT_SUFFIXES))):
        return InceptionFeatures(text.removeprefix("inception:")).to(device)
    net = load_domain_network(text, device=device)
    name = "domain" if text is None else text if text in DOMAIN_NETWORKS else f"domain:{display_path(text)}"
    return DomainFeatures(net, name=name)


#: Each data set's FID setting: the shipped domain network of its classes (an alias of ``load_extractor``).
DATA_EXTRACTORS = {"photos": "domain", "emoji": "domain-emoji", "emoji-names": "domain-emoji"}


def reference_images_fn(data: str = "photos") -> Callable[[int, int, int], np.ndarray]:
    """The held-out real images FID compares ``data`` with: ``(num, resolution, seed) -> uint8 [num, R, R, 3]``
    (photos: crops of the held-out strips; emoji: augmented views of held-out emoji)."""
    from arvis.data.sources import check_data, heldout_images_fn

    return heldout_images if check_data(data) == "photos" else heldout_images_fn(data)


def extractor_name(extractor: Any) -> str:
    return str(getattr(extractor, "name", type(extractor).__name__))


def extractor_fingerprint(extractor: Any) -> str | None:
    fp = getattr(extractor, "fingerprint", None)
    return fp() if callable(fp) else None


def check_resize(mode: str) -> str:
    if mode not in RESIZE_MODES:
        raise ValueError(f"resize must be one of {RESIZE_MODES}, got {mode!r}")
    return mode


def make_resizer(size: int, mode: str = "clean") -> Callable[[np.ndarray], np.ndarray]:
    """``uint8 / float [H, W, 3]`` → ``float32 [size, size, 3]`` in ``[0, 255]``.

    ``"clean"``: clean-fid's clean resize (PIL bicubic on float32 channels, no quantisation). ``"bilinear"``:
    ``torch.nn.functional.interpolate(mode="bilinear", align_corners=False)``, as pytorch-fid resizes.
    """
    if check_resize(mode) == "clean":
        from cleanfid.resize import make_resizer as _make

        return _make("PIL", False, "bicubic", (size, size))

    def bilinear(image: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1), dtype=np.float32))[None]
        y = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
        return y[0].numpy().transpose(1, 2, 0)

    return bilinear


def feature_dim(extractor: Any) -> int:
    """The size of the extractor's features (one call on a blank image)."""
    size = _input_size(extractor)
    with torch.no_grad():
        return int(extractor(torch.zeros(1, 3, size, size, device=_device_of(extractor))).shape[1])


def _device_of(extractor: Any) -> torch.device:
    params = getattr(extractor, "parameters", None)
    first = next(params(), None) if callable(params) else None
    return first.device if first is not None else torch.device("cpu")


def _input_size(extractor: Any) -> int:
    size = getattr(extractor, "input_size", None)
    if not isinstance(size, int) or size < 1:
        raise ValueError("extractor: needs an integer input_size attribute (the side images are resized to); "
                         "wrap plain functions with arvis.eval.fid.CallableFeatures")
    return size


# ----------------------------------------------------------------------------- statistics
@dataclass
class FIDStatistics:
    """Mean and covariance of features of one image set.

    Attributes:
        mu: ``[D]`` float64.  sigma: ``[D, D]`` float64.  count: number of images (``0``: unknown, for
        statistics precomputed elsewhere).  image_size: ``(H, W)`` of the images before resizing.
        extractor: its name.  fingerprint: the extractor's weights fingerprint (or ``None``).
        source: where images came from.  resize: the resize mode (``None``: unknown, precomputed elsewhere).
        extra: notes that are not saved (``cache``: ``"hit"``, ``"miss"`` or ``"stale"`` and ``cache_file``;
        ``file``: the statistics file they were read from).
    """

    mu: np.ndarray
    sigma: np.ndarray
    count: int
    image_size: tuple[int, int]
    extractor: str
    fingerprint: str | None = None
    source: str = ""
    resize: str | None = "clean"
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_features(cls, features: np.ndarray, image_size: tuple[int, int], extractor: Any,
                      source: str = "", resize: str = "clean") -> FIDStatistics:
        if features.ndim != 2 or features.shape[0] < 2:
            raise ValueError(f"source: FID needs at least 2 images, got {features.shape[0] if features.ndim else 0}")
        return cls(mu=np.mean(features, axis=0), sigma=np.cov(features, rowvar=False), count=int(features.shape[0]),
                   image_size=(int(image_size[0]), int(image_size[1])), extractor=extractor_name(extractor),
                   fingerprint=extractor_fingerprint(extractor), source=source, resize=resize)

    def save(self, path: str | os.PathLike) -> Path:
        """Write an ``.npz`` (no pickles) atomically."""
        from arvis.utils.files import atomic_path

        path = Path(path)
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, mu=self.mu, sigma=self.sigma, count=self.count, image_size=np.array(self.image_size),
                         extractor=self.extractor, fingerprint=self.fingerprint or "", source=self.source,
                         resize=self.resize or "")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> FIDStatistics:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"reference: no such statistics file {str(path)!r}")
        try:
            with np.load(path, allow_pickle=False) as z:
                # Files written before the resize mode was recorded were all "clean".
                resize = str(z["resize"]) if "resize" in z.files else "clean"
                return cls(mu=z["mu"], sigma=z["sigma"], count=int(z["count"]),
                           image_size=tuple(int(v) for v in z["image_size"]), extractor=str(z["extractor"]),
                           fingerprint=str(z["fingerprint"]) or None, source=str(z["source"]), resize=resize or None)
        except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
            raise ValueError(f"reference: {str(path)!r} is not an arvis FID statistics file ({err})") from None


def frechet_distance(a: FIDStatistics, b: FIDStatistics) -> float:
    """clean-fid's Fréchet distance between two statistics (same extractor required)."""
    from cleanfid.fid import frechet_distance as _fd

    if a.mu.shape != b.mu.shape:
        raise ValueError(f"reference: feature sizes differ ({a.mu.shape[0]} vs {b.mu.shape[0]}); both statistics "
                         f"must come from the same extractor")
    if a.fingerprint and b.fingerprint and a.fingerprint != b.fingerprint:
        raise ValueError(f"reference: statistics were computed with different extractors "
                         f"({a.extractor} {a.fingerprint[:12]} vs {b.extractor} {b.fingerprint[:12]})")
    if a.resize and b.resize and a.resize != b.resize:
        raise ValueError(f"resize: the statistics were computed with different resize modes ({a.resize} vs "
                         f"{b.resize}); compute both with the same --resize")
    return float(_fd(a.mu, a.sigma, b.mu, b.sigma))


# ----------------------------------------------------------------------------- features
def folder_features(folder: str | os.PathLike, extractor: Any, batch_size: int = 64, num_workers: int = 0,
                    device: str | torch.device = "cpu", progress: bool = True, resize: str = "clean"
                    ) -> tuple[np.ndarray, tuple[int, int]]:
    """Features ``[N, D]`` of every image in ``folder`` (read by clean-fid) and the images' common size.

    Raises:
        ValueError: missing or empty folder, images of mixed sizes or unreadable images.
    """
    from cleanfid.fid import get_files_features

    _check_positive("batch_size", batch_size)
    files = list_images(folder)
    size = check_same_size(files)
    feats = get_files_features([str(f) for f in files], extractor, num_workers=num_workers, batch_size=batch_size,
                               device=torch.device(device), mode="clean", custom_fn_resize=make_resizer(_input_size(
                                   extractor), resize), description=f"features {Path(folder).name}", verbose=progress)
    return feats, size


def array_features(images: np.ndarray, extractor: Any, batch_size: int = 64, device: str | torch.device = "cpu",
                   progress: bool = False, description: str = "features", resize: str = "clean") -> np.ndarray:
    """Features ``[N, D]`` of ``images: uint8 [N, H, W, 3]``, through exactly clean-fid's folder path."""
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"images must be a uint8 array [N, H, W, 3], got "
                         f"{getattr(images, 'dtype', type(images).__name__)} {getattr(images, 'shape', '')}")
    _check_positive("batch_size", batch_size)
    fn = make_resizer(_input_size(extractor), resize)
    out = []
    starts = range(0, images.shape[0], batch_size)
    for start in tqdm(starts, desc=description, disable=not progress, unit="batch"):
        # clean-fid's ResizeDataset: resize → float32 HWC → CHW tensor (ToTensor keeps float values).
        batch = torch.stack([torch.from_numpy(np.ascontiguousarray(fn(im).transpose(2, 0, 1)))
                             for im in images[start:start + batch_size]])
        with torch.no_grad():
            out.append(extractor(batch.to(device)).detach().cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)


def source_features(source: ImageSource, num: int, extractor: Any, batch_size: int = 16,
                    device: str | torch.device = "cpu", progress: bool = True, resize: str = "clean"
                    ) -> tuple[np.ndarray, tuple[int, int]]:
    """Features of ``num`` generated images ``source([i, ...])`` for indices ``0 … num-1``, batch by batch."""
    _check_positive("num", num)
    _check_positive("batch_size", batch_size)
    feats, size = [], None
    bar = tqdm(total=num, desc="generate + features", disable=not progress, unit="img")
    for start in range(0, num, batch_size):
        images = source(list(range(start, min(start + batch_size, num))))
        if size is None:
            size = tuple(images.shape[1:3])
        elif tuple(images.shape[1:3]) != size:
            raise ValueError(f"source: images of mixed sizes ({size} then {tuple(images.shape[1:3])})")
        feats.append(array_features(images, extractor, batch_size=batch_size, device=device, resize=resize))
        bar.update(images.shape[0])
    bar.close()
    return np.concatenate(feats), size  # type: ignore[return-value]


def folder_statistics(folder: str | os.PathLike, extractor: Any, resize: str = "clean", **kwargs: Any) -> FIDStatistics:
    feats, size = folder_features(folder, extractor, resize=resize, **kwargs)
    return FIDStatistics.from_features(feats, size, extractor, source=f"folder:{display_path(folder)}", resize=resize)


def array_statistics(images: np.ndarray, extractor: Any, source: str = "array", resize: str = "clean",
                     **kwargs: Any) -> FIDStatistics:
    feats = array_features(images, extractor, resize=resize, **kwargs)
    return FIDStatistics.from_features(feats, images.shape[1:3], extractor, source=source, resize=resize)


def source_statistics(source: ImageSource, num: int, extractor: Any, name: str = "generator", resize: str = "clean",
                      **kwargs: Any) -> FIDStatistics:
    feats, size = source_features(source, num, extractor, resize=resize, **kwargs)
    return FIDStatistics.from_features(feats, size, extractor, source=name, resize=resize)


def batch_statistics(path: str | os.PathLike, extractor: Any, resize: str = "clean", batch_size: int = 64,
                     device: str | torch.device = "cpu", progress: bool = True, argument: str = "samples"
                     ) -> FIDStatistics:
    """Statistics of the images (``arr_0``) of an ADM-layout ``.npz`` (:mod:`arvis.eval.adm`), read as they go."""
    from arvis.eval.adm import open_batch

    batch = open_batch(path, argument)
    if batch.image_size is None:
        raise ValueError(f"{argument}: {str(path)!r} holds statistics but no images (arr_0)")
    feats = [array_features(images, extractor, batch_size=batch_size, device=device, resize=resize)
             for images in tqdm(batch.iter_images(batch_size), total=-(-batch.count // batch_size),
                                desc=f"features {Path(path).name}", disable=not progress, unit="batch")]
    return FIDStatistics.from_features(np.concatenate(feats), batch.image_size, extractor,
                                       source=f"npz:{display_path(path)}", resize=resize)


# ----------------------------------------------------------------------------- cached statistics
def _cached(kind: str, params: dict[str, Any], cache_dir: str | os.PathLike | None, expect: dict[str, Any],
            compute: Callable[[], FIDStatistics]) -> FIDStatistics:
    """Statistics from the cache file of ``(kind, params)`` when it holds what ``expect`` says, else computed
    and written (atomically). ``extra["cache"]`` says which: ``hit``, ``miss`` (no file) or ``stale`` (a file
    that did not hold what its name promises: unreadable, or another count, size, source, weights or mode)."""
    from arvis.data.cache import cache_path

    path = cache_path(kind, params, cache_dir)
    state = "miss"
    if path.is_file():
        try:
            stats = FIDStatistics.load(path)
        except ValueError:
            stats = None
        if stats is not None and all(getattr(stats, k) == v for k, v in expect.items()):
            stats.extra.update(cache="hit", cache_file=path)
            return stats
        state = "stale"
    stats = compute()
    stats.save(path)
    stats.extra.update(cache=state, cache_file=path)
    return stats


# ----------------------------------------------------------------------------- held-out reference
def heldout_images(num: int, resolution: int, seed: int, progress: bool = True) -> np.ndarray:
    """``uint8 [num, resolution, resolution, 3]`` held-out crops (never seen in training)."""
    from arvis.data.crops import heldout_crops

    images, _ = heldout_crops(num, resolution=resolution, seed=seed, progress=progress and num > 2000)
    return images


def heldout_statistics(extractor: Any, num: int = DEFAULT_REFERENCE_COUNT, resolution: int = 128,
                       seed: int = REFERENCE_SEED, cache: bool = True, cache_dir: str | os.PathLike | None = None,
                       images_fn: Callable[..., np.ndarray] = heldout_images,
                       batch_size: int = 64, device: str | torch.device = "cpu", progress: bool = True,
                       resize: str = "clean") -> FIDStatistics:
    """Reference statistics of ``num`` held-out real crops at ``resolution``, cached per extractor.

    Args:
        extractor: the feature extractor (cached only when it has a fingerprint).
        num: number of held-out crops (>= 2; use several times the feature size for a stable covariance).
        resolution: side of the crops, the generated images' side (both are then resized alike).
        seed: which draw of held-out crops.
        cache: read / write ``fid-stats-<hash>.npz`` under ``cache_dir`` (default: arvis's data cache,
            ``$ARVIS_CACHE`` or ``~/.cache/arvis/data``); a stale file is recomputed (:func:`_cached`).
        images_fn: ``(num, resolution, seed[, progress]) -> uint8 [num, R, R, 3]`` (default: held-out crops).
        resize: the resize mode (part of the cache key).
    """
    _check_positive("num", num)
    _check_positive("resolution", resolution)
    check_resize(resize)
    fingerprint = extractor_fingerprint(extractor)
    source = f"heldout:n={num},res={resolution},seed={seed}"

    def compute() -> FIDStatistics:
        accepts_progress = "progress" in inspect.signature(images_fn).parameters
        images = images_fn(num, resolution, seed, **({"progress": progress} if accepts_progress else {}))
        return array_statistics(images, extractor, source=source, batch_size=batch_size, device=device,
                                progress=progress, description="reference features", resize=resize)

    if not (cache and fingerprint):
        return compute()
    params = {"num": int(num), "resolution": int(resolution), "seed": int(seed), "extractor": fingerprint,
              "input_size": _input_size(extractor), "images": _images_key(images_fn)}
    if resize != "clean":  # clean-mode keys predate the mode and keep naming the same files
        params["resize"] = resize
    expect = {"count": int(num), "image_size": (int(resolution), int(resolution)), "fingerprint": fingerprint,
              "source": source, "resize": resize}
    return _cached("fid-stats", params, cache_dir, expect, compute)


def _images_key(images_fn: Callable) -> str:
    """Names the held-out image maker in cache keys (module-qualified except the photos' default, whose key
    predates the emoji data and must keep naming the same cached statistics)."""
    name = getattr(images_fn, "__qualname__", "custom")
    return name if images_fn is heldout_images else f"{getattr(images_fn, '__module__', '')}.{name}"


def real_floor(reference: FIDStatistics, extractor: Any, num: int, seed: int = FLOOR_SEED,
               images_fn: Callable[..., np.ndarray] = heldout_images, **kwargs: Any) -> float:
    """FID of ``num`` independent held-out crops against ``reference``: the real-vs-real floor at size ``num``."""
    h, w = reference.image_size
    if h != w:
        raise ValueError(f"reference: held-out crops are square; reference images are {h}x{w}")
    kwargs.setdefault("resize", reference.resize or "clean")
    other = heldout_statistics(extractor, num=num, resolution=h, seed=seed, images_fn=images_fn, **kwargs)
    return frechet_distance(other, reference)


# ----------------------------------------------------------------------------- user references (.npz)
def is_arvis_statistics(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a statistics file written by :meth:`FIDStatistics.save` (not a third party's)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return {"mu", "sigma", "count", "extractor", "fingerprint"} <= set(z.files)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return False


def default_resize(reference: Any) -> str:
    """``"bilinear"`` for a third party's ``.npz`` reference (ADM's reference batches, pytorch-fid or clean-fid
    statistics: computed with a bilinear resize), ``"clean"`` otherwise."""
    if isinstance(reference, str | os.PathLike) and str(reference).endswith(".npz"):
        return "clean" if is_arvis_statistics(reference) else "bilinear"
    return "clean"


def npz_reference(path: str | os.PathLike, extractor: Any, dim: int, resize: str = "clean", cache: bool = True,
                  cache_dir: str | os.PathLike | None = None, batch_size: int = 64,
                  device: str | torch.device = "cpu", progress: bool = True) -> FIDStatistics:
    """Reference statistics from an ``.npz``: arvis's own statistics, or a third party's file in ADM's layout.

    A file with ``mu`` / ``sigma`` (ADM's reference batches, pytorch-fid and clean-fid statistics) is used as it
    is; they must be ``dim``-dimensional (the extractor's feature size). A file with only images (``arr_0``)
    gets statistics computed with ``extractor``, cached by the file's sha256, the extractor's fingerprint,
    the resize mode and the image count.

    Raises:
        ValueError: unreadable file, statistics of another feature size (naming the Inception weights when
            they are 2048-dimensional, the Inception pool size), or neither statistics nor images.
    """
    from arvis.eval.adm import open_batch
    from arvis.eval.files import sha256_file
    from arvis.eval.inception import INCEPTION_FEATURES

    if is_arvis_statistics(path):
        stats = FIDStatistics.load(path)
        stats.extra["file"] = path
        return stats
    batch = open_batch(path, "reference")
    name = f"npz:{display_path(path)}"
    if batch.mu is not None:
        d = batch.mu.shape[0]
        if d != dim:
            hint = (missing_weights_message("these statistics (Inception pool features, as in ADM's reference "
                                            "batches)") if d == INCEPTION_FEATURES else
                    "use the extractor these statistics were computed with")
            raise ValueError(f"reference: {str(path)!r} holds {d}-dimensional statistics but the extractor "
                             f"gives {dim}-dimensional features; {hint}")
        return FIDStatistics(mu=batch.mu, sigma=batch.sigma, count=0, image_size=batch.image_size or (0, 0),
                             extractor="precomputed", fingerprint=None, source=f"precomputed:{name}", resize=None,
                             extra={"file": path})
    fingerprint = extractor_fingerprint(extractor)

    def compute() -> FIDStatistics:
        return batch_statistics(path, extractor, resize=resize, batch_size=batch_size, device=device,
                                progress=progress, argument="reference")

    if not (cache and fingerprint):
        return compute()
    digest = sha256_file(path)
    params = {"source": digest, "num": batch.count, "extractor": fingerprint, "input_size": _input_size(extractor),
              "resize": resize}
    expect = {"count": batch.count, "image_size": batch.image_size, "fingerprint": fingerprint, "resize": resize}
    return _cached("fid-ref-stats", params, cache_dir, expect, compute)


# ----------------------------------------------------------------------------- one call
@dataclass
class FIDResult:
    """An FID and what it was computed from (``floor``: the real-vs-real floor at the same size, if asked)."""

    fid: float
    generated: FIDStatistics
    reference: FIDStatistics
    floor: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"fid": self.fid, "real_vs_real_floor": self.floor, "num_generated": self.generated.count,
                "num_reference": self.reference.count or None, "image_size": list(self.generated.image_size),
                "extractor": self.generated.extractor, "extractor_fingerprint": self.generated.fingerprint,
                "resize": self.generated.resize, "generated": self.generated.source,
                "reference": self.reference.source, "small_sample": self.small_sample}

    @property
    def small_sample(self) -> bool:
        """Fewer than :data:`~arvis.eval.defaults.MIN_MEANINGFUL_IMAGES` generated images: the FID is mostly
        sample-size bias."""
        return self.generated.count < MIN_MEANINGFUL_IMAGES

    def warning(self) -> str | None:
        """What to tell a reader of a small-sample FID (``None`` when the sample is large enough)."""
        if not self.small_sample:
            return None
        n = self.generated.count
        floor = (f"the real-vs-real floor at the same N={n} is {self.floor:.4f}: compare with that, not with "
                 f"published figures" if self.floor is not None else
                 "no real-vs-real floor is defined for this reference")
        return (f"N={n} generated images is too few for FID to mean anything (below {MIN_MEANINGFUL_IMAGES}: the "
                f"figure is mostly sample-size bias, large even for real images); {floor}. Papers use 50,000 "
                f"(50 per class)")


def compute_fid(source: str | os.PathLike | np.ndarray | ImageSource,
                reference: str | os.PathLike | FIDStatistics = "heldout", extractor: Any = None, *,
                num: int | None = None, reference_num: int = DEFAULT_REFERENCE_COUNT, floor: bool = False,
                batch_size: int = 64, source_batch_size: int = 16, device: str | torch.device = "cpu",
                cache_dir: str | os.PathLike | None = None,
                images_fn: Callable[..., np.ndarray] | None = None, progress: bool = True,
                data: str = "photos", resize: str | None = None) -> FIDResult:
    """FID of generated images against a reference.

    Args:
        source: a folder of images, an ADM sample batch ``.npz`` (``arr_0``), a ``uint8 [N, H, W, 3]`` array, or
            an image source ``indices -> uint8 [B, H, W, 3]`` (then ``num`` is required).
        reference: ``"heldout"`` (held-out real crops at the source's resolution, cached), a folder of
            images, an ``.npz`` (statistics written by :meth:`FIDStatistics.save`, or a third party's reference
            batch or statistics: :func:`npz_reference`), or statistics.
        extractor: a feature extractor (default: the shipped domain network of ``data``).
        num: images to draw from an image source.
        reference_num: held-out crops in the reference.
        floor: also compute the real-vs-real floor at the source's size.
        batch_size, device: feature extraction (CPU, no worker processes by default).
        source_batch_size: indices per call of an image source (images do not depend on it).
        cache_dir: where reference statistics are cached (default ``$ARVIS_CACHE`` or ``~/.cache/arvis/data``).
        images_fn: the held-out image maker (default: ``data``'s, :func:`reference_images_fn`; tests replace it).
        data: the data set the images belong to, ``"photos"`` or ``"emoji"``: picks the default extractor
            (:data:`DATA_EXTRACTORS`) and the held-out reference images.
        resize: ``"clean"`` or ``"bilinear"``; default :func:`default_resize` of the reference.
    """
    if images_fn is None:
        images_fn = reference_images_fn(data)
    if floor and (isinstance(reference, FIDStatistics) or str(reference) != "heldout"):
        raise ValueError("floor: the real-vs-real floor is defined against the held-out reference "
                         "(reference='heldout')")
    resize = check_resize(default_resize(reference) if resize is None else resize)
    if extractor is None:
        extractor = load_extractor(DATA_EXTRACTORS[data], device=device)
    kw = dict(batch_size=batch_size, device=device, progress=progress, resize=resize)
    ref: FIDStatistics | None = None
    if not isinstance(reference, FIDStatistics) and str(reference).endswith(".npz"):
        # Before any generated image: a reference that cannot be used must fail first.
        ref = npz_reference(reference, extractor, dim=feature_dim(extractor), cache_dir=cache_dir, **kw)
    if isinstance(source, np.ndarray):
        gen = array_statistics(source, extractor, **kw)
    elif isinstance(source, str | os.PathLike) and str(source).endswith(".npz"):
        gen = batch_statistics(source, extractor, **kw)
    elif isinstance(source, str | os.PathLike):
        gen = folder_statistics(source, extractor, **kw)
    elif callable(source):
        if num is None:
            raise ValueError("num: required when source is an image generator")
        gen = source_statistics(source, num, extractor, name=getattr(source, "name", "generator"),
                                **{**kw, "batch_size": source_batch_size})
    else:
        raise ValueError(f"source: expected a folder, an .npz, a uint8 array or an image generator, got "
                         f"{type(source).__name__}")

    if isinstance(reference, FIDStatistics):
        ref = reference
    elif str(reference) == "heldout":
        h, w = gen.image_size
        if h != w:
            raise ValueError(f"reference: held-out crops are square; generated images are {h}x{w}")
        ref = heldout_statistics(extractor, num=reference_num, resolution=h, cache_dir=cache_dir,
                                 images_fn=images_fn, **kw)
    elif ref is None:
        ref = folder_statistics(reference, extractor, **kw)
    fid = frechet_distance(gen, ref)
    result = FIDResult(fid=fid, generated=gen, reference=ref)
    if floor:
        result.floor = real_floor(ref, extractor, gen.count, cache_dir=cache_dir, images_fn=images_fn, **kw)
    return result


def _check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
