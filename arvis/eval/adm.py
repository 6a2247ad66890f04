"""Sample and reference batches in the layout of ADM's evaluation suite (openai/guided-diffusion
``evaluations/``), which LlamaGen, VAR and MAR report their FID with.

- A **sample batch** is an ``.npz`` whose ``arr_0`` is ``uint8 [N, H, W, 3]`` (NHWC, RGB). Class-conditional
  samplers store the labels as ``arr_1`` (``int64 [N]``); the evaluator reads only ``arr_0``.
- A **reference batch** has the same ``arr_0`` (real images) and may hold precomputed statistics of the whole
  reference set: ``mu`` ``[2048]`` and ``sigma`` ``[2048, 2048]`` over Inception pool features (``mu_s`` /
  ``sigma_s``: spatial features for sFID, unused here). ADM's evaluator uses ``mu`` / ``sigma`` when present
  (for ImageNet they cover the whole training set, not the 10,000 images of ``arr_0``).

Writing streams images into the archive (memory stays bounded at 50 images per class x 1,000 classes) and
is atomic; reading streams ``arr_0`` slice by slice (``np.load`` would read all of it: 10,000 256-px images
are 2 GB). Archives are read without pickles.
"""

from __future__ import annotations

import contextlib
import os
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

IMAGES_KEY = "arr_0"
LABELS_KEY = "arr_1"


class SampleBatchWriter:
    """Write ``num`` images (and their labels) as an ADM sample batch, batch by batch, atomically.

    Usage: ``w = SampleBatchWriter(path, num)``; ``w.add(images, labels)`` any number of times;
    ``w.close()`` renames the finished file onto ``path`` (``w.abort()``, or an exception inside a ``with``
    block, removes the temporary file).

    Args:
        path: the ``.npz`` to write.
        num: how many images will be added in all (written in the array header up front).
    """

    def __init__(self, path: str | os.PathLike, num: int):
        from arvis.utils.files import create_temporary

        if isinstance(num, bool) or not isinstance(num, int) or num < 1:
            raise ValueError(f"num must be an integer >= 1, got {num!r}")
        self.path, self.num = Path(path), num
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = create_temporary(self.path)
        self._zip = zipfile.ZipFile(self._tmp, "w", zipfile.ZIP_STORED, allowZip64=True)
        self._member: IO[bytes] | None = None
        self._shape: tuple[int, int] | None = None
        self.count = 0
        self.labels: list[int] = []

    def add(self, images: np.ndarray, labels: Sequence[int] | None = None) -> None:
        """Append ``uint8 [B, H, W, 3]`` images (every batch the same ``H, W``) and, optionally, their labels."""
        if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
            raise ValueError(f"images must be a uint8 array [B, H, W, 3], got "
                             f"{getattr(images, 'dtype', type(images).__name__)} {getattr(images, 'shape', '')}")
        if self.count + images.shape[0] > self.num:
            raise ValueError(f"sample batch: {self.count + images.shape[0]} images added, {self.num} announced")
        if labels is not None and len(labels) != images.shape[0]:
            raise ValueError(f"labels: {len(labels)} for {images.shape[0]} images")
        if (labels is None) != (not self.labels) and self.count:
            raise ValueError("labels: give them with every batch or with none")
        if self._member is None:
            self._shape = (int(images.shape[1]), int(images.shape[2]))
            self._member = self._zip.open(f"{IMAGES_KEY}.npy", "w", force_zip64=True)
            np.lib.format.write_array_header_1_0(self._member, {
                "descr": np.lib.format.dtype_to_descr(np.dtype(np.uint8)), "fortran_order": False,
                "shape": (self.num, *self._shape, 3)})
        elif tuple(images.shape[1:3]) != self._shape:
            raise ValueError(f"images: size {tuple(images.shape[1:3])} after {self._shape}; a batch holds one size")
        self._member.write(np.ascontiguousarray(images).tobytes())
        self.count += images.shape[0]
        if labels is not None:
            self.labels += [int(v) for v in labels]

    def close(self) -> Path:
        """Finish the archive (``arr_1`` when labels were given) and move it onto ``path``."""
        if self.count != self.num:
            self.abort()
            raise ValueError(f"sample batch: {self.count} images added, {self.num} announced; nothing written")
        assert self._member is not None
        self._member.close()
        if self.labels:
            with self._zip.open(f"{LABELS_KEY}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asarray(self.labels, dtype=np.int64), allow_pickle=False)
        self._zip.close()
        os.replace(self._tmp, self.path)
        return self.path

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            if self._member is not None:
                self._member.close()
            self._zip.close()
        with contextlib.suppress(FileNotFoundError):
            self._tmp.unlink()

    def __enter__(self) -> SampleBatchWriter:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def recording(source: Callable[[Sequence[int]], np.ndarray], writer: SampleBatchWriter
              ) -> Callable[[Sequence[int]], np.ndarray]:
    """An image source (``indices -> uint8 [B, H, W, 3]``) that also adds every batch it returns to ``writer``,
    with each image's class label when ``source`` has a ``condition(i)`` giving one (:class:`PipelineSampler`)."""

    def draw(indices: Sequence[int]) -> np.ndarray:
        images = source(indices)
        conditions = [source.condition(i) for i in indices] if hasattr(source, "condition") else []
        labels = [c["label"] for c in conditions] if conditions and all("label" in c for c in conditions) else None
        writer.add(images, labels)
        return images

    draw.name = getattr(source, "name", "generator")  # type: ignore[attr-defined]
    return draw


def write_sample_batch(path: str | os.PathLike, images: np.ndarray, labels: Sequence[int] | None = None) -> Path:
    """Write ``uint8 [N, H, W, 3]`` images (and labels) as an ADM sample batch, atomically."""
    with SampleBatchWriter(path, int(images.shape[0])) as writer:
        writer.add(images, labels)
    return Path(path)


@dataclass
class BatchFile:
    """What an ADM-layout ``.npz`` holds: ``count`` images of ``image_size`` (``0`` / ``None`` without
    ``arr_0``), whether it has labels, and precomputed statistics (``mu`` / ``sigma``, or ``None``)."""

    path: Path
    count: int
    image_size: tuple[int, int] | None
    has_labels: bool
    mu: np.ndarray | None
    sigma: np.ndarray | None

    def iter_images(self, batch_size: int = 64) -> Iterator[np.ndarray]:
        """``arr_0`` in order, ``batch_size`` images at a time, read from the archive as it goes."""
        if self.image_size is None:
            raise ValueError(f"{str(self.path)!r} holds no images ({IMAGES_KEY})")
        h, w = self.image_size
        with zipfile.ZipFile(self.path) as z, z.open(f"{IMAGES_KEY}.npy") as f:
            _read_header(f, self.path)
            for start in range(0, self.count, batch_size):
                n = min(batch_size, self.count - start)
                data = f.read(n * h * w * 3)
                if len(data) != n * h * w * 3:
                    raise ValueError(f"{str(self.path)!r}: {IMAGES_KEY} is truncated (ends before image {start + n})")
                yield np.frombuffer(data, dtype=np.uint8).reshape(n, h, w, 3)

    def labels(self) -> np.ndarray | None:
        if not self.has_labels:
            return None
        with np.load(self.path, allow_pickle=False) as z:
            return z[LABELS_KEY]


def _read_header(f: IO[bytes], path: Path) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(f)
    if fortran or dtype != np.uint8 or len(shape) != 4 or shape[-1] != 3:
        raise ValueError(f"{str(path)!r}: {IMAGES_KEY} must be uint8 [N, H, W, 3] in C order (ADM's layout), got "
                         f"{dtype} {tuple(shape)}{' in Fortran order' if fortran else ''}")
    return shape, fortran, dtype


def open_batch(path: str | os.PathLike, argument: str = "batch") -> BatchFile:
    """Read an ADM-layout ``.npz``'s contents list, image shape and statistics (images stay on disk).

    Raises:
        ValueError: missing file, not an ``.npz``, ``arr_0`` of the wrong layout, ``mu`` without ``sigma``
            or of mismatched sizes, or neither images nor statistics.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{argument}: no such file {str(path)!r}")
    try:
        with np.load(path, allow_pickle=False) as z:
            names = set(z.files)
            mu = np.asarray(z["mu"], dtype=np.float64) if "mu" in names else None
            sigma = np.asarray(z["sigma"], dtype=np.float64) if "sigma" in names else None
        count, size = 0, None
        if IMAGES_KEY in names:
            with zipfile.ZipFile(path) as zf, zf.open(f"{IMAGES_KEY}.npy") as f:
                shape, _, _ = _read_header(f, path)
            count, size = int(shape[0]), (int(shape[1]), int(shape[2]))
    except (OSError, ValueError, zipfile.BadZipFile, KeyError) as err:
        raise ValueError(f"{argument}: {str(path)!r} is not a readable .npz batch ({err})") from None
    if (mu is None) != (sigma is None):
        raise ValueError(f"{argument}: {str(path)!r} has {'mu' if sigma is None else 'sigma'} without "
                         f"{'sigma' if sigma is None else 'mu'}")
    if mu is not None and (mu.ndim != 1 or sigma.shape != (mu.shape[0], mu.shape[0])):
        raise ValueError(f"{argument}: {str(path)!r}: mu {mu.shape} and sigma {sigma.shape} do not fit "
                         f"(expected [D] and [D, D])")
    if size is None and mu is None:
        raise ValueError(f"{argument}: {str(path)!r} holds neither images ({IMAGES_KEY}) nor statistics (mu, sigma)")
    return BatchFile(path=path, count=count, image_size=size, has_labels=LABELS_KEY in names, mu=mu, sigma=sigma)


def write_folder_batch(folder: str | os.PathLike, path: str | os.PathLike, batch_size: int = 64) -> Path:
    """Pack a folder's images into an ADM sample batch, in file order, with the labels of a sampling job's
    ``manifest.json`` when it has them (``eval/sample.py`` writes one).

    Raises:
        ValueError: no images, images of mixed sizes, or an unfinished sampling job.
    """
    import json

    from PIL import Image

    from arvis.eval.files import check_same_size, list_images

    files = list_images(folder)
    check_same_size(files)
    labels = None
    manifest = Path(folder) / "manifest.json"
    if manifest.is_file():
        record = json.loads(manifest.read_text())
        if not record.get("complete"):
            raise ValueError(f"folder: the sampling job in {str(folder)!r} is unfinished; finish it (--resume) first")
        by_file = {r["file"]: r.get("label") for r in record.get("images", [])}
        if all(by_file.get(f.name) is not None for f in files):
            labels = [int(by_file[f.name]) for f in files]
    with SampleBatchWriter(path, len(files)) as writer:
        for start in range(0, len(files), batch_size):
            chunk = files[start:start + batch_size]
            images = []
            for f in chunk:
                with Image.open(f) as im:
                    images.append(np.asarray(im.convert("RGB")))
            writer.add(np.stack(images), None if labels is None else labels[start:start + len(chunk)])
    return Path(path)
