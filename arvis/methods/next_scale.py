"""Next-scale methods (VAR, arXiv:2404.02905): schedules of the next-scale decoder's one verb.

Each method runs on :class:`arvis.engine.next_scale.NextScaleDecoder` and decides which model evaluates which
scales (:func:`run_schedule`, the one loop they all are a setting of):

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
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from arvis.engine.next_scale import DRAFT, TARGET, NextScaleDecoder
from arvis.engine.sampling import SamplingConfig
from arvis.engine.stats import BatchStats
from arvis.methods.base import DecodingMethod, MissingResourceError, register_method
from arvis.methods.catalog import DecoderKind, MethodInfo, method_info
from arvis.methods.registry import build_method
from arvis.models.next_scale import NextScaleBackbone, ScaleKVCache, ScaleQuantizer
from arvis.utils.random import GeneratorArg, sample_categorical


# ----------------------------------------------------------------------------- FastVAR token pruning
@functools.lru_cache(maxsize=32)
def _area_resize(source: int, side: int) -> torch.Tensor:
    # Area interpolation is linear: resizing the p² unit maps gives its [side², p²] matrix.
    eye = torch.eye(source * source, dtype=torch.float64).view(-1, 1, source, source)
    matrix = F.interpolate(eye, size=(side, side), mode="area").view(source * source, side * side).T
    return matrix.to(torch.float32).contiguous()


def area_resize_matrix(source: int, side: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The ``[side², source²]`` fp32 matrix of ``F.interpolate(mode="area")`` from a ``source × source`` map to a
    ``side × side`` one (row-major positions): ``matrix @ tokens`` resizes ``[…, source², C]`` token maps."""
    return _area_resize(source, side).to(device)


class CachedTokenPruning:
    """FastVAR's cached token pruning as :class:`~arvis.models.var.TokenPruning` hooks (one per model and request).

    On the unpruned forward just before a pruned scale every block records its attention and MLP outputs
    (γ applied; of that forward's last scale).
    On a pruned scale each block keeps the ``keep`` tokens whose input is farthest (squared L2) from
    the scale's mean token and evaluates only those (their keys/values alone enter the cache); the other
    positions take the recorded outputs of the last unpruned scale, area-resized to the pruned scale.
    """

    def __init__(self, keep: dict[int, int]):
        self.keep = dict(keep)  # scale -> tokens kept
        self.cache: dict[tuple[int, str], torch.Tensor] = {}
        self.prev_side = 0
        self.active: int | None = None  # tokens kept in the current forward
        self.recording = False
        self.filled: dict[tuple[int, str], torch.Tensor] = {}  # the current pruned scale's [R, l, C] fill maps

    @property
    def written(self) -> int | None:
        return self.active

    def begin(self, layout: Any, first: int, last: int) -> None:
        self.active = self.keep.get(last)
        self.filled = {}
        if self.active is not None and (first != last or not self.cache):
            raise ValueError(f"prune_ratios: scale {last} can be pruned only when the same model evaluated an "
                             f"earlier scale on its own (its outputs are what pruned tokens reuse)")
        if self.active is None:
            # Only the scale just before a pruned one is ever read back: record nothing on the others.
            self.recording = last + 1 in self.keep
            if self.recording:
                self.prev_side = layout.patch_nums[last]
            return
        self.recording = False
        # Resize every recorded output map at once, as one product with the area-resize matrix (one op for all
        # blocks and parts, not an interpolation per block and part inside the forward): [N, R, p², C] -> [N, R, side², C].
        keys = list(self.cache)
        stacked = torch.stack([self.cache[k] for k in keys])
        resize = area_resize_matrix(self.prev_side, layout.patch_nums[last], stacked.device)
        filled = torch.matmul(resize, stacked.float()).to(stacked.dtype)  # fp32, as the interpolation it replaces
        self.filled = dict(zip(keys, filled.unbind(0), strict=True))

    def select(self, layer: int, part: str, x: torch.Tensor) -> torch.Tensor | None:
        if self.active is None:
            return None
        # Ranked in fp32 (bf16/fp16 models too); the L2 norm ranks as its square, in one op.
        distance = torch.linalg.vector_norm(x - x.mean(1, keepdim=True), dim=-1, dtype=torch.float32)
        return distance.topk(self.active, dim=1).indices  # [R, keep]

    def fill(self, layer: int, part: str, rows: int) -> torch.Tensor:
        return self.filled[(layer, part)][:rows]  # guidance may have dropped the unconditional rows

    def record(self, layer: int, part: str, out: torch.Tensor) -> None:
        if self.recording:
            self.cache[(layer, part)] = out[:, out.shape[1] - self.prev_side ** 2:]


# ----------------------------------------------------------------------------- methods
@dataclass(frozen=True)
class NextScaleMethod(DecodingMethod):
    """A schedule of :meth:`NextScaleDecoder.step` calls (module docstring).

    Attributes (shared by the lossy methods; each method exposes the ones it uses):
        draft_scales: scales decoded by the large model; the small model decodes the rest (CoDe).
        guided_scales: scales with CFG; later scales run the conditional rows only (``None``: all).
        prune_ratios: fraction of tokens dropped at each of the last ``len(prune_ratios)`` scales (FastVAR).
    """

    def __post_init__(self) -> None:
        self._check_declared()

    def schedule(self) -> tuple[int | None, int | None, tuple[float, ...], Any]:
        """``(draft_scales, guided_scales, prune_ratios, draft_model)`` of this method."""
        values = {f: getattr(self, f) for f in self.__dataclass_fields__}  # type: ignore[attr-defined]
        return (values.get("draft_scales"), values.get("guided_scales"), tuple(values.get("prune_ratios", ())),
                values.get("draft_model"))

    def run(self, decoder: NextScaleDecoder) -> dict[str, Any]:
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


@register_method
@dataclass(frozen=True)
class NextScaleBaseline(NextScaleMethod):
    """Plain next-scale decoding (VAR's ``autoregressive_infer_cfg``): what ``method="ar"`` means for VAR."""

    info: ClassVar[MethodInfo] = method_info("ar", DecoderKind.NEXT_SCALE)


@register_method
@dataclass(frozen=True)
class CollaborativeDecoding(NextScaleMethod):
    """CoDe (training-free mode): the large model drafts the first ``draft_scales`` scales, the small model
    refines the rest. Lossy: the small model's distribution replaces the large one's at those scales.

    Attributes:
        draft_scales: scales decoded by the large model, in ``[1, S]`` (``S``: the baseline).
        guided_scales: CFG only for the first scales (``None``: all), as ``cfg-cutoff``.
        prune_ratios: FastVAR pruning at the last scales (empty: none).
        draft_model: the small model (the pipeline supplies its ``draft_transformer``).
    """

    info: ClassVar[MethodInfo] = method_info("code", DecoderKind.NEXT_SCALE)

    draft_scales: int = 4
    guided_scales: int | None = None
    prune_ratios: tuple[float, ...] = ()
    draft_model: Any = field(default=None, repr=False)


@register_method
@dataclass(frozen=True)
class GuidanceCutoff(NextScaleMethod):
    """CFG for the first ``guided_scales`` scales only; later scales skip the unconditional rows. Lossy.

    Attributes:
        guided_scales: scales with CFG, in ``[0, S]``.
        prune_ratios: FastVAR pruning at the last scales (empty: none).
    """

    info: ClassVar[MethodInfo] = method_info("cfg-cutoff", DecoderKind.NEXT_SCALE)

    guided_scales: int = 4
    prune_ratios: tuple[float, ...] = ()


@register_method
@dataclass(frozen=True)
class FastVAR(NextScaleMethod):
    """FastVAR's cached token pruning at the last scales. Lossy.

    Attributes:
        prune_ratios: fraction of tokens dropped at each of the last ``len(prune_ratios)`` scales
            (FastVAR drops 50% and 75% at the last two scales of 1024 px models).
    """

    info: ClassVar[MethodInfo] = method_info("fastvar", DecoderKind.NEXT_SCALE)

    prune_ratios: tuple[float, ...] = (0.5,)


def decode_scales(target: NextScaleBackbone, quantizer: ScaleQuantizer, labels: torch.Tensor,
                  sampling: SamplingConfig, method: str | DecodingMethod = "ar", generator: GeneratorArg = None,
                  on_scale: Callable[[NextScaleDecoder], None] | None = None, **options: Any
                  ) -> tuple[torch.Tensor, BatchStats]:
    """Generate token pyramids for a batch of class labels (the next-scale counterpart of
    :func:`arvis.methods.decode`).

    Args:
        target: the large model. quantizer: the tokenizer's quantiser. labels: ``[B]`` class ids.
        sampling: settings with the ``var`` guidance rule. method: a next-scale method's name or object.
        generator: one generator, one per sample, or ``None``. on_scale: callback after every scale.
        **options: the method's options; here (no pipeline) also ``draft_model=`` for ``code``.

    Returns:
        ``(tokens [B, L] int64, statistics)``; ``decoder.f_hat`` is not returned (decode the tokens).
    """
    from arvis.methods.registry import split_resources

    user_options, resources = split_resources(options)
    method_obj = build_method(method, DecoderKind.NEXT_SCALE, resources, **user_options)
    decoder = NextScaleDecoder(target, quantizer, labels, sampling, generator, method_obj.name, on_scale)
    extra = method_obj.run(decoder)
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
