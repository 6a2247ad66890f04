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
  Here ``g = −log E`` with ``E ~ Exp(1)``, and the argmax is the exponential race ``argmax(p / E)``
  (:func:`arvis.utils.random.sample_categorical`), the sampler plain AR uses.
- *No coupling* (SJD): a fresh independent draw from ``p``.

:func:`refresh_drafts` is the refresh step of every Jacobi method: given a forward's ``p`` and its
verification, the new draft at each evaluated position.
"""

from __future__ import annotations

import torch

from arvis.acceptance.speculative import speculative_step
from arvis.utils.modes import COUPLINGS
from arvis.utils.random import draw, sample_categorical


def maximal_coupling(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, uniform: torch.Tensor,
                     noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Refresh ``drafts [..., L]`` (drawn from ``q [..., L, V]``) into draws from ``p [..., L, V]``.

    ``uniform [..., L]`` decides the keeps; ``noise`` draws the replacements (``Exp(1) [..., L, V]`` or
    ``U(0, 1) [..., L]``). Returns ``(new_drafts [..., L], kept [..., L])``; the new drafts' distribution is ``p``.
    """
    return speculative_step(p, q, drafts, uniform, noise)


def gumbel_argmax(p: torch.Tensor, exponential_noise: torch.Tensor) -> torch.Tensor:
    """``argmax(log p + g)`` with ``g = −log E``: a draw from ``p [..., V]`` given fixed ``E [..., V]``."""
    return sample_categorical(p, exponential_noise)


def refresh_drafts(coupling: str, p: torch.Tensor, coupled: torch.Tensor, fresh_noise: torch.Tensor | None
                   ) -> torch.Tensor:
    """New drafts ``[..., L]``, each distributed as ``p [..., L, V]`` (their ``q`` becomes ``p``).

    Args:
        coupling: ``none`` (an independent draw with ``fresh_noise``: ``Exp(1) [..., L, V]`` or ``U(0, 1) [..., L]``),
            ``maximal`` or ``gumbel`` (``coupled``: the coupling of the old draft with ``p`` that the
            verification already computed — :attr:`arvis.acceptance.verify.Verification.coupled`).
    """
    if coupling == "none":
        if fresh_noise is None:
            raise ValueError("coupling 'none' draws fresh drafts: pass fresh_noise")
        return draw(p, fresh_noise)
    if coupling not in COUPLINGS:
        raise ValueError(f"coupling must be one of {COUPLINGS}, got {coupling!r}")
    return coupled
