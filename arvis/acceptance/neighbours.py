"""Latent neighbourhoods of a tokenizer's codebook (LANTERN): each token's nearest codebook entries.

Computed in row chunks so a 16,384-entry codebook never needs its full V×V distance matrix (the
reference loads a 0.5 GB table); only the first ``k`` neighbours are kept. Pure tensor math; callers
cache the result (:func:`arvis.methods.relaxation.codebook_neighbourhoods`).
"""

from __future__ import annotations

import torch


def nearest_neighbours(embeddings: torch.Tensor, k: int, chunk_size: int = 1024,
                       valid: torch.Tensor | None = None) -> torch.Tensor:
    """The ``k`` nearest other entries of every codebook row, by L2 distance, nearest first.

    Args:
        embeddings: ``[V, D]`` codebook vectors (as the decoder sees them, e.g. l2-normalised).
        k: neighbours kept per token (capped at ``V − 1``).
        chunk_size: rows per distance block (memory ``chunk_size × V``).
        valid: ``[V]`` bool, tokens that may be neighbours and have neighbours (image tokens); the
            others get ``-1`` rows and never appear in a list.

    Returns:
        ``[V, k]`` int64 neighbour ids (``-1`` padding). Ties break toward the smaller id.
    """
    V = embeddings.shape[0]
    k = min(k, V - 1)
    emb = embeddings.detach().double()
    sq = (emb * emb).sum(-1)
    valid = torch.ones(V, dtype=torch.bool) if valid is None else valid.to(torch.bool).cpu()
    out = torch.full((V, k), -1, dtype=torch.long)
    ids = torch.arange(V)
    for start in range(0, V, chunk_size):
        block = emb[start:start + chunk_size]
        d = sq[start:start + chunk_size, None] + sq[None, :] - 2.0 * block @ emb.T  # [c, V]
        d[torch.arange(block.shape[0]), ids[start:start + chunk_size]] = float("inf")  # not itself
        d[:, ~valid] = float("inf")
        # Stable order on (distance, id): sort by id first is implicit; topk is not stable, so sort.
        order = torch.sort(d, dim=-1, stable=True).indices[:, :k]
        dist = d.gather(-1, order)
        order = torch.where(torch.isinf(dist), -1, order)
        out[start:start + chunk_size] = order
    out[~valid] = -1
    return out
