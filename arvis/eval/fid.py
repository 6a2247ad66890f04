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
any domain-network folder, or Inception from a local weights file (``"inception:/path/inception-2015-12-05.pt"``,
the torchscript file clean-fid itself downloads from
``https://nvlabs-fi-cdn.nvidia.com/stylegan2-ada-pytorch/pretrained/metrics/inception-2015-12-05.pt``;
nothing is downloaded here).

Reference statistics come from held-out real data (:func:`heldout_statistics`: crops of the held-out
strips of the photos, never seen in training, :mod:`arvis.data.crops`) and are cached as ``.npz`` under
the data cache directory, keyed by the extractor's fingerprint and every data parameter. The
*real-vs-real floor* (:func:`real_floor`) is the FID of an independent draw of held-out crops of the
generated set's size against the same reference: the best FID a perfect generator could show at that
sample size.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from tqdm.auto import tqdm

from arvis.eval.files import check_same_size, list_images
from arvis.utils.paths import display_path

# A function producing generated images: sample indices -> uint8 [B, H, W, 3].
ImageSource = Callable[[Sequence[int]], np.ndarray]

DEFAULT_REFERENCE_COUNT = 5000
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


class InceptionFeatures(torch.nn.Module):
    """clean-fid's Inception-v3 (``mode="clean"``) from a local torchscript file: 2048-d pool features.

    Mirrors ``cleanfid.inception_torchscript.InceptionV3W`` with ``resize_inside=False``: inputs are
    already resized to 299 (clean bicubic), normalised as ``(x - 128) / 128``. TorchScript archives run
    in the TorchScript interpreter (no Python unpickling of arbitrary objects); load only files you trust.
    """

    input_size = 299

    def __init__(self, path: str | os.PathLike):
        super().__init__()
        path = Path(path).expanduser()
        if not path.is_file():
            raise ValueError(f"extractor: Inception weights file {str(path)!r} not found (download "
                             f"inception-2015-12-05.pt once, where network access exists, and pass its path)")
        try:
            with warnings.catch_warnings():  # torch >= 2.10 flags TorchScript as deprecated; clean-fid uses it
                warnings.simplefilter("ignore", FutureWarning)
                self.base = torch.jit.load(str(path), map_location="cpu").eval()
        except (RuntimeError, ValueError) as err:
            raise ValueError(f"extractor: {str(path)!r} is not a TorchScript Inception file ({err})") from None
        if not hasattr(self.base, "layers"):
            raise ValueError(f"extractor: {str(path)!r} has no 'layers' module; expected clean-fid's "
                             f"inception-2015-12-05.pt")
        self.path = path
        self.name = "inception"
        self._fingerprint: str | None = None

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.shape[2:] != (299, 299):
            raise ValueError(f"Inception expects 299x299 inputs, got {tuple(images.shape[2:])}")
        return self.base.layers.forward((images - 128) / 128).reshape(images.shape[0], -1)

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            from arvis.eval.files import sha256_file

            self._fingerprint = sha256_file(self.path)
        return self._fingerprint


def load_extractor(spec: str | os.PathLike | None = None, device: str | torch.device = "cpu") -> torch.nn.Module:
    """An FID feature extractor from a spec.

    Args:
        spec: ``None`` or ``"domain"`` (the shipped domain network), a domain-network folder, or
            ``"inception:PATH"`` / a path to ``inception-2015-12-05.pt`` (clean-fid's clean Inception).
        device: where the network runs.
    """
    from arvis.eval.domain import DomainFeatures, load_domain_network
    from arvis.models.domain_net import DOMAIN_NETWORKS

    text = None if spec is None else str(spec)
    if text is not None and (text.startswith("inception:") or text.endswith(".pt")):
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


def make_resizer(size: int) -> Callable[[np.ndarray], np.ndarray]:
    """clean-fid's clean resize (PIL bicubic on float32 channels, no quantisation) to ``size x size``."""
    from cleanfid.resize import make_resizer as _make

    return _make("PIL", False, "bicubic", (size, size))


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
        mu: ``[D]`` float64.  sigma: ``[D, D]`` float64.  count: number of images.
        image_size: ``(H, W)`` of the images before resizing.  extractor: its name.
        fingerprint: the extractor's weights fingerprint (or ``None``).  source: where images came from.
    """

    mu: np.ndarray
    sigma: np.ndarray
    count: int
    image_size: tuple[int, int]
    extractor: str
    fingerprint: str | None = None
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_features(cls, features: np.ndarray, image_size: tuple[int, int], extractor: Any,
                      source: str = "") -> FIDStatistics:
        if features.ndim != 2 or features.shape[0] < 2:
            raise ValueError(f"source: FID needs at least 2 images, got {features.shape[0] if features.ndim else 0}")
        return cls(mu=np.mean(features, axis=0), sigma=np.cov(features, rowvar=False), count=int(features.shape[0]),
                   image_size=(int(image_size[0]), int(image_size[1])), extractor=extractor_name(extractor),
                   fingerprint=extractor_fingerprint(extractor), source=source)

    def save(self, path: str | os.PathLike) -> Path:
        """Write an ``.npz`` (no pickles) atomically."""
        from arvis.utils.serialization import atomic_path

        path = Path(path)
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, mu=self.mu, sigma=self.sigma, count=self.count, image_size=np.array(self.image_size),
                         extractor=self.extractor, fingerprint=self.fingerprint or "", source=self.source)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> FIDStatistics:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"reference: no such statistics file {str(path)!r}")
        try:
            with np.load(path, allow_pickle=False) as z:
                return cls(mu=z["mu"], sigma=z["sigma"], count=int(z["count"]),
                           image_size=tuple(int(v) for v in z["image_size"]), extractor=str(z["extractor"]),
                           fingerprint=str(z["fingerprint"]) or None, source=str(z["source"]))
        except (KeyError, ValueError, OSError) as err:
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
    return float(_fd(a.mu, a.sigma, b.mu, b.sigma))


# ----------------------------------------------------------------------------- features
def folder_features(folder: str | os.PathLike, extractor: Any, batch_size: int = 64, num_workers: int = 0,
                    device: str | torch.device = "cpu", progress: bool = True) -> tuple[np.ndarray, tuple[int, int]]:
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
                                   extractor)), description=f"features {Path(folder).name}", verbose=progress)
    return feats, size


def array_features(images: np.ndarray, extractor: Any, batch_size: int = 64, device: str | torch.device = "cpu",
                   progress: bool = False, description: str = "features") -> np.ndarray:
    """Features ``[N, D]`` of ``images: uint8 [N, H, W, 3]``, through exactly clean-fid's folder path."""
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"images must be a uint8 array [N, H, W, 3], got "
                         f"{getattr(images, 'dtype', type(images).__name__)} {getattr(images, 'shape', '')}")
    _check_positive("batch_size", batch_size)
    resize = make_resizer(_input_size(extractor))
    out = []
    starts = range(0, images.shape[0], batch_size)
    for start in tqdm(starts, desc=description, disable=not progress, unit="batch"):
        # clean-fid's ResizeDataset: resize → float32 HWC → CHW tensor (ToTensor keeps float values).
        batch = torch.stack([torch.from_numpy(np.ascontiguousarray(resize(im).transpose(2, 0, 1)))
                             for im in images[start:start + batch_size]])
        with torch.no_grad():
            out.append(extractor(batch.to(device)).detach().cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)


def source_features(source: ImageSource, num: int, extractor: Any, batch_size: int = 16,
                    device: str | torch.device = "cpu", progress: bool = True
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
        feats.append(array_features(images, extractor, batch_size=batch_size, device=device))
        bar.update(images.shape[0])
    bar.close()
    return np.concatenate(feats), size  # type: ignore[return-value]


def folder_statistics(folder: str | os.PathLike, extractor: Any, **kwargs: Any) -> FIDStatistics:
    feats, size = folder_features(folder, extractor, **kwargs)
    return FIDStatistics.from_features(feats, size, extractor, source=f"folder:{display_path(folder)}")


def array_statistics(images: np.ndarray, extractor: Any, source: str = "array", **kwargs: Any) -> FIDStatistics:
    feats = array_features(images, extractor, **kwargs)
    return FIDStatistics.from_features(feats, images.shape[1:3], extractor, source=source)


def source_statistics(source: ImageSource, num: int, extractor: Any, name: str = "generator",
                      **kwargs: Any) -> FIDStatistics:
    feats, size = source_features(source, num, extractor, **kwargs)
    return FIDStatistics.from_features(feats, size, extractor, source=name)


# ----------------------------------------------------------------------------- held-out reference
def heldout_images(num: int, resolution: int, seed: int) -> np.ndarray:
    """``uint8 [num, resolution, resolution, 3]`` held-out crops (never seen in training)."""
    from arvis.data.crops import heldout_crops

    images, _ = heldout_crops(num, resolution=resolution, seed=seed, progress=num > 2000)
    return images


def heldout_statistics(extractor: Any, num: int = DEFAULT_REFERENCE_COUNT, resolution: int = 128,
                       seed: int = REFERENCE_SEED, cache: bool = True, cache_dir: str | os.PathLike | None = None,
                       images_fn: Callable[[int, int, int], np.ndarray] = heldout_images,
                       batch_size: int = 64, device: str | torch.device = "cpu", progress: bool = True
                       ) -> FIDStatistics:
    """Reference statistics of ``num`` held-out real crops at ``resolution``, cached per extractor.

    Args:
        extractor: the feature extractor (cached only when it has a fingerprint).
        num: number of held-out crops (>= 2; use several times the feature size for a stable covariance).
        resolution: side of the crops, the generated images' side (both are then resized alike).
        seed: which draw of held-out crops.
        cache: read / write ``fid-stats-<hash>.npz`` under ``cache_dir`` (default: arvis's data cache,
            ``$ARVIS_CACHE`` or ``~/.cache/arvis/data``).
        images_fn: ``(num, resolution, seed) -> uint8 [num, R, R, 3]`` (default: held-out crops).
    """
    from arvis.data.cache import cache_path

    _check_positive("num", num)
    _check_positive("resolution", resolution)
    fingerprint = extractor_fingerprint(extractor)
    path = None
    if cache and fingerprint:
        params = {"num": int(num), "resolution": int(resolution), "seed": int(seed), "extractor": fingerprint,
                  "input_size": _input_size(extractor), "images": _images_key(images_fn)}
        path = cache_path("fid-stats", params, cache_dir)
        if path.is_file():
            return FIDStatistics.load(path)
    images = images_fn(num, resolution, seed)
    stats = array_statistics(images, extractor, source=f"heldout:n={num},res={resolution},seed={seed}",
                             batch_size=batch_size, device=device, progress=progress,
                             description="reference features")
    if path is not None:
        stats.save(path)
    return stats


def _images_key(images_fn: Callable) -> str:
    """Names the held-out image maker in cache keys (module-qualified except the photos' default, whose key
    predates the emoji data and must keep naming the same cached statistics)."""
    name = getattr(images_fn, "__qualname__", "custom")
    return name if images_fn is heldout_images else f"{getattr(images_fn, '__module__', '')}.{name}"


def real_floor(reference: FIDStatistics, extractor: Any, num: int, seed: int = FLOOR_SEED,
               images_fn: Callable[[int, int, int], np.ndarray] = heldout_images, **kwargs: Any) -> float:
    """FID of ``num`` independent held-out crops against ``reference``: the real-vs-real floor at size ``num``."""
    h, w = reference.image_size
    if h != w:
        raise ValueError(f"reference: held-out crops are square; reference images are {h}x{w}")
    other = heldout_statistics(extractor, num=num, resolution=h, seed=seed, images_fn=images_fn, **kwargs)
    return frechet_distance(other, reference)


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
                "num_reference": self.reference.count, "image_size": list(self.generated.image_size),
                "extractor": self.generated.extractor, "extractor_fingerprint": self.generated.fingerprint,
                "generated": self.generated.source, "reference": self.reference.source}


def compute_fid(source: str | os.PathLike | np.ndarray | ImageSource,
                reference: str | os.PathLike | FIDStatistics = "heldout", extractor: Any = None, *,
                num: int | None = None, reference_num: int = DEFAULT_REFERENCE_COUNT, floor: bool = False,
                batch_size: int = 64, source_batch_size: int = 16, device: str | torch.device = "cpu",
                cache_dir: str | os.PathLike | None = None,
                images_fn: Callable[[int, int, int], np.ndarray] | None = None, progress: bool = True,
                data: str = "photos") -> FIDResult:
    """FID of generated images against a reference.

    Args:
        source: a folder of images, a ``uint8 [N, H, W, 3]`` array, or an image source
            ``indices -> uint8 [B, H, W, 3]`` (then ``num`` is required).
        reference: ``"heldout"`` (held-out real crops at the source's resolution, cached), a folder of
            images, a statistics ``.npz`` written by :meth:`FIDStatistics.save`, or statistics.
        extractor: a feature extractor (default: the shipped domain network of ``data``).
        num: images to draw from an image source.
        reference_num: held-out crops in the reference.
        floor: also compute the real-vs-real floor at the source's size.
        batch_size, device: feature extraction (CPU, no worker processes by default).
        source_batch_size: indices per call of an image source (images do not depend on it).
        cache_dir: where held-out statistics are cached.
        images_fn: the held-out image maker (default: ``data``'s, :func:`reference_images_fn`; tests replace it).
        data: the data set the images belong to, ``"photos"`` or ``"emoji"``: picks the default extractor
            (:data:`DATA_EXTRACTORS`) and the held-out reference images.
    """
    if images_fn is None:
        images_fn = reference_images_fn(data)
    if floor and (isinstance(reference, FIDStatistics) or str(reference) != "heldout"):
        raise ValueError("floor: the real-vs-real floor is defined against the held-out reference "
                         "(reference='heldout')")
    if extractor is None:
        extractor = load_extractor(DATA_EXTRACTORS[data], device=device)
    kw = dict(batch_size=batch_size, device=device, progress=progress)
    if isinstance(source, np.ndarray):
        gen = array_statistics(source, extractor, **kw)
    elif isinstance(source, str | os.PathLike):
        gen = folder_statistics(source, extractor, **kw)
    elif callable(source):
        if num is None:
            raise ValueError("num: required when source is an image generator")
        gen = source_statistics(source, num, extractor, name=getattr(source, "name", "generator"),
                                **{**kw, "batch_size": source_batch_size})
    else:
        raise ValueError(f"source: expected a folder, a uint8 array or an image generator, got {type(source).__name__}")

    if isinstance(reference, FIDStatistics):
        ref = reference
    elif str(reference) == "heldout":
        h, w = gen.image_size
        if h != w:
            raise ValueError(f"reference: held-out crops are square; generated images are {h}x{w}")
        ref = heldout_statistics(extractor, num=reference_num, resolution=h, cache_dir=cache_dir,
                                 images_fn=images_fn, **kw)
    elif str(reference).endswith(".npz"):
        ref = FIDStatistics.load(reference)
    else:
        ref = folder_statistics(reference, extractor, **kw)
    fid = frechet_distance(gen, ref)
    result = FIDResult(fid=fid, generated=gen, reference=ref)
    if floor:
        result.floor = real_floor(ref, extractor, gen.count, cache_dir=cache_dir, images_fn=images_fn, **kw)
    return result


def _check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

