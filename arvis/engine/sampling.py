"""Logits → target distribution ``p``: CFG combine, temperature, top-k, top-p, structural tokens.

Every method verifies drafts against exactly this ``p`` (fp32), so plain AR, SJD, ZipAR and the
speculative methods all sample from the same distribution. Semantics follow LlamaGen's
``autoregressive/models/generate.py``:

- CFG (the ``llamagen`` rule of :mod:`arvis.engine.guidance`): ``logits = u + (c - u) * guidance_scale`` on
  the conditional / unconditional rows. With
  ``cfg_interval = i >= 0`` guidance applies to sequence indices ``0 … i + 1`` (LlamaGen counts decode
  steps after the prefill token) and the conditional logits alone are used after that;
- temperature divides the logits (``temperature = 0`` is greedy: ``p`` is one-hot at the argmax);
- top-k keeps every logit ≥ the k-th largest (ties kept), then top-p keeps the smallest prefix of
  the sorted distribution whose mass reaches ``top_p`` (the first token always kept).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from arvis.engine.guidance import GUIDANCE_KINDS, RULES, GuidanceRule, combine
from arvis.utils.modes import CFG_SCHEDULES
from arvis.utils.random import one_hot


@dataclass(frozen=True)
class SamplingConfig:
    """How the target distribution is formed from the model's logits.

    Attributes:
        temperature: finite, >= 0; 0 means greedy.
        top_k: >= 0; 0 disables top-k.
        top_p: in (0, 1]; 1 disables nucleus filtering.
        guidance_scale: finite, >= 0; the family's rule says which value disables CFG (no unconditional rows
            are run): 1 for ``llamagen`` and ``mar``, 0 for ``var``.
        cfg_interval: -1 (guide every token) or >= 0 (see module docstring; ``llamagen`` rule only).
        guidance: the family's guidance rule (:mod:`arvis.engine.guidance`): ``llamagen``, ``var`` or ``mar``.
        cfg_schedule: ``mar`` rule only: ``linear`` (MAR's ramp) or ``constant``.

    Temperature and guidance scale must also be representable in fp32 (|x| <= 3.4e38), where the
    target distribution is computed. Values that are finite but still overflow the logits (e.g. a
    guidance scale of 1e30) are caught while decoding (:class:`arvis.engine.engine.NonFiniteError`).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    guidance_scale: float = 1.0
    cfg_interval: int = -1
    guidance: str = "llamagen"
    cfg_schedule: str = "constant"

    def __post_init__(self) -> None:
        fp32_max = float(torch.finfo(torch.float32).max)
        for name in ("temperature", "guidance_scale"):
            value = getattr(self, name)
            if isinstance(value, int | float) and not isinstance(value, bool) and not (
                    math.isfinite(value) and abs(value) <= fp32_max):
                raise ValueError(f"{name} must be a finite number (at most {fp32_max:.3g}, the fp32 range the "
                                 f"target distribution is computed in), got {value!r}")
        if not (isinstance(self.temperature, int | float) and self.temperature >= 0):
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature!r}")
        if not (isinstance(self.top_k, int) and not isinstance(self.top_k, bool) and self.top_k >= 0):
            raise ValueError(f"top_k must be an integer >= 0 (0 disables top-k), got {self.top_k!r}")
        if not (isinstance(self.top_p, int | float) and 0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1] (1 disables nucleus sampling), got {self.top_p!r}")
        if not (isinstance(self.guidance_scale, int | float) and self.guidance_scale >= 0):
            raise ValueError(f"guidance_scale must be >= 0 (1 disables classifier-free guidance), "
                             f"got {self.guidance_scale!r}")
        if not (isinstance(self.cfg_interval, int) and self.cfg_interval >= -1):
            raise ValueError(f"cfg_interval must be -1 (always guide) or an integer >= 0, got {self.cfg_interval!r}")
        if self.guidance not in GUIDANCE_KINDS:
            raise ValueError(f"guidance must be one of {GUIDANCE_KINDS}, got {self.guidance!r}")
        if self.cfg_schedule not in CFG_SCHEDULES:
            raise ValueError(f"cfg_schedule must be one of {CFG_SCHEDULES}, got {self.cfg_schedule!r}")
        if self.cfg_interval != -1 and self.guidance != "llamagen":
            raise ValueError(f"cfg_interval: only LlamaGen-style guidance has it; this model guides by the "
                             f"{self.guidance!r} rule ({self.rule.formula}); leave cfg_interval at -1")
        if self.cfg_schedule != "constant" and self.guidance != "mar":
            raise ValueError(f"cfg_schedule: only MAR's guidance has a schedule; this model guides by the "
                             f"{self.guidance!r} rule ({self.rule.formula})")

    @property
    def rule(self) -> GuidanceRule:
        """The family's guidance rule."""
        return RULES[self.guidance]

    @property
    def uses_cfg(self) -> bool:
        """Whether unconditional rows run (the guidance scale is not the rule's "off" value)."""
        return self.rule.active(self.guidance_scale)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def guidance_active(config: SamplingConfig, target_index: torch.Tensor) -> torch.Tensor | bool:
    """Whether CFG applies to the tokens at ``target_index`` (bool tensor of its shape, or a constant)."""
    if not config.uses_cfg:
        return False
    if config.cfg_interval < 0:
        return True
    return target_index <= config.cfg_interval + 1


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Top-k then top-p filtering of ``logits: [..., V]`` (removed entries become -inf)."""
    if top_k > 0:
        k = min(top_k, logits.shape[-1])
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        remove = cum > top_p
        remove[..., 1:] = remove[..., :-1].clone()  # keep the first token that crosses top_p
        remove[..., 0] = False
        logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return logits


def logits_to_probs(cond_logits: torch.Tensor, uncond_logits: torch.Tensor | None, config: SamplingConfig,
                    target_index: torch.Tensor, forced_tokens: torch.Tensor | None = None,
                    image_token_range: tuple[int, int] | None = None) -> torch.Tensor:
    """The target distribution ``p`` for each query.

    Args:
        cond_logits: ``[B, T, V]`` logits of the conditional rows (any float dtype).
        uncond_logits: ``[B, T, V]`` logits of the unconditional rows, or ``None`` without CFG.
        config: sampling settings.
        target_index: ``[B, T]`` sequence index each query predicts (for ``cfg_interval`` and
            structural tokens).
        forced_tokens: ``[N]`` int64, the forced id per sequence index or -1 (structural tokens), or
            ``None`` when the layout has none.
        image_token_range: ``[lo, hi)``: free positions may only take these ids (Emu3's
            prefix-constrained decoding); applied after CFG, before temperature and top-k/top-p, as
            transformers orders its processors. ``None`` = no restriction.

    Returns:
        ``[B, T, V]`` fp32 probabilities.
    """
    logits = cond_logits.float()
    if uncond_logits is not None:
        u = uncond_logits.float()
        guided = combine(logits, u, config.guidance_scale)
        active = guidance_active(config, target_index)
        if isinstance(active, torch.Tensor):
            logits = torch.where(active[..., None], guided, logits)
        elif active:
            logits = guided
    if image_token_range is not None and tuple(image_token_range) != (0, logits.shape[-1]):
        lo, hi = image_token_range
        logits = logits.clone()
        logits[..., :lo] = float("-inf")
        logits[..., hi:] = float("-inf")
    if config.greedy:
        probs = one_hot(logits.argmax(-1), logits.shape[-1])
    else:
        if config.temperature != 1.0:
            logits = logits / config.temperature
        logits = filter_logits(logits, config.top_k, config.top_p)
        probs = logits.softmax(-1)
    if forced_tokens is not None:
        forced = forced_tokens[target_index.clamp_max(forced_tokens.shape[0] - 1)]  # [B, T]
        probs = torch.where((forced >= 0)[..., None], one_hot(forced.clamp_min(0), probs.shape[-1]), probs)
    return probs
