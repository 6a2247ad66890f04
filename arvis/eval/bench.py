"""The speed harness: several decoding methods side by side on one model, timed fairly.

Protocol (docs/measurement.md): every method decodes the same conditions with the same per-sample
generators (image ``i``: class ``i % num_classes``, ``torch.Generator().manual_seed(seed_for(seed, i))``,
fresh for every repeat, so each repeat decodes identical tokens); one warm-up run per method first;
then ``repeats`` rounds, each running every method once in turn (``ar, m1, m2, ar, m1, m2, …``) so that
machine noise falls on all methods alike; ``latency_s`` is the median over rounds of the wall time
per sample, and ``speedup`` = median AR latency / median method latency. The AR baseline is always
run, even when not asked for. ``quick=True`` (``arvis bench --quick``) runs one warm-up and one timed round,
a shorter curve and no sync count: every record and table says it is a quick run, not a measurement.
The decode statistics (``tokens``, ``target_forwards``,
``draft_forwards``, ``step_compression``, ``accepted_per_forward``, ``commit_forward``,
``peak_memory_mb``) come from the engine and are the same in every round.

Beside every latency table goes this machine's *forward-cost curve*: milliseconds inside one target
forward against the number of positions it evaluates (``T = 1, 2, 4 … 64`` plus every method's own
``T``), measured on the same model, batch and guidance through :meth:`arvis.engine.DecodeEngine.evaluate`
at a mid-image position (the median and the minimum of the timed calls per size; a size that costs less
than a smaller one is flagged with the spread of its timings). Every record shows the *ideal speedup*
that curve allows — AR's forwards over the method's, times ``cost(1) / cost(T)`` — beside the measured one.
"Ideal" counts time inside target forwards only: the measured speedup exceeds it when AR spends more time
outside forwards (sampling, cache bookkeeping, Python) per token than the method does, and it falls short
of it by the method's own overhead and drafter. Every record splits its time out (seconds inside target
forwards, inside drafter forwards, and outside both: total, per target forward, and as a share), and
:func:`ideal_notes` states, with these figures, why a measured speedup sits above its ideal. One extra, untimed decode per
method counts the host synchronisations and the aten ops per iteration (:func:`count_host_syncs`).

Method specs (``sjd:window=16``…): :mod:`arvis.methods.spec`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from arvis.engine import SamplingConfig
from arvis.engine.cost import FORWARD_COST_SIZES, curve_cost, forward_cost_curve
from arvis.engine.stats import BatchStats, summarize, summarize_extra
from arvis.eval.defaults import (
    FORWARD_COST_REPEATS,
    FORWARD_COST_WARMUP,
    MIN_REPEATS,
    QUICK_FORWARD_COST_REPEATS,
    QUICK_FORWARD_COST_WARMUP,
)
from arvis.eval.jobs import image_generator
from arvis.methods.base import DecodingMethod
from arvis.methods.spec import MethodSpec, parse_method_specs  # noqa: F401  (re-exported)
from arvis.pipelines.interface import BenchInputs

QUICK_LABEL = "QUICK RUN: one warm-up and one timed round; not a measurement (docs/measurement.md)"

# aten ops that make the host wait for the device (on a GPU); a boolean index hides a nonzero().
_SYNC_OPS = frozenset({"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique2", "unique_dim"})
_INDEX_OPS = frozenset({"index", "index_put", "index_put_", "_index_put_impl_"})


def curve_dips(curve: Sequence[Mapping[str, float]]) -> list[str]:
    """One sentence per size whose median cost is below a smaller size's: whether the spread of the timings
    (or the minimum) explains it, or the dip is real (some shapes run faster kernels)."""
    notes = []
    points = sorted(curve, key=lambda c: c["positions"])
    for prev, cur in zip(points, points[1:], strict=False):
        if cur["ms"] >= prev["ms"]:
            continue
        gap = prev["ms"] - cur["ms"]
        spread = max(prev.get("ms_iqr", 0.0), cur.get("ms_iqr", 0.0))
        by_min = "ms_min" in cur and cur["ms_min"] >= prev["ms_min"]
        why = ("within the spread of the timings (noise from other work on the machine)" if gap <= spread else
               "but the minima rise: noise" if by_min else
               "beyond the spread, in the minima too: this shape really runs faster here")
        notes.append(f"T={cur['positions']} costs {cur['ms']:.3f} ms, less than T={prev['positions']} "
                     f"({prev['ms']:.3f} ms): {gap:.3f} ms, {why} (spread {spread:.3f} ms)")
    return notes


def count_host_syncs(run: Callable[[], BatchStats]) -> dict[str, float]:
    """Host synchronisations and aten ops per loop iteration of one decode (``run`` returns its stats).

    Counts the engine's deliberate synchronisations (``DecodeEngine.host_syncs_total``: the
    once-per-iteration :meth:`~arvis.engine.DecodeEngine.status`, the final check) plus every aten op that
    would block the host on a GPU (``item``/``bool()``, ``nonzero``, boolean indexing…), seen through a
    dispatch mode; aten ops are split into those inside backbone forwards (per forward, drafter included)
    and outside them (per iteration). Iterations: the batch's target forwards after the prefill.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    from arvis.engine import engine as engine_module

    inside = [0]

    class Counter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops = {"inside": 0, "outside": 0}
            self.syncs = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            self.ops["inside" if inside[0] else "outside"] += 1
            if name in _SYNC_OPS or (name in _INDEX_OPS and len(args) > 1 and any(
                    isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or ()))):
                self.syncs += 1
            return func(*args, **(kwargs or {}))

    original = engine_module.DecodeEngine._forward

    def counted(self, fn, *args, **kwargs):
        inside[0] += 1
        try:
            return original(self, fn, *args, **kwargs)
        finally:
            inside[0] -= 1

    counter = Counter()
    engine_module.DecodeEngine._forward = counted
    deliberate_before = engine_module.DecodeEngine.host_syncs_total
    try:
        with counter:
            stats = run()
    finally:
        engine_module.DecodeEngine._forward = original
    deliberate = engine_module.DecodeEngine.host_syncs_total - deliberate_before
    iterations = max(stats.batch_target_forwards - 1, 1)
    forwards = max(stats.batch_target_forwards + stats.batch_draft_forwards, 1)
    return {"host_syncs": counter.syncs + deliberate, "iterations": iterations,
            "host_syncs_per_iteration": (counter.syncs + deliberate) / iterations,
            "aten_ops_per_iteration_outside_forwards": counter.ops["outside"] / iterations,
            "aten_ops_per_forward": counter.ops["inside"] / forwards}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------- the bench
@dataclass
class BenchResult:
    """Per-spec records (JSON-ready dicts, AR first) and the forward-cost curve."""

    records: list[dict[str, Any]]
    forward_cost: list[dict[str, float]]
    context: dict[str, Any] = field(default_factory=dict)


def available_cores() -> int:
    """CPU cores this process may run on (the bench's default thread count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_settings(samples: int, repeats: int, warmup: int, batch_size: int, quick: bool = False) -> None:
    """``ValueError`` naming the first bench setting out of range (``quick``: any ``repeats >= 1``)."""
    for name, value, low in (("samples", samples, 1), ("repeats", repeats, 1 if quick else MIN_REPEATS),
                             ("warmup", warmup, 1), ("batch_size", batch_size, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            extra = (f" (docs/measurement.md: median of >= {MIN_REPEATS} interleaved repeats; --quick for a "
                     f"look that is not a measurement)" if name == "repeats" else "")
            raise ValueError(f"{name} must be an integer >= {low}{extra}, got {value!r}")


def run_bench(inputs: BenchInputs, specs: Sequence[MethodSpec], sampling: SamplingConfig, *, seed: int = 0,
              repeats: int = MIN_REPEATS, warmup: int = 1, forward_cost_sizes: Sequence[int] = FORWARD_COST_SIZES,
              context: Mapping[str, Any] | None = None, progress: bool = True, count_syncs: bool = True,
              clock: Callable[[], float] = time.perf_counter, quick: bool = False) -> BenchResult:
    """Time ``specs`` (plus the AR baseline) on a pipeline's :class:`~arvis.pipelines.interface.BenchInputs`
    and collect their figures.

    Args:
        inputs: what to decode and how (``pipe.bench_inputs(conditions, samples, batch_size)``): the condition
            batches, the decode function, the method builder (with the pipeline's resources) and, for token
            models, the backbone whose forward-cost curve is measured.
        specs: methods to compare (:func:`parse_method_specs`); AR is added first if missing.
        sampling: the target distribution (same for all methods).
        seed: sample ``i`` uses ``seed_for(seed, i)``.
        repeats: timed rounds (>= 5; the median is reported). warmup: untimed rounds first (>= 1).
        forward_cost_sizes: ``T`` values of the forward-cost curve (empty, or no backbone: skip it and the ideal
            speedups); every method's own ``T`` is added.
        context: fields copied into every record (model name, dtype, threads, provenance…).
        count_syncs: run each method once more, untimed, counting host syncs and aten ops per iteration.
        clock: the timer (tests replace it).
        quick: a look, not a measurement: any ``repeats >= 1``, a shorter forward-cost curve, no sync count;
            every record carries ``"quick": true``.
    """
    conditions = inputs.batches
    samples = sum(len(idx) for idx, _ in conditions)
    batch_size = len(conditions[0][0])
    check_settings(samples=samples, repeats=repeats, warmup=warmup, batch_size=batch_size, quick=quick)
    count_syncs = count_syncs and not quick
    specs = list(specs)
    if not any(s.name == "ar" and not s.options for s in specs):
        specs.insert(0, MethodSpec("ar"))
    device = inputs.device
    backbone = inputs.backbone
    methods = {s.label: inputs.build(s.name, s.options_dict) for s in specs}

    def run_once(spec: MethodSpec) -> tuple[float, list[BatchStats], str]:
        elapsed, batches, digest = 0.0, [], hashlib.sha256()
        for idx, cond in conditions:
            gens = [image_generator(seed, i, device) for i in idx]
            _sync(device)
            t0 = clock()
            tokens, batch_stats = inputs.decode(cond, sampling, methods[spec.label], gens)
            _sync(device)
            elapsed += clock() - t0
            batches.append(batch_stats)
            digest.update(tokens.cpu().numpy().tobytes())
        return elapsed / samples, batches, digest.hexdigest()

    total = (warmup + repeats) * len(specs)
    bar = tqdm(total=total, desc="bench", unit="run", disable=not progress)
    for _ in range(warmup):
        for spec in specs:
            run_once(spec)
            bar.update(1)
    latencies: dict[str, list[float]] = {s.label: [] for s in specs}
    rounds: dict[str, list[list[BatchStats]]] = {s.label: [] for s in specs}
    digests: dict[str, set[str]] = {s.label: set() for s in specs}
    for _ in range(repeats):
        for spec in specs:  # interleaved: every round runs every method once
            latency, batches, digest = run_once(spec)
            latencies[spec.label].append(latency)
            rounds[spec.label].append(batches)
            digests[spec.label].add(digest)
            bar.update(1)
    bar.close()

    positions = {s.label: methods[s.label].positions_per_forward for s in specs}
    curve: list[dict[str, float]] = []
    if forward_cost_sizes and backbone is not None:
        extra_sizes = [t for t in positions.values() if isinstance(t, int)]
        curve = forward_cost_curve(backbone, conditions[0][1], sampling, [*forward_cost_sizes, *extra_sizes],
                                   **({"repeats": QUICK_FORWARD_COST_REPEATS, "warmup": QUICK_FORWARD_COST_WARMUP}
                                      if quick else {"repeats": FORWARD_COST_REPEATS, "warmup": FORWARD_COST_WARMUP}))
    syncs: dict[str, dict[str, float]] = {}
    if count_syncs:
        idx, cond = conditions[0]
        for spec in specs:
            gens = [image_generator(seed, i, device) for i in idx]
            syncs[spec.label] = count_host_syncs(
                lambda spec=spec, gens=gens: inputs.decode(cond, sampling, methods[spec.label], gens)[1])

    ar_latency = statistics.median(latencies["ar"])
    records = []
    for spec in specs:
        lat = latencies[spec.label]
        median_round = sorted(range(len(lat)), key=lat.__getitem__)[len(lat) // 2]
        figures = summarize(rounds[spec.label][median_round], details=True)
        figures.pop("latency_s")  # the decode calls' own sum; the record's latency is the median per sample
        if not methods[spec.label].lossless and "mean_tv_per_token" not in figures["extra"]:
            figures["extra"].update(measured_tv(inputs, spec, methods[spec.label], sampling, seed))
        record = {
            "method": spec.name,
            "spec": spec.label,
            "options": spec.options_dict,
            "lossless": methods[spec.label].lossless,
            **dict(context or {}),
            "seed": seed,
            "samples": samples,
            "batch_size": batch_size,
            "repeats": repeats,
            "warmup": warmup,
            "quick": quick,
            "sampling": dataclasses.asdict(sampling),
            "grid": list(inputs.grid),
            **figures,
            "latency_s": statistics.median(lat),
            "latency_repeats_s": lat,
            "speedup": ar_latency / statistics.median(lat),
            "positions_per_forward": positions[spec.label],
            **syncs.get(spec.label, {}),
            "deterministic": len(digests[spec.label]) == 1,
            "forward_cost": curve,
        }
        records.append(record)
    ar_forwards = records[[s.label for s in specs].index("ar")]["target_forwards"]
    for record in records:  # the speedup the forward-cost curve allows, beside the measured one
        record["ideal_speedup"] = ideal_speedup(record, ar_forwards, curve)
        # Against the same AR run: for token models the step compression, for next-scale models (whose AR already
        # commits many tokens per forward) the only ratio that reads as a saving.
        record["forwards_vs_ar"] = ar_forwards / max(record["target_forwards"], 1e-12)
        ideal = record["ideal_speedup"]
        record["share_of_ideal"] = record["speedup"] / ideal if ideal else None
    return BenchResult(records=records, forward_cost=curve, context=dict(context or {}))


def measured_tv(inputs: BenchInputs, spec: MethodSpec, method: DecodingMethod, sampling: SamplingConfig, seed: int
                ) -> dict[str, Any]:
    """The realised TV per token of a relaxed rule that measures it only on request (``tv=true``: its exact output
    distribution costs a sizeable share of the step, so the timed rounds run without it), from one more untimed
    decode of the first batch with it on; ``{}`` for methods without that option or that already measure it."""
    options = spec.options_dict
    if "tv" in options or "tv" not in {o.name for o in method.info.options}:
        return {}
    measuring = inputs.build(spec.name, {**options, "tv": True})
    idx, cond = inputs.batches[0]
    _, stats = inputs.decode(cond, sampling, measuring, [image_generator(seed, i, inputs.device) for i in idx])
    extra = summarize_extra(stats.samples)
    return {k: extra[k] for k in ("tv_kind", "mean_tv_per_token", "max_tv_per_token") if k in extra}


def ideal_speedup(record: Mapping[str, Any], ar_forwards: float, curve: Sequence[Mapping[str, float]]
                  ) -> float | None:
    """AR's target forwards over the method's, times ``cost(1) / cost(T)`` from the curve (``T``: the
    method's positions per forward; for cost-aware windows, the mean cost of the windows their trace chose, or
    else their mean window plus one, priced on the curve between the measured sizes). Drafter forwards are not in
    it (they are timed separately); ``None`` for methods with a varying ``T`` that they do not report (ZipAR) or
    without a curve."""
    if not curve:
        return None
    T = record.get("positions_per_forward")
    extra = record.get("extra", {})
    if isinstance(T, int):
        sizes = [T]
    elif extra.get("window_trace"):
        sizes = [window + 1 for _, window in extra["window_trace"]]
    elif isinstance(extra.get("mean_window"), int | float):
        sizes = [extra["mean_window"] + 1]
    else:
        return None
    one, costs = curve_cost(curve, 1), [curve_cost(curve, t) for t in sizes]
    if one is None or any(c is None for c in costs):
        return None
    return ar_forwards / record["target_forwards"] * one / (sum(costs) / len(costs))  # type: ignore[arg-type]


def ideal_notes(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """One sentence per record whose measured speedup exceeds its ideal, saying from the record's own time
    split where the difference comes from: forwards that shrank more inside the decode than the curve prices
    them, time outside forwards that shrank more than the forward time, or neither (timing noise)."""
    ar = next((r for r in records if r.get("spec") == "ar"), None)
    if ar is None:
        return []
    notes = []
    for r in records:
        ideal = r.get("ideal_speedup")
        if r is ar or ideal is None or r["speedup"] <= ideal:
            continue
        a_fwd, a_out = ar["target_forward_s"], ar["outside_s"]
        m_fwd, m_out = r["target_forward_s"] + r["draft_forward_s"], r["outside_s"]
        fwd_ratio = a_fwd / max(m_fwd, 1e-12)
        out_ratio = a_out / max(m_out, 1e-12)
        causes = []
        if fwd_ratio > ideal:
            causes.append(f"the forwards timed inside the decode shrank {fwd_ratio:.2f}x, more than the curve's "
                          f"{ideal:.2f}x (the curve times one forward in isolation at a mid-image position, on a "
                          f"machine shared with other work)")
        if out_ratio > fwd_ratio:
            causes.append(f"the time outside forwards shrank {out_ratio:.2f}x, more than the forward time "
                          f"({fwd_ratio:.2f}x): AR pays sampling and bookkeeping per token, {r['spec']} per forward")
        if not causes:
            causes.append("neither the forward time nor the time outside forwards shrank more than the ideal: the "
                          "difference is timing noise between rounds")
        notes.append(f"{r['spec']}: measured {r['speedup']:.2f}x > ideal {ideal:.2f}x. 'Ideal' counts time inside "
                     f"target forwards only, as the curve prices them. In the median round AR spent {a_fwd:.3f} s "
                     f"in forwards and {a_out:.3f} s outside them ({100 * ar['outside_share']:.0f}%: sampling, cache "
                     f"updates, Python); {r['spec']} {m_fwd:.3f} s in forwards (drafter included) and {m_out:.3f} s "
                     f"outside. Why: " + "; ".join(causes))
    return notes


# ----------------------------------------------------------------------------- tables
def _fmt(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


TABLE_COLUMNS = ("spec", "lossless", "target_forwards", "draft_forwards", "tokens/fwd", "fewer_fwd_vs_ar", "T",
                 "latency_s", "speedup", "ideal", "of_ideal", "fwd_ms", "draft_ms", "outside_ms", "outside", "syncs/it")


def _opt(x: Any, digits: int = 2, suffix: str = "") -> str:
    return "-" if x is None else _fmt(x, digits) + suffix


def table_rows(records: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """One row per record: forwards, tokens per target forward (the record's ``step_compression``), AR's target
    forwards over the method's (the same AR run), positions per forward, latency, measured and ideal
    speedup, ms per target forward inside target / drafter forwards and outside both, outside share, host
    syncs per iteration.

    Tokens per forward is printed as a count, not as a ratio ("x"): it is a speed-up over AR only where AR
    commits one token per forward (token models); a next-scale AR commits a whole scale per forward (VAR's
    21.67 on the 6-scale pyramid), so every ratio a row shows (``fewer_fwd_vs_ar``, ``speedup``, ``ideal``) is
    taken against the same AR run instead."""
    rows = []
    for r in records:
        rows.append([r["spec"], "yes" if r["lossless"] else "no", _fmt(r["target_forwards"], 1),
                     _fmt(r["draft_forwards"], 1), _fmt(r["step_compression"]),
                     _opt(r.get("forwards_vs_ar"), 2, "x"), str(r.get("positions_per_forward") or "-"), _fmt(r["latency_s"], 4), _fmt(r["speedup"]) + "x",
                     _opt(r.get("ideal_speedup"), 2, "x"),
                     _opt(None if r.get("share_of_ideal") is None else 100 * r["share_of_ideal"], 0, "%"),
                     _opt(r.get("target_ms_per_forward")),
                     _opt(r.get("draft_ms_per_forward")), _opt(r.get("outside_ms_per_forward")),
                     _opt(None if r.get("outside_share") is None else 100 * r["outside_share"], 0, "%"),
                     _opt(r.get("host_syncs_per_iteration"))])
    return rows


COST_COLUMNS = ("positions", "ms/forward", "min", "vs T=1")


def cost_rows(curve: Sequence[Mapping[str, float]]) -> list[list[str]]:
    """``T``, median ms, minimum ms (records written before it was measured: ``-``), median ratio to ``T=1``;
    a ``*`` marks a size costing less than a smaller one (explained by :func:`curve_dips`)."""
    rows, prev = [], None
    for c in sorted(curve, key=lambda c: c["positions"]):
        dip = prev is not None and c["ms"] < prev
        rows.append([str(c["positions"]) + ("*" if dip else ""), _fmt(c["ms"], 3), _opt(c.get("ms_min"), 3),
                     "-" if c["ratio"] is None else _fmt(c["ratio"]) + "x"])
        prev = c["ms"]
    return rows


def _notes(result: BenchResult) -> list[str]:
    """The sentences under the tables: a quick run's label, curve dips (``*``), ideal below measured."""
    notes = [QUICK_LABEL] if result.records[0].get("quick") else []
    notes += [f"* {n}" for n in curve_dips(result.forward_cost)]
    notes += [f"note: {n}" for n in ideal_notes(result.records)]
    return notes


def _text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            for r in rows]
    return out


def _header_line(result: BenchResult) -> str:
    r = result.records[0]
    rounds = (f"repeats={r['repeats']} (QUICK: not a measurement, warm-up {r['warmup']})" if r.get("quick") else
              f"repeats={r['repeats']} (median, interleaved, warm-up {r['warmup']})")
    return (f"model={r.get('model', '?')} samples={r['samples']} batch_size={r['batch_size']} seed={r['seed']} "
            f"{rounds} dtype={r.get('dtype')} "
            f"threads={r.get('threads')} device={r.get('device')} commit={str(r.get('git_commit', '?'))[:12]}")


def format_text(result: BenchResult, max_width: int = 200) -> str:
    """The latency table with the forward-cost curve beside it (below it when the line would be too wide)."""
    left = _text_table(TABLE_COLUMNS, table_rows(result.records))
    right = (["forward cost on this machine", *_text_table(COST_COLUMNS, cost_rows(result.forward_cost))]
             if result.forward_cost else [])
    width = max(len(s) for s in left)
    lines = [_header_line(result)]
    notes = _notes(result)
    if right and width + 4 + max(len(s) for s in right) > max_width:
        return "\n".join(lines + left + [""] + right + notes)
    left = [""] + left  # the cost table's title sits beside the blank line above the latency header
    for i in range(max(len(left), len(right))):
        a = left[i] if i < len(left) else ""
        b = right[i] if i < len(right) else ""
        lines.append((a.ljust(width) + "    " + b).rstrip())
    return "\n".join(lines + notes)


def format_markdown(result: BenchResult) -> str:
    """A Markdown report: settings, the latency table, and the forward-cost curve beside it."""
    def md(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
        return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                *["| " + " | ".join(r) + " |" for r in rows]]

    r0 = result.records[0]
    lines = ["# arvis bench", "", *([f"**{QUICK_LABEL}**", ""] if r0.get("quick") else []),
             f"`{_header_line(result)}`", "",
             f"Sampling: {json.dumps(r0['sampling'])}. latency_s = median wall time per sample over "
             f"{r0['repeats']} interleaved rounds; tokens/fwd = tokens committed per target forward (a count: "
             f"next-scale AR already commits a whole scale per forward); fewer_fwd_vs_ar = AR target forwards / "
             f"method target forwards; speedup = AR latency / method latency (same process, "
             f"seeds, dtype, threads); ideal = AR forwards / method forwards x cost(1) / cost(T) from the curve "
             f"below (T = positions per forward; it counts time inside target forwards only); fwd_ms / draft_ms / outside_ms = time inside target forwards, "
             f"inside drafter forwards and outside both, per target forward; outside = share of the latency; "
             f"syncs/it = host synchronisations per loop iteration.", "",
             *md(TABLE_COLUMNS, table_rows(result.records))]
    if result.forward_cost:
        lines += ["", "Forward cost on this machine (ms per target forward vs positions evaluated; "
                  "same model, batch and guidance):", "",
                  *md(COST_COLUMNS, cost_rows(result.forward_cost))]
    notes = [n for n in _notes(result) if n != QUICK_LABEL]
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"
