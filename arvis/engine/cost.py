"""What a target forward costs on this machine: milliseconds against the positions it evaluates.

The bench prints this *forward-cost curve* beside every latency table, and cost-aware windows
(:class:`arvis.methods.window_policy.AutoWindow`) choose each forward's window from it: a forward over ``T``
positions costs ``cost(T) / cost(1)`` single-token forwards, which depends on the model, batch, dtype, device and
thread count. :func:`measured_curve` measures it once per such setting and process (a few dozen forwards on a
separate engine, so the decode's own cache, random streams and statistics are untouched) and keeps it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from arvis.engine.engine import DecodeEngine
from arvis.engine.sampling import SamplingConfig
from arvis.models.protocol import Condition

FORWARD_COST_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)


def forward_cost_curve(backbone: Any, condition: Condition, sampling: SamplingConfig,
                       sizes: Sequence[int] = FORWARD_COST_SIZES, repeats: int = 15,
                       warmup: int = 3) -> list[dict[str, float]]:
    """Milliseconds inside one target forward against positions evaluated, on ``backbone`` as it decodes.

    One engine is prefilled with ``condition``; then, ``repeats`` times round-robin over ``sizes``, one
    :meth:`DecodeEngine.evaluate` over ``T`` consecutive sequence indices in the middle of the image is
    run, and the time inside the backbone call (the engine's forward clock: the same measure as a
    record's ``target_ms_per_forward``) is kept; the median is reported, with the minimum (the least
    disturbed call: noise on a shared machine only adds time) and the interquartile spread. Sizes larger
    than the sequence allows are dropped.

    Returns:
        ``[{"positions": T, "ms": median_ms, "ms_min": ..., "ms_iqr": ..., "ratio": ms / ms(T=1)}, ...]``
        (ratio ``None`` without T=1).
    """
    N = backbone.layout.num_tokens
    sizes = sorted({int(t) for t in sizes if 1 <= int(t) <= N - 1})
    if not sizes:
        raise ValueError("sizes: no size fits the model's sequence")
    B = condition.batch_size
    engine = DecodeEngine(backbone, condition, sampling, generator=torch.Generator().manual_seed(0))
    engine.prefill()
    device = engine.device
    calls = {}
    for t in sizes:
        start = (N - 1 - t) // 2
        calls[t] = (torch.zeros(B, t, dtype=torch.long, device=device),
                    (start + torch.arange(t, device=device)).expand(B, t).contiguous(), start + t)
    times: dict[int, list[float]] = {t: [] for t in sizes}
    for r in range(warmup + repeats):
        for t in sizes:
            inputs, index, extent = calls[t]
            before = engine.clock.totals().get("target", 0.0)
            engine.evaluate(inputs, index, extent=extent)
            if r >= warmup:
                times[t].append(engine.clock.totals()["target"] - before)
    base = statistics.median(times[sizes[0]]) if sizes[0] == 1 else None
    curve = []
    for t in sizes:
        ms = statistics.median(times[t]) * 1e3
        q = statistics.quantiles(times[t], n=4) if len(times[t]) > 1 else [times[t][0]] * 3
        curve.append({"positions": t, "ms": ms, "ms_min": min(times[t]) * 1e3, "ms_iqr": (q[2] - q[0]) * 1e3,
                      "ratio": ms / (base * 1e3) if base else None})
    return curve


def curve_cost(curve: Sequence[Mapping[str, float]], positions: int) -> float | None:
    """ms of a ``positions``-wide forward from the curve (linear between measured sizes), or ``None``."""
    points = sorted((c["positions"], c["ms"]) for c in curve)
    for t, m in points:
        if t == positions:
            return m
    for (t0, m0), (t1, m1) in zip(points, points[1:], strict=False):
        if t0 < positions < t1:
            return m0 + (m1 - m0) * (positions - t0) / (t1 - t0)
    return None


# Curves measured in this process, by (model, batch, guidance, dtype, device, threads, sizes).
_MEASURED: dict[tuple[Any, ...], list[dict[str, float]]] = {}


def measured_curve(backbone: Any, condition: Condition, sampling: SamplingConfig, sizes: Sequence[int],
                   repeats: int = 3, warmup: int = 1) -> list[dict[str, float]]:
    """The forward-cost curve of ``backbone`` at ``condition``'s batch, with ``sampling``'s guidance, at its dtype,
    device and the thread count, measured on a separate engine the first time it is asked for in this process
    (then kept).

    The key holds the backbone object's identity: a curve is never shared between two models, and a model
    garbage-collected and replaced at the same address would only reuse a curve of the same shapes.
    """
    param = next(backbone.parameters())
    layout = backbone.layout
    key = (id(backbone), type(backbone).__name__, layout.num_tokens, layout.condition_length, condition.batch_size,
           sampling.uses_cfg, param.dtype, str(param.device), torch.get_num_threads(), tuple(sizes))
    if key not in _MEASURED:
        _MEASURED[key] = forward_cost_curve(backbone, condition, sampling, sizes, repeats=repeats, warmup=warmup)
    return _MEASURED[key]


__all__ = ["FORWARD_COST_SIZES", "curve_cost", "forward_cost_curve", "measured_curve"]
