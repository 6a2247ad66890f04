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
from arvis.acceptance.multidraft import gumbel_multi_draft, multi_draft_step
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
        path: ``[A, T]`` bool, trees of candidates (:func:`verify_tree`): the nodes whose tokens commit (the
            accepted path from the root); ``None`` for a raster window (its first ``commit_count`` columns).
    """

    tokens: torch.Tensor
    accepted: torch.Tensor
    accepted_count: torch.Tensor
    commit_count: torch.Tensor
    coupled: torch.Tensor
    tv: torch.Tensor | None = None
    path: torch.Tensor | None = None


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
        coupled, accepted = maximal_coupling(p, q, drafts, uniform, noise)  # never accepts where q = 0 (no draft)
        tokens = coupled
        if not rule.lossless:
            tokens, accepted, tv = relaxed_step(rule, p, q, drafts, uniform, noise, neighbours)
            accepted = accepted & has_draft
    accepted_count = leading_accepted(accepted[:, :verified])
    commit_count = torch.minimum(accepted_count + 1, limit)
    return Verification(tokens, accepted, accepted_count, commit_count, coupled, tv)


def verify_tree(p: torch.Tensor, candidates: torch.Tensor, has: torch.Tensor, q: torch.Tensor,
                children: torch.Tensor, node_depth: torch.Tensor, *, chain: int, branch_depth: int,
                limit: torch.Tensor, uniform: torch.Tensor | None = None, noise: torch.Tensor | None = None,
                gumbel_noise: torch.Tensor | None = None) -> Verification:
    """Verify a tree of candidates (SJD-PAC's proactive drafting) against one forward's targets, exactly.

    Every node ``u`` (a query of the forward, ``p[:, u]`` its target given its own path) verifies its
    children's candidates by recursive rejection sampling without replacement
    (:func:`arvis.acceptance.multidraft.multi_draft_step`; Gumbel coupling:
    :func:`~arvis.acceptance.multidraft.gumbel_multi_draft`). The committed path starts at the root (column
    0) and moves to the accepted child while there is one; at the node where it stops, the token drawn
    there (recovered, or the bonus at a leaf) commits too. Each node's test uses its own randomness, so the
    nodes off the path — and with them the refreshed drafts — never depend on the commit decision.

    Args:
        p: ``[A, T, V]`` targets. q: ``[A, T, V]`` the distribution of each node's children's candidates.
        candidates, has: ``[A, T, K]`` each node's children's candidate tokens (rank order) and which exist.
        children: ``[T, K]`` the column of each child (``-1`` none). node_depth: ``[T]``.
        chain: columns ``0 … chain − 1`` are the raster window (column ``c`` at depth ``c``).
        branch_depth: depth of the tree's last branching level; the chain node at that depth continues
            down the chain.
        limit: ``[A]`` most tokens a sample may commit.
        uniform: ``[A, T, K]`` U(0, 1) per round. noise: ``U(0, 1) [A, T]`` or ``Exp(1) [A, T, V]``, the
            recovered tokens'. gumbel_noise: ``[A, T, V]`` the fixed noise of each node's target index.

    Returns:
        :class:`Verification` with :attr:`~Verification.path`; ``coupled`` holds each node's first round
        alone (MC-SJD's refreshed draft of the chain).
    """
    if gumbel_noise is not None:
        tokens, rank = gumbel_multi_draft(p, candidates, has, gumbel_noise)
        coupled = tokens
    else:
        if uniform is None or noise is None:
            raise ValueError("verify_tree: exact acceptance needs uniform and noise")
        tokens, rank, coupled = multi_draft_step(p, q, candidates, has, uniform, noise)
    A = p.shape[0]
    rows = torch.arange(A, device=p.device)
    at = torch.zeros(A, dtype=torch.long, device=p.device)  # the path's current node
    moving = torch.ones(A, dtype=torch.bool, device=p.device)
    path = torch.zeros(rank.shape, dtype=torch.bool, device=p.device)
    path[:, 0] = True
    for _ in range(branch_depth):  # down the tree: a few levels, every sample at once
        r = rank.gather(1, at[:, None])[:, 0]
        moving = moving & (r >= 0)
        at = torch.where(moving, children[at, r.clamp_min(0)], at)
        path[rows, at] |= moving
    # Down the chain from the chain node at the tree's last level: its leading accepted children.
    on_chain = moving & (at == branch_depth)
    lead = leading_accepted(rank[:, branch_depth: chain - 1] == 0)
    column = torch.arange(chain, device=p.device)
    path[:, :chain] |= on_chain[:, None] & (column > branch_depth) & (column <= branch_depth + lead[:, None])
    path &= node_depth < limit[:, None]
    commit_count = path.sum(1)
    return Verification(tokens, rank >= 0, commit_count - 1, commit_count, coupled, None, path)
