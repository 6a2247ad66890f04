"""Proactive drafting (SJD-PAC; Kang et al., CVPR 2026, arXiv:2603.18599): a tree of Jacobi candidates.

The chain of Jacobi drafts (:class:`arvis.drafting.jacobi.JacobiSession`, with its refresh — SJD's fresh draws,
MC-SJD's maximal coupling, or Gumbel coupling) is kept as it is. Over the first ``depth`` positions after the
last committed token it gets ``width − 1`` more candidates each, so that a rejection no longer ends the
forward at the recovered token: every node of the ``width``-ary tree is a query of the same forward
(:class:`arvis.engine.schedules.TreeWindow`), and the verification follows whichever candidates are accepted
(:func:`arvis.acceptance.verify.verify_tree`).

The candidates at sequence index ``j`` are the chain's draft ``d_j ~ q_j`` (rank 0) followed by a draw
*without replacement* from ``q_j`` without ``d_j`` (:func:`arvis.acceptance.multidraft.successive_sample`,
fresh ``Exp(1)`` noise per forward; with Gumbel coupling, the runners-up of ``q_j / E_j`` under the
position's fixed noise). All nodes at one depth share these candidates. That makes each node's children an
exact draw without replacement from ``q_j`` given everything the target conditions on, which is what the
verification needs to be exact (docs/methods.md, "SJD-PAC").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from arvis.acceptance.multidraft import successive_sample
from arvis.acceptance.verify import Verification
from arvis.drafting.base import Proposal
from arvis.drafting.jacobi import JacobiDrafter, JacobiSession
from arvis.engine.engine import DecodeEngine
from arvis.engine.schedules import RasterWindow, TreeWindow, WindowPlan
from arvis.utils.random import PositionNoise


class TreeDrafter:
    """Jacobi drafts (``jacobi``) with a tree of candidates over the first positions of a :class:`TreeWindow`.

    Args:
        jacobi: the chain's drafter (its ``init``, ``coupling`` and ``interval``); ragged batches only (a
            lockstep cut could fall inside the tree), no holes.
    """

    def __init__(self, jacobi: JacobiDrafter):
        if jacobi.lockstep or jacobi.holes:
            raise ValueError("a tree of candidates needs ragged batches (batch_mode='ragged') and a prefix commit")
        self.jacobi = jacobi

    def start(self, engine: DecodeEngine, schedule: TreeWindow, first_p: torch.Tensor,
              noise: PositionNoise | None = None) -> TreeSession:
        chain = self.jacobi.start(engine, RasterWindow(schedule.window, engine.num_tokens), first_p, noise)
        return TreeSession(chain, engine, noise)


def chain_plan(plan: WindowPlan) -> WindowPlan:
    """The raster window of a tree plan (its first ``verified`` columns)."""
    K = plan.verified
    return WindowPlan(plan.targets[:, :K], plan.real[:, :K], K, plan.extent)


class TreeSession:
    """One request's chain of Jacobi drafts plus the tree's extra candidates (module docstring)."""

    def __init__(self, chain: JacobiSession, engine: DecodeEngine, noise: PositionNoise | None):
        self.chain, self.engine, self.noise = chain, engine, noise

    def window_needed(self, committed: Sequence[int]) -> bool:
        return self.chain.window_needed(committed)

    def absorb(self, index: torch.Tensor, tokens: torch.Tensor, p: torch.Tensor) -> None:
        self.chain.absorb(index, tokens, p)

    def propose(self, committed: torch.Tensor, plan: WindowPlan) -> Proposal:
        if plan.tree is None:  # a plain AR step (outside the Jacobi interval)
            return self.chain.propose(committed, plan)
        tree, L1 = plan.tree, plan.verified
        b, K = tree.depth, tree.width
        cp = self.chain.propose(committed, chain_plan(plan))
        # Candidates of depth d = 1 … b (sequence index n − 1 + d): the chain's draft there, then K − 1 more.
        first, q, has = cp.drafts[:, :b], cp.q[:, :b], cp.has_draft[:, :b]
        noise = self.noise.at(plan.targets[:, :b]) if self.noise is not None else \
            self.engine.exponential((b, q.shape[-1]))
        extra, extra_has = successive_sample(q, first, noise, K - 1)
        cand = torch.cat([first[..., None], extra], -1)  # [A, b, K]
        cand_has = torch.cat([has[..., None], extra_has & has[..., None]], -1)
        depth, rank = tree.node_depth, tree.rank
        T = depth.shape[0]
        level = (depth - 1).clamp(0, max(b - 1, 0))
        # The token of every node (chain nodes: the chain's inputs) and whether it exists.
        own = cand[:, level, rank]  # [A, T]
        own_has = cand_has[:, level, rank] | (depth == 0)
        is_chain = torch.arange(T, device=depth.device) < L1
        inputs = torch.where(is_chain, torch.cat([cp.inputs, own[:, L1:]], 1), own)
        # A node is evaluated when it and all its ancestors exist and it lies inside the sequence.
        missing = (tree.ancestors[None] & ~own_has[:, None, :]).any(-1)
        use = torch.cat([cp.use, (plan.real & ~missing)[:, L1:]], 1)
        # Each node's children's candidates: the next depth's set inside the tree, the chain's next draft below.
        inner = (depth < b)[None, :, None]
        children = torch.where(inner, cand[:, depth.clamp_max(max(b - 1, 0))], 0)
        children_has = torch.where(inner, cand_has[:, depth.clamp_max(max(b - 1, 0))], False)
        chain_next = torch.cat([cp.drafts, torch.zeros_like(own[:, L1:])], 1)
        chain_has = torch.cat([cp.has_draft, torch.zeros_like(own_has[:, L1:])], 1)
        below = (is_chain & (depth >= b))[None, :]
        children[..., 0] = torch.where(below, chain_next, children[..., 0])
        children_has[..., 0] = torch.where(below, chain_has, children_has[..., 0])
        if K > 1:
            children_has[..., 1:] &= ~below[..., None]
        children_has &= use[..., None]
        return Proposal(inputs=inputs, drafts=children[..., 0], q=cp.q[:, depth], has_draft=children_has[..., 0],
                        use=use, candidates=children, candidate_has=children_has)

    def update(self, committed: torch.Tensor, plan: WindowPlan, p: torch.Tensor, verification: Verification,
               proposal: Proposal, commit_mask: torch.Tensor) -> None:
        if plan.tree is None:
            self.chain.update(committed, plan, p, verification, proposal, commit_mask)
            return
        L1 = plan.verified
        A = p.shape[0]
        # The token committed at each chain position is the path's node at that depth (maybe not the chain's).
        slot = torch.where(verification.path, plan.tree.node_depth, L1)
        tokens = torch.zeros(A, L1 + 1, dtype=verification.tokens.dtype, device=p.device)
        tokens = tokens.scatter(1, slot, verification.tokens)[:, :L1]
        column = torch.arange(L1, device=p.device)
        chain_commit = (column < verification.commit_count[:, None]) & proposal.use[:, :L1]
        chain_verification = replace(verification, tokens=tokens, accepted=verification.accepted[:, :L1],
                                     coupled=verification.coupled[:, :L1], path=None)
        chain_proposal = Proposal(proposal.inputs[:, :L1], proposal.drafts[:, :L1], proposal.q[:, :L1],
                                  proposal.has_draft[:, :L1], proposal.use[:, :L1])
        self.chain.update(committed, chain_plan(plan), p[:, :L1], chain_verification, chain_proposal, chain_commit)

    def retire(self, kept: Sequence[int], kept_index: torch.Tensor) -> None:
        self.chain.retire(kept, kept_index)

    def nbytes(self) -> int:
        return self.chain.nbytes()


__all__ = ["TreeDrafter", "TreeSession", "chain_plan"]
