"""Cost-aware windows (``window="auto"``): every forward's window chosen from this machine's forward-cost curve
and the acceptance measured so far in this decode.

An iteration with ``L`` drafts costs ``cost(L + 1)`` (the curve: :func:`arvis.engine.cost.measured_curve`, measured
once per model, batch, dtype, device and thread count; each size priced by its fastest timed forward, since other
work on the machine only adds time) plus the loop's own time per iteration (measured as it runs), and commits
``m(L)`` tokens per sample on average. Each iteration takes the window with the most expected tokens per second.
A batch decodes until its slowest sample ends, so its pace is its least advanced sample's: each window's ``m(L)`` is
divided by its *ragged factor*, the mean sample's advance over the least advanced sample's while it was played
(measured at batch 4 on ``c2i``: 1.07 at window 4, 1.20 at 16; plain AR steps keep a batch in lockstep: 1).

How ``m(L)`` is estimated depends on the drafts:

- *Jacobi drafts* (SJD, MC-SJD and the methods built on them): a draft's acceptance depends on how often it was
  refined before it was verified — its *age*, the forwards whose window covered its position — and the window
  sets the ages: at window ``L`` committing ``m`` tokens per iteration, the draft at offset ``j`` entered the
  window's far end about ``(L − 1 − j) / m`` iterations ago. So the loop counts, on the device, the drafts tested
  and accepted per age, pooled over every window played, and each window's steady state is modelled from them:
  ``m = 1 + Σ_{j<L} Π_{k≤j} α(age_k)``, solved by a few fixed-point steps. The acceptance per age is made
  non-decreasing (a draft refined more is no worse), so ages no window has reached yet are priced at the best
  rate seen among ages tested often enough (``reliable_tests``). A policy that compared windows by what each
  committed while it was played alone (an earlier version of this module) settled on narrow ones: a window measured
  right after it widened sees fresh drafts, and narrow windows never refine drafts long enough to show what a wide
  one gets (measured on ``c2i``: 0.55 accepted per offset at window 4, 0.8 at 16). The model alone errs the other
  way where old ages are thinly tested (batch 1: window 16 priced at 2.2 tokens per iteration, 3.5 measured). So a
  window's estimate is what it committed while it was played (not counting the iterations after a widening) with
  ``block`` pseudo-iterations of the model: the model prices the windows not played lately.
- *A draft model's drafts* do not depend on the window: ``E(L) = 1 + Σ_{j=1..L} Π_{k<j} α_k`` from the
  acceptance ``α_k`` per offset, blended with the tokens each window actually committed while it was played.

Windows are played in blocks (16 iterations; 4 with a draft model; longer after a widening, until the new far
drafts were refined) on a doubling ladder (0 — plain AR steps —, 1, 2, 4, 8, …, ``max_window``). Window 0 is
played as a *run*: the loop runs the block's plain AR steps in a row, without its iteration's sync, drafts and
verification (:meth:`arvis.methods.draft_verify.DraftVerifyLoop.ar_run`), and its price is the recent runs' mean
time per step, as a played window's is the median of its recent iterations (the least of either is biased low: an
early run, with its short context, is cheap); until timed it is tried once if, with no time outside the forward,
it would beat the best window. Windows not played are priced at the curve scaled by the least ratio of what a
played one took to its price. Iterations whose window reached past the sequence's end are not counted, and near it
no window is widened (nor narrowed to one not timed: that could not be undone). A window must beat plain AR
steps by ``ar_margin`` (5%) to be played: they are the floor.
After each block the best-scoring window is played, unless a ladder neighbour of it has hardly been measured
lately and could, optimistically (its model estimate × ``optimism``), beat it: then that neighbour is tried for
a quarter of a block (counted as a whole one when deciding the next try). The first window is the widest whose
forward costs at most twice a single-token forward; a decode's first window is counted only once it slid its width
at one token per forward (its drafts were all fresh). Iterations are timed only while the whole batch is active.
With a ``memory_key``, what a decode measured seeds the next decode of the same model, batch, settings and method
in this process (a bench's warm-up round teaches its timed rounds, as the cost curve is measured once): its counts
per age, its tokens and laggard advance per window, both measured overheads and each window's median measured time
per iteration (and, with a draft model, outside its forwards).

Lossless: iteration ``i``'s window is a function of what iterations before it observed (their commits, accepted
counts and times), never of iteration ``i``'s own drafts or coins, and exact acceptance commits every token as a
sample of its conditional whatever the window — so the output distribution is AR's. ``tests/methods/test_lossless.py``
proves it with windows chosen from the random acceptance history.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, NamedTuple

import torch

from arvis.acceptance.verify import Verification
from arvis.drafting.base import Proposal
from arvis.engine.cost import curve_cost, measured_curve
from arvis.engine.engine import DecodeEngine
from arvis.engine.schedules import WindowPlan


class _Learned(NamedTuple):
    """What a decode measured, seeding the next decode with the same key (:class:`AutoWindow`'s attributes)."""

    committed_sum: list[float]
    played: list[float]
    tried: list[float]
    laggard_sum: list[float]
    age_counts: list[float] | None  # flattened [tested, accepted] per age, on the host
    ar_overhead_ms: float | None
    overhead_ms: float
    overhead_by_window: list[float | None]  # a draft model's: each window's least time outside its forwards
    iteration_by_window: list[float | None]  # each window's median time per iteration, in all
    ar_step_ms: float | None  # runs of plain AR steps: their mean time per step


# Per process, like the cost curves.
_LEARNED: dict[Hashable, _Learned] = {}


def window_ladder(max_window: int) -> list[int]:
    """The windows an adaptive decode plays: 0 (a plain AR step), 1, 2, 4, 8, … up to ``max_window``
    (always one of them)."""
    if max_window < 1:
        raise ValueError(f"max_window must be >= 1, got {max_window}")
    ladder = [0] + [2**i for i in range(max_window.bit_length()) if 2**i < max_window]
    return [*ladder, max_window]


class AutoWindow:
    """Chooses each iteration's window (module docstring). Per request, owned by its :class:`DraftVerifyLoop`.

    Args:
        engine: the request's engine (its device; its backbone, batch and settings key the cost curve).
        max_window: the largest window it may choose.
        curve: a forward-cost curve (``[{"positions": T, "ms": …}, …]``) covering ``T = L + 1`` for every
            candidate ``L``; default: measured for ``engine`` (:func:`arvis.engine.cost.measured_curve`).
        decay: weight kept by the offset counts at each iteration (``0 < decay <= 1``).
        window_decay: weight kept by each window's measurements at each iteration.
        prior: pseudo-tests pulling a rarely tested offset's rate towards the pooled rate, and pseudo-iterations
            of the modelled ``E(L)`` in a window's estimate.
        block: iterations a window is played before the next choice.
        optimism: how much a little-measured window may beat its model estimate when deciding to try it.
        ar_margin: how much better than plain AR steps a window must score to be played (or tried) instead.
        overhead_ms: the loop's time per iteration outside the forward (and, for window 0, a run's time per plain
            AR step outside its forwards); default ``None``: measured as it runs (the least of the last 16), a fixed
            value makes the choices a function of the commits alone (the lossless tests use it).
        drafting_ms: the time a draft model takes to propose ``L`` drafts (speculative decoding's draft length);
            ``None`` for drafts that cost no forward (Jacobi drafts).
        memory_key: what decodes with this key measured seeds this one (see the module docstring); ``None``: a
            decode learns alone.
        max_age: draft ages counted apart (older drafts count as this age less one).
        age_decay: weight kept by an age's counts at each forward that tests drafts of that age.
        reliable_tests: (decayed) tests an age needs before its acceptance may raise the rate that older ages are
            priced at (a few lucky tests at an old age otherwise price every wider window at that luck).
    """

    def __init__(self, engine: DecodeEngine, max_window: int, curve: Sequence[Mapping[str, float]] | None = None,
                 decay: float = 0.8, window_decay: float = 0.99, prior: float = 2.0, block: int | None = None,
                 optimism: float = 1.2, ar_margin: float = 1.05,
                 overhead_ms: float | None = None, drafting_ms: Callable[[int], float] | None = None,
                 memory_key: Hashable | None = None, max_age: int = 16, age_decay: float = 0.99,
                 reliable_tests: float = 8.0):
        for name, value in (("decay", decay), ("window_decay", window_decay), ("age_decay", age_decay)):
            if not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        # Every switch and try costs what the estimates do not see (fresh drafts after widening, a narrower
        # window's shorter reach): blocks of 16 and tries raised at most 1.2x, against 8 and 1.5x before, measured
        # 1.63x / 0.96x / 0.99x AR at batch 1 / 4 / 8 on ``c2i`` against 1.51x / 0.91x / 0.91x (interleaved decodes).
        block = block if block is not None else (16 if drafting_ms is None else 4)
        if block < 1:
            raise ValueError(f"block must be >= 1, got {block}")
        if max_age < 1:
            raise ValueError(f"max_age must be >= 1, got {max_age}")
        # The curve is timed inside the sequence: windows up to N - 2 (a longer one never fits anyway). Window 0,
        # plain AR steps, is a candidate with a draft model too: the draft model does not run during them, and its
        # next proposal catches up on their tokens in its one catch-up forward.
        max_window = max(1, min(max_window, engine.num_tokens - 2))
        self.candidates = window_ladder(max_window)
        sizes = [c + 1 for c in self.candidates]
        self.curve = (list(curve) if curve is not None
                      else measured_curve(engine.backbone, engine.condition, engine.sampling, sizes))
        # Each size's least disturbed forward (other work on the machine only adds time to a timing).
        priced = [{"positions": c["positions"], "ms": c.get("ms_min", c["ms"])} for c in self.curve]
        costs = [curve_cost(priced, t) for t in sizes]
        if any(c is None for c in costs):
            raise ValueError(f"the forward-cost curve must cover positions {sizes[0]} … {sizes[-1]}")
        self.cost_ms: list[float] = [float(c) + (drafting_ms(L) if drafting_ms and L else 0.0)  # type: ignore[arg-type]
                                     for c, L in zip(costs, self.candidates, strict=True)]
        self.max_window, self.decay, self.window_decay, self.prior = max_window, decay, window_decay, prior
        if ar_margin < 1:
            raise ValueError(f"ar_margin must be >= 1, got {ar_margin}")
        self.block, self.optimism, self.ar_margin = block, optimism, ar_margin
        dev = engine.device
        self.tested = torch.zeros(max_window, device=dev)
        self.accepted = torch.zeros(max_window, device=dev)
        self._offsets = torch.arange(max_window, device=dev)
        # Jacobi drafts (no draft model): acceptance by the draft's age, the forwards that refined it before.
        self.by_age, self.max_age, self.age_decay = drafting_ms is None, max_age, age_decay
        self.reliable_tests = reliable_tests
        if self.by_age:
            self.seen = torch.zeros(engine.batch_size, engine.num_tokens, dtype=torch.long, device=dev)
            self.age_counts = torch.zeros(2, max_age, device=dev)  # [tested, accepted] per age
        self._candidates = torch.tensor(self.candidates, device=dev)
        # The loop's time per iteration outside the forward, unless given.
        # Its least disturbed recent value: other work on the machine only adds time (as for the curve).
        self.overhead_ms, self._measure_overhead = overhead_ms or 0.0, overhead_ms is None
        self._overheads: deque[float] = deque(maxlen=16)
        # With a draft model the time outside the forwards grows with the window (each draft is sampled and handed
        # to the next draft forward on the host): measured per window, as each window is played.
        self._overheads_by: list[deque[float]] = [deque(maxlen=8) for _ in self.candidates]
        # A played window is priced at what its iterations took in all (per step for window 0): a curve timed apart
        # misprices what the loop pays (with a draft model, batch 4 on ``c2i``: a window-1 iteration priced 4.5 ms
        # took 6.7, and window 1 was played throughout at 0.93x AR).
        self._iterations_by: list[deque[float]] = [deque(maxlen=8) for _ in self.candidates]
        # Runs of plain AR steps, (ms, steps) each: priced at their mean time per step, not the least run's. Runs
        # cover different stretches of the sequence and an early one is cheap (short context): the least run priced
        # AR steps at batch 4 on ``c2i`` at 5.3 ms against 6.4 over a decode, and the decode kept to them at 0.95x
        # AR while window 16 ran 1.15x.
        self._ar_timed: deque[tuple[float, int]] = deque(maxlen=8)
        # Tokens per sample each window committed (decayed sums and counts), seeded from earlier decodes.
        self.memory_key = None if memory_key is None else (
            memory_key, id(engine.backbone), repr(engine.sampling), engine.batch_size, tuple(self.candidates),
            next(engine.backbone.parameters()).dtype, torch.get_num_threads())
        learned = _LEARNED.get(self.memory_key) if self.memory_key is not None else None
        self.committed_sum = list(learned.committed_sum) if learned else [0.0] * len(self.candidates)
        self.played = list(learned.played) if learned else [0.0] * len(self.candidates)
        # Iterations a window counts as measured when deciding whether to try it (decayed): a try is a short block
        # but counts as a whole one, so windows are retried no more often than if tries were whole blocks.
        self.tried = list(learned.tried) if learned else [0.0] * len(self.candidates)
        # The batch's least advanced sample's advance while each window was played (decayed sums): a batch
        # decodes until its slowest sample ends, so a window is priced at its laggard's pace, not the mean's.
        self.laggard_sum = list(learned.laggard_sum) if learned else [0.0] * len(self.candidates)
        # The counts per age the decode starts from, on the host (the loop's first choice has no sync to read them).
        self._seeded_counts = (list(learned.age_counts) if self.by_age and learned and learned.age_counts is not None
                               else [0.0] * (2 * max_age))
        if self.by_age:
            self.age_counts.copy_(torch.tensor(self._seeded_counts).view(2, max_age))
        # A plain AR step played as a run of them (:meth:`take_ar_block`) costs the forward plus the run's own time
        # per step, far less than the loop's; measured as runs are played (until then priced at the loop's).
        self.ar_overhead_ms: float | None = learned.ar_overhead_ms if learned else None
        if learned and self._measure_overhead:  # else a decode's first blocks price the loop's time at 0
            self.overhead_ms = learned.overhead_ms
            self._overheads.append(learned.overhead_ms)
            for sums, learned_ms in ((self._overheads_by, learned.overhead_by_window),
                                     (self._iterations_by, learned.iteration_by_window)):
                for window, ms in zip(sums, learned_ms, strict=True):
                    if ms is not None:
                        window.append(ms)
            if learned.ar_step_ms is not None:  # one pseudo-run of a block's steps
                self._ar_timed.append((learned.ar_step_ms * self.block, self.block))
        self._ar_overheads: deque[float] = deque(maxlen=16)
        self._ar_run = 0  # steps of the run of plain AR steps the last block was (0: it was not one)
        self._ar_length = self.block  # steps of the last block of window 0 (doubling while window 0 keeps winning)
        self.max_ar_run = 8 * self.block
        self.ar_runs = 0
        self._laggard: int | None = None  # the least advanced active sample's committed length at the last choice
        self._furthest = 0  # and the most advanced one's
        self._num_tokens = engine.num_tokens
        self._current: int | None = None  # candidate index being played, and for how many more iterations
        self._left = 0
        self._warming = 0  # iterations still not counted after widening the window
        self._last_time: float | None = None
        self._batch_size, self._timed_full = engine.batch_size, True  # whether the last choice saw the whole batch
        # Time inside forwards so far (target and draft; CPU: exact, no sync), so that the time outside them is
        # measured, not inferred from the curve: a forward early in the sequence costs less than the curve's.
        self._clock = engine.clock
        self._last_forward_s: float | None = None
        self.trace: list[tuple[int, int]] = []  # (first uncommitted index of the first active sample, window)

    # ------------------------------------------------------------------ on the device
    def expected_tokens(self) -> torch.Tensor:
        """What the loop's sync reads for :meth:`choose`: Jacobi drafts, the tested and accepted counts per age
        (``[2 · max_age]``, modelled on the host when a block ends); a draft model's, ``[C]`` modelled committed
        tokens per sample of each candidate window."""
        if self.by_age:
            return self.age_counts.flatten()
        return self._expected(self.accepted, self.tested, self._candidates)

    def prior_tokens(self) -> list[float]:
        """:meth:`expected_tokens` before anything was observed, computed on the host (the loop's first iteration
        has no sync to read it with)."""
        if self.by_age:
            return list(self._seeded_counts)
        zeros = torch.zeros_like(self.tested, device="cpu")
        return self._expected(zeros, zeros, self._candidates.cpu()).double().tolist()

    def retire(self, kept_index: torch.Tensor) -> None:
        """Active samples were compacted: the per-sample ages follow them."""
        if self.by_age:
            self.seen = self.seen.index_select(0, kept_index)

    def _expected_by_age(self, counts: Sequence[float]) -> list[float]:
        """Steady-state committed tokens per sample of each candidate window, from the acceptance per draft age.

        At window ``L`` committing ``m`` tokens per iteration, the draft at offset ``j`` entered the window at its
        far end about ``(L − 1 − j) / m`` iterations ago and was refined that many times; so
        ``m = 1 + Σ_j Π_{k≤j} α(age_k)``, solved by a few fixed-point steps. ``α(age)`` is smoothed towards the
        pooled rate and made non-decreasing in age (a draft refined more is no worse), which also prices ages no
        window has reached yet at the best rate seen: a narrow window's acceptance does not hide a wide one's.
        """
        tested, accepted = counts[: self.max_age], counts[self.max_age:]
        pooled = (sum(accepted) + 1.0) / (sum(tested) + 2.0)
        alpha, best = [], 0.0
        for t, a in zip(tested, accepted, strict=True):
            if t >= self.reliable_tests or not alpha:  # a handful of tests at an old age does not raise the rest
                best = max(best, (a + self.prior * pooled) / (t + self.prior))
            alpha.append(best)
        out = []
        for L in self.candidates:
            m = 1.0 + L * pooled
            for _ in range(4):
                survive, total = 1.0, 1.0
                for j in range(L):
                    survive *= alpha[min(self.max_age - 1, round((L - 1 - j) / m))]
                    total += survive
                m = total
            out.append(m)
        return out

    def _expected(self, accepted: torch.Tensor, tested: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        pooled = (accepted.sum() + 1) / (tested.sum() + 2)
        alpha = (accepted + self.prior * pooled) / (tested + self.prior)
        survive = torch.cumprod(alpha, 0)  # [j]: the first j + 1 drafts accepted
        expected = 1 + torch.cat([survive.new_zeros(1), torch.cumsum(survive, 0)])  # [L]: E(L)
        return expected.index_select(0, candidates)

    def observe(self, plan: WindowPlan, proposal: Proposal, verification: Verification) -> None:
        """Count the drafts this forward tested and accepted, per offset (no host synchronisation)."""
        L = plan.verified - 1
        if not self.by_age:  # the per-offset counts are a draft model's alone
            self.tested.mul_(self.decay)
            self.accepted.mul_(self.decay)
        if L == 0:
            return
        offsets = self._offsets[:L]
        accepted_count = verification.accepted_count[:, None]
        tested = proposal.has_draft[:, :L] & (offsets <= accepted_count)
        if self.by_age:
            positions = plan.targets[:, :L].clamp_max(self.seen.shape[1] - 1)
            age = self.seen.gather(1, positions).clamp_max_(self.max_age - 1).flatten()
            new = torch.zeros_like(self.age_counts)
            new[0].scatter_add_(0, age, tested.flatten().float())
            new[1].scatter_add_(0, age, (tested & (offsets < accepted_count)).flatten().float())
            # Only the ages this forward tested forget: tries of narrow windows would otherwise wear the old ages'
            # counts below ``reliable_tests`` and price every wide window at the young drafts' rate, a state runs
            # of AR steps never left (batch 1 on ``c2i``: AR runs throughout, against 1.5x at window 16).
            self.age_counts.mul_(torch.where(new[0] > 0, self.age_decay, 1.0))
            self.age_counts.add_(new)
            self.seen.scatter_add_(1, positions, plan.real[:, :L].long())
            return
        self.tested[:L] += tested.sum(0)
        self.accepted[:L] += (offsets < accepted_count).sum(0)

    # ------------------------------------------------------------------ on the host
    def estimates(self, expected: Sequence[float]) -> list[float]:
        """Tokens per sample each candidate is expected to commit: its measurements, with pseudo-iterations of the
        model — ``block`` of the age model for Jacobi drafts, ``prior`` of ``E(L)`` for a draft model (a plain AR
        step commits exactly one)."""
        if self.by_age:
            # What a window committed while it was played is the ground truth for it; the age model prices the
            # windows not played lately. Alone, the model's thin old ages priced window 16 at batch 1 below runs of
            # AR steps (2.2 tokens per iteration against 3.5 measured), and a decode seeded with it never left them.
            return [1.0 if L == 0 else (s + self.block * e) / (n + self.block) for L, s, n, e in
                    zip(self.candidates, self.committed_sum, self.played, self._expected_by_age(expected), strict=True)]
        return [1.0 if L == 0 else (s + self.prior * e) / (n + self.prior)
                for L, s, n, e in zip(self.candidates, self.committed_sum, self.played, expected, strict=True)]

    def ragged_factors(self) -> list[float]:
        """Per candidate: the mean sample's tokens per iteration over the least advanced sample's, measured while it
        was played (1 for plain AR steps, which keep a batch in lockstep, and at batch 1). A window not measured
        yet takes the pooled factor of the windows played; ``prior`` pseudo-iterations pull towards it."""
        drafted = [i for i, L in enumerate(self.candidates) if L > 0]
        pooled = ((sum(self.committed_sum[i] for i in drafted) + self.prior)
                  / (sum(self.laggard_sum[i] for i in drafted) + self.prior))
        return [1.0 if L == 0 else max(1.0, (s + self.prior * pooled) / (lag + self.prior))
                for L, s, lag in zip(self.candidates, self.committed_sum, self.laggard_sum, strict=True)]

    def choose(self, expected: Sequence[float], committed: Sequence[int], advanced: float) -> int:
        """The window of the next forward, from :meth:`expected_tokens` read at this iteration's sync, the active
        samples' ``committed`` lengths and the tokens per sample the last iteration ``advanced``."""
        now = time.perf_counter()
        laggard = min(committed)
        lagged = 0.0 if self._laggard is None else float(laggard - self._laggard)
        self._laggard = laggard
        # Times are kept only while the whole batch is active: the curve prices full-batch forwards, and once samples
        # finish, iterations cost less (batch 8 on ``c2i``: window 1 timed at 3.1 ms with the last sample left, a
        # price a later decode's full batch paid 10 ms for).
        full = len(committed) == self._batch_size
        if self._current is not None:
            # The last iteration beyond its forward (a run of AR steps was timed by played_ar_run).
            if self._measure_overhead and self._last_time is not None and not self._ar_run and full:
                outside = self._outside_ms(now, self.cost_ms[self._current])
                self._overheads.append(outside)
                self._overheads_by[self._current].append(outside)
                self._iterations_by[self._current].append((now - self._last_time) * 1e3)
                self.overhead_ms = min(self._overheads)
            steps = self._ar_run or 1  # a run of AR steps counts as one iteration per step
            decay = self.window_decay ** steps
            self.committed_sum, self.laggard_sum, self.played, self.tried = (
                [x * decay for x in sums] for sums in (self.committed_sum, self.laggard_sum, self.played, self.tried))
            # A window reaching past the sequence's end commits at most what is left: not what it commits elsewhere
            # (batch 8 on ``c2i``: window 8 measured over a decode's last 16 tokens at 1.9 tokens per iteration and
            # a ragged factor of 1.0, against 2.4 and 1.16 mid-sequence).
            cut_short = self._furthest + self.candidates[self._current] >= self._num_tokens
            if self._warming > 0:
                self._warming -= 1
            elif not cut_short:
                self.committed_sum[self._current] += advanced
                self.laggard_sum[self._current] += lagged
                self.played[self._current] += float(steps)
            self._ar_run = 0
        self._furthest = max(committed)
        if self._left > 0:
            self._left -= 1
        else:
            previous = self._current
            estimate = self.estimates(expected)  # once per block (the age model is solved on the host)
            self._current, trial = self._next(estimate)
            # A wider window's new far drafts are fresh: not counted until the window has slid past them once. A
            # decode's first window holds nothing but fresh drafts, which commit about one token per forward until
            # they are refined, whatever earlier decodes measured: its slide is counted at that pace (counted at the
            # window's own estimate, batch 1 on ``c2i`` measured the fresh start of window 16, 1.26 tokens per
            # iteration against 3.5 once refined, and the decode stayed at window 1 and 2: 1.08x AR against 1.6x).
            before = 0 if previous is None else self.candidates[previous]
            widened = self.candidates[self._current] - before
            if widened > 0:
                pace = 1.0 if previous is None else max(estimate[previous], 1.0)
                self._warming = min(math.ceil(widened / pace), 2 * self.block)
            length = self.block
            if trial:  # a short block, counted as a whole one when deciding the next try
                length = max(1, self.block // 4)
                self.tried[self._current] += float(self.block - length)
            # Runs of AR steps teach the policy nothing new about the windows, and each run ends in a loop iteration
            # (its sync and this choice): while they keep winning, each run is twice the last (batch 8 on ``c2i``:
            # runs of 4 steps throughout cost 8% against AR).
            if self.candidates[self._current] == 0 and previous is not None and self.candidates[previous] == 0:
                self._ar_length = length = min(2 * self._ar_length, self.max_ar_run)
            else:
                self._ar_length = self.block
            self._left = length - 1 + self._warming
        self._last_time, self._last_forward_s, self._timed_full = now, self._clock.seconds_so_far(), full
        window = self.candidates[self._current]
        self.trace.append((committed[0], window))
        return window

    def _next(self, estimate: Sequence[float]) -> tuple[int, bool]:
        """The candidate index of the next block, from :meth:`estimates`, and whether it is a try of a neighbour
        of the best (played for a short block)."""
        if self._current is None and not any(self.played):  # nothing measured: the widest window costing ≤ 2 steps
            cheap = [i for i, c in enumerate(self.cost_ms) if c <= 2 * self.cost_ms[0]]
            return max(cheap, default=0), False
        cost = [c + o for c, o in zip(self.cost_ms, self.overheads_by_window(), strict=True)]
        if self.candidates[0] == 0:  # plain AR steps are played as runs: their own time per step
            cost[0] = self.cost_ms[0] + min(self.overhead_ms, self.ar_overhead_ms if self.ar_overhead_ms is not None
                                            else self.overhead_ms)
        # What played windows took (a run of AR steps: per step), where measured; the others at the curve's price
        # scaled by the least that a played one took over its price (the curve was timed apart, each size at its
        # fastest: at batch 8 on ``c2i`` window 4 was priced 14.4 ms and took 21 ms, AR steps took 1.17x theirs).
        measured = self.iteration_ms()
        ratios = [ms / c for c, ms in zip(cost, measured, strict=True) if ms is not None]
        scale = max(1.0, min(ratios, default=1.0))
        cost = [c * scale if ms is None else ms for c, ms in zip(cost, measured, strict=True)]
        # the batch's pace: its least advanced sample's tokens per iteration
        estimate = [e / r for e, r in zip(estimate, self.ragged_factors(), strict=True)]
        scores = [e / c for e, c in zip(estimate, cost, strict=True)]
        # Plain AR steps are the baseline the method must never fall below, and a window's score is an estimate:
        # a window is played only if it beats them by a margin (batch 8 on ``c2i``: window 1 scored 3% above AR and
        # ran below it; the decodes that played it ran 0.96x AR).
        if self.candidates[0] == 0:
            scores[0] *= self.ar_margin
        # Near the sequence's end a wider window does not pay for its fresh drafts, which commit about one token
        # per forward until refined (batch 8 on ``c2i``: window 8 played over each decode's last 15 tokens, after
        # its runs of AR steps): a window is widened only with ``4 ×`` the widening of tokens still to go.
        current = 0 if self._current is None else self.candidates[self._current]
        to_go = self._num_tokens - self._furthest
        # There, narrowing is for good (the current window could not be widened back to) and a window played there
        # is hardly measured (iterations cut short by the end are not counted, a shrinking batch is not timed), so
        # a narrower window is taken only where its iterations were timed: one priced at the curve stays mispriced
        # (batch 4 on ``c2i``: window 16 left 28 tokens before the end for window 2 and 4, never timed, and took 24
        # iterations for them). With a fixed overhead (``overhead_ms``) nothing is timed: the curve is the price.
        untimed = [ms is None and self._measure_overhead for ms in measured]
        allowed = [not (L > current and to_go < 4 * (L - current))
                   and not (L < current and to_go < 4 * (current - L) and blind)
                   for L, blind in zip(self.candidates, untimed, strict=True)]
        best = max((i for i, ok in enumerate(allowed) if ok), key=scores.__getitem__)
        # Runs of plain AR steps not timed yet: tried once if, with no time outside the forward, they would win.
        if self.candidates[0] == 0 and best != 0 and self.ar_overhead_ms is None and allowed[0] and \
                1.0 / self.cost_ms[0] > scores[best]:
            return 0, False
        # Try a ladder neighbour if, optimistically, it could beat the best: the less it has been measured
        # lately, the more it may exceed its estimate (up to ``optimism`` times when never measured).
        for neighbour in (best + 1, best - 1):
            if 0 <= neighbour < len(scores) and self.candidates[neighbour] > 0 and allowed[neighbour]:
                L, n = self.candidates[neighbour], self.played[neighbour] + self.tried[neighbour]
                hopeful = min(L + 1.0, estimate[neighbour] * (1 + (self.optimism - 1) * self.prior / (n + self.prior)))
                if hopeful / cost[neighbour] > scores[best]:
                    return neighbour, True
        return best, False

    def iteration_ms(self) -> list[float | None]:
        """What each played window's iterations took in all (``None`` where not timed): the median of its recent
        iterations; runs of plain AR steps, their mean time per step (a run is long: a disturbed step barely moves
        it). Typical times on both sides: the least of a window's iterations against the runs' mean priced window 1
        at batch 8 on ``c2i`` 12% above AR, where it ran 2% below; a mean of iterations moved with single disturbed
        ones (window 16 at batch 1: 11.7 ms in one decode, 16.2 in the next)."""
        out: list[float | None] = [statistics.median(d) if d else None for d in self._iterations_by]
        if self._ar_timed and self.candidates[0] == 0:
            out[0] = sum(ms for ms, _ in self._ar_timed) / sum(n for _, n in self._ar_timed)
        return out

    def overheads_by_window(self) -> list[float]:
        """Each candidate's time per iteration outside its forwards. Jacobi drafts: the loop's, one figure (its
        drafts are refreshed in one vectorised step whatever the window). A draft model: each window's own least
        recent time where it was played, else the line through the nearest played windows (flat beyond a single
        one, and never below the least time measured), since each draft adds host work."""
        if self.by_age:
            return [self.overhead_ms] * len(self.candidates)
        measured = {L: min(d) for L, d in zip(self.candidates, self._overheads_by, strict=True) if d}
        if not measured:
            return [self.overhead_ms] * len(self.candidates)
        floor, played = min(measured.values()), sorted(measured)
        out = []
        for L in self.candidates:
            if L in measured:
                out.append(measured[L])
                continue
            below, above = [x for x in played if x < L], [x for x in played if x > L]
            pair = (below[-1:] + above[:1]) if below and above else (below[-2:] or above[:2])
            if len(pair) == 1:
                out.append(measured[pair[0]])
                continue
            (l0, l1) = pair
            slope = (measured[l1] - measured[l0]) / (l1 - l0)
            out.append(max(floor, measured[l0] + slope * (L - l0)))
        return out

    def _outside_ms(self, now: float, forward_ms: float) -> float:
        """Milliseconds since the last choice outside every forward: measured by the engine's clock where it needs no
        synchronisation (CPU), else the elapsed time less ``forward_ms`` (the curve's price, drafting included)."""
        elapsed = (now - self._last_time) * 1e3
        forwards = self._clock.seconds_so_far()
        if forwards is not None and self._last_forward_s is not None:
            forward_ms = (forwards - self._last_forward_s) * 1e3
        return max(elapsed - forward_ms, 0.0)

    def take_ar_block(self) -> int:
        """Right after :meth:`choose` returned 0: how many plain AR steps to run now, in a row, without returning to
        the loop's iteration (the rest of the block). The loop reports the run with :meth:`played_ar_run`."""
        steps, self._left = self._left + 1, 0
        return steps

    def played_ar_run(self, steps: int, first: int) -> None:
        """The loop ran ``steps`` plain AR steps in a row since :meth:`choose` (``first``: the first sample's first
        uncommitted index before them); their time beyond the forwards prices the next runs."""
        if self._last_time is not None and self._measure_overhead and self._timed_full:  # full batch: see choose
            now = time.perf_counter()
            self._ar_overheads.append(self._outside_ms(now, steps * self.cost_ms[0]) / steps)
            self.ar_overhead_ms = min(self._ar_overheads)
            self._ar_timed.append(((now - self._last_time) * 1e3, steps))
        elif not self._measure_overhead:
            self.ar_overhead_ms = self.overhead_ms
        self.trace.extend((first + i, 0) for i in range(1, steps))
        self._ar_run, self.ar_runs = steps, self.ar_runs + 1

    def report(self) -> dict[str, Any]:
        counts = self.age_counts.flatten().tolist() if self.by_age else None  # [tested…, accepted…] per age
        iteration_ms = self.iteration_ms()
        if self.memory_key is not None:
            _LEARNED[self.memory_key] = _Learned(list(self.committed_sum), list(self.played), list(self.tried),
                                                 list(self.laggard_sum), counts, self.ar_overhead_ms, self.overhead_ms,
                                                 [min(d) if d else None for d in self._overheads_by],
                                                 [statistics.median(d) if d else None for d in self._iterations_by],
                                                 iteration_ms[0] if self._ar_timed else None)
        chosen: dict[int, int] = {}
        for _, w in self.trace:
            chosen[w] = chosen.get(w, 0) + 1
        measured = {str(L): round(s / n, 3) for L, s, n in zip(self.candidates, self.committed_sum, self.played,
                                                                 strict=True) if n > 0}
        by_age = {}
        if counts is not None:
            tested, accepted = counts[: self.max_age], counts[self.max_age:]
            by_age = {"acceptance_by_age": [round(a / t, 3) if t > 1e-9 else None
                                            for t, a in zip(tested, accepted, strict=True)],
                      "modelled_tokens_by_window": {str(L): round(m, 3) for L, m in zip(
                          self.candidates, self._expected_by_age(counts), strict=True)}}
        return {"window_policy": "auto", "max_window": self.max_window, **by_age,
                "windows_chosen": {str(w): n for w, n in sorted(chosen.items())},
                "window_trace": [list(t) for t in self.trace],
                "mean_window": sum(w for _, w in self.trace) / max(len(self.trace), 1),
                "tokens_per_iteration_by_window": measured,
                "ragged_factor_by_window": {str(L): round(r, 3) for L, r, n in zip(
                    self.candidates, self.ragged_factors(), self.played, strict=True) if n > 0},
                "cost_curve_ms": {str(c["positions"]): c.get("ms_min", c["ms"]) for c in self.curve},
                "loop_overhead_ms": self.overhead_ms, "ar_step_overhead_ms": self.ar_overhead_ms,
                **({} if self.by_age else {"overhead_ms_by_window": {str(L): round(o, 3) for L, o in zip(
                    self.candidates, self.overheads_by_window(), strict=True)}}),
                "iteration_ms_by_window": {str(L): round(ms, 3) for L, ms in zip(
                    self.candidates, iteration_ms, strict=True) if ms is not None},
                "ar_runs": self.ar_runs}


__all__ = ["AutoWindow", "window_ladder"]
