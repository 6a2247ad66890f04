"""The draft-then-verify loop shared by SJD, MC-SJD and draft-model speculative decoding.

One iteration is six named steps:

1. **sync** — the one host synchronisation of the iteration: the committed lengths (and the engine's
   non-finite flags) come to the host; finished samples leave the batch (ragged batches);
2. **schedule** — which positions the forward evaluates (:mod:`arvis.engine.schedules`);
3. **draft** — the drafter proposes the inputs and drafts there (:mod:`arvis.drafting`);
4. **evaluate** — one target forward (:meth:`arvis.engine.DecodeEngine.evaluate`);
5. **verify** — couple every draft with ``p`` and decide the commit (:func:`arvis.acceptance.verify.verify`);
6. **commit / roll back** — fix the accepted tokens plus one, drop the rest of the window from the cache;
   then the drafter **refreshes** from what the forward computed (:meth:`DraftSession.update`).

Nothing inside an iteration branches on a device value: shapes depend only on the schedule and on
host values read at step 1, so the loop is capture-friendly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from arvis.acceptance.coupling import gumbel_argmax
from arvis.acceptance.relaxed import AcceptanceRule
from arvis.acceptance.verify import Verification, verify
from arvis.drafting.base import DraftSession, Proposal
from arvis.engine.engine import DecodeEngine
from arvis.engine.schedules import RasterWindow, WindowPlan
from arvis.utils.random import PositionNoise


class DraftVerifyLoop:
    """One request's draft-then-verify decode.

    Args:
        engine: the request's engine.
        schedule: the verification window (raster or staircase).
        start_drafter: opens the drafting session after the first token, given the ``p`` it was drawn
            from and the fixed noise (Gumbel coupling) — or ``None``.
        rule: the acceptance rule (exact, or relaxed: lossy).
        neighbours: codebook neighbourhoods for relaxed rules.
        gumbel: Gumbel coupling — every token is the Gumbel-max of its ``p`` with noise fixed per position.
        lockstep: every sample advances by the batch's minimum commit.
    """

    def __init__(self, engine: DecodeEngine, schedule: RasterWindow,
                 start_drafter: Callable[[torch.Tensor, PositionNoise | None], DraftSession], *,
                 rule: AcceptanceRule, neighbours: torch.Tensor | None = None, gumbel: bool = False,
                 lockstep: bool = False):
        self.engine, self.schedule, self.start_drafter = engine, schedule, start_drafter
        self.rule, self.gumbel, self.lockstep = rule, gumbel, lockstep
        self.neighbours = None if neighbours is None else neighbours.to(engine.device)
        K, dev = schedule.verified, engine.device
        self.noise = (PositionNoise(engine.random, engine.active_list, engine.vocab_size, schedule.reach + 1)
                      if gumbel else None)
        # How many drafts each forward accepted, per sample (a histogram over 0 … K).
        self.accepted_hist = torch.zeros(K + 1, dtype=torch.long, device=dev)
        self._ones = torch.ones(engine.batch_size, dtype=torch.long, device=dev)
        self._columns: dict[int, torch.Tensor] = {}
        self.tv_sum = torch.zeros((), device=dev)
        self.tv_count = torch.zeros((), device=dev)
        self.tv_max = torch.zeros((), device=dev)
        self.iterations = 0
        self.state_bytes = 0

    # ------------------------------------------------------------------ the loop
    @torch.no_grad()
    def run(self) -> dict[str, Any]:
        self.start()
        while (committed := self.sync()) is not None:
            plan = self.schedule.plan(self.committed, max(committed), single=not self.session.window_needed(committed))
            if self.noise is not None:
                self.noise.advance([min(n + self.schedule.reach, self.engine.num_tokens) for n in committed])
            proposal = self.session.propose(self.committed, plan)
            p = self.engine.evaluate(proposal.inputs, plan.inputs_index, pad=~proposal.use, extent=plan.extent)
            verification = self.verify(plan, proposal, p)
            commit_mask = self.commit(plan, proposal, verification)
            self.session.update(self.committed, plan, p, verification, proposal, commit_mask)
            self.iterations += 1
        return self.report()

    def start(self) -> None:
        """Prefill and commit index 0 (Gumbel: the Gumbel-max with index 0's fixed noise), open the drafter."""
        e = self.engine
        p0 = e.prefill()  # [A, V]
        zero = torch.zeros(e.batch_size, 1, dtype=torch.long, device=e.device)
        if self.noise is not None:
            self.noise.advance([1] * e.batch_size)
            first = gumbel_argmax(p0[:, None], self.noise.at(zero))
        else:
            first = e.sample(p0[:, None])
        e.commit(zero, first)
        self.committed = torch.ones(e.batch_size, dtype=torch.long, device=e.device)
        self.session = self.start_drafter(p0, self.noise)
        self.state_bytes = self.session.nbytes()

    def sync(self) -> list[int] | None:
        """The iteration's one host synchronisation: committed lengths on the host; finished samples
        retire. Returns the active samples' committed lengths, or ``None`` when every sample is done."""
        (committed,) = self.engine.status(self.committed)
        N = self.engine.num_tokens
        kept = [a for a, n in enumerate(committed) if n < N]
        if not kept:
            return None
        if len(kept) < len(committed):
            kept_index = self.engine.retire(kept)
            self.committed = self.committed.index_select(0, kept_index)
            self.session.retire(kept, kept_index)
            committed = [committed[a] for a in kept]
        self.state_bytes = max(self.state_bytes, self.session.nbytes())
        return committed

    def verify(self, plan: WindowPlan, proposal: Proposal, p: torch.Tensor) -> Verification:
        e = self.engine
        T = plan.targets.shape[1]
        limit = e.num_tokens - self.committed
        if self.noise is not None:
            return verify(p, proposal.drafts, proposal.q, proposal.has_draft, verified=plan.verified, limit=limit,
                          rule=self.rule, gumbel_noise=self.noise.at(plan.targets))
        # One U(0, 1) per position for the accept test and one for the recovered token (inverse CDF):
        # noise drawn where it is used, not V numbers per position.
        uniform = e.uniform((2, T))
        return verify(p, proposal.drafts, proposal.q, proposal.has_draft, verified=plan.verified, limit=limit,
                      rule=self.rule, uniform=uniform[:, 0], noise=uniform[:, 1], neighbours=self.neighbours)

    def commit(self, plan: WindowPlan, proposal: Proposal, verification: Verification) -> torch.Tensor:
        """Commit the leading accepted drafts plus one; roll the cache back to the committed prefix.
        Returns the committed positions ``[A, T]``."""
        T, K = plan.targets.shape[1], plan.verified
        if T not in self._columns:
            self._columns[T] = torch.arange(T, device=plan.targets.device).masked_fill(
                torch.arange(T, device=plan.targets.device) >= K, T)  # band columns never commit
        if self.lockstep:
            verification = _replace_commit(verification, verification.commit_count.min().expand_as(self.committed))
        commit_mask = (self._columns[T] < verification.commit_count[:, None]) & proposal.use
        self.engine.commit(plan.targets, verification.tokens, commit_mask)
        self.committed = self.committed + verification.commit_count
        self.engine.truncate(self.committed - 1)  # slots after the last committed input hold rejected drafts
        self.accepted_hist.index_add_(0, verification.accepted_count, self._ones[: self.committed.shape[0]])
        if verification.tv is not None:  # the realised TV of relaxed rules
            tv = verification.tv * commit_mask
            self.tv_sum += tv.sum()
            self.tv_count += commit_mask.sum()
            self.tv_max = torch.maximum(self.tv_max, tv.max())
        return commit_mask

    def report(self) -> dict[str, Any]:
        K = self.accepted_hist.shape[0]
        tv = torch.stack([self.tv_sum / self.tv_count.clamp_min(1), self.tv_max])
        values = self.engine.to_host(torch.cat([self.accepted_hist.double(), tv.double()]))
        hist, (mean_tv, max_tv) = values[:K], values[K:]
        # P(the draft at window offset k is accepted | the drafts before it were): from the histogram of
        # accepted drafts per forward (forwards near the end of a sequence have shorter windows).
        reached = [sum(hist[k:]) for k in range(K)]
        out: dict[str, Any] = {
            "acceptance_by_offset": [(reached[k + 1] / reached[k]) if reached[k] else None for k in range(K - 1)],
            "iterations": self.iterations,
            "draft_state_mb": self.state_bytes / 2**20,
        }
        if not self.rule.lossless:
            out.update(tv_kind="realised per token given the prefix",
                       mean_tv_per_token=mean_tv, max_tv_per_token=max_tv)
        return out


def _replace_commit(verification: Verification, commit_count: torch.Tensor) -> Verification:
    from dataclasses import replace

    return replace(verification, commit_count=commit_count)
