"""On-disk cache for generated data sets: ``.npz`` files written atomically under one directory.

The directory is ``$ARVIS_CACHE`` when set, else ``~/.cache/arvis/data``. Files are named by a hash of
everything that determines their content, so a stale file is never read for new parameters.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from arvis.utils.files import atomic_path

__all__ = ["cache_dir", "cache_path", "load_npz", "save_npz_atomic"]

# Bump when a generator's output changes for the same parameters, to invalidate old cache files.
DATA_VERSION = 1


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """Cache directory: ``override``, else ``$ARVIS_CACHE``, else ``~/.cache/arvis/data``."""
    if override is not None:
        return Path(override)
    env = os.environ.get("ARVIS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "arvis" / "data"


def cache_path(kind: str, params: dict[str, Any], directory: str | os.PathLike | None = None) -> Path:
    """Path of the cache file for data set ``kind`` built with ``params`` (JSON-serialisable)."""
    blob = json.dumps({"kind": kind, "version": DATA_VERSION, **params}, sort_keys=True, default=str)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:16]
    return cache_dir(directory) / f"{kind}-{digest}.npz"


def save_npz_atomic(path: str | os.PathLike, **arrays: np.ndarray) -> Path:
    """Write ``arrays`` to ``path`` (.npz, uncompressed) through a temp file and ``os.replace``."""
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)
    return path


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Load every array of an ``.npz`` file into memory (no pickles)."""
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}
