"""Prompt batches as decoders read them: token-id sequences left-padded to one length, with their mask."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def left_padded(seqs: Sequence[Sequence[int]], pad_id: int, length: int | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids [B, C] int64, mask [B, C] bool)``: each sequence right-aligned after ``pad_id`` padding.

    Args:
        seqs: token-id sequences (at least one).
        pad_id: the padding id.
        length: ``C`` (default: the longest sequence); ``ValueError`` when a sequence is longer.
    """
    if not seqs:
        raise ValueError("prompt: empty")
    C = length or max(len(s) for s in seqs)
    if any(len(s) > C for s in seqs):
        raise ValueError(f"length: a prompt has {max(len(s) for s in seqs)} tokens, more than {C}")
    ids = torch.full((len(seqs), C), pad_id, dtype=torch.long)
    mask = torch.zeros(len(seqs), C, dtype=torch.bool)
    for b, s in enumerate(seqs):
        if len(s):
            ids[b, C - len(s):] = torch.tensor(list(s), dtype=torch.long)
            mask[b, C - len(s):] = True
    return ids, mask


__all__ = ["left_padded"]
