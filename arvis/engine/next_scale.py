"""The next-scale decoder (VAR, arXiv:2404.02905): one request's state and the one verb every next-scale
method is a schedule of.

A next-scale model samples a pyramid of token maps scale by scale; the tokens of one scale are drawn at once,
independently given the earlier scales. :class:`NextScaleDecoder` holds one request's state (the tokenizer's
running reconstruction ``f_hat``, the sampled ids, the per-sample random streams, the forward clock and the
statistics recorder shared with the token engine) and offers :meth:`NextScaleDecoder.step`: "run this model
over scales ``first … last`` against its cache, sample scale ``last`` and commit it". The methods
(:mod:`arvis.methods.next_scale`) decide which model runs which scales.

Sampling (VAR's conventions): CFG by the ``var`` rule of :mod:`arvis.engine.guidance` (``w = 1 + s·k/(S − 1)``
at scale ``k``; ``guidance_scale = 0`` runs no unconditional rows); then temperature, top-k and top-p
(:func:`arvis.engine.sampling.filter_logits`; VAR keeps the smallest set whose mass exceeds ``top_p``, the same
set up to ties) and one draw per token from the sample's own generator.

Statistics are the engine's (:class:`arvis.engine.stats.BatchStats`): ``target_forwards`` / ``draft_forwards``
count forwards of the large / small model, ``accepted_per_forward`` the tokens each forward committed (large
and small, in order), ``commit_forward`` the forward that committed each token; ``extra`` holds the per-scale
timeline (``scale_model``, ``scale_rows``, ``scale_positions`` evaluated, ``scale_ms``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from arvis.engine.guidance import combine, split_rows
from arvis.engine.sampling import SamplingConfig, filter_logits
from arvis.engine.stats import BatchStats, ForwardClock, StatsRecorder, peak_memory_mb
from arvis.models.next_scale import NextScaleBackbone, ScaleKVCache, ScaleQuantizer
from arvis.utils.random import GeneratorArg, RandomStreams, sample_categorical

TARGET, DRAFT = "target", "draft"


def scale_probs(cond_logits: torch.Tensor, uncond_logits: torch.Tensor | None, strength: float,
                sampling: SamplingConfig) -> torch.Tensor:
    """The sampling distribution of every token of a scale.

    Args:
        cond_logits: ``[B, l, V]`` logits of the conditional rows.
        uncond_logits: ``[B, l, V]`` of the unconditional rows, or ``None`` (no guidance).
        strength: the guidance strength ``w`` at this scale (``u + w·(c − u)``).
        sampling: temperature (0 = greedy), top-k, top-p.

    Returns:
        ``[B, l, V]`` fp32 probabilities.
    """
    logits = cond_logits.float()
    if uncond_logits is not None:
        logits = combine(logits, uncond_logits.float(), strength)
    if sampling.greedy:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    return filter_logits(logits / sampling.temperature, sampling.top_k, sampling.top_p).softmax(-1)


@dataclass
class ScaleStep:
    """One forward of the timeline: which model, which scales, how many rows, how many positions it evaluated
    (after pruning), how long (forward + sampling + commit)."""

    model: str
    first: int
    last: int
    rows: int
    positions: int
    seconds: float


class NextScaleDecoder:
    """One request's decode state for a next-scale model.

    Args:
        target: the (large) model (:class:`~arvis.models.next_scale.NextScaleBackbone`).
        quantizer: the tokenizer's multi-scale quantiser (:class:`~arvis.models.next_scale.ScaleQuantizer`).
        labels: ``[B]`` class ids.
        sampling: sampling settings with the ``var`` guidance rule.
        generator: one generator, one per sample, or ``None``.
        method: the method name recorded in the statistics.
        on_scale: called after every committed scale with the decoder (progress, previews).
    """

    def __init__(self, target: NextScaleBackbone, quantizer: ScaleQuantizer, labels: torch.Tensor,
                 sampling: SamplingConfig, generator: GeneratorArg = None, method: str = "ar",
                 on_scale: Callable[[NextScaleDecoder], None] | None = None):
        if sampling.guidance != "var":
            raise ValueError(f"sampling: a next-scale model guides by VAR's rule (guidance='var'), got "
                             f"{sampling.guidance!r}")
        self.target, self.quantizer, self.sampling, self.method, self.on_scale = target, quantizer, sampling, method, on_scale
        self.layout = layout = target.scale_layout
        if tuple(quantizer.patch_nums) != layout.patch_nums:
            raise ValueError(f"the tokenizer's scales {tuple(quantizer.patch_nums)} differ from the transformer's "
                             f"{layout.patch_nums}")
        self.device = next(target.parameters()).device  # type: ignore[attr-defined]
        self.labels = labels.to(self.device)
        self.B = B = int(labels.shape[0])
        if isinstance(generator, list | tuple) and len(generator) != B:
            raise ValueError(f"generator: got {len(generator)} generators for {B} images; pass one, or one per image")
        self.guided = sampling.uses_cfg
        self.random = RandomStreams(generator, B, self.device)
        self.clock = ForwardClock(self.device)
        self.stats = StatsRecorder(B, layout.num_tokens, self.device)
        self.tokens = torch.full((B, layout.num_tokens), -1, dtype=torch.long, device=self.device)
        side = layout.patch_nums[-1]
        self.f_hat = torch.zeros(B, quantizer.channels, side, side, device=self.device, dtype=torch.float32)
        self.inputs: list[torch.Tensor | None] = [None] * layout.num_scales  # scale s ≥ 1: [B, pn_s², Cvae]
        self.timeline: list[ScaleStep] = []
        self.committed = 0  # scales committed so far
        self._samples = list(range(B))
        self._t0 = time.perf_counter()

    def allocate(self, model: NextScaleBackbone, guided: bool) -> ScaleKVCache:
        """A KV cache for ``model`` with room for the CFG pair when ``guided``."""
        return model.allocate_cache(2 * self.B if guided and self.guided else self.B)

    def _inputs(self, model: NextScaleBackbone, cond: torch.Tensor, first: int, last: int) -> torch.Tensor:
        R = cond.shape[0]
        parts = []
        for s in range(first, last + 1):
            if s == 0:
                parts.append(model.first_input(cond))
            else:
                x = self.inputs[s]
                assert x is not None, f"scale {s} has no input: scale {s - 1} is not committed"
                parts.append(model.embed_input(s, x.repeat(R // self.B, 1, 1)))
        return torch.cat(parts, 1)

    @torch.no_grad()
    def step(self, model: NextScaleBackbone, cache: ScaleKVCache, first: int, last: int, guided: bool = True,
             pruning: Any = None, role: str = TARGET) -> None:
        """Run ``model`` over scales ``first … last`` (one forward against ``cache``), sample and commit ``last``.

        ``guided``: apply CFG to this scale (needs the unconditional rows, so a cache allocated guided).
        """
        t0 = time.perf_counter()
        probs = self.distribution(model, cache, first, last, guided, pruning, role)
        ids = sample_categorical(probs, self.random.exponential(probs.shape[1:]))  # [B, l]
        forward = (self.stats.target_forward(self._samples) if role == TARGET
                   else self.stats.draft_forward(self._samples, commits=True))
        self.commit(last, ids, forward)
        self.timeline[-1].seconds = time.perf_counter() - t0

    @torch.no_grad()
    def distribution(self, model: NextScaleBackbone, cache: ScaleKVCache, first: int, last: int, guided: bool = True,
                     pruning: Any = None, role: str = TARGET) -> torch.Tensor:
        """``model``'s sampling distribution of scale ``last`` (``[B, pn², V]`` fp32) from one forward over
        scales ``first … last``; recorded in the timeline, nothing committed."""
        if last != self.committed or first > last:
            raise RuntimeError(f"forward over scales {first}..{last} but {self.committed} scales are committed")
        t0 = time.perf_counter()
        guided = guided and self.guided
        labels = torch.cat([self.labels, torch.full_like(self.labels, model.num_classes)]) if guided else self.labels
        cond = model.condition(labels)
        x = self._inputs(model, cond, first, last)
        if pruning is not None:
            pruning.begin(self.layout, first, last)
        with self.clock.measure(role):
            logits = model.forward_scales(x, cond, cache, first, last, pruning)
        begin, end = self.layout.bounds[last]
        logits = logits[:, x.shape[1] - (end - begin):]
        strength = self.sampling.rule.strength(self.sampling.guidance_scale, last / (self.layout.num_scales - 1))
        cond_logits, uncond_logits = split_rows(logits, self.B, guided)
        probs = scale_probs(cond_logits, uncond_logits, strength, self.sampling)
        kept = pruning.written if pruning is not None else None
        self.timeline.append(ScaleStep(role, first, last, x.shape[0], x.shape[1] if kept is None else int(kept),
                                       time.perf_counter() - t0))
        return probs

    def commit(self, scale: int, ids: torch.Tensor, forward: int = -1) -> None:
        """Fix scale ``scale``'s ids ``[B, pn²]`` (committed by ``forward`` of the timeline) and prepare the next
        scale's input."""
        begin, end = self.layout.bounds[scale]
        pn = self.layout.patch_nums[scale]
        self.tokens[:, begin:end] = ids
        if forward >= 0:
            self.stats.commit_forward[:, begin:end] = forward
        code_map = self.quantizer.code_map(ids, pn)  # in the tokenizer's dtype (fp32, or bf16/fp16 pipelines)
        self.f_hat, nxt = self.quantizer.next_scale_input(scale, self.f_hat.to(code_map.dtype), code_map)
        if nxt is not None:
            self.inputs[scale + 1] = nxt
        self.committed = scale + 1
        if self.on_scale is not None:
            self.on_scale(self)

    def finished(self) -> bool:
        return self.committed == self.layout.num_scales

    def finish(self, extra: dict[str, Any] | None = None, partial: bool = False) -> BatchStats:
        """Stop the clock; the statistics in the engine's format (``partial``: of the scales committed so far,
        after an interrupted decode)."""
        latency = time.perf_counter() - self._t0
        if not partial and not self.finished():
            raise RuntimeError(f"method {self.method!r} committed {self.committed} of {self.layout.num_scales} scales")
        self.stats.extra.update({"scale_model": [s.model for s in self.timeline],
                                 "scale_rows": [s.rows for s in self.timeline],
                                 "scale_positions": [s.positions for s in self.timeline],
                                 "scale_ms": [1e3 * s.seconds for s in self.timeline], **(extra or {})})
        return self.stats.finish(self.method, latency, peak_memory_mb(self.device), self.clock)


__all__ = ["DRAFT", "TARGET", "NextScaleDecoder", "ScaleStep", "scale_probs"]
