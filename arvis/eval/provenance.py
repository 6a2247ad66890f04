"""What every evaluation record says about where it came from: versions, git commit, threads, machine."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

_REPO = Path(__file__).resolve().parents[2]


def git_commit(repo: str | os.PathLike = _REPO) -> tuple[str, bool | None]:
    """``(commit, dirty)`` of the arvis checkout, or ``("unknown", None)`` outside a git work tree."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                                capture_output=True, text=True, timeout=20, check=True).stdout
        return commit or "unknown", bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        return "unknown", None


def versions() -> dict[str, str]:
    """Versions of the packages a figure depends on."""
    import numpy

    import arvis

    out = {"arvis": arvis.__version__, "torch": torch.__version__, "numpy": numpy.__version__,
           "python": platform.python_version()}
    for dist in ("diffusers", "clean-fid", "open_clip_torch"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:  # optional dependency not installed: not recorded
            pass
    return out


def provenance(device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> dict[str, Any]:
    """The shared fields of every JSON record: versions, commit, threads, dtype, device, machine, time."""
    commit, dirty = git_commit()
    return {
        "versions": versions(),
        "git_commit": commit,
        "git_dirty": dirty,
        "threads": torch.get_num_threads(),
        "dtype": str(dtype).removeprefix("torch.") if dtype is not None else None,
        "device": str(device),
        "machine": {"platform": platform.platform(), "processor": platform.machine(), "cpus": os.cpu_count()},
        "timestamp": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
