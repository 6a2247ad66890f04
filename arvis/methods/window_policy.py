"""Cost-aware windows (``window="auto"``): every forward's window chosen from this machine's forward-cost curve
and the acceptance measured so far in the decode.

A window of ``L`` drafts commits ``E(L) = 1 + Σ_{j=1..L} Π_{k<j} α_k`` tokens per sample on average, where
``α_k`` is the probability that the draft at offset ``k`` is accepted when the drafts before it were; an iteration
costs ``cost(L + 1)`` (the curve: :func:`arvis.engine.cost.measured_curve`, measured once per model, batch,
dtype, device and thread count; each size priced by its fastest timed forward, since other work on the machine
only adds time) plus the loop's own time per iteration (measured as it runs). Each iteration
takes the candidate ``L`` — ``0`` is a plain AR step — with the most expected tokens per second.

``α_k`` is estimated per offset from exponentially decayed counts of the drafts tested and accepted (recent
iterations weigh more: acceptance changes across an image), shrunk towards the pooled rate where an offset has
few tests. After ``probe_every`` plain AR steps in a row one small window is tried, so a decode that went to AR
can notice when drafting pays again.

Lossless: iteration ``i``'s window is a function of what iterations before it observed (their accepted counts
and times), never of iteration ``i``'s own drafts or coins, and exact acceptance commits every token as a sample
of its conditional whatever the window — so the output distribution is AR's. ``tests/methods/test_lossless.py`` proves
it with windows chosen from the random acceptance history (:class:`AutoWindow` with a given curve).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from arvis.acceptance.verify import Verification
from arvis.drafting.base import Proposal
from arvis.engine.cost import curve_cost, measured_curve
from arvis.engine.engine import DecodeEngine
from arvis.engine.schedules import WindowPlan

# Windows an adaptive decode chooses between (0: a plain AR step); the curve is measured at each plus one.
WINDOW_CANDIDATES: tuple[int, ...] = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def window_candidates(max_window: int) -> list[int]:
    """The candidate windows up to ``max_window`` (which is always one of them)."""
    if max_window < 1:
        raise ValueError(f"max_window must be >= 1, got {max_window}")
    return sorted({*(c for c in WINDOW_CANDIDATES if c <= max_window), max_window})


class AutoWindow:
    """Chooses each iteration's window (module docstring). Per request, owned by its :class:`DraftVerifyLoop`.

    Args:
        engine: the request's engine (its device; its backbone, batch and settings key the cost curve).
        max_window: the largest window it may choose.
        curve: a forward-cost curve (``[{"positions": T, "ms": …}, …]``) covering ``T = L + 1`` for every
            candidate ``L``; default: measured for ``engine`` (:func:`arvis.engine.cost.measured_curve`).
        decay: weight of the previous counts at each iteration (``0 < decay <= 1``).
        probe_every: plain AR steps in a row after which one small window is tried.
        prior: pseudo-tests pulling a rarely tested offset's rate towards the pooled rate.
        overhead_ms: the loop's time per iteration outside the forward; default ``None``: measured as it runs
            (a fixed value makes the choices a function of the acceptance alone: the lossless tests use it).
        drafting_ms: the time a draft model takes to propose ``L`` drafts (speculative decoding's draft length);
            ``None`` for drafts that cost no forward (Jacobi drafts).
    """

    def __init__(self, engine: DecodeEngine, max_window: int, curve: Sequence[Mapping[str, float]] | None = None,
                 decay: float = 0.8, probe_every: int = 8, prior: float = 2.0, overhead_ms: float | None = None,
                 drafting_ms: Callable[[int], float] | None = None):
        if not 0 < decay <= 1:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        # With a draft model (drafting_ms: its time to propose L drafts) there is no plain AR step: its cache
        # catches up on at most two committed tokens per forward.
        # The curve is timed inside the sequence: windows up to N - 2 (a longer one never fits anyway).
        max_window = max(1, min(max_window, engine.num_tokens - 2))
        self.candidates = [c for c in window_candidates(max_window) if c > 0 or drafting_ms is None]
        sizes = [c + 1 for c in self.candidates]
        self.curve = (list(curve) if curve is not None
                      else measured_curve(engine.backbone, engine.condition, engine.sampling, sizes))
        # Each size's least disturbed forward (other work on the machine only adds time to a timing).
        priced = [{"positions": c["positions"], "ms": c.get("ms_min", c["ms"])} for c in self.curve]
        costs = [curve_cost(priced, t) for t in sizes]
        if any(c is None for c in costs):
            raise ValueError(f"the forward-cost curve must cover positions {sizes[0]} … {sizes[-1]}")
        self.cost_ms: list[float] = [float(c) + (drafting_ms(L) if drafting_ms else 0.0)  # type: ignore[arg-type]
                                     for c, L in zip(costs, self.candidates, strict=True)]
        self.max_window, self.decay, self.probe_every, self.prior = max_window, decay, probe_every, prior
        dev = engine.device
        self.tested = torch.zeros(max_window, device=dev)
        self.accepted = torch.zeros(max_window, device=dev)
        self._offsets = torch.arange(max_window, device=dev)
        self._candidates = torch.tensor(self.candidates, device=dev)
        # The loop's time per iteration outside the forward (an exponential average), unless given.
        self.overhead_ms, self._measure_overhead = overhead_ms or 0.0, overhead_ms is None
        self._overhead_seen = False
        self._last: tuple[float, int] | None = None  # (host time, candidate index) of the previous choice
        self._ar_run = 0
        self.trace: list[tuple[int, int]] = []  # (first uncommitted index of the first active sample, window)

    # ------------------------------------------------------------------ on the device
    def expected_tokens(self) -> torch.Tensor:
        """``[C]``: expected committed tokens per sample of each candidate window (read at the loop's sync)."""
        pooled = (self.accepted.sum() + 1) / (self.tested.sum() + 2)
        alpha = (self.accepted + self.prior * pooled) / (self.tested + self.prior)
        survive = torch.cumprod(alpha, 0)  # [j]: the first j + 1 drafts accepted
        expected = 1 + torch.cat([survive.new_zeros(1), torch.cumsum(survive, 0)])  # [L]: E(L)
        return expected.index_select(0, self._candidates)

    def observe(self, plan: WindowPlan, proposal: Proposal, verification: Verification) -> None:
        """Count the drafts this forward tested and accepted, per offset (no host synchronisation)."""
        L = plan.verified - 1
        self.tested.mul_(self.decay)
        self.accepted.mul_(self.decay)
        if L == 0:
            return
        offsets = self._offsets[:L]
        accepted_count = verification.accepted_count[:, None]
        tested = proposal.has_draft[:, :L] & (offsets <= accepted_count)
        self.tested[:L] += tested.sum(0)
        self.accepted[:L] += (offsets < accepted_count).sum(0)

    # ------------------------------------------------------------------ on the host
    def choose(self, expected: Sequence[float], committed: Sequence[int]) -> int:
        """The window of the next forward, from :meth:`expected_tokens` read at this iteration's sync."""
        now = time.perf_counter()
        if self._last is not None and self._measure_overhead:  # the last iteration's time beyond its forward
            spent = (now - self._last[0]) * 1e3 - self.cost_ms[self._last[1]]
            spent = max(spent, 0.0)
            self.overhead_ms = spent if not self._overhead_seen else 0.8 * self.overhead_ms + 0.2 * spent
            self._overhead_seen = True
        scores = [e / (c + self.overhead_ms) for e, c in zip(expected, self.cost_ms, strict=True)]
        best = max(range(len(scores)), key=scores.__getitem__)
        if self.candidates[best] == 0:
            self._ar_run += 1
            if self._ar_run > self.probe_every:  # try drafting again (candidates[1]: the smallest window)
                best, self._ar_run = 1, 0
        else:
            self._ar_run = 0
        self._last = (now, best)
        window = self.candidates[best]
        self.trace.append((committed[0], window))
        return window

    def report(self) -> dict[str, Any]:
        chosen: dict[int, int] = {}
        for _, w in self.trace:
            chosen[w] = chosen.get(w, 0) + 1
        return {"window_policy": "auto", "max_window": self.max_window,
                "windows_chosen": {str(w): n for w, n in sorted(chosen.items())},
                "window_trace": [list(t) for t in self.trace],
                "mean_window": sum(w for _, w in self.trace) / max(len(self.trace), 1),
                "cost_curve_ms": {str(c["positions"]): c.get("ms_min", c["ms"]) for c in self.curve},
                "loop_overhead_ms": self.overhead_ms}


__all__ = ["WINDOW_CANDIDATES", "AutoWindow", "window_candidates"]
