"""Decoding MAR's continuous tokens: the masked sampler (MAR's own) and the causal raster-order AR baseline.

Both return tokens ``[B, L, D]`` (float32 VAE latents in raster order, MAR's scale) and the engine's
statistics (:class:`~arvis.engine.stats.BatchStats`): ``target_forwards`` counts transformer forwards (a CFG
pair counts once), ``accepted_per_forward`` the tokens each forward committed; the diffusion head is reported
apart, in ``extra``: ``head_steps`` (denoiser evaluations per token × tokens, i.e. per sample) and
``head_forwards`` / ``head_s`` (batched head calls and their wall time, per batch).

- :func:`decode_masked` — MAR's sampler (LTH14/mar ``MAR.sample_tokens``): a random order per image,
  ``num_iter`` iterations, the number still masked after iteration ``k`` following
  ``floor(L · cos(π/2 · (k+1)/num_iter))`` (at least one masked until the last iteration, at least one
  predicted per iteration); the head samples the tokens of each iteration with MAR's *linear* CFG schedule
  ``1 + (s − 1) · (L − masked_after) / L`` (or ``constant``).
- :func:`decode_causal` — the causal raster variant (``MARTransformer(causal=True)``): one forward per token
  with a KV cache; the linear CFG schedule becomes ``1 + (s − 1) · (j + 1) / L`` for token ``j`` (the same
  formula with "masked after" = tokens after ``j``).

Randomness: one generator, or one per image. With one per image, image ``b``'s order and all the noise of
its tokens come from its own generator alone, in the same sequence whatever the batch: a batch gives the
images of single-image calls.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from arvis.engine.stats import BatchStats, DecodeStats, ForwardClock, peak_memory_mb
from arvis.models.diffusion_head import MARDiffusionHead, check_temperature
from arvis.models.mar import MARTransformer
from arvis.utils.random import GeneratorArg, RandomStreams

CFG_SCHEDULES = ("linear", "constant")


def mask_schedule(seq_len: int, num_iter: int, guidance_scale: float = 1.0, cfg_schedule: str = "linear"
                  ) -> list[tuple[int, float]]:
    """MAR's masked schedule: per iteration, ``(tokens predicted, the head's CFG scale)``.

    An iteration may predict 0 tokens when ``num_iter > seq_len`` (the official sampler then runs a forward
    for nothing; arvis skips it).
    """
    check_num_iter(num_iter)
    check_cfg_schedule(cfg_schedule)
    out, masked = [], seq_len
    for step in range(num_iter):
        target = math.floor(seq_len * math.cos(math.pi / 2.0 * (step + 1) / num_iter))
        after = max(1, min(masked - 1, target))
        count = masked if step >= num_iter - 1 else masked - after
        scale = 1 + (guidance_scale - 1) * (seq_len - after) / seq_len if cfg_schedule == "linear" else guidance_scale
        out.append((count, float(scale)))
        masked = after
    return out


def causal_guidance(seq_len: int, index: int, guidance_scale: float, cfg_schedule: str = "linear") -> float:
    """The head's CFG scale for token ``index`` of the raster variant."""
    if cfg_schedule == "constant":
        return float(guidance_scale)
    return 1 + (guidance_scale - 1) * (index + 1) / seq_len


def check_num_iter(num_iter: int) -> None:
    if isinstance(num_iter, bool) or not isinstance(num_iter, int) or not 1 <= num_iter <= 4096:
        raise ValueError(f"num_iter must be an integer in [1, 4096] (MAR's masked iterations), got {num_iter!r}")


def check_cfg_schedule(cfg_schedule: str) -> None:
    if cfg_schedule not in CFG_SCHEDULES:
        raise ValueError(f"cfg_schedule must be one of {CFG_SCHEDULES}, got {cfg_schedule!r}")


def check_guidance(guidance_scale: float) -> None:
    if isinstance(guidance_scale, bool) or not isinstance(guidance_scale, int | float) or not (
            math.isfinite(guidance_scale) and guidance_scale >= 0):
        raise ValueError(f"guidance_scale must be a finite number >= 0 (1 disables guidance), got {guidance_scale!r}")


@dataclass
class MARStep:
    """What a step callback sees: the step index, the tokens so far ``[B, L, D]``, which are known ``[B, L]``."""

    step: int
    tokens: torch.Tensor
    known: torch.Tensor


def _head_noise(streams: RandomStreams, batch: int, steps: int, per_image: int, dim: int) -> torch.Tensor:
    """``[S, B·k, D]`` head noise for ``k`` tokens of each of ``B`` images (image-major rows)."""
    noise = streams.normal((steps, per_image, dim))  # [B, S, k, D]
    return noise.permute(1, 0, 2, 3).reshape(steps, batch * per_image, dim)


def _finish(method: str, B: int, L: int, per_forward: list[int], commit: torch.Tensor, forwards: int,
            head: MARDiffusionHead, head_forwards: int, clock: ForwardClock, t0: float, device: torch.device,
            extra: dict | None = None) -> BatchStats:
    times = clock.totals()
    latency = time.perf_counter() - t0
    memory = peak_memory_mb(device)
    S = head.num_sampling_steps()
    commit_lists = commit.tolist()  # one host sync, at the end
    samples = [DecodeStats(method=method, tokens=L, target_forwards=forwards, draft_forwards=0,
                           accepted_per_forward=list(per_forward), commit_forward=commit_lists[b], latency_s=latency,
                           peak_memory_mb=memory,
                           extra={"head_steps": L * S, "head_forwards": head_forwards, "head_s": times.get("head", 0.0),
                                  **(extra or {})})
               for b in range(B)]
    return BatchStats(samples=samples, batch_target_forwards=forwards, batch_draft_forwards=0, latency_s=latency,
                      peak_memory_mb=memory, target_forward_s=times.get("target", 0.0))


@torch.no_grad()
def decode_masked(transformer: MARTransformer, head: MARDiffusionHead, labels: torch.Tensor, *, num_iter: int = 64,
                  guidance_scale: float = 1.0, cfg_schedule: str = "linear", temperature: float = 1.0,
                  generator: GeneratorArg = None, on_step: Callable[[MARStep], None] | None = None
                  ) -> tuple[torch.Tensor, BatchStats]:
    """MAR's masked sampler (module docstring).

    Args:
        transformer: a masked (``causal=False``) MAR.
        head: its diffusion head.
        labels: ``[B]`` class ids.
        num_iter: iterations (>= 1; the official default 64, its evaluations 256).
        guidance_scale: CFG scale ``s`` (1 = none; MAR runs the unconditional rows whenever ``s != 1``).
        cfg_schedule: ``linear`` (MAR's) or ``constant``.
        temperature: the head's temperature (>= 0).
        generator: one generator or one per image.
        on_step: called after every iteration that predicted tokens.

    Returns:
        ``(tokens [B, L, D], statistics)``.
    """
    if transformer.is_causal:
        raise ValueError("transformer: a causal MAR decodes in raster order (decode_causal), not with masks")
    check_guidance(guidance_scale)
    check_temperature(temperature)
    schedule = mask_schedule(transformer.seq_len, num_iter, guidance_scale, cfg_schedule)
    device = transformer.mask_token.device
    t0 = time.perf_counter()
    clock = ForwardClock(device)
    B, L, D = labels.shape[0], transformer.seq_len, transformer.token_embed_dim
    streams = RandomStreams(generator, B, device)
    orders = streams.uniform((L,)).argsort(dim=-1)  # [B, L] a random permutation per image
    cfg = guidance_scale != 1.0
    cond = transformer.class_embedding(labels)
    if cfg:
        cond = torch.cat([cond, transformer.class_embedding(None, B)])
    tokens = torch.zeros(B, L, D, device=device)
    mask = torch.ones(B, L, dtype=torch.bool, device=device)
    commit = torch.full((B, L), -1, dtype=torch.long, device=device)
    S = head.num_sampling_steps()
    per_forward: list[int] = []
    masked, forwards, head_forwards = L, 0, 0
    for step, (count, scale) in enumerate(schedule):
        if count == 0:
            continue
        rows_mask = torch.cat([mask, mask]) if cfg else mask
        rows_tokens = torch.cat([tokens, tokens]) if cfg else tokens
        with clock.measure("target"):
            z = transformer(rows_tokens, rows_mask, cond, num_masked=masked)  # [R, L, C]
        forwards += 1
        # The positions predicted now: the order's entries [masked − count, masked), in position order per image
        # (the official sampler indexes z with a row-major boolean mask).
        positions = orders[:, masked - count: masked].sort(dim=-1).values  # [B, k]
        index = positions[..., None].expand(-1, -1, z.shape[-1])
        zc = z[:B].gather(1, index).reshape(B * count, -1)
        zu = z[B:].gather(1, index).reshape(B * count, -1) if cfg else None
        noise = _head_noise(streams, B, S, count, D)
        with clock.measure("head"):
            x = head.sample(zc, temperature=temperature, guidance_scale=scale, z_uncond=zu, noise=noise)
        head_forwards += S
        tokens = tokens.scatter(1, positions[..., None].expand(-1, -1, D), x.reshape(B, count, D))
        mask = mask.scatter(1, positions, False)
        commit.scatter_(1, positions, len(per_forward))
        per_forward.append(count)
        masked -= count
        if on_step is not None:
            on_step(MARStep(step, tokens, ~mask))
    return tokens, _finish("ar", B, L, per_forward, commit, forwards, head, head_forwards, clock, t0, device,
                           {"num_iter": num_iter})


@torch.no_grad()
def decode_causal(transformer: MARTransformer, head: MARDiffusionHead, labels: torch.Tensor, *,
                  guidance_scale: float = 1.0, cfg_schedule: str = "linear", temperature: float = 1.0,
                  generator: GeneratorArg = None, on_step: Callable[[MARStep], None] | None = None,
                  final_std: float = 0.0) -> tuple[torch.Tensor, BatchStats]:
    """The causal raster variant, one token per forward with a KV cache (the AR baseline of continuous
    speculative decoding). Arguments as :func:`decode_masked` (no ``num_iter``: ``L`` forwards), plus
    ``final_std``: the std of a Gaussian added at the head's last step (0: MAR's sampler), the sampler
    :mod:`arvis.methods.cspd` is exact for."""
    if not transformer.is_causal:
        raise ValueError("transformer: decode_causal needs the causal raster variant (causal=True)")
    check_guidance(guidance_scale)
    check_temperature(temperature)
    check_cfg_schedule(cfg_schedule)
    if not (math.isfinite(final_std) and final_std >= 0):
        raise ValueError(f"final_std must be a finite number >= 0, got {final_std!r}")
    device = transformer.mask_token.device
    t0 = time.perf_counter()
    clock = ForwardClock(device)
    B, L, D = labels.shape[0], transformer.seq_len, transformer.token_embed_dim
    streams = RandomStreams(generator, B, device)
    cfg = guidance_scale != 1.0
    cond = transformer.class_embedding(labels)
    if cfg:
        cond = torch.cat([cond, transformer.class_embedding(None, B)])
    cache = transformer.allocate_cache(cond.shape[0])
    tokens = torch.zeros(B, L, D, device=device)
    S = head.num_sampling_steps()
    with clock.measure("target"):
        z = transformer.prefill(cond, cache)  # [R, C]: z of token 0
    for j in range(L):
        noise = _head_noise(streams, B, S, 1, D)
        with clock.measure("head"):
            x = head.sample(z[:B], temperature=temperature, guidance_scale=causal_guidance(L, j, guidance_scale,
                                                                                         cfg_schedule),
                            z_uncond=z[B:] if cfg else None, noise=noise)
        if final_std > 0:
            x = x + final_std * streams.normal((D,))
        tokens[:, j] = x
        if on_step is not None:
            known = torch.zeros(B, L, dtype=torch.bool, device=device)
            known[:, : j + 1] = True
            on_step(MARStep(j, tokens, known))
        if j + 1 < L:
            with clock.measure("target"):
                z = transformer.forward_tokens(torch.cat([x, x])[:, None] if cfg else x[:, None], j, cache)[:, 0]
    commit = torch.arange(L, device=device).expand(B, L)
    return tokens, _finish("ar", B, L, [1] * L, commit, L, head, L * S, clock, t0, device,
                           {"final_std": final_std} if final_std else None)


__all__ = ["mask_schedule", "causal_guidance", "decode_masked", "decode_causal", "MARStep", "CFG_SCHEDULES"]


# The continuous kind's baseline, registered: MAR's masked sampler or raster AR for the causal variant.
from dataclasses import dataclass as _dataclass  # noqa: E402
from typing import Any as _Any  # noqa: E402
from typing import ClassVar as _ClassVar  # noqa: E402

from arvis.methods.base import DecodingMethod  # noqa: E402
from arvis.methods.catalog import DecoderKind, MethodInfo, method_info  # noqa: E402
from arvis.methods.registry import register_method  # noqa: E402


@register_method
@_dataclass(frozen=True)
class ContinuousBaseline(DecodingMethod):
    """Plain decoding of a continuous-token model: MAR's masked sampler, or one token per forward (causal)."""

    info: _ClassVar[MethodInfo] = method_info("ar", DecoderKind.CONTINUOUS)
    final_std: float = 0.0

    def __post_init__(self) -> None:
        self._check_declared()

    def run(self, decoder: _Any) -> None:
        raise NotImplementedError("the continuous decoder is being introduced")
