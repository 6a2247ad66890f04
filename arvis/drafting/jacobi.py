"""Initial drafts for Jacobi decoding (SJD, MC-SJD): the proposal for a position drafted for the first time.

Every initialisation records *the distribution the draft was drawn from* — losslessness depends on
that ``q`` being right:

- ``random``: ``d ~ Uniform(image vocabulary)`` with a uniform ``q`` (the references pair random drafts
  with a one-hot ``q``: still exact, since any draft independent of the coin may be verified against
  a one-hot ``q``, but it is accepted with probability ``p(d)`` only; a uniform ``q`` accepts with
  probability ``1 − TV(p, uniform)``);
- ``repeat_horizontal`` / ``repeat_vertical``: copy the left / upper neighbour's current token
  (committed or drafted), one-hot ``q`` (upper falls back to left on the first row);
- ``neighbour_distribution``: draw from the distribution of the upper neighbour (left on the first
  row) — the ``p`` it was committed with, or its current draft distribution — with ``q`` = that
  distribution.

Drafts live in absolute per-sequence-index buffers (``tokens [A, N]``, ``q [A, N, V]``) that the
caller owns; a position's neighbour may itself be initialised in the same call (chains resolve in
rounds). A position whose neighbour is unknown stays without a draft (``q = 0``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from arvis.utils.random import sample_categorical

JACOBI_INITS = ("random", "repeat_horizontal", "repeat_vertical", "neighbour_distribution")


def neighbour_index(index: torch.Tensor, width: int, strategy: str) -> torch.Tensor:
    """The sequence index each position copies from (``repeat_horizontal``: left; else upper, left on row 0)."""
    if strategy == "repeat_horizontal":
        return index - 1
    return torch.where(index >= width, index - width, index - 1)


def fill_drafts(strategy: str, index: torch.Tensor, need: torch.Tensor, tokens: torch.Tensor, q: torch.Tensor,
                width: int, noise: torch.Tensor | None, image_token_range: tuple[int, int] | None = None) -> None:
    """Draft the positions ``index[a, m]`` where ``need[a, m]``, in place.

    Args:
        strategy: one of :data:`JACOBI_INITS`.
        index: ``[A, M]`` sequence indices (entries where ``need`` is false are ignored; they must
            still lie in ``[0, N)``).
        need: ``[A, M]`` bool.
        tokens: ``[A, N]`` current token per index (committed or drafted; -1 where unknown); drafts
            are written here.
        q: ``[A, N, V]`` distribution per index (the committing ``p``, or the draft distribution;
            zeros where unknown); the drafts' ``q`` is written here.
        width: grid width (vertical neighbours).
        noise: ``[A, M, V]`` Exp(1) noise for the sampled initialisations (``random``,
            ``neighbour_distribution``); with Gumbel coupling, the fixed noise of those positions.
        image_token_range: ``[lo, hi)`` of image tokens (random drafts stay inside it).
    """
    if strategy not in JACOBI_INITS:
        raise ValueError(f"init must be one of {JACOBI_INITS}, got {strategy!r}")
    if not bool(need.any()):  # host sync, once per call
        return
    V = q.shape[-1]
    rows = torch.arange(index.shape[0], device=index.device)[:, None].expand_as(index)

    def write(mask: torch.Tensor, new_tokens: torch.Tensor, new_q: torch.Tensor) -> None:
        # Boolean selection, not scatter: padding entries may repeat an index that is being written.
        a, i = rows[mask], index[mask]
        tokens[a, i] = new_tokens[mask]
        q[a, i] = new_q[mask] if new_q.dim() == 3 else new_q

    if strategy == "random":
        lo, hi = image_token_range or (0, V)
        uniform = torch.zeros(V, device=q.device)
        uniform[lo:hi] = 1.0 / (hi - lo)
        write(need, sample_categorical(uniform.expand(*index.shape, V), noise), uniform)
        return

    nb = neighbour_index(index, width, strategy).clamp(0, tokens.shape[1] - 1)
    nb_full = nb[..., None].expand(-1, -1, V)
    pending = need.clone()
    # Each round drafts the positions whose neighbour is known; a chain of k new positions takes k rounds.
    for _ in range(index.shape[1]):
        nb_tok = tokens.gather(1, nb)
        ready = pending & (nb_tok >= 0)
        if strategy == "neighbour_distribution":
            nb_dist = q.gather(1, nb_full)  # [A, M, V]
            ready &= nb_dist.sum(-1) > 0
            new = sample_categorical(nb_dist, noise)
            new_q = nb_dist
        else:
            new = nb_tok.clamp_min(0)
            new_q = F.one_hot(new, V).to(q.dtype)
        write(ready, new, new_q)
        pending &= ~ready
        # host sync per round (rounds ≈ positions newly drafted in a row this iteration)
        if not bool(pending.any()) or not bool(ready.any()):
            break
