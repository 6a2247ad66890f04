"""Shared pieces of relaxed acceptance for methods: the neighbourhoods check and cached codebook neighbourhoods."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch

from arvis.acceptance.neighbours import nearest_neighbours
from arvis.acceptance.relaxed import AcceptanceRule
from arvis.methods.base import MissingResourceError

_MEMORY: dict[tuple[str, int], torch.Tensor] = {}


def codebook_neighbourhoods(embeddings: torch.Tensor, k: int, cache_dir: str | os.PathLike | None = None
                            ) -> torch.Tensor:
    """``[V, k]`` nearest-neighbour ids of a codebook, cached in memory and on disk.

    The key is a hash of the codebook's bytes, so a changed tokenizer never reuses stale lists. The
    disk cache lives in ``$ARVIS_CACHE`` (default ``~/.cache/arvis``) as a safetensors file.
    """
    from safetensors.torch import load_file

    from arvis.utils.serialization import save_safetensors

    emb = embeddings.detach().float().cpu().contiguous()
    digest = hashlib.sha256(emb.numpy().tobytes()).hexdigest()[:20]
    key = (digest, k)
    if key in _MEMORY:
        return _MEMORY[key]
    folder = Path(cache_dir or os.environ.get("ARVIS_CACHE", Path.home() / ".cache" / "arvis")) / "neighbours"
    path = folder / f"{digest}-k{k}.safetensors"
    if path.is_file():
        table = load_file(str(path))["neighbours"]
    else:
        table = nearest_neighbours(emb, k)
        try:
            save_safetensors({"neighbours": table}, path)
        except OSError:  # a read-only cache is not an error: the table is recomputed next time
            pass
    _MEMORY[key] = table
    return table


def checked_neighbours(rule: AcceptanceRule, neighbours: torch.Tensor | None) -> torch.Tensor | None:
    """The neighbourhoods a relaxed rule runs with; :class:`MissingResourceError` when they are missing,
    ``ValueError`` when they have fewer than ``k`` columns. Exact rules need none (``None`` returned)."""
    if rule.lossless:
        return None
    if neighbours is None:
        raise MissingResourceError(f"acceptance={rule.kind!r} needs the tokenizer's codebook neighbourhoods "
                                   f"(neighbours=…); the pipelines pass them automatically")
    if neighbours.shape[1] < rule.k:
        raise ValueError(f"k={rule.k} but the neighbourhoods have only {neighbours.shape[1]} columns")
    return neighbours
