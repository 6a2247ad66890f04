"""Exact speculative acceptance and residual sampling (Leviathan et al., 2023, arXiv:2211.17192;
Chen et al., 2023, arXiv:2302.01318), vectorised over any leading dimensions.

Glossary (used across arvis):

- *target* ``p``: the distribution the output must follow (after CFG, temperature, top-k/top-p).
- *draft* ``d`` with *draft distribution* ``q``: a proposed token and the distribution it was really
  drawn from (one-hot for deterministic drafts; all zeros for "no draft" — then ``d`` is ignored).
- *accepted*: ``U < min(1, p(d) / q(d))`` with ``U ~ Uniform(0, 1)``; written ``U·q(d) < p(d)``.
- *recovered* token: on rejection, a draw from the *residual* ``normalize(max(0, p − q))``. With an
  absent draft (``q = 0``) the residual is ``p`` itself, so a *bonus* token after a fully accepted
  window is the same operation.

Accept-then-recover yields exactly ``p`` for any ``q`` the draft was drawn from. Everything here is
pure tensor math in fp32 (fp64 inputs stay fp64, for exact checks): no model calls, no state, no Python
loops over batch or window; randomness is passed in as tensors drawn from the caller's generators. The
noise of a recovered token is either ``Exp(1) [..., V]`` (the exponential race) or one ``U(0, 1)`` per
position (inverse CDF; :func:`arvis.utils.random.draw`).
"""

from __future__ import annotations

import torch

from arvis.utils.random import draw


def _math_dtype(t: torch.Tensor) -> torch.dtype:
    """fp32 for every input precision, fp64 kept (exact-enumeration tests)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def token_probability(dist: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``dist[..., tokens]``: ``dist [..., V]``, ``tokens [...]`` → ``[...]``."""
    return dist.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def accept_drafts(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """The accept test of every draft.

    Args:
        p: ``[..., V]`` target distributions.
        q: ``[..., V]`` draft distributions (zeros where there is no draft).
        drafts: ``[...]`` draft tokens.
        uniform: ``[...]`` U(0, 1) draws.

    Returns:
        ``[...]`` bool, ``U · q(d) < p(d)`` and ``q(d) > 0`` (a draft its own ``q`` could not have
        produced — or no draft — is never accepted).
    """
    dtype = _math_dtype(p)
    p_d = token_probability(p.to(dtype), drafts)
    q_d = token_probability(q.to(dtype), drafts)
    return (uniform * q_d < p_d) & (q_d > 0)


def leading_accepted(accepted: torch.Tensor) -> torch.Tensor:
    """Number of accepted drafts before the first rejection: ``[..., L]`` bool → ``[...]`` int64."""
    return accepted.cummin(-1).values.sum(-1)  # the running minimum stays true up to the first rejection (2 ops)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``normalize(max(0, p − q))`` over the last dimension (fp32).

    When ``p == q`` the residual has no mass; acceptance is then certain, so the value returned there
    is never sampled in exact arithmetic. Rounding can leave ``p ≤ q`` everywhere with a rejection
    of probability ~1e-7; ``p`` is returned for those rows so that the result is always a
    distribution (this is a guard for rounding, not a substitute for the residual).
    """
    dtype = _math_dtype(p)
    r = (p.to(dtype) - q.to(dtype)).clamp_min(0.0)
    mass = r.sum(-1, keepdim=True)
    return torch.where(mass > 0, r / mass.clamp_min(torch.finfo(dtype).tiny), p.to(dtype))


def acceptance_probability(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
    """``min(1, p(d) / q(d))`` (0 where ``q(d) = 0``): the probability :func:`accept_drafts` accepts."""
    dtype = _math_dtype(p)
    p_d = token_probability(p.to(dtype), drafts)
    q_d = token_probability(q.to(dtype), drafts)
    return torch.where(q_d > 0, (p_d / q_d.clamp_min(torch.finfo(dtype).tiny)).clamp_max(1.0), 0.0)


def sample_residual(p: torch.Tensor, q: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Recovered tokens: draws from ``residual(p, q)`` with the caller's noise (``Exp(1) [..., V]`` or
    ``U(0, 1) [...]``). The residual is left unnormalised (the samplers do not need it), with the same
    rounding guard as :func:`residual`."""
    dtype = _math_dtype(p)
    r = (p.to(dtype) - q.to(dtype)).clamp_min(0.0)
    return draw(torch.where(r.sum(-1, keepdim=True) > 0, r, p.to(dtype)), noise)


def speculative_step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, uniform: torch.Tensor,
                     noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Accept-or-recover at every position independently (the kernel of SJD, MC-SJD and SD).

    Args:
        p, q: ``[..., L, V]``; drafts, uniform: ``[..., L]``; noise: the recovered tokens' noise, ``Exp(1)
            [..., L, V]`` or ``U(0, 1) [..., L]`` (independent of ``uniform``).

    Returns:
        ``(tokens [..., L], accepted [..., L])``: the draft where accepted, else a recovered token.
        Marginally every ``tokens[..., j]`` ~ ``p[..., j]`` when ``drafts[..., j] ~ q[..., j]``. The
        committed prefix of a window is ``tokens[..., : leading_accepted(accepted) + 1]``.
    """
    accepted = accept_drafts(p, q, drafts, uniform)
    recovered = sample_residual(p, q, noise)
    return torch.where(accepted, drafts, recovered), accepted
