"""One verification step for every draft-then-verify method (SJD, MC-SJD, speculative decoding).

Given one target forward's ``p`` over a window of positions, the drafts there and the distributions
they were drawn from, :func:`verify` couples every position with its draft — exact speculative
acceptance, which is the maximal coupling (:mod:`arvis.acceptance.coupling`), or the Gumbel-max with
noise fixed per position — optionally relaxes the commit rule (LANTERN, LANTERN++, the bounded rule:
:mod:`arvis.acceptance.relaxed`), and reports what a method commits: the leading accepted drafts, then
one recovered (or bonus) token.

Vocabulary as in :mod:`arvis.acceptance.speculative`: *accepted* drafts, the *recovered* token at the
first rejection, the *bonus* token when every draft passes (a position without a draft, whose residual
is ``p`` itself). Pure tensor math, fp32, no host synchronisation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from arvis.acceptance.coupling import gumbel_argmax, maximal_coupling
from arvis.acceptance.relaxed import AcceptanceRule, relaxed_step
from arvis.acceptance.speculative import leading_accepted

EXACT = AcceptanceRule()


@dataclass(frozen=True)
class Verification:
    """The outcome of one verification, per active sample ``[A]`` and window position ``[A, T]``.

    Attributes:
        tokens: ``[A, T]`` the token committed at each position if the commit reaches it: the draft
            where accepted, else the recovered token (relaxed rules: drawn from the relaxed target).
        accepted: ``[A, T]`` bool, the draft passed (never where there is no draft).
        accepted_count: ``[A]`` leading accepted drafts among the verified columns.
        commit_count: ``[A]`` tokens to commit: ``accepted_count + 1``, capped by ``limit``.
        coupled: ``[A, T]`` each old draft coupled with ``p`` (maximal or Gumbel): a draw from ``p``
            equal to the draft as often as possible — the refreshed draft of MC-SJD.
        tv: ``[A, T]`` per-position TV between the committed token's distribution and ``p`` (relaxed
            rules: the realised TV of the committed token given the prefix), or ``None`` (exact).
    """

    tokens: torch.Tensor
    accepted: torch.Tensor
    accepted_count: torch.Tensor
    commit_count: torch.Tensor
    coupled: torch.Tensor
    tv: torch.Tensor | None = None


def verify(p: torch.Tensor, drafts: torch.Tensor, q: torch.Tensor, has_draft: torch.Tensor, *,
           verified: int, limit: torch.Tensor, rule: AcceptanceRule = EXACT,
           uniform: torch.Tensor | None = None, noise: torch.Tensor | None = None,
           gumbel_noise: torch.Tensor | None = None, neighbours: torch.Tensor | None = None) -> Verification:
    """Verify a window of drafts against one forward's target distributions.

    Args:
        p: ``[A, T, V]`` target distributions (fp32).
        drafts: ``[A, T]`` draft tokens (any value where ``has_draft`` is false).
        q: ``[A, T, V]`` the distributions the drafts were drawn from.
        has_draft: ``[A, T]`` bool, a draft exists at the position (the bonus position has none).
        verified: the first ``verified`` columns form the raster window verified left to right; later
            columns (refresh-only bands) are coupled but never committed.
        limit: ``[A]`` the most tokens a sample may commit (what is left of its sequence).
        rule: exact (lossless) or a relaxed rule; relaxed rules change which tokens are committed,
            never :attr:`Verification.coupled`.
        uniform: ``[A, T]`` U(0, 1), the accept tests (exact and relaxed rules).
        noise: the recovered tokens' noise, ``U(0, 1) [A, T]`` (inverse CDF) or ``Exp(1) [A, T, V]``.
        gumbel_noise: ``[A, T, V]`` the fixed Exp(1) noise of each position (Gumbel coupling; exact only).
        neighbours: ``[V, k]`` codebook neighbourhoods (relaxed rules).
    """
    q = q * has_draft[..., None]  # no draft: q = 0, so nothing is accepted and the residual is p
    tv = None
    if gumbel_noise is not None:
        if not rule.lossless:
            raise ValueError("acceptance: Gumbel coupling verifies by matching argmaxes; relaxed rules need "
                             "coupling 'none' or 'maximal'")
        coupled = gumbel_argmax(p, gumbel_noise)
        accepted = has_draft & (drafts == coupled)
        tokens = coupled
    else:
        if uniform is None or noise is None:
            raise ValueError("verify: exact and relaxed acceptance need uniform and noise")
        coupled, accepted = maximal_coupling(p, q, drafts, uniform, noise)
        tokens = coupled
        if not rule.lossless:
            tokens, accepted, tv = relaxed_step(rule, p, q, drafts, uniform, noise, neighbours)
        accepted = accepted & has_draft
    accepted_count = leading_accepted(accepted[:, :verified])
    commit_count = torch.minimum(accepted_count + 1, limit)
    return Verification(tokens, accepted, accepted_count, commit_count, coupled, tv)
