"""The figures every method reports, counted once, in the engine (names as in docs/measurement.md).

- ``tokens``: generated tokens per sample.
- ``target_forwards``: target-model forward passes the sample took part in (a CFG pair counts once;
  the prefill that yields the first token counts as one).
- ``draft_forwards``: forward passes of any drafter / up-sampler.
- ``step_compression`` = tokens / target_forwards.
- ``accepted_per_forward``: tokens committed by each of those forwards (mean and histogram).
- ``commit_forward``: for every sequence index, the forward that committed it (decode-order heat map).
- ``latency_s``: wall time of the whole batch decode; ``peak_memory_mb``: see :func:`peak_memory_mb`.
"""

from __future__ import annotations

import resource
import sys
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
    """Statistics of one batched decode: per sample, plus batch-level forwards and wall time."""

    samples: list[DecodeStats]
    batch_target_forwards: int
    batch_draft_forwards: int
    latency_s: float
    peak_memory_mb: float

    def summary(self) -> dict[str, float]:
        """Means over samples of the headline figures, plus the batch's own counts."""
        n = max(len(self.samples), 1)
        return {
            "method": self.samples[0].method if self.samples else "",
            "samples": len(self.samples),
            "tokens": sum(s.tokens for s in self.samples) / n,
            "target_forwards": sum(s.target_forwards for s in self.samples) / n,
            "draft_forwards": sum(s.draft_forwards for s in self.samples) / n,
            "step_compression": sum(s.step_compression for s in self.samples) / n,
            "accepted_per_forward": sum(s.mean_accepted_per_forward for s in self.samples) / n,
            "batch_target_forwards": self.batch_target_forwards,
            "latency_s": self.latency_s,
            "peak_memory_mb": self.peak_memory_mb,
        }

    def format(self) -> str:
        s = self.summary()
        return (f"method={s['method']} samples={s['samples']} tokens={s['tokens']:.0f} "
                f"target_forwards={s['target_forwards']:.1f} draft_forwards={s['draft_forwards']:.1f} "
                f"step_compression={s['step_compression']:.2f}x accepted_per_forward={s['accepted_per_forward']:.2f} "
                f"batch_forwards={s['batch_target_forwards']} latency_s={s['latency_s']:.3f} "
                f"peak_memory_mb={s['peak_memory_mb']:.0f}")


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
    """Counts forwards and commits for a batch; tensors stay on the device until :meth:`finish`."""

    def __init__(self, batch_size: int, num_tokens: int, device: torch.device):
        self.forward_index = 0  # batch-level target forwards so far
        self.draft_forwards = 0
        self.sample_forwards = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.sample_draft_forwards = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.commit_forward = torch.full((batch_size, num_tokens), -1, dtype=torch.long, device=device)
        self.extra: dict[str, Any] = {}

    def target_forward(self, samples: torch.Tensor) -> int:
        """A target forward over ``samples`` (sample ids); returns its index."""
        self.sample_forwards.index_add_(0, samples, torch.ones_like(samples))
        self.forward_index += 1
        return self.forward_index - 1

    def draft_forward(self, samples: torch.Tensor, count: int = 1) -> None:
        self.sample_draft_forwards.index_add_(0, samples, torch.full_like(samples, count))
        self.draft_forwards += count

    def finish(self, method: str, latency_s: float, peak_mb: float) -> BatchStats:
        commit = self.commit_forward.cpu()
        B = commit.shape[0]
        F = max(self.forward_index, 1)
        # Tokens committed by each forward, for every sample at once: [B, F].
        counts = torch.zeros(B, F, dtype=torch.long).scatter_add_(1, commit.clamp_min(0), (commit >= 0).long())
        forwards = self.sample_forwards.tolist()
        drafts = self.sample_draft_forwards.tolist()
        tokens = (commit >= 0).sum(1).tolist()
        counts_l, commit_l = counts.tolist(), commit.tolist()
        per_sample = {k: v for k, v in self.extra.items() if isinstance(v, list) and len(v) == B}
        shared = {k: v for k, v in self.extra.items() if k not in per_sample}
        samples = [
            DecodeStats(method=method, tokens=tokens[b], target_forwards=forwards[b], draft_forwards=drafts[b],
                        accepted_per_forward=counts_l[b][: forwards[b]], commit_forward=commit_l[b],
                        latency_s=latency_s, peak_memory_mb=peak_mb,
                        extra={**shared, **{k: v[b] for k, v in per_sample.items()}})
            for b in range(B)
        ]
        return BatchStats(samples=samples, batch_target_forwards=self.forward_index,
                          batch_draft_forwards=self.draft_forwards, latency_s=latency_s, peak_memory_mb=peak_mb)
