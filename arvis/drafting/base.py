"""The drafter contract (after transformers' ``CandidateGenerator``): propose, then learn the outcome.

A :class:`Drafter` is configuration (shareable across requests); :meth:`Drafter.start` opens a
:class:`DraftSession` holding one request's drafting state (a draft model's cache, adaptive window
sizes…). The verifier never looks inside: it gets drafts with the distributions they were drawn from,
and reports back how many were committed.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from arvis.engine.engine import DecodeEngine


@runtime_checkable
class DraftSession(Protocol):
    def propose(self, committed: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Drafts for sequence indices ``committed[a] … committed[a] + count − 1`` of every active sample.

        Args:
            committed: ``[A]`` committed lengths (all of the target engine's tokens before them are final).
            count: drafts wanted per sample.

        Returns:
            ``(drafts [A, count] int64, q [A, count, V] fp32)``: each draft and the distribution it
            was drawn from (zeros = no draft at that position, e.g. past the end of the sequence).
        """
        ...

    def update(self, committed: torch.Tensor) -> None:
        """The target committed up to ``committed [A]`` (roll back whatever drafting state went past it)."""
        ...

    def retire(self, kept: torch.Tensor) -> None:
        """Active samples were compacted to positions ``kept`` (same call as ``DecodeEngine.retire``)."""
        ...


class Drafter(Protocol):
    def start(self, engine: DecodeEngine) -> DraftSession: ...
