"""Safe reading and atomic writing of weight files.

Safetensors is the default everywhere. Pickled checkpoints (the official LlamaGen / VAR / MAR ``.pt``
and ``.pth`` files) are read only through ``torch.load(weights_only=True)`` with an explicit, short
allowlist of globals: a pickle that asks for anything else (``os.system``, arbitrary classes…) is
refused before any of its code can run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

# The only non-tensor, non-builtin objects official checkpoints pickle: LlamaGen stores its
# training arguments as an argparse.Namespace under "args".
SAFE_PICKLE_GLOBALS: tuple[Any, ...] = (argparse.Namespace,)

SAFETENSORS_SUFFIXES = (".safetensors",)
PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")


def load_pickle_checkpoint(path: str | os.PathLike, extra_safe_globals: tuple[Any, ...] = ()) -> Any:
    """Load a pickled torch checkpoint safely (``weights_only=True`` + allowlist).

    Args:
        path: the ``.pt`` / ``.pth`` file.
        extra_safe_globals: further classes the caller vouches for (default none).

    Raises:
        ValueError: the file is missing, truncated/corrupt, or asks to unpickle a global that is
            not on the allowlist (in which case nothing from it was executed).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint: no such file {str(path)!r}")
    allow = list(SAFE_PICKLE_GLOBALS) + list(extra_safe_globals)
    try:
        with torch.serialization.safe_globals(allow):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises UnpicklingError, RuntimeError, EOFError… depending on damage
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        if "Unsupported global" in str(err) or "weights_only" in str(err):
            raise ValueError(
                f"checkpoint {str(path)!r} was refused: it asks to unpickle an object that is not on arvis's "
                f"allowlist ({message}). arvis never unpickles arbitrary objects; convert the file to "
                f"safetensors, or pass the class in extra_safe_globals if you trust it."
            ) from None
        raise ValueError(
            f"checkpoint {str(path)!r} could not be read ({type(err).__name__}: {message}); "
            f"is it truncated or not a torch checkpoint?"
        ) from None


def load_state_dict_file(path: str | os.PathLike) -> dict[str, Any]:
    """Read a weights file: safetensors, or a pickled checkpoint through :func:`load_pickle_checkpoint`.

    Returns the raw top-level object for pickles (a dict; the caller picks the state dict inside) and
    the flat tensor dict for safetensors.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint: no such file {str(path)!r}")
    if path.suffix in SAFETENSORS_SUFFIXES:
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path), device="cpu")
        except (SafetensorError, OSError, ValueError) as err:
            raise ValueError(f"checkpoint {str(path)!r} could not be read as safetensors: {err}") from None
    if path.suffix in PICKLE_SUFFIXES:
        obj = load_pickle_checkpoint(path)
        if not isinstance(obj, Mapping):
            raise ValueError(f"checkpoint {str(path)!r}: expected a dict at the top level, got {type(obj).__name__}")
        return dict(obj)
    raise ValueError(
        f"checkpoint {str(path)!r}: unknown file type {path.suffix!r}; expected one of "
        f"{SAFETENSORS_SUFFIXES + PICKLE_SUFFIXES}"
    )


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it is renamed onto ``path`` atomically.

    Readers never see a half-written file: on error the temporary file is removed and ``path`` is
    untouched. The temporary name ends in ``.tmp`` so folder scanners can skip it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


def save_pickle_checkpoint(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` written atomically (used to export the official ``.pt`` layouts)."""
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def save_safetensors(tensors: Mapping[str, torch.Tensor], path: str | os.PathLike,
                     metadata: Mapping[str, str] | None = None) -> None:
    """Write a safetensors file atomically (tensors made contiguous)."""
    from safetensors.torch import save_file

    with atomic_path(path) as tmp:
        save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(tmp),
                  metadata=dict(metadata) if metadata else None)


# Where official training scripts put the weights inside a pickled checkpoint, in the order
# ``key="auto"`` looks for them (LlamaGen DDP: "model"; DeepSpeed: "module"; Lightning: "state_dict").
CHECKPOINT_WEIGHT_KEYS = ("model", "ema", "module", "state_dict")


def extract_state_dict(obj: Mapping[str, Any], key: str = "auto", source: str = "checkpoint"
                       ) -> tuple[dict[str, torch.Tensor], Any]:
    """Pick the weights out of a loaded checkpoint.

    Args:
        obj: what :func:`load_state_dict_file` returned.
        key: ``"auto"`` (first of ``model``, ``ema``, ``module``, ``state_dict`` that is present, or the
            object itself when it is already a flat tensor dict), or one of those names explicitly.
        source: a name for error messages (usually the path).

    Returns:
        ``(state_dict, args)`` where ``args`` is the pickled training-arguments object if any.
    """
    if key != "auto" and key not in CHECKPOINT_WEIGHT_KEYS:
        raise ValueError(f"key must be 'auto' or one of {CHECKPOINT_WEIGHT_KEYS}, got {key!r}")
    args = obj.get("args")
    if key == "auto":
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return dict(obj), None
        for candidate in CHECKPOINT_WEIGHT_KEYS:
            if isinstance(obj.get(candidate), Mapping):
                return dict(obj[candidate]), args
        raise ValueError(
            f"{source}: found no weights; top-level keys are {sorted(obj)[:10]}, expected a flat "
            f"state dict or one of {CHECKPOINT_WEIGHT_KEYS}"
        )
    if not isinstance(obj.get(key), Mapping):
        raise ValueError(f"{source}: no {key!r} entry; top-level keys are {sorted(obj)[:10]}")
    return dict(obj[key]), args


def check_state_dict(module: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], source: str,
                     ignore_prefixes: tuple[str, ...] = (), ignore_substrings: tuple[str, ...] = ()) -> None:
    """Raise one clear ``ValueError`` listing missing keys, unexpected keys and shape mismatches."""

    def ignored(k: str) -> bool:
        return k.startswith(ignore_prefixes) or any(s in k for s in ignore_substrings)

    expected = {k: v for k, v in module.state_dict().items() if not ignored(k)}
    given = {k: v for k, v in state_dict.items() if not ignored(k)}
    missing = sorted(set(expected) - set(given))
    unexpected = sorted(set(given) - set(expected))
    mismatched = [
        f"{k}: checkpoint {tuple(given[k].shape)} vs model {tuple(expected[k].shape)}"
        for k in sorted(set(expected) & set(given))
        if tuple(given[k].shape) != tuple(expected[k].shape)
    ]
    if missing or unexpected or mismatched:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing keys (e.g. {missing[:5]})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected keys (e.g. {unexpected[:5]})")
        if mismatched:
            parts.append(f"{len(mismatched)} shape mismatches (e.g. {mismatched[:3]})")
        raise ValueError(f"{source} does not fit {type(module).__name__}: " + "; ".join(parts))
