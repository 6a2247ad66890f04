"""Safe reading and atomic writing of weight files.

Safetensors is the default everywhere. Pickled checkpoints (the official LlamaGen / VAR / MAR ``.pt``
and ``.pth`` files) are read only through ``torch.load(weights_only=True)`` with an explicit, short
allowlist of globals: a pickle that asks for anything else (``os.system``, arbitrary classes…) is
refused before any of its code can run.

Loaded tensors are checked before they reach a model (:func:`check_tensor_values`): every value a
tensor, every tensor floating point. A safetensors file's names, shapes and dtypes can be read from its
header without loading a tensor (:func:`read_safetensors_header`), so a configuration can be checked
against the file before anything is allocated (:mod:`arvis.utils.config_check`). Every refusal is a
:class:`~arvis.errors.CheckpointError` naming the file and the tensor.

Weights are written atomically through :mod:`arvis.utils.files`.
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from arvis.errors import CheckpointError
from arvis.utils.files import atomic_path

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
        CheckpointError: the file is missing, unreadable, truncated/corrupt, or asks to unpickle a
            global that is not on the allowlist (in which case nothing from it was executed).
    """
    path = Path(path)
    _check_is_file(path)
    allow = list(SAFE_PICKLE_GLOBALS) + list(extra_safe_globals)
    try:
        with torch.serialization.safe_globals(allow):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises UnpicklingError, RuntimeError, EOFError… depending on damage
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        if "Unsupported global" in str(err) or "weights_only" in str(err):
            raise CheckpointError(
                f"checkpoint {str(path)!r} was refused: it asks to unpickle an object that is not on arvis's "
                f"allowlist ({message}). arvis never unpickles arbitrary objects; convert the file to "
                f"safetensors, or pass the class in extra_safe_globals if you trust it."
            ) from None
        raise CheckpointError(
            f"checkpoint {str(path)!r} could not be read ({type(err).__name__}: {message}); "
            f"is it unreadable, truncated or not a torch checkpoint?"
        ) from None


def _check_is_file(path: Path) -> None:
    if not path.exists():
        raise CheckpointError(f"checkpoint: no such file {str(path)!r}")
    if not path.is_file():
        raise CheckpointError(f"checkpoint: {str(path)!r} is not a file")


def load_state_dict_file(path: str | os.PathLike) -> dict[str, Any]:
    """Read a weights file: safetensors, or a pickled checkpoint through :func:`load_pickle_checkpoint`.

    Returns the raw top-level object for pickles (a dict; the caller picks the state dict inside) and
    the flat tensor dict for safetensors.

    Raises:
        CheckpointError: missing, unreadable or damaged file, or an unknown file type.
    """
    path = Path(path)
    _check_is_file(path)
    if path.suffix in SAFETENSORS_SUFFIXES:
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path), device="cpu")
        except (SafetensorError, OSError, ValueError, RuntimeError) as err:
            raise CheckpointError(f"checkpoint {str(path)!r} could not be read as safetensors: {err}") from None
    if path.suffix in PICKLE_SUFFIXES:
        obj = load_pickle_checkpoint(path)
        if not isinstance(obj, Mapping):
            raise CheckpointError(
                f"checkpoint {str(path)!r}: expected a dict at the top level, got {type(obj).__name__}")
        return dict(obj)
    raise CheckpointError(
        f"checkpoint {str(path)!r}: unknown file type {path.suffix!r}; expected one of "
        f"{SAFETENSORS_SUFFIXES + PICKLE_SUFFIXES}"
    )



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
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"{source}: expected a dict at the top level, got {type(obj).__name__}")
    args = obj.get("args")
    if key == "auto":
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return dict(obj), None
        for candidate in CHECKPOINT_WEIGHT_KEYS:
            if isinstance(obj.get(candidate), Mapping):
                return dict(obj[candidate]), args
        raise CheckpointError(
            f"{source}: found no weights; top-level keys are {sorted(map(str, obj))[:10]}, expected a flat "
            f"state dict or one of {CHECKPOINT_WEIGHT_KEYS}"
        )
    if not isinstance(obj.get(key), Mapping):
        raise CheckpointError(f"{source}: no {key!r} entry; top-level keys are {sorted(map(str, obj))[:10]}")
    return dict(obj[key]), args


def check_state_dict(module: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], source: str,
                     ignore_prefixes: tuple[str, ...] = (), ignore_substrings: tuple[str, ...] = ()) -> None:
    """Raise one :class:`CheckpointError` listing missing keys, unexpected keys and shape mismatches."""

    def ignored(k: str) -> bool:
        return k.startswith(ignore_prefixes) or any(s in k for s in ignore_substrings)

    expected = {k: tuple(v.shape) for k, v in module.state_dict().items() if not ignored(k)}
    given = {k: tuple(v.shape) for k, v in state_dict.items() if not ignored(k)}
    compare_shapes(expected, given, f"{source} does not fit {type(module).__name__}")


def compare_shapes(expected: Mapping[str, tuple[int, ...]], given: Mapping[str, tuple[int, ...]], what: str) -> None:
    """Raise one :class:`CheckpointError` ``"{what}: …"`` listing missing, unexpected and mis-shaped tensors.

    Args:
        expected: tensor name → shape the model needs.
        given: tensor name → shape the file holds.
        what: the start of the message, naming the file (and the model).
    """
    missing = sorted(set(expected) - set(given))
    unexpected = sorted(set(given) - set(expected))
    mismatched = [
        f"{k}: checkpoint {tuple(given[k])} vs model {tuple(expected[k])}"
        for k in sorted(set(expected) & set(given))
        if tuple(given[k]) != tuple(expected[k])
    ]
    if missing or unexpected or mismatched:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing keys (e.g. {missing[:5]})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected keys (e.g. {unexpected[:5]})")
        if mismatched:
            parts.append(f"{len(mismatched)} shape mismatches (e.g. {mismatched[:3]})")
        raise CheckpointError(f"{what}: " + "; ".join(parts))


# Floating-point dtypes a weight may have, as torch dtypes and as safetensors header names.
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
SAFETENSORS_FLOAT_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def check_tensor_values(state_dict: Mapping[str, Any], source: str) -> torch.dtype:
    """Check that every value is a floating-point tensor holding its own values; return the dtype to load them in.

    Weights of integer, bool or complex dtype would load into a model "successfully" (``assign=True``
    keeps them) and give a wrong model or a confusing error at the first forward; non-tensor values
    would fail deep inside ``load_state_dict``. Both are refused here, naming the key.

    A pickle can also hold *views*: an expanded (stride-0) tensor of one stored value, or many tensors
    viewing one storage, asks for gigabytes from a file of kilobytes once it is cast or copied. So the
    values a state dict asks for may not exceed the bytes of the storages it holds (identical views,
    e.g. tied weights, counted once): memory follows the file's size, times the dtype cast.

    Returns:
        The common dtype; ``torch.float32`` when the file mixes floating dtypes (e.g. fp16 weights with
        fp32 norms), so that every parameter of the model has one dtype.

    Raises:
        CheckpointError: a value is not a tensor, a tensor is not floating point, a tensor has more
            elements than its storage holds, or all of them more than their storages hold together.
    """
    dtypes: set[torch.dtype] = set()
    storages: dict[int, int] = {}  # storage address -> bytes
    views: set[tuple] = set()
    asked = 0
    for key, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"{source}: {key!r} is a {type(value).__name__}, not a tensor")
        if value.dtype not in FLOAT_DTYPES:
            raise CheckpointError(f"{source}: {key!r} has dtype {value.dtype}; weights must be floating point "
                                  f"({', '.join(str(d) for d in FLOAT_DTYPES)})")
        dtypes.add(value.dtype)
        storage = value.untyped_storage()
        size = value.numel() * value.element_size()
        if size > storage.nbytes():
            raise CheckpointError(f"{source}: {key!r} is a {tuple(value.shape)} view of {storage.nbytes()} stored bytes "
                                  f"(an expanded, stride-0 tensor): it asks for {size} bytes, more than the file holds "
                                  f"for it; a weights file must store every value")
        storages[storage.data_ptr()] = storage.nbytes()
        view = (storage.data_ptr(), value.storage_offset(), tuple(value.shape), value.stride(), value.dtype)
        if view not in views:
            views.add(view)
            asked += size
    held = sum(storages.values())
    if asked > held:
        raise CheckpointError(f"{source}: its tensors ask for {asked} bytes but view only {held} stored bytes (tensors "
                              f"sharing one storage): more than the file holds; a weights file must store every value")
    return dtypes.pop() if len(dtypes) == 1 else torch.float32


def to_common_dtype(state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``state_dict`` with every tensor of another dtype cast to ``dtype`` (others shared, not copied)."""
    return {k: v if v.dtype == dtype else v.to(dtype) for k, v in state_dict.items()}


@dataclass(frozen=True)
class SafetensorsHeader:
    """What a safetensors file declares, read without loading a tensor.

    Attributes:
        shapes: tensor name → shape.
        dtypes: tensor name → safetensors dtype name (``"F32"``, ``"BF16"``, ``"I64"``…).
        metadata: the free-form string metadata (``{}`` when absent).
    """

    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]
    metadata: dict[str, str]

    def check_floating(self, source: str, allow: tuple[str, ...] = ()) -> None:
        """Raise :class:`CheckpointError` naming the first tensor whose dtype is not floating point (tensors whose
        name ends with one of ``allow`` excepted: integer buffers a module keeps, e.g. BatchNorm's counters)."""
        for key, dtype in self.dtypes.items():
            if dtype not in SAFETENSORS_FLOAT_DTYPES and not (allow and key.endswith(allow)):
                raise CheckpointError(f"{source}: {key!r} has dtype {dtype}; weights must be floating point "
                                      f"({', '.join(SAFETENSORS_FLOAT_DTYPES)})")


# Safetensors metadata key under which arvis records the configuration a model was saved with: the fields
# that no tensor shape reveals (a head count, a norm epsilon) can then be checked against config.json.
CONFIG_METADATA_KEY = "arvis_config"


def add_safetensors_metadata(path: str | os.PathLike, metadata: Mapping[str, str]) -> None:
    """Add string ``metadata`` to a safetensors file's header, atomically; the tensor bytes are copied as they
    are (streamed, never loaded). The header stays 8-byte aligned as the format requires."""
    import json

    path = Path(path)
    with open(path, "rb") as src:
        size = int.from_bytes(src.read(8), "little")
        header = json.loads(src.read(size))
        header["__metadata__"] = {**header.get("__metadata__", {}), **{str(k): str(v) for k, v in metadata.items()}}
        encoded = json.dumps(header, separators=(",", ":")).encode()
        encoded += b" " * (-len(encoded) % 8)
        with atomic_path(path) as tmp, open(tmp, "wb") as dst:
            dst.write(len(encoded).to_bytes(8, "little"))
            dst.write(encoded)
            shutil.copyfileobj(src, dst, 1 << 20)


def read_safetensors_header(path: str | os.PathLike) -> SafetensorsHeader:
    """Names, shapes, dtypes and metadata of a safetensors file; no tensor is loaded.

    Raises:
        CheckpointError: the file is missing, unreadable or not a valid safetensors file.
    """
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    _check_is_file(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            shapes, dtypes = {}, {}
            for key in f.keys():
                info = f.get_slice(key)
                shapes[key], dtypes[key] = tuple(int(n) for n in info.get_shape()), str(info.get_dtype())
            metadata = dict(f.metadata() or {})
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"checkpoint {str(path)!r} could not be read as safetensors: {err}") from None
    return SafetensorsHeader(shapes=shapes, dtypes=dtypes, metadata=metadata)
