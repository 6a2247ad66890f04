"""Next-scale decoding (VAR, arXiv:2404.02905) and its accelerations.

A next-scale model samples a pyramid of token maps scale by scale; the tokens of one scale are drawn
at once, independently given the earlier scales. :class:`NextScaleDecoder` holds one request's state
(the caller-owned KV caches, the tokenizer's running reconstruction ``f_hat``, the sampled ids, the
per-sample random streams and the statistics) and offers one verb, :meth:`NextScaleDecoder.step`:
"run this model over scales ``first … last`` against its cache, sample scale ``last`` and commit it".
Every method is a schedule of steps:

- ``ar`` (the baseline, lossless): the target model decodes every scale, CFG on every scale;
- ``code`` (CoDe, Chen et al., CVPR 2025, arXiv:2411.17787; lossy): the large model decodes the first
  ``draft_scales`` scales, the small model (the pipeline's ``draft_transformer``; CoDe calls it the
  *refiner*) reads them all in one block-causal forward and decodes the rest;
- ``cfg-cutoff`` (lossy): the unconditional rows run only for the first ``guided_scales`` scales;
- ``fastvar`` (FastVAR, Guo et al., ICCV 2025, arXiv:2503.23367; lossy): at the last scales each block
  evaluates only the tokens farthest from the scale's mean, the others take the previous scale's
  block outputs, up-sampled (cached token pruning).

The lossy options compose: ``code`` and ``cfg-cutoff`` accept ``prune_ratios``; ``code`` accepts
``guided_scales``.

Sampling (VAR's conventions): CFG uses the ramp ``t_s = guidance_scale · s / (S − 1)`` and the combination
``(1 + t)·c − t·u`` on logits (``guidance_scale = 0`` turns it off and runs no unconditional rows);
then temperature, top-k and top-p (:func:`arvis.engine.sampling.filter_logits`; VAR keeps the smallest
set whose mass exceeds ``top_p``, the same set up to ties) and one draw per token from the sample's own
generator (:func:`arvis.utils.random.sample_categorical`).

Statistics are the engine's (:class:`arvis.engine.stats.BatchStats`): ``target_forwards`` / ``draft_forwards``
count forwards of the large / small model, ``accepted_per_forward`` the tokens each forward committed
(large and small, in order), ``commit_forward`` the forward that committed each token; ``extra`` holds
the per-scale timeline (``scale_model``, ``scale_rows``, ``scale_positions`` evaluated, ``scale_ms``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from arvis.engine.engine import DecodeEngine
from arvis.engine.sampling import SamplingConfig, filter_logits
from arvis.engine.stats import BatchStats, DecodeStats, peak_memory_mb
from arvis.methods.ar import Autoregressive
from arvis.methods.base import DecodingMethod, MissingResourceError
from arvis.methods.options import Option
from arvis.models.next_scale import NextScaleBackbone, ScaleKVCache, ScaleQuantizer
from arvis.utils.random import GeneratorArg, RandomStreams, sample_categorical

TARGET, DRAFT = "target", "draft"

# The options of the next-scale methods, declared once (``arvis methods``, bench specs); the constructors
# check the values (scale counts are checked against the model's scales when the decode starts).
DRAFT_SCALES = Option("draft_scales", "int", 4, "scales decoded by the large model; the small model (the pipeline's "
                      "draft_transformer) decodes the rest", low=1, high=64)
GUIDED_SCALES = Option("guided_scales", "int", None, "scales with classifier-free guidance; later scales run the "
                       "conditional rows only (None: all)", low=0, high=64)
PRUNE_RATIOS = Option("prune_ratios", "fractions", (), "fraction of tokens dropped at each of the last scales "
                      "(FastVAR cached token pruning)", low=0.0, high=1.0)
DRAFT_MODEL = Option("draft_model", "resource", None, "the small VAR (the pipeline passes its draft_transformer)")


def guidance_ramp(guidance_scale: float, scale: int, num_scales: int) -> float:
    """VAR's CFG strength at ``scale``: ``t = guidance_scale · scale / (num_scales − 1)``."""
    return guidance_scale * scale / (num_scales - 1)


def scale_probs(cond_logits: torch.Tensor, uncond_logits: torch.Tensor | None, t: float,
                sampling: SamplingConfig) -> torch.Tensor:
    """The sampling distribution of every token of a scale.

    Args:
        cond_logits: ``[B, l, V]`` logits of the conditional rows.
        uncond_logits: ``[B, l, V]`` of the unconditional rows, or ``None`` (no guidance).
        t: CFG strength (:func:`guidance_ramp`): ``logits = (1 + t)·c − t·u``.
        sampling: temperature (0 = greedy), top-k, top-p.

    Returns:
        ``[B, l, V]`` fp32 probabilities.
    """
    logits = cond_logits.float()
    if uncond_logits is not None:
        logits = (1 + t) * logits - t * uncond_logits.float()
    if sampling.greedy:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    return filter_logits(logits / sampling.temperature, sampling.top_k, sampling.top_p).softmax(-1)


def check_sampling(sampling: SamplingConfig) -> None:
    if sampling.cfg_interval != -1:
        raise ValueError("cfg_interval: next-scale models use VAR's CFG ramp over scales; leave cfg_interval at -1")


# ----------------------------------------------------------------------------- decode state
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
        sampling: VAR-convention sampling settings (``guidance_scale`` is VAR's ``cfg``).
        generator: one generator, one per sample, or ``None``.
        method: the method name recorded in the statistics.
        on_scale: called after every committed scale with the decoder (progress, previews).
    """

    def __init__(self, target: NextScaleBackbone, quantizer: ScaleQuantizer, labels: torch.Tensor,
                 sampling: SamplingConfig, generator: GeneratorArg = None, method: str = "ar",
                 on_scale: Callable[[NextScaleDecoder], None] | None = None):
        check_sampling(sampling)
        self.target, self.quantizer, self.sampling, self.method, self.on_scale = target, quantizer, sampling, method, on_scale
        self.layout = layout = target.scale_layout
        if tuple(quantizer.patch_nums) != layout.patch_nums:
            raise ValueError(f"the tokenizer's scales {tuple(quantizer.patch_nums)} differ from the transformer's "
                             f"{layout.patch_nums}")
        self.device = next(target.parameters()).device  # type: ignore[attr-defined]
        self.labels = labels.to(self.device)
        self.B = B = int(labels.shape[0])
        self.guided = sampling.guidance_scale > 0
        self.random = RandomStreams(generator, B, self.device)
        self.tokens = torch.full((B, layout.num_tokens), -1, dtype=torch.long, device=self.device)
        side = layout.patch_nums[-1]
        self.f_hat = torch.zeros(B, quantizer.channels, side, side, device=self.device, dtype=torch.float32)
        self.inputs: list[torch.Tensor | None] = [None] * layout.num_scales  # scale s ≥ 1: [B, pn_s², Cvae]
        self.timeline: list[ScaleStep] = []
        self.committed = 0  # scales committed so far
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
        self.commit(last, ids)
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
        logits = model.forward_scales(x, cond, cache, first, last, pruning)
        begin, end = self.layout.bounds[last]
        logits = logits[:, x.shape[1] - (end - begin):]
        t = guidance_ramp(self.sampling.guidance_scale, last, self.layout.num_scales)
        probs = scale_probs(logits[: self.B], logits[self.B:] if guided else None, t, self.sampling)
        kept = getattr(pruning, "written", None)
        self.timeline.append(ScaleStep(role, first, last, x.shape[0], x.shape[1] if kept is None else int(kept),
                                       time.perf_counter() - t0))
        return probs

    def commit(self, scale: int, ids: torch.Tensor) -> None:
        """Fix scale ``scale``'s ids ``[B, pn²]`` and prepare the next scale's input."""
        begin, end = self.layout.bounds[scale]
        pn = self.layout.patch_nums[scale]
        self.tokens[:, begin:end] = ids
        code_map = self.quantizer.code_map(ids, pn)  # in the tokenizer's dtype (fp32, or bf16/fp16 pipelines)
        self.f_hat, nxt = self.quantizer.next_scale_input(scale, self.f_hat.to(code_map.dtype), code_map)
        if nxt is not None:
            self.inputs[scale + 1] = nxt
        self.committed = scale + 1
        if self.on_scale is not None:
            self.on_scale(self)

    def finished(self) -> bool:
        return self.committed == self.layout.num_scales

    def finish(self, extra: dict[str, Any] | None = None) -> BatchStats:
        """Stop the clock; the statistics in the engine's format."""
        latency = time.perf_counter() - self._t0
        if not self.finished():
            raise RuntimeError(f"method {self.method!r} committed {self.committed} of {self.layout.num_scales} scales")
        per_forward = [self.layout.bounds[s.last][1] - self.layout.bounds[s.last][0] for s in self.timeline]
        commit_forward = [0] * self.layout.num_tokens
        for f, s in enumerate(self.timeline):
            begin, end = self.layout.bounds[s.last]
            commit_forward[begin:end] = [f] * (end - begin)
        targets = sum(s.model == TARGET for s in self.timeline)
        drafts = len(self.timeline) - targets
        timeline = {"scale_model": [s.model for s in self.timeline], "scale_rows": [s.rows for s in self.timeline],
                    "scale_positions": [s.positions for s in self.timeline],
                    "scale_ms": [1e3 * s.seconds for s in self.timeline]}
        peak = peak_memory_mb(self.device)
        samples = [DecodeStats(method=self.method, tokens=self.layout.num_tokens, target_forwards=targets,
                               draft_forwards=drafts, accepted_per_forward=list(per_forward),
                               commit_forward=list(commit_forward), latency_s=latency, peak_memory_mb=peak,
                               extra={**timeline, **(extra or {})})
                   for _ in range(self.B)]
        return BatchStats(samples=samples, batch_target_forwards=targets, batch_draft_forwards=drafts,
                          latency_s=latency, peak_memory_mb=peak,
                          target_forward_s=sum(s.seconds for s in self.timeline if s.model == TARGET),
                          draft_forward_s=sum(s.seconds for s in self.timeline if s.model != TARGET))


# ----------------------------------------------------------------------------- FastVAR token pruning
class CachedTokenPruning:
    """FastVAR's cached token pruning as :class:`~arvis.models.var.TokenPruning` hooks (one per model and request).

    On an unpruned single-scale forward every block records its attention and MLP outputs (γ applied).
    On a pruned scale each block keeps the ``keep`` tokens whose input is farthest (squared L2) from
    the scale's mean token, evaluates only those (their keys/values alone enter the cache), and fills
    the other positions with the recorded outputs of the last unpruned scale, area-resized.
    """

    def __init__(self, keep: dict[int, int]):
        self.keep = dict(keep)  # scale -> tokens kept
        self.cache: dict[tuple[int, str], torch.Tensor] = {}
        self.side = 0
        self.prev_side = 0
        self.active: int | None = None  # tokens kept in the current forward
        self.recording = False

    @property
    def written(self) -> int | None:
        return self.active

    def begin(self, layout: Any, first: int, last: int) -> None:
        self.active = self.keep.get(last)
        if self.active is not None and (first != last or not self.cache):
            raise ValueError(f"prune_ratios: scale {last} can be pruned only when the same model evaluated an "
                             f"earlier scale on its own (its outputs are what pruned tokens reuse)")
        if self.active is None:
            self.recording, self.prev_side = True, layout.patch_nums[last]
        else:
            self.recording = False
        self.side = layout.patch_nums[last]

    def select(self, layer: int, part: str, x: torch.Tensor) -> torch.Tensor | None:
        if self.active is None:
            return None
        distance = (x - x.mean(1, keepdim=True)).float().pow(2).sum(-1)  # [R, l]
        return distance.topk(self.active, dim=1).indices

    def restore(self, layer: int, part: str, out: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        prev = self.cache[(layer, part)][: out.shape[0]]  # guidance may have dropped the unconditional rows
        R, C = out.shape[0], out.shape[-1]
        grid = prev.transpose(1, 2).reshape(R, C, self.prev_side, self.prev_side)
        full = F.interpolate(grid.float(), size=(self.side, self.side), mode="area").to(out.dtype)
        full = full.flatten(2).transpose(1, 2).contiguous()
        return full.scatter(1, index[..., None].expand(-1, -1, C), out)

    def record(self, layer: int, part: str, out: torch.Tensor) -> None:
        if self.recording:
            self.cache[(layer, part)] = out[:, out.shape[1] - self.prev_side ** 2:]


# ----------------------------------------------------------------------------- methods
def _check_count(name: str, value: Any, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer scale count >= 0{' or None' if allow_none else ''}, got {value!r}")


def _check_ratios(ratios: Any) -> tuple[float, ...]:
    if not isinstance(ratios, list | tuple) or not all(isinstance(r, int | float) and not isinstance(r, bool)
                                                       and 0.0 <= r < 1.0 for r in ratios):
        raise ValueError(f"prune_ratios must be a list of fractions in [0, 1) (tokens dropped at each of the last "
                         f"scales), got {ratios!r}")
    return tuple(float(r) for r in ratios)


@dataclass(frozen=True)
class NextScaleMethod(DecodingMethod):
    """A schedule of :meth:`NextScaleDecoder.step` calls (see the module docstring).

    Attributes (shared by the lossy methods; each method exposes the ones it uses):
        draft_scales: scales decoded by the large model; the small model decodes the rest (CoDe).
        guided_scales: scales with CFG; later scales run the conditional rows only (``None``: all).
        prune_ratios: fraction of tokens dropped at each of the last ``len(prune_ratios)`` scales (FastVAR).
    """

    family: ClassVar[str] = "next-scale"

    def run(self, engine: DecodeEngine) -> None:
        raise ValueError(f"method {self.name!r} decodes next-scale (VAR) models; this model decodes token by token. "
                         f"Use it with a VARPipeline")

    def schedule(self) -> tuple[int | None, int | None, tuple[float, ...], Any]:
        """``(draft_scales, guided_scales, prune_ratios, draft_model)`` of this method."""
        return (getattr(self, "draft_scales", None), getattr(self, "guided_scales", None),
                tuple(getattr(self, "prune_ratios", ())), getattr(self, "draft_model", None))

    def run_scales(self, decoder: NextScaleDecoder) -> dict[str, Any]:
        """Decode every scale of ``decoder``; returns method statistics for ``extra``."""
        return run_schedule(decoder, *self.schedule())


def run_schedule(decoder: NextScaleDecoder, draft_scales: int | None = None, guided_scales: int | None = None,
                 prune_ratios: Sequence[float] = (), draft_model: NextScaleBackbone | None = None) -> dict[str, Any]:
    """The one decode loop every next-scale method is a setting of (``None``: the baseline's choice)."""
    layout = decoder.layout
    S = layout.num_scales
    split = S if draft_scales is None else layout.check_scale("draft_scales", draft_scales, allow_end=True)
    if split == 0:
        raise ValueError(f"draft_scales must be in [1, {S}] (the large model decodes at least scale 0), got 0")
    guided_until = S if guided_scales is None else layout.check_scale("guided_scales", guided_scales, allow_end=True)
    if len(prune_ratios) > S - 1:
        raise ValueError(f"prune_ratios: {len(prune_ratios)} ratios for a model of {S} scales (at most {S - 1}: "
                         f"scale 0 has nothing to reuse)")
    keep = {S - len(prune_ratios) + i: max(1, math.ceil(layout.patch_nums[S - len(prune_ratios) + i] ** 2 * (1 - r)))
            for i, r in enumerate(prune_ratios) if r > 0}
    if split < S:
        if draft_model is None:
            raise MissingResourceError("draft_model: collaborative decoding needs the small model (the pipeline's "
                                       "draft_transformer)")
        if draft_model.scale_layout != layout:
            raise ValueError(f"draft_model: its scales {draft_model.scale_layout.patch_nums} / vocabulary differ "
                             f"from the target's {layout.patch_nums}")
    guided_any = decoder.guided and guided_until > 0
    caches: dict[str, ScaleKVCache] = {}
    prunings = {TARGET: CachedTokenPruning(keep), DRAFT: CachedTokenPruning(keep)} if keep else {}
    for s in range(S):
        role = TARGET if s < split else DRAFT
        model = decoder.target if role == TARGET else draft_model
        first = s
        if role not in caches:
            caches[role] = decoder.allocate(model, guided_any and s < guided_until)
            first = 0 if role == DRAFT else s  # the small model reads every earlier scale in one forward
        decoder.step(model, caches[role], first, s, guided=s < guided_until, pruning=prunings.get(role), role=role)
    return {"draft_scales": split, "guided_scales": guided_until, "pruned_tokens_kept": {str(k): v for k, v in keep.items()}}


@dataclass(frozen=True)
class NextScaleBaseline(NextScaleMethod):
    """Plain next-scale decoding (VAR's ``autoregressive_infer_cfg``): what ``method="ar"`` means for VAR."""

    name: ClassVar[str] = "ar"
    lossless: ClassVar[bool] = True


@dataclass(frozen=True)
class CollaborativeDecoding(NextScaleMethod):
    """CoDe (training-free mode): the large model drafts the first ``draft_scales`` scales, the small model
    refines the rest. Lossy: the small model's distribution replaces the large one's at those scales.

    Attributes:
        draft_scales: scales decoded by the large model, in ``[1, S]`` (``S``: the baseline).
        guided_scales: CFG only for the first scales (``None``: all), as ``cfg-cutoff``.
        prune_ratios: FastVAR pruning at the last scales (empty: none).
        draft_model: the small model (the pipeline passes its ``draft_transformer``).
    """

    name: ClassVar[str] = "code"
    lossless: ClassVar[bool] = False
    options: ClassVar[tuple[Option, ...]] = (DRAFT_SCALES, GUIDED_SCALES, PRUNE_RATIOS, DRAFT_MODEL)

    draft_scales: int = 4
    guided_scales: int | None = None
    prune_ratios: tuple[float, ...] = ()
    draft_model: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        _check_count("draft_scales", self.draft_scales, allow_none=False)
        if self.draft_scales < 1:
            raise ValueError(f"draft_scales must be >= 1 (the large model decodes at least scale 0), got {self.draft_scales}")
        _check_count("guided_scales", self.guided_scales)
        object.__setattr__(self, "prune_ratios", _check_ratios(self.prune_ratios))
        # draft_model may still be None here: a pipeline hands its draft_transformer over at decode time,
        # and run_schedule refuses a split without one (MissingResourceError).


@dataclass(frozen=True)
class GuidanceCutoff(NextScaleMethod):
    """CFG for the first ``guided_scales`` scales only; later scales skip the unconditional rows. Lossy.

    Attributes:
        guided_scales: scales with CFG, in ``[0, S]``.
        prune_ratios: FastVAR pruning at the last scales (empty: none).
    """

    name: ClassVar[str] = "cfg-cutoff"
    lossless: ClassVar[bool] = False
    options: ClassVar[tuple[Option, ...]] = (dataclasses.replace(GUIDED_SCALES, default=4), PRUNE_RATIOS)

    guided_scales: int = 4
    prune_ratios: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        _check_count("guided_scales", self.guided_scales, allow_none=False)
        object.__setattr__(self, "prune_ratios", _check_ratios(self.prune_ratios))


@dataclass(frozen=True)
class FastVAR(NextScaleMethod):
    """FastVAR's cached token pruning at the last scales. Lossy.

    Attributes:
        prune_ratios: fraction of tokens dropped at each of the last ``len(prune_ratios)`` scales
            (FastVAR drops 50% and 75% at the last two scales of 1024 px models).
    """

    name: ClassVar[str] = "fastvar"
    lossless: ClassVar[bool] = False
    options: ClassVar[tuple[Option, ...]] = (dataclasses.replace(PRUNE_RATIOS, default=(0.5,)),)

    prune_ratios: tuple[float, ...] = (0.5,)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prune_ratios", _check_ratios(self.prune_ratios))
        if not any(r > 0 for r in self.prune_ratios):
            raise ValueError("prune_ratios: give at least one ratio > 0 (otherwise use method 'ar')")


NEXT_SCALE_METHODS: tuple[type[NextScaleMethod], ...] = (CollaborativeDecoding, GuidanceCutoff, FastVAR)


def as_next_scale(method: DecodingMethod) -> NextScaleMethod:
    """The next-scale form of ``method``: plain ``ar`` becomes :class:`NextScaleBaseline`; token-by-token
    methods are refused with the list of next-scale ones."""
    if isinstance(method, NextScaleMethod):
        return method
    if isinstance(method, Autoregressive):
        return NextScaleBaseline()
    names = ", ".join(["ar", *(c.name for c in NEXT_SCALE_METHODS)])
    raise ValueError(f"method {method.name!r} decodes token by token; a next-scale (VAR) model takes one of: {names}")


def decode_scales(target: NextScaleBackbone, quantizer: ScaleQuantizer, labels: torch.Tensor,
                  sampling: SamplingConfig, method: DecodingMethod, generator: GeneratorArg = None,
                  on_scale: Callable[[NextScaleDecoder], None] | None = None) -> tuple[torch.Tensor, BatchStats]:
    """Generate token pyramids for a batch of class labels.

    Args:
        target: the large model. quantizer: the tokenizer's quantiser. labels: ``[B]`` class ids.
        sampling: VAR-convention settings. method: a next-scale method or ``ar``.
        generator: one generator, one per sample, or ``None``. on_scale: callback after every scale.

    Returns:
        ``(tokens [B, L] int64, statistics)``; ``decoder.f_hat`` is not returned (decode the tokens).
    """
    scheduled = as_next_scale(method)
    decoder = NextScaleDecoder(target, quantizer, labels, sampling, generator, scheduled.name, on_scale)
    extra = scheduled.run_scales(decoder)
    return decoder.tokens, decoder.finish(extra)


# ----------------------------------------------------------------------------- is there a lossless speed-up?
@torch.no_grad()
def measure_scale_agreement(target: NextScaleBackbone, draft: NextScaleBackbone, quantizer: ScaleQuantizer,
                            labels: torch.Tensor, sampling: SamplingConfig, generator: GeneratorArg = None,
                            joint_draws: int = 32) -> list[dict[str, float]]:
    """How often a small model's whole scale would survive exact verification by the target (docs/var.md).

    Decodes ``labels`` with the target (plain next-scale sampling) and, at every scale, also evaluates the
    draft model on the same committed prefix. For each sample and scale with target ``p_i`` and draft
    ``q_i`` per token:

    - ``tv``: ``TV(p_i, q_i)``, averaged over tokens and samples;
    - ``tokenwise``: ``Π_i (1 − TV_i)``, the probability that token-by-token speculative verification
      (per-token maximal coupling) accepts every token of the scale; mean over samples;
    - ``joint``: ``E_{y~Q}[min(1, P(y)/Q(y))] = 1 − TV(P, Q)`` for the whole scale ``P = Π p_i``,
      ``Q = Π q_i``: the best any exact verification of a drafted scale can accept (the maximal coupling
      of the two joint distributions), estimated with ``joint_draws`` draft samples per sample.

    Returns:
        One dict per scale: ``scale``, ``side``, ``tokens``, ``tv``, ``tokenwise``, ``log10_tokenwise``
        (median over samples), ``joint``.
    """
    decoder = NextScaleDecoder(target, quantizer, labels, sampling, generator, "measure")
    caches = {TARGET: decoder.allocate(target, True), DRAFT: decoder.allocate(draft, True)}
    out = []
    for s, pn in enumerate(decoder.layout.patch_nums):
        p = decoder.distribution(target, caches[TARGET], s, s)  # [B, l, V]
        q = decoder.distribution(draft, caches[DRAFT], s, s, role=DRAFT)
        tv = 0.5 * (p - q).abs().sum(-1)  # [B, l]
        log_tokenwise = torch.log1p(-tv.clamp(max=1.0)).sum(-1)  # [B]; -inf when a token has TV = 1
        y = sample_categorical(q[:, None], decoder.random.exponential((joint_draws, *q.shape[1:])))  # [B, K, l]
        lp = p[:, None].expand(-1, joint_draws, -1, -1).gather(-1, y[..., None]).squeeze(-1).log()
        lq = q[:, None].expand(-1, joint_draws, -1, -1).gather(-1, y[..., None]).squeeze(-1).log()
        joint = (lp - lq).sum(-1).clamp(max=0).exp().mean(1)  # [B]
        out.append({"scale": s, "side": pn, "tokens": pn * pn, "tv": float(tv.mean()),
                    "tokenwise": float(log_tokenwise.exp().mean()),
                    "log10_tokenwise": float(log_tokenwise.median() / math.log(10)),
                    "joint": float(joint.mean())})
        decoder.commit(s, sample_categorical(p, decoder.random.exponential(p.shape[1:])))
    return out
