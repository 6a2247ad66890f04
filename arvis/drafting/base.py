"""The drafter contract (after transformers' ``CandidateGenerator``): propose, then learn the outcome.

A drafter is configuration (shareable across requests); its ``start(...)`` opens a
:class:`DraftSession` holding one request's drafting state (a draft model's cache, Jacobi drafts and
their distributions…). The verifier never looks inside: each iteration it gets a :class:`Proposal`
— the tokens to feed, the drafts with the distributions they were drawn from — and afterwards reports
what the target computed and committed (:meth:`DraftSession.update`), from which Jacobi drafters
refresh their drafts and a draft model rolls its cache back.

Two drafters exist: :class:`arvis.drafting.jacobi.JacobiDrafter` (the target's own previous outputs:
SJD, MC-SJD) and :class:`arvis.drafting.draft_model.DraftModelDrafter` (a small AR model).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from arvis.acceptance.verify import Verification
from arvis.engine.schedules import WindowPlan


@dataclass(frozen=True)
class Proposal:
    """What a drafter puts into one verification forward (``[A, T]`` per query of the plan).

    Attributes:
        inputs: token fed at each query's input index (``plan.targets − 1``): committed or drafted.
        drafts: the draft at each target (any value where ``has_draft`` is false).
        q: ``[A, T, V]`` the distribution each draft was drawn from.
        has_draft: a draft exists at the target (never at the bonus position).
        use: the query is evaluated (false: padding — outside the sequence, or after a position
            without a draft in the raster window, where nothing could be committed).
        final: the target is already final (committed ahead of the first uncommitted index by a commit policy
            with holes); ``None`` when the policy leaves none.
        candidates: ``[A, T, K]`` a tree of candidates (:class:`arvis.engine.schedules.TreeWindow`): the
            candidate tokens of each query's target, rank 0 first (rank 0 is ``drafts``); ``None``: one draft.
        candidate_has: ``[A, T, K]`` which candidates exist (with ``candidates``).
    """

    inputs: torch.Tensor
    drafts: torch.Tensor
    q: torch.Tensor
    has_draft: torch.Tensor
    use: torch.Tensor
    final: torch.Tensor | None = None
    candidates: torch.Tensor | None = None
    candidate_has: torch.Tensor | None = None


@runtime_checkable
class DraftSession(Protocol):
    def window_needed(self, committed: Sequence[int]) -> bool:
        """Whether any sample (committed lengths on the host) can use more than one query this iteration."""
        ...

    def propose(self, committed: torch.Tensor, plan: WindowPlan) -> Proposal:
        """Drafts for the plan's queries; ``committed [A]``: every target token before it is final."""
        ...

    def update(self, committed: torch.Tensor, plan: WindowPlan, p: torch.Tensor, verification: Verification,
               proposal: Proposal, commit_mask: torch.Tensor) -> None:
        """The target evaluated ``p [A, T, V]`` and committed the positions ``commit_mask [A, T]``; every
        sample now has ``committed [A]`` tokens."""
        ...

    def absorb(self, index: torch.Tensor, tokens: torch.Tensor, p: torch.Tensor) -> None:
        """The loop committed ``tokens [A, M]`` at ``index [A, M]`` outside a verification (plain AR steps), each
        drawn from its ``p [A, M, V]``: they are inputs from now on, as committed tokens of a verification are."""
        ...

    def retire(self, kept: Sequence[int], kept_index: torch.Tensor) -> None:
        """Active samples were compacted to positions ``kept`` (same call as ``DecodeEngine.retire``)."""
        ...

    def nbytes(self) -> int:
        """Bytes of per-request drafting state (what the method holds per position, for the memory report)."""
        ...
