"""The draft-then-verify loop shared by SJD, MC-SJD and draft-model speculative decoding.

One iteration is six named steps:

1. **sync** — the one host synchronisation of the iteration: the committed lengths (and the engine's
   non-finite flags) come to the host; finished samples leave the batch (ragged batches). The first iteration
   needs no read (every sample holds index 0), and the read that may find every sample done also carries the
   decode's closing figures (:meth:`DecodeEngine.finish`'s and the loop's own), so a decode reads the host once per
   iteration in all;
2. **schedule** — which positions the forward evaluates (:mod:`arvis.engine.schedules`);
3. **draft** — the drafter proposes the inputs and drafts there (:mod:`arvis.drafting`);
4. **evaluate** — one target forward (:meth:`arvis.engine.DecodeEngine.evaluate`);
5. **verify** — couple every draft with ``p`` and decide the commit (:func:`arvis.acceptance.verify.verify`);
6. **commit / roll back** — the *commit policy* decides which verified positions become final (by default the
   accepted prefix plus one: :class:`PrefixCommit`), the rest of the window leaves the cache; then the drafter
   **refreshes** from what the forward computed (:meth:`DraftSession.update`).

The commit policy is the one place a method changes what a verification commits: MuLo-SD's local verification
(:class:`arvis.methods.mulo.LocalCommit`) commits past a rejection outside its neighbourhood. A policy that may
leave *holes* (positions final ahead of the first uncommitted one) says so (``holes = True``): the drafter then
keeps those positions' committed tokens as inputs and never drafts or verifies them again.

Nothing inside an iteration branches on a device value: shapes depend only on the schedule and on
host values read at step 1, so the loop is capture-friendly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from arvis.acceptance.coupling import gumbel_argmax
from arvis.acceptance.relaxed import AcceptanceRule
from arvis.acceptance.verify import Verification, verify, verify_tree
from arvis.drafting.base import DraftSession, Proposal
from arvis.engine.engine import DecodeEngine
from arvis.engine.schedules import RasterWindow, WindowPlan
from arvis.utils.random import PositionNoise


class CommitPolicy(Protocol):
    """Which of a forward's verified positions become final.

    ``holes``: the policy may commit positions after a rejection (then positions ahead of the first uncommitted
    one are final, and the drafter must keep them).
    """

    holes: bool

    def decide(self, plan: WindowPlan, proposal: Proposal, verification: Verification, p: torch.Tensor,
               committed: torch.Tensor, engine: DecodeEngine) -> tuple[torch.Tensor, torch.Tensor]:
        """``(commit_mask [A, T], committed [A])``: the positions to commit now, and every sample's new first
        uncommitted index (all indices before it final). ``p [A, T, V]``: the forward's target distributions."""
        ...

    def retire(self, kept_index: torch.Tensor) -> None:
        """Active samples were compacted (per-sample state follows them)."""
        ...

    def report(self) -> dict[str, Any]:
        """The policy's own statistics for the method's ``extra``."""
        ...


class WindowPolicy(Protocol):
    """Chooses each forward's window (:class:`arvis.methods.window_policy.AutoWindow`)."""

    def expected_tokens(self) -> torch.Tensor:
        """Small device tensor read at the iteration's sync and handed to :meth:`choose`."""
        ...

    def prior_tokens(self) -> list[float]:
        """What :meth:`expected_tokens` reads before any forward was observed (the first iteration has no sync)."""
        ...

    def retire(self, kept_index: torch.Tensor) -> None:
        """Active samples were compacted (per-sample state follows them)."""
        ...

    def choose(self, expected: list[float], committed: list[int], advanced: float) -> int:
        """The next forward's window (0: plain AR steps), given the tokens per sample the last iteration committed."""
        ...

    def take_ar_block(self) -> int:
        """After :meth:`choose` returned 0: how many plain AR steps the loop runs in a row now (at least 1)."""
        ...

    def played_ar_run(self, steps: int, first: int) -> None:
        """The loop ran ``steps`` plain AR steps in a row (``first``: sample 0's first uncommitted index before)."""
        ...

    def observe(self, plan: WindowPlan, proposal: Proposal, verification: Verification) -> None:
        """What the forward's verification showed (device only)."""
        ...

    def report(self) -> dict[str, Any]:
        """The policy's statistics for the method's ``extra``."""
        ...


class PrefixCommit:
    """The lossless rule: the leading accepted drafts plus one (the recovered or bonus token).

    ``lockstep``: every sample advances by the batch's minimum instead (accepted drafts past the cut are redrawn
    by the drafter, which keeps it lossless)."""

    holes = False

    def __init__(self, lockstep: bool = False):
        self.lockstep = lockstep
        self._columns: dict[tuple[int, int], torch.Tensor] = {}

    def decide(self, plan: WindowPlan, proposal: Proposal, verification: Verification, p: torch.Tensor,
               committed: torch.Tensor, engine: DecodeEngine) -> tuple[torch.Tensor, torch.Tensor]:
        T, K = plan.targets.shape[1], plan.verified
        if (T, K) not in self._columns:
            column = torch.arange(T, device=plan.targets.device)
            self._columns[T, K] = column.masked_fill(column >= K, T)  # band columns never commit
        count = verification.commit_count
        if verification.path is not None:  # a tree of candidates: the accepted path (never lockstep)
            return verification.path & proposal.use, committed + count
        if self.lockstep:
            count = count.min().expand_as(count)
        return (self._columns[T, K] < count[:, None]) & proposal.use, committed + count

    def retire(self, kept_index: torch.Tensor) -> None:
        pass

    def report(self) -> dict[str, Any]:
        return {}


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
        lockstep: every sample advances by the batch's minimum commit (with the default policy).
        policy: the commit policy (default :class:`PrefixCommit`).
        window_policy: chooses each forward's window up to the schedule's (cost-aware windows,
            :class:`arvis.methods.window_policy.AutoWindow`); ``None``: the schedule's window every forward.
    """

    def __init__(self, engine: DecodeEngine, schedule: RasterWindow,
                 start_drafter: Callable[[torch.Tensor, PositionNoise | None], DraftSession], *,
                 rule: AcceptanceRule, neighbours: torch.Tensor | None = None, gumbel: bool = False,
                 lockstep: bool = False, policy: CommitPolicy | None = None, window_policy: WindowPolicy | None = None):
        self.engine, self.schedule, self.start_drafter = engine, schedule, start_drafter
        self.window_policy = window_policy
        self.rule, self.gumbel, self.lockstep = rule, gumbel, lockstep
        self.policy = policy if policy is not None else PrefixCommit(lockstep)
        self.neighbours = None if neighbours is None else neighbours.to(engine.device)
        K, dev = schedule.verified, engine.device
        self.noise = (PositionNoise(engine.random, engine.active_list, engine.vocab_size, schedule.reach + 1)
                      if gumbel else None)
        # How many drafts each forward accepted, per sample (a histogram over 0 … K).
        self.accepted_hist = torch.zeros(K + 1, dtype=torch.long, device=dev)
        self._ones = torch.ones(engine.batch_size, dtype=torch.long, device=dev)
        self.tv_sum = torch.zeros((), device=dev)
        self.tv_count = torch.zeros((), device=dev)
        self.tv_max = torch.zeros((), device=dev)
        self.iterations = 0
        self.state_bytes = 0
        self._started = False  # between start() and the first sync
        self._host_committed: list[int] = []  # the active samples' committed lengths at the last sync
        self._totals_host: list[float] | None = None  # _totals() as read by the last (closing) sync

    # ------------------------------------------------------------------ the loop
    @torch.no_grad()
    def run(self) -> dict[str, Any]:
        self.start()
        while (committed := self.sync()) is not None:
            single = not self.session.window_needed(committed)
            if self.window_policy is None:
                plan = self.schedule.plan(self.committed, max(committed), single=single)
            else:
                window = self.window_policy.choose(self._expected, committed, self._advanced)
                if window == 0 and not self.policy.holes:
                    self.ar_run(self.window_policy.take_ar_block(), committed)
                    continue
                plan = self.schedule.plan(self.committed, max(committed), single=single or window == 0, window=window)
            if self.noise is not None:
                self.noise.advance([min(n + self.schedule.reach, self.engine.num_tokens) for n in committed])
            proposal = self.session.propose(self.committed, plan)
            tree = plan.tree
            p = self.engine.evaluate(proposal.inputs, plan.inputs_index, pad=~proposal.use, extent=plan.extent,
                                     scratch=None if tree is None else tree.scratch,
                                     ancestors=None if tree is None else tree.ancestors)
            verification = self.verify(plan, proposal, p)
            if self.window_policy is not None:
                self.window_policy.observe(plan, proposal, verification)
            commit_mask = self.commit(plan, proposal, verification, p)
            self.session.update(self.committed, plan, p, verification, proposal, commit_mask)
            self.iterations += 1
        return self.report()

    def ar_run(self, steps: int, committed: list[int]) -> None:
        """Plain AR steps in a row, without the iteration's sync, drafts or verification: each forward feeds every
        sample's last committed token and commits the next one from ``p`` (the Gumbel-max with the position's fixed
        noise under Gumbel coupling), exactly as :mod:`arvis.methods.ar` does; the drafter keeps the tokens and
        their ``p`` as if a verification had committed them. At most ``steps``, and never past a sample's end.

        Lossless: each token is a sample of its conditional, and the drafts ahead stay samples of their ``q``
        (the forwards see committed tokens only)."""
        e, furthest = self.engine, max(committed)
        steps = max(1, min(steps, e.num_tokens - furthest))
        index = (self.committed - 1)[:, None]  # [A, 1]: the last committed index
        token = e.tokens[e.active[:, None], index]
        tokens, probs = [], []
        for step in range(steps):
            p = e.evaluate(token, index, extent=furthest + step)
            index = index + 1
            if self.noise is not None:
                self.noise.advance([min(n + step + self.schedule.reach, e.num_tokens) for n in committed])
                token = gumbel_argmax(p, self.noise.at(index))
            else:
                token = e.sample(p)
            e.commit(index, token)
            tokens.append(token)
            probs.append(p)
        # The drafter learns the run in one call: per-step bookkeeping cost as much as 5% of a batch-1 AR step.
        run = self.committed[:, None] + torch.arange(steps, device=e.device)
        self.session.absorb(run, torch.cat(tokens, 1), torch.cat(probs, 1))
        self.committed = self.committed + steps
        self.iterations += steps
        self.window_policy.played_ar_run(steps, committed[0])

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
        self._committed_before, self._advanced = e.batch_size, 0.0
        self.session = self.start_drafter(p0, self.noise)
        self.state_bytes = self.session.nbytes()
        self._started = True

    def sync(self) -> list[int] | None:
        """The iteration's one host synchronisation: committed lengths on the host; finished samples
        retire. Returns the active samples' committed lengths, or ``None`` when every sample is done."""
        N = self.engine.num_tokens
        started, self._started = self._started, False
        if started and N > 1:  # right after start every sample holds index 0 alone: nothing to read (N = 1: done)
            self._expected = self.window_policy.prior_tokens() if self.window_policy is not None else []
            self._host_committed = [1] * self.engine.num_active
            return self._host_committed
        # A host-side bound: no sample commits more than the verified window per forward. When every sample may
        # be done now, the read also carries the closing figures (no read of their own when the decode ends).
        closing = not self._host_committed or min(self._host_committed) + self.schedule.verified >= N
        extra = [self.window_policy.expected_tokens()] if self.window_policy is not None else []
        if closing:
            extra.append(self._totals())
        committed, *floats = self.engine.status(self.committed, extra=torch.cat(extra) if extra else None,
                                                closing=closing)
        values = floats[0] if floats else []
        C = len(values) - (self._totals_size if closing else 0)
        self._expected, self._totals_host = values[:C], (values[C:] if closing else None)
        # Tokens per sample the last iteration committed (over the samples it decoded, finished ones included).
        self._advanced = (sum(committed) - self._committed_before) / len(committed)
        kept = [a for a, n in enumerate(committed) if n < N]
        if not kept:
            return None
        if len(kept) < len(committed):
            kept_index = self.engine.retire(kept)
            self.committed = self.committed.index_select(0, kept_index)
            self.session.retire(kept, kept_index)
            self.policy.retire(kept_index)
            if self.window_policy is not None:
                self.window_policy.retire(kept_index)
            committed = [committed[a] for a in kept]
        self._committed_before = sum(committed)
        self.state_bytes = max(self.state_bytes, self.session.nbytes())
        self._host_committed = committed
        return committed

    def verify(self, plan: WindowPlan, proposal: Proposal, p: torch.Tensor) -> Verification:
        e = self.engine
        T = plan.targets.shape[1]
        limit = e.num_tokens - self.committed
        if plan.tree is not None:
            return self.verify_tree(plan, proposal, p, limit)
        if self.noise is not None:
            return verify(p, proposal.drafts, proposal.q, proposal.has_draft, verified=plan.verified, limit=limit,
                          rule=self.rule, gumbel_noise=self.noise.at(plan.targets))
        # One U(0, 1) per position for the accept test and one for the recovered token (inverse CDF):
        # noise drawn where it is used, not V numbers per position.
        uniform = e.uniform((2, T))
        return verify(p, proposal.drafts, proposal.q, proposal.has_draft, verified=plan.verified, limit=limit,
                      rule=self.rule, uniform=uniform[:, 0], noise=uniform[:, 1], neighbours=self.neighbours)

    def verify_tree(self, plan: WindowPlan, proposal: Proposal, p: torch.Tensor, limit: torch.Tensor
                    ) -> Verification:
        """A tree of candidates (SJD-PAC): every node verifies its children's candidates exactly."""
        if not self.rule.lossless:
            raise ValueError("acceptance: a tree of candidates is verified exactly (relaxed rules take one draft)")
        tree = plan.tree
        common = dict(chain=plan.verified, branch_depth=tree.depth, limit=limit)
        if self.noise is not None:
            return verify_tree(p, proposal.candidates, proposal.candidate_has, proposal.q, tree.children,
                               tree.node_depth, gumbel_noise=self.noise.at(plan.targets), **common)
        # K accept tests and one recovered token per node (inverse CDF): noise drawn where it is used.
        uniform = self.engine.uniform((plan.targets.shape[1], tree.width + 1))
        return verify_tree(p, proposal.candidates, proposal.candidate_has, proposal.q, tree.children,
                           tree.node_depth, uniform=uniform[..., :-1], noise=uniform[..., -1], **common)

    def commit(self, plan: WindowPlan, proposal: Proposal, verification: Verification, p: torch.Tensor
               ) -> torch.Tensor:
        """Commit what the policy decides; roll the cache back to the first uncommitted index.
        Returns the committed positions ``[A, T]``."""
        commit_mask, self.committed = self.policy.decide(plan, proposal, verification, p, self.committed, self.engine)
        self.engine.commit(plan.targets, verification.tokens, commit_mask)
        if plan.tree is not None:  # committed path nodes evaluated in scratch slots move to their own slots
            self.engine.settle(plan.tree.scratch, plan.inputs_index, commit_mask)
        self.engine.truncate(self.committed - 1)  # slots after the last committed input hold rejected drafts
        A = self.committed.shape[0]
        self.accepted_hist.index_add_(0, verification.accepted_count, self._ones if A == len(self._ones) else
                                      self._ones[:A])
        if verification.tv is not None:  # the realised TV of relaxed rules
            tv = verification.tv * commit_mask
            self.tv_sum += tv.sum()
            self.tv_count += commit_mask.sum()
            self.tv_max = torch.maximum(self.tv_max, tv.max())
        return commit_mask

    @property
    def _totals_size(self) -> int:
        return self.accepted_hist.shape[0] + 2

    def _totals(self) -> torch.Tensor:
        """The loop's own figures, flat fp64: the accepted-drafts histogram, the mean and the max realised TV."""
        tv = torch.stack([self.tv_sum / self.tv_count.clamp_min(1), self.tv_max])
        return torch.cat([self.accepted_hist.double(), tv.double()])

    def report(self) -> dict[str, Any]:
        K = self.accepted_hist.shape[0]
        # Read by the last sync when it was a closing one (it found every sample done), else read now.
        values = self._totals_host if self._totals_host is not None else self.engine.to_host(self._totals())
        hist, (mean_tv, max_tv) = values[:K], values[K:]
        # P(the draft at window offset k is accepted | the drafts before it were): from the histogram of
        # accepted drafts per forward (forwards near the end of a sequence have shorter windows).
        reached = [sum(hist[k:]) for k in range(K)]
        out: dict[str, Any] = {
            "acceptance_by_offset": [(reached[k + 1] / reached[k]) if reached[k] else None for k in range(K - 1)],
            "iterations": self.iterations,
            "draft_state_mb": self.state_bytes / 2**20,
            **self.policy.report(),
            **(self.window_policy.report() if self.window_policy is not None else {}),
        }
        if self.rule.kind == "bounded" or self.rule.tv:  # measured (the other relaxed rules only on request)
            out.update(tv_kind="realised per token given the prefix",
                       mean_tv_per_token=mean_tv, max_tv_per_token=max_tv)
        return out
