"""File helpers for evaluation outputs: atomic PNG / JSON / folder writes, image-folder scanning.

Every file an evaluation writes appears whole or not at all: it is written to a hidden temporary name
ending in ``.tmp`` next to its destination (:func:`arvis.utils.files.atomic_path`) and renamed
onto it. Folder scanners (arvis's and clean-fid's, which globs ``**/*.png`` and skips hidden names)
therefore never count a half-written image; a crash can leave a stale ``.*.tmp`` behind, which
:func:`remove_stale_temporaries` clears before a resumed job starts writing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from glob import glob
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from arvis.utils.files import atomic_path

# The extensions clean-fid's folder reader globs (cleanfid.utils.EXTENSIONS), so that arvis and
# clean-fid always count the same files.
IMAGE_EXTENSIONS: tuple[str, ...] = ("bmp", "jpg", "jpeg", "pgm", "png", "ppm", "tif", "tiff", "webp", "npy",
                                     "JPEG", "JPG", "PNG")
TEMP_SUFFIX = ".tmp"


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def png_bytes(image: Image.Image | np.ndarray) -> bytes:
    """Encode an RGB image (PIL or ``uint8 [H, W, 3]``) as PNG bytes (deterministic for equal pixels)."""
    import io

    if isinstance(image, np.ndarray):
        image = Image.fromarray(image)
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file and an atomic rename."""
    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    return path


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON, atomically."""
    return write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode())


def is_valid_image(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an image PIL can decode completely (a truncated or corrupt file is not)."""
    try:
        with Image.open(path) as im:
            im.load()
        return True
    except (OSError, ValueError, SyntaxError):  # PIL raises these for truncated / corrupt data
        return False


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Delete temporary files (``.*.tmp``) a killed writer left in ``folder``; returns what was removed."""
    folder = Path(folder)
    removed = []
    if folder.is_dir():
        for p in folder.glob(f".*{TEMP_SUFFIX}"):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                removed.append(p)
    return removed


def list_images(folder: str | os.PathLike, argument: str = "folder") -> list[Path]:
    """The image files in ``folder``, exactly as clean-fid's folder reader finds them (recursive, sorted).

    Raises:
        ValueError: ``folder`` does not exist, is not a directory, or holds no images.
    """
    path = Path(folder)
    if not path.exists():
        raise ValueError(f"{argument}: no such folder {str(path)!r}")
    if not path.is_dir():
        raise ValueError(f"{argument}: {str(path)!r} is not a folder")
    files = sorted(Path(f) for ext in IMAGE_EXTENSIONS for f in glob(os.path.join(str(path), f"**/*.{ext}"),
                                                                        recursive=True))
    if not files:
        raise ValueError(f"{argument}: folder {str(path)!r} contains no images "
                         f"(looked for *.{', *.'.join(sorted(set(e.lower() for e in IMAGE_EXTENSIONS)))})")
    return files


def image_size(path: Path) -> tuple[int, int]:
    """``(height, width)`` of an image file, read from its header (``.npy``: from its array shape)."""
    if path.suffix == ".npy":
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        if arr.ndim != 3 or arr.shape[2] != 3:
            raise ValueError(f"{str(path)!r}: expected an [H, W, 3] array, got shape {arr.shape}")
        return int(arr.shape[0]), int(arr.shape[1])
    with Image.open(path) as im:
        return im.height, im.width


def check_same_size(files: list[Path], argument: str = "folder") -> tuple[int, int]:
    """Common ``(height, width)`` of ``files``; ``ValueError`` names files of differing or unreadable sizes."""
    sizes: dict[tuple[int, int], list[Path]] = {}
    for f in files:
        try:
            sizes.setdefault(image_size(f), []).append(f)
        except (OSError, ValueError) as err:
            raise ValueError(f"{argument}: cannot read image {str(f)!r} ({err})") from None
    if len(sizes) > 1:
        parts = [f"{len(v)} of {h}x{w} (e.g. {v[0].name})" for (h, w), v in sorted(sizes.items())]
        raise ValueError(f"{argument}: images of mixed sizes: {'; '.join(parts)}. FID compares images of one "
                         f"size; resize them first (or pass folders of one size)")
    return next(iter(sizes))


