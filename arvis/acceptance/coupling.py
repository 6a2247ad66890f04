"""Couplings that refresh drafts so they change as little as possible (MC-SJD; So et al., 2025,
arXiv:2510.24211).

- *Maximal coupling* of an old draft ``d ~ q`` with a new target ``p``: keep ``d`` with probability
  ``min(1, p(d)/q(d))``, else draw from ``normalize(max(0, p − q))``. The result is distributed as
  ``p`` and equals ``d`` with the largest possible probability, ``1 − TV(p, q)``. It is exactly
  :func:`arvis.acceptance.speculative.speculative_step` applied at every position; after it the
  draft's distribution is ``p`` (store the NEW distribution: the reference Lumina/Janus code keeps
  the old one, which breaks losslessness).
- *Gumbel coupling*: every token is ``argmax(log p + g)`` with Gumbel noise ``g`` fixed per absolute
  position for the whole generation. Drafts, verification and commits all use the same ``g``, so a
  draft survives whenever the argmax does not move, and the committed token at a position is exactly
  the Gumbel-max sample of its true conditional — the same token plain AR draws with that noise.
"""

from __future__ import annotations

import torch

from arvis.acceptance.speculative import speculative_step


def maximal_coupling(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, uniform: torch.Tensor,
                     exponential_noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Refresh ``drafts [..., L]`` (drawn from ``q [..., L, V]``) into draws from ``p [..., L, V]``.

    Returns ``(new_drafts [..., L], kept [..., L])``; the new drafts' distribution is ``p``.
    """
    return speculative_step(p, q, drafts, uniform, exponential_noise)


def gumbel_argmax(p: torch.Tensor, gumbel: torch.Tensor) -> torch.Tensor:
    """``argmax(log p + g)``: a draw from ``p [..., V]`` given Gumbel noise ``g [..., V]``.

    Written as ``argmax(p / exp(-g))`` (the exponential race) so zero-probability tokens never win
    and no ``log 0`` appears.
    """
    return torch.argmax(p.float() * torch.exp(gumbel), dim=-1)
