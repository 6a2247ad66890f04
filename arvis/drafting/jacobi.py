"""Initial drafts for Jacobi windows (SJD, MC-SJD): the proposal for a window slot seen for the first time.

Every initialisation returns the draft *and the distribution it was drawn from* — losslessness
depends on that ``q`` being right:

- ``random``: ``d ~ Uniform(image vocabulary)`` with a uniform ``q`` (the references pair random drafts
  with a one-hot ``q``, which makes them almost never accepted; a uniform ``q`` accepts with
  probability ``1 − TV(p, uniform)``, still exactly);
- ``repeat_horizontal`` / ``repeat_vertical``: copy the left / upper neighbour's current token
  (committed or drafted), one-hot ``q`` (upper falls back to left on the first row);
- ``neighbour_distribution``: draw from the distribution of the upper neighbour (left on the first
  row) — its committing ``p``, or its current draft distribution — with ``q`` = that distribution.

A slot's neighbour may itself be a new slot of the same window; chains are resolved in rounds.
A slot whose neighbour is unknown gets no draft (``q = 0``).
"""

from __future__ import annotations

import torch

from arvis.utils.random import sample_categorical

JACOBI_INITS = ("random", "repeat_horizontal", "repeat_vertical", "neighbour_distribution")


def neighbour_index(index: torch.Tensor, width: int, strategy: str) -> torch.Tensor:
    """The sequence index each slot copies from (``-1`` = none, only for index 0)."""
    if strategy == "repeat_horizontal":
        return index - 1
    return torch.where(index >= width, index - width, index - 1)


def initial_drafts(strategy: str, index: torch.Tensor, need: torch.Tensor, tokens: torch.Tensor,
                   dists: torch.Tensor | None, width: int, vocab_size: int, noise: torch.Tensor | None,
                   image_token_range: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Drafts and their distributions for the window slots where ``need`` is set.

    Args:
        strategy: one of :data:`JACOBI_INITS`.
        index: ``[A, K]`` sequence index of each window slot.
        need: ``[A, K]`` bool, slots to initialise.
        tokens: ``[A, N]`` current token per sequence index (committed or drafted; -1 unknown).
            Updated in place at the initialised slots (so later chains see them).
        dists: ``[A, N, V]`` distribution per sequence index (``neighbour_distribution`` only; updated
            in place at the initialised slots).
        width: grid width (for vertical neighbours).
        vocab_size: ``V``.
        noise: ``[A, K, V]`` Exp(1) noise for the sampled initialisations (``random``,
            ``neighbour_distribution``); with Gumbel coupling it is the fixed per-position noise.
        image_token_range: ``[lo, hi)`` of image tokens (random drafts stay inside it).

    Returns:
        ``(drafts [A, K], q [A, K, V])``; entries where ``need`` is false are zeros.
    """
    if strategy not in JACOBI_INITS:
        raise ValueError(f"init must be one of {JACOBI_INITS}, got {strategy!r}")
    A, K = index.shape
    N = tokens.shape[1]
    drafts = torch.zeros(A, K, dtype=torch.long, device=index.device)
    q = torch.zeros(A, K, vocab_size, device=index.device)
    if not bool(need.any()):  # host sync, once per window update
        return drafts, q
    if strategy == "random":
        lo, hi = image_token_range or (0, vocab_size)
        uniform = torch.zeros(vocab_size, device=index.device)
        uniform[lo:hi] = 1.0 / (hi - lo)
        drafts = torch.where(need, sample_categorical(uniform.expand(A, K, -1), noise), 0)
        q = torch.where(need[..., None], uniform, 0.0)
        safe = index.clamp(0, N - 1)
        tokens.scatter_(1, safe, torch.where(need, drafts, tokens.gather(1, safe)))
        return drafts, q

    nb = neighbour_index(index, width, strategy).clamp(0, N - 1)  # [A, K]
    safe = index.clamp(0, N - 1)
    pending = need.clone()
    # Each round initialises the slots whose neighbour is already known; a chain of k new slots takes k rounds.
    for _ in range(K):
        nb_tok = tokens.gather(1, nb)
        ready = pending & (nb_tok >= 0)
        if strategy == "neighbour_distribution":
            assert dists is not None and noise is not None
            nb_dist = dists.gather(1, nb[..., None].expand(-1, -1, vocab_size))  # [A, K, V]
            ready &= nb_dist.sum(-1) > 0
            new = sample_categorical(nb_dist, noise)
            q = torch.where(ready[..., None], nb_dist, q)
            dists.scatter_(1, safe[..., None].expand(-1, -1, vocab_size),
                           torch.where(ready[..., None], nb_dist, dists.gather(1, safe[..., None].expand(-1, -1, vocab_size))))
        else:
            new = nb_tok.clamp_min(0)
            q = torch.where(ready[..., None], torch.nn.functional.one_hot(new, vocab_size).float(), q)
        drafts = torch.where(ready, new, drafts)
        tokens.scatter_(1, safe, torch.where(ready, new, tokens.gather(1, safe)))
        pending &= ~ready
        # host sync per round (rounds ≈ tokens committed this iteration)
        if not bool(pending.any()) or not bool(ready.any()):
            break
    # Slots whose neighbour is unknown (e.g. before a Jacobi interval starts) stay empty: q = 0 means
    # "no draft", which verification treats as a window boundary.
    return drafts, q
