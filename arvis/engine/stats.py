"""The figures every method reports, counted once, in the engine (names as in docs/measurement.md).

- ``tokens``: generated tokens per sample.
- ``target_forwards``: target-model forward passes the sample took part in (a CFG pair counts once;
  the prefill that yields the first token counts as one).
- ``draft_forwards``: forward passes of any drafter / up-sampler.
- ``step_compression`` = tokens / target_forwards.
- ``accepted_per_forward``: tokens committed by each of those forwards (mean and histogram).
- ``commit_forward``: for every sequence index, the forward that committed it (decode-order heat map).
- ``latency_s``: wall time of the whole batch decode; ``peak_memory_mb``: see :func:`peak_memory_mb`.
- the time split of ``latency_s`` (batch level): ``target_forward_s`` inside target-model forwards,
  ``draft_forward_s`` inside drafter forwards, ``outside_s`` everything else (acceptance math, drafting
  bookkeeping, sampling, masks — what an implementation controls), also per target forward.

:func:`summarize` is the one place these figures are aggregated (a pipeline's ``stats.summary()``,
``arvis generate`` and ``arvis bench`` records all come from it).
"""

from __future__ import annotations

import contextlib
import resource
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch


@dataclass
class DecodeStats:
    """One sample's decode statistics."""

    method: str
    tokens: int
    target_forwards: int
    draft_forwards: int
    accepted_per_forward: list[int]
    commit_forward: list[int]
    latency_s: float = 0.0
    peak_memory_mb: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def step_compression(self) -> float:
        return self.tokens / max(self.target_forwards, 1)

    @property
    def mean_accepted_per_forward(self) -> float:
        a = self.accepted_per_forward
        return sum(a) / max(len(a), 1)

    def to_dict(self, with_lists: bool = True) -> dict[str, Any]:
        d = asdict(self)
        if not with_lists:
            d.pop("accepted_per_forward")
            d.pop("commit_forward")
        d["step_compression"] = self.step_compression
        d["mean_accepted_per_forward"] = self.mean_accepted_per_forward
        return d


@dataclass
class BatchStats:
    """Statistics of one batched decode: per sample, plus batch-level forwards, wall time and its split."""

    samples: list[DecodeStats]
    batch_target_forwards: int
    batch_draft_forwards: int
    latency_s: float
    peak_memory_mb: float
    target_forward_s: float = 0.0
    draft_forward_s: float = 0.0

    @property
    def outside_s(self) -> float:
        """Wall time outside every target and drafter forward."""
        return max(self.latency_s - self.target_forward_s - self.draft_forward_s, 0.0)

    # The headline figures as attributes (means over samples, as in :meth:`summary`), the same for every family.
    @property
    def tokens(self) -> float:
        return self._mean("tokens")

    @property
    def target_forwards(self) -> float:
        return self._mean("target_forwards")

    @property
    def draft_forwards(self) -> float:
        return self._mean("draft_forwards")

    @property
    def step_compression(self) -> float:
        return self._mean("step_compression")

    @property
    def accepted_per_forward(self) -> float:
        return self._mean("mean_accepted_per_forward")

    def _mean(self, figure: str) -> float:
        return sum(getattr(s, figure) for s in self.samples) / max(len(self.samples), 1)

    def summary(self, details: bool = False) -> dict[str, Any]:
        """:func:`summarize` of this batch."""
        return summarize([self], details=details)

    def format(self) -> str:
        s = self.summary()
        return (f"method={s['method']} samples={s['samples']} tokens={s['tokens']:.0f} "
                f"target_forwards={s['target_forwards']:.1f} draft_forwards={s['draft_forwards']:.1f} "
                f"step_compression={s['step_compression']:.2f}x accepted_per_forward={s['accepted_per_forward']:.2f} "
                f"batch_forwards={s['batch_target_forwards']} latency_s={s['latency_s']:.3f} "
                f"outside_forwards={100 * s['outside_share']:.0f}% peak_memory_mb={s['peak_memory_mb']:.0f}")


def summarize(batches: Sequence[BatchStats], details: bool = False) -> dict[str, Any]:
    """The figures of one or more batched decodes of the same method (names of docs/measurement.md).

    Means over all samples: ``tokens``, ``target_forwards``, ``draft_forwards``, ``step_compression``,
    ``accepted_per_forward``. Sums over batches: ``batch_target_forwards``, ``batch_draft_forwards``,
    ``latency_s`` and its split ``target_forward_s`` / ``draft_forward_s`` / ``outside_s`` (also per
    batch target forward, in ms, and ``outside_share`` of the latency). ``peak_memory_mb``: the max.

    With ``details``: the accepted-per-forward histogram of all samples, sample 0's decode order
    (``commit_forward``), ``per_sample`` headline figures and the method's ``extra`` figures
    (:func:`summarize_extra`).
    """
    samples = [s for b in batches for s in b.samples]
    n = max(len(samples), 1)
    forwards = sum(b.batch_target_forwards for b in batches)
    latency = sum(b.latency_s for b in batches)
    target = sum(b.target_forward_s for b in batches)
    draft = sum(b.draft_forward_s for b in batches)
    outside = sum(b.outside_s for b in batches)
    out: dict[str, Any] = {
        "method": samples[0].method if samples else "",
        "samples": len(samples),
        **{k: sum(getattr(s, k) for s in samples) / n for k in ("tokens", "target_forwards", "draft_forwards",
                                                                   "step_compression")},
        "accepted_per_forward": sum(s.mean_accepted_per_forward for s in samples) / n,
        "batch_target_forwards": forwards,
        "batch_draft_forwards": sum(b.batch_draft_forwards for b in batches),
        "latency_s": latency,
        "target_forward_s": target,
        "draft_forward_s": draft,
        "outside_s": outside,
        "target_ms_per_forward": 1e3 * target / max(forwards, 1),
        "draft_ms_per_forward": 1e3 * draft / max(forwards, 1),
        "outside_ms_per_forward": 1e3 * outside / max(forwards, 1),
        "outside_share": outside / latency if latency > 0 else 0.0,
        "peak_memory_mb": max((b.peak_memory_mb for b in batches), default=0.0),
    }
    if details and samples:
        hist: Counter[int] = Counter()
        for s in samples:
            hist.update(s.accepted_per_forward)
        out["accepted_per_forward_histogram"] = {str(k): v for k, v in sorted(hist.items())}
        out["commit_forward"] = samples[0].commit_forward
        out["per_sample"] = [{"tokens": s.tokens, "target_forwards": s.target_forwards,
                              "draft_forwards": s.draft_forwards, "step_compression": s.step_compression,
                              "accepted_per_forward": s.mean_accepted_per_forward} for s in samples]
        out["extra"] = summarize_extra(samples)
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def summarize_extra(samples: Sequence[DecodeStats]) -> dict[str, Any]:
    """Method-specific figures (``DecodeStats.extra``) over samples: ``max_*`` keys by max, other numbers by mean,
    anything else kept when all samples agree (e.g. ``tv_kind``). Where separate decodes disagree (batch 1: one
    decode per sample), a dict of numbers (e.g. ``windows_chosen``) is averaged key by key and a list of numbers
    (e.g. ``acceptance_by_offset``) index by index, each over the samples that report that key or index."""
    out: dict[str, Any] = {}
    for key in samples[0].extra:
        values = [s.extra.get(key) for s in samples]
        if all(_is_number(v) for v in values):
            out[key] = max(values) if key.startswith("max_") else sum(values) / len(values)
        elif all(v == values[0] for v in values):
            out[key] = values[0]
        elif all(isinstance(v, dict) and all(_is_number(x) for x in v.values()) for v in values):
            keys = dict.fromkeys(k for v in values for k in v)  # first-seen order
            out[key] = {k: sum(v[k] for v in values if k in v) / sum(k in v for v in values) for k in keys}
        elif all(isinstance(v, list) and all(_is_number(x) for x in v) for v in values):
            longest = max(len(v) for v in values)
            out[key] = [sum(v[i] for v in values if i < len(v)) / sum(i < len(v) for v in values)
                        for i in range(longest)]
    return out


class ForwardClock:
    """Wall time spent inside backbone forwards, per role (``"target"``, ``"draft"``).

    On the CPU a forward runs synchronously, so ``perf_counter`` around the call is exact. On CUDA the
    call only queues kernels: CUDA events are recorded around it and read once, at the end of the
    decode (no synchronisation per forward).
    """

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.seconds: dict[str, float] = {}
        self._events: list[tuple[str, Any, Any]] = []

    @contextlib.contextmanager
    def measure(self, role: str) -> Iterator[None]:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._events.append((role, start, end))
            return
        t0 = time.perf_counter()
        yield
        self.seconds[role] = self.seconds.get(role, 0.0) + time.perf_counter() - t0

    def seconds_so_far(self) -> float | None:
        """Seconds inside forwards so far (every role), without a synchronisation: on the CPU (exact); ``None`` on
        CUDA (its events are read at the end)."""
        return None if self.cuda else sum(self.seconds.values())

    def totals(self) -> dict[str, float]:
        """Seconds per role (synchronises once on CUDA)."""
        if self._events:
            self._events[-1][2].synchronize()
            for role, start, end in self._events:
                self.seconds[role] = self.seconds.get(role, 0.0) + start.elapsed_time(end) / 1e3
            self._events.clear()
        return dict(self.seconds)


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory: CUDA allocator high-water mark, or on the CPU the process's peak resident set.

    The CPU figure is the whole process's high-water mark since start (what ``ru_maxrss`` measures),
    so it is an upper bound for any one decode in it.
    """
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10


class StatsRecorder:
    """Counts forwards and commits for a batch — the one recorder of every decoder kind (token engine,
    next-scale decoder, continuous decoder).

    Forward counts are kept on the host (a decoder knows which samples take part without reading the device);
    the decode order stays on the device until :meth:`finish`. A *committing* forward is one whose output
    tokens are committed (target forwards; also a draft model's own forwards where it commits, as CoDe's
    refiner does): they make the timeline that ``commit_forward`` and ``accepted_per_forward`` index.
    """

    def __init__(self, batch_size: int, num_tokens: int, device: torch.device):
        self.forward_index = 0  # committing forwards so far (the commit timeline)
        self.target_forwards = 0  # batch-level target forwards
        self.draft_forwards = 0
        self.sample_forwards = [0] * batch_size
        self.sample_draft_forwards = [0] * batch_size
        # [B, N + 1]: the forward that committed each index; column N is a scratch column (see the engine).
        self._commit_forward = torch.full((batch_size, num_tokens + 1), -1, dtype=torch.long, device=device)
        self.commit_forward = self._commit_forward
        self.extra: dict[str, Any] = {}

    def target_forward(self, samples: Sequence[int]) -> int:
        """A target forward over ``samples`` (sample ids); returns its index in the commit timeline."""
        for b in samples:
            self.sample_forwards[b] += 1
        self.target_forwards += 1
        self.forward_index += 1
        return self.forward_index - 1

    def draft_forward(self, samples: Sequence[int], count: int = 1, commits: bool = False) -> int:
        """``count`` drafter forwards over ``samples``; with ``commits`` (one forward) it commits tokens itself
        and gets an index in the commit timeline (returned; else -1)."""
        for b in samples:
            self.sample_draft_forwards[b] += count
        self.draft_forwards += count
        if not commits:
            return -1
        self.forward_index += 1
        return self.forward_index - 1

    def mark(self, positions: torch.Tensor, forward: int) -> None:
        """Record that ``forward`` committed ``positions`` (``[B, k]`` sequence indices, every sample)."""
        self._commit_forward.scatter_(1, positions, forward)

    def finish(self, method: str, latency_s: float, peak_mb: float, clock: ForwardClock | None = None,
               commit: torch.Tensor | None = None) -> BatchStats:
        """The batch's statistics; ``commit``: the decode order ``[B, N]`` already on the host (the caller read it
        with other values in one transfer), else it is read here."""
        if commit is None:
            commit = self._commit_forward[:, :-1].cpu()
        B = commit.shape[0]
        F = max(self.forward_index, 1)
        # Tokens committed by each forward, for every sample at once: [B, F].
        counts = torch.zeros(B, F, dtype=torch.long).scatter_add_(1, commit.clamp_min(0), (commit >= 0).long())
        forwards, drafts = self.sample_forwards, self.sample_draft_forwards
        tokens = (commit >= 0).sum(1).tolist()
        counts_l, commit_l = counts.tolist(), commit.tolist()
        # A sample's forwards in the commit timeline: all of them when every sample takes part in every forward.
        timeline = [forwards[b] if self.forward_index == self.target_forwards else self.forward_index
                    for b in range(B)]
        # Per-sample figures come under "per_sample" ({name: [value of sample b]}); everything else is shared.
        shared = dict(self.extra)
        per_sample = shared.pop("per_sample", {})
        if any(len(v) != B for v in per_sample.values()):
            raise ValueError(f"per_sample figures must have one value per sample ({B})")
        samples = [
            DecodeStats(method=method, tokens=tokens[b], target_forwards=forwards[b], draft_forwards=drafts[b],
                        accepted_per_forward=counts_l[b][: timeline[b]], commit_forward=commit_l[b],
                        latency_s=latency_s, peak_memory_mb=peak_mb,
                        extra={**shared, **{k: v[b] for k, v in per_sample.items()}})
            for b in range(B)
        ]
        seconds = clock.totals() if clock is not None else {}
        return BatchStats(samples=samples, batch_target_forwards=self.target_forwards,
                          batch_draft_forwards=self.draft_forwards, latency_s=latency_s, peak_memory_mb=peak_mb,
                          target_forward_s=seconds.get("target", 0.0), draft_forward_s=seconds.get("draft", 0.0))
