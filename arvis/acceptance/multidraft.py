"""Several drafts for one position, verified exactly: recursive rejection sampling without replacement.

SJD-PAC's proactive drafting (Kang et al., CVPR 2026, arXiv:2603.18599) proposes ``K`` candidate tokens for a
position instead of one. The published verification is not exact (docs/methods.md, "SJD-PAC"); arvis uses
the rule of Recursive Speculative Decoding (Jeon et al., 2024, arXiv:2402.14160), which is:

- the candidates ``c_1 … c_K`` are a draw *without replacement* from the draft distribution ``q``:
  ``c_1 ~ q``, then ``c_2 ~ q`` with ``c_1`` removed and renormalised, and so on (successive sampling;
  :func:`successive_sample` draws ``c_2 …`` given ``c_1``);
- round ``k`` tests ``c_k`` against the target ``p_k`` with the proposal ``q_k`` (``q`` without
  ``c_1 … c_{k−1}``, renormalised): accept iff ``U_k · q_k(c_k) < p_k(c_k)``; on rejection
  ``p_{k+1} = normalize(max(0, p_k − q_k))``, ``p_1 = p``;
- if every candidate is rejected, the token is drawn from ``p_{K+1}``.

Why it is exact: round ``k`` is exact speculative sampling toward ``p_k`` with a draft distributed as
``q_k`` given the earlier candidates, so (by induction from the last round) the token leaving round ``k``
is distributed as ``p_k`` whatever ``c_1 … c_{k−1}`` were; round 1 therefore outputs ``p``. With ``K = 1``
it is the single-draft step of :func:`arvis.acceptance.speculative.speculative_step` (same noise, same token).
Candidates need not exhaust ``q``: missing ones (``has`` false, a suffix) skip their rounds.

With Gumbel coupling (:func:`gumbel_multi_draft`) the token is the Gumbel-max of ``p`` with the position's
fixed noise, and a candidate is accepted iff it equals it — exact for any candidates.

Pure tensor math, fp32 (fp64 inputs stay fp64), vectorised over leading dimensions; the only loop is over
the ``K`` ranks.
"""

from __future__ import annotations

import torch

from arvis.acceptance.coupling import gumbel_argmax
from arvis.acceptance.speculative import _math_dtype, token_probability
from arvis.utils.random import draw


def successive_sample(q: torch.Tensor, first: torch.Tensor, exponential_noise: torch.Tensor, count: int
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidates ``c_2 … c_{count+1}`` after ``c_1 = first``: successive sampling without replacement from ``q``.

    The order of ``q / E`` (``E ~ Exp(1)``, the Gumbel-top-k trick) restricted to tokens other than ``first``
    is successive sampling from ``q`` without ``first``; with the fixed noise of Gumbel coupling it gives the
    runners-up of the position's Gumbel-max.

    Args:
        q: ``[..., V]`` the draft distribution (``first`` was drawn from it).
        first: ``[...]`` the first candidate.
        exponential_noise: ``[..., V]`` Exp(1).
        count: candidates wanted after ``first``.

    Returns:
        ``(candidates [..., count], has [..., count])``: ``has`` is false where ``q`` has no mass left.
    """
    if count == 0:
        empty = first[..., None][..., :0]
        return empty, empty.bool()
    keys = q.to(_math_dtype(q)) / exponential_noise.to(_math_dtype(q))
    keys = keys.scatter(-1, first[..., None], -1.0)  # c_1 is not drawn again
    keys = torch.where(q > 0, keys, -1.0)
    values, candidates = keys.topk(count, dim=-1)
    return candidates, values > 0


def multi_draft_step(p: torch.Tensor, q: torch.Tensor, candidates: torch.Tensor, has: torch.Tensor,
                     uniform: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Recursive rejection sampling without replacement at every position (module docstring).

    Args:
        p: ``[..., V]`` targets. q: ``[..., V]`` the distribution the candidates were drawn from (without
            replacement, in rank order).
        candidates, has: ``[..., K]`` the candidates and whether each exists (a suffix may be missing).
        uniform: ``[..., K]`` U(0, 1), one per round.
        noise: the final token's noise, ``U(0, 1) [...]`` or ``Exp(1) [..., V]``.

    Returns:
        ``(tokens [...], rank [...], coupled [...])``: the output token (distributed as ``p``), the rank of
        the accepted candidate (``-1``: none, the token came from the last residual), and the first round
        alone as a coupling of ``c_1`` with ``p`` (``c_1`` if round 1 accepts, else a draw from
        ``normalize(max(0, p − q))``: MC-SJD's refreshed draft).
    """
    dtype = _math_dtype(p)
    target, proposal = p.to(dtype), q.to(dtype)
    tiny = torch.finfo(dtype).tiny
    rank = torch.full(candidates.shape[:-1], -1, dtype=torch.long, device=p.device)
    coupled = None
    for k in range(candidates.shape[-1]):
        c = candidates[..., k]
        mass = proposal.sum(-1, keepdim=True)
        q_k = proposal / mass.clamp_min(tiny)
        live = has[..., k] & (mass[..., 0] > 0)
        q_c = token_probability(q_k, c)
        accepted = live & (q_c > 0) & (uniform[..., k] * q_c < token_probability(target, c))
        rank = torch.where((rank < 0) & accepted, k, rank)
        residual = (target - q_k).clamp_min(0.0)
        left = residual.sum(-1, keepdim=True)
        # p_k == q_k leaves no residual: acceptance was then certain (a rounding guard, as in speculative.py).
        after = torch.where(left > 0, residual / left.clamp_min(tiny), target)
        if k == 0:  # no first candidate: the coupling is a plain draw from p
            coupled = torch.where(accepted, c, draw(torch.where((left > 0) & live[..., None], residual, target), noise))
        target = torch.where(live[..., None], after, target)
        proposal = torch.where(live[..., None], proposal.scatter(-1, c[..., None], 0.0), proposal)
    recovered = draw(target, noise)
    tokens = torch.where(rank >= 0, candidates.gather(-1, rank.clamp_min(0)[..., None])[..., 0], recovered)
    if coupled is None:  # no candidate slot at all: the token is a draw from p
        coupled = tokens
    return tokens, rank, coupled


def gumbel_multi_draft(p: torch.Tensor, candidates: torch.Tensor, has: torch.Tensor,
                       exponential_noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gumbel coupling with several candidates: the token is ``argmax(p / E)`` with the position's fixed
    ``E [..., V]``; the accepted rank is the first candidate equal to it (``-1``: none).

    Returns ``(tokens [...], rank [...])``.
    """
    tokens = gumbel_argmax(p, exponential_noise)
    match = has & (candidates == tokens[..., None])
    rank = torch.where(match.any(-1), match.long().argmax(-1), -1)
    return tokens, rank


__all__ = ["gumbel_multi_draft", "multi_draft_step", "successive_sample"]
