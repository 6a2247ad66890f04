"""The speed harness: several decoding methods side by side on one model, timed fairly.

Protocol (docs/measurement.md): every method decodes the same conditions with the same per-sample
generators (image ``i``: class ``i % num_classes``, ``torch.Generator().manual_seed(seed_for(seed, i))``,
fresh for every repeat, so each repeat decodes identical tokens); one warm-up run per method first;
then ``repeats`` rounds, each running every method once in turn (``ar, m1, m2, ar, m1, m2, …``) so that
machine noise falls on all methods alike; ``latency_s`` is the median over rounds of the wall time
per sample, and ``speedup`` = median AR latency / median method latency. The AR baseline is always
run, even when not asked for. The decode statistics (``tokens``, ``target_forwards``,
``draft_forwards``, ``step_compression``, ``accepted_per_forward``, ``commit_forward``,
``peak_memory_mb``) come from the engine and are the same in every round.

Beside every latency table goes this machine's *forward-cost curve*: milliseconds per target forward
against the number of positions it evaluates (``T = 1, 2, 4 … 64``), measured on the same model, batch
and guidance through :meth:`arvis.engine.DecodeEngine.evaluate`. A method's latency speedup is roughly
its step compression divided by the cost ratio at its typical ``T``.

Method specs (:func:`parse_method_specs`): ``name`` or ``name:key=value,key=value`` with values parsed
as JSON (``sjd:window=16``, ``mc-sjd:window=32,init="random"``; a bare word stays a string). Several specs
are joined by ``;`` or by ``,``: a comma-separated item that contains ``=`` but no ``:`` before it
continues the options of the spec before it, anything else starts a new spec. So
``ar,sjd:window=16,init=random,mc-sjd:window=32`` is three specs. Brackets and quotes nest (``x=[1,2]``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from arvis.engine import DecodeEngine, SamplingConfig
from arvis.eval.jobs import image_generator
from arvis.methods import (
    METHODS,
    available_methods,
    build_method,
    decode,
    is_lossless,
    validate_method,
    with_resources,
)
from arvis.models.protocol import Condition

FORWARD_COST_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
MIN_REPEATS = 5

# Figures copied from each sample's DecodeStats and averaged over samples (names of docs/measurement.md).
FIGURES = ("tokens", "target_forwards", "draft_forwards", "step_compression", "accepted_per_forward")


# ----------------------------------------------------------------------------- method specs
@dataclass(frozen=True)
class MethodSpec:
    """A method name plus options, e.g. ``sjd:window=16``."""

    name: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def options_dict(self) -> dict[str, Any]:
        return dict(self.options)

    @property
    def label(self) -> str:
        if not self.options:
            return self.name
        return self.name + ":" + ",".join(f"{k}={_format_value(v)}" for k, v in self.options)

    @property
    def window(self) -> int | None:
        w = self.options_dict.get("window")
        return w if isinstance(w, int) and not isinstance(w, bool) else None


def _format_value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _split_top_level(text: str, seps: str) -> list[str]:
    """Split on any of ``seps`` outside brackets and quotes."""
    parts, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch in seps and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return parts


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_method_specs(texts: str | Sequence[str]) -> list[MethodSpec]:
    """Parse and validate method specs (module docstring); ``ValueError`` names the bad part.

    Every spec is checked with :func:`arvis.methods.build_method` (unknown method → the list of
    available methods; unknown option → the method's options). Duplicates are an error.
    """
    if isinstance(texts, str):
        texts = [texts]
    specs: list[MethodSpec] = []
    for text in texts:
        for group in _split_top_level(text, ";"):
            current: tuple[str, dict[str, Any]] | None = None
            for item in (s.strip() for s in _split_top_level(group, ",")):
                if not item:
                    continue
                colon, eq = item.find(":"), item.find("=")
                if eq >= 0 and (colon < 0 or colon > eq):  # key=value continuing the previous spec
                    if current is None:
                        raise ValueError(f"methods: option {item!r} comes before any method name")
                    key, value = item.split("=", 1)
                    current[1][key.strip().replace("-", "_")] = _parse_value(value.strip())
                    continue
                if current is not None:
                    specs.append(_make_spec(*current))
                name, _, first = item.partition(":")
                options: dict[str, Any] = {}
                if first:
                    if "=" not in first:
                        raise ValueError(f"methods: expected key=value after {name!r}:, got {first!r}")
                    key, value = first.split("=", 1)
                    options[key.strip().replace("-", "_")] = _parse_value(value.strip())
                current = (name.strip(), options)
            if current is not None:
                specs.append(_make_spec(*current))
    if not specs:
        raise ValueError(f"methods: no method given; available methods: {', '.join(available_methods())}")
    labels = [s.label for s in specs]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ValueError(f"methods: {dupes} given more than once")
    return specs


def _make_spec(name: str, options: dict[str, Any]) -> MethodSpec:
    if name not in METHODS:
        raise ValueError(f"methods: unknown method {name!r}; available methods: {', '.join(available_methods())}")
    validate_method(name, options)  # raises ValueError naming unknown or invalid options
    return MethodSpec(name, tuple(options.items()))


# ----------------------------------------------------------------------------- conditions
def class_conditions(num_classes: int, samples: int, batch_size: int, device: torch.device | str = "cpu"
                     ) -> list[tuple[list[int], Condition]]:
    """Batches of ``(sample indices, Condition)``: sample ``i`` gets class ``i % num_classes``."""
    out = []
    for start in range(0, samples, batch_size):
        idx = list(range(start, min(start + batch_size, samples)))
        labels = torch.tensor([i % num_classes for i in idx], dtype=torch.long, device=device)
        out.append((idx, Condition(class_labels=labels)))
    return out


# ----------------------------------------------------------------------------- forward cost
def forward_cost_curve(backbone: Any, condition: Condition, sampling: SamplingConfig,
                       sizes: Sequence[int] = FORWARD_COST_SIZES, repeats: int = 15, warmup: int = 3
                       ) -> list[dict[str, float]]:
    """Milliseconds per target forward against positions evaluated, on ``backbone`` as it decodes.

    One engine is prefilled with ``condition``; then, ``repeats`` times round-robin over ``sizes``, one
    :meth:`DecodeEngine.evaluate` over sequence indices ``0 … T-1`` is timed (median reported). Sizes
    larger than the sequence allows are dropped.

    Returns:
        ``[{"positions": T, "ms": median_ms, "ratio": ms / ms(T=1)}, ...]`` (ratio ``None`` without T=1).
    """
    sizes = sorted({int(t) for t in sizes if 1 <= int(t) <= backbone.layout.num_tokens - 1})
    if not sizes:
        raise ValueError("sizes: no size fits the model's sequence")
    B = condition.batch_size
    engine = DecodeEngine(backbone, condition, sampling, generator=torch.Generator().manual_seed(0))
    engine.prefill()
    device = engine.device
    calls = {t: (torch.zeros(B, t, dtype=torch.long, device=device),
                 torch.arange(t, device=device).expand(B, t).contiguous()) for t in sizes}
    times: dict[int, list[float]] = {t: [] for t in sizes}
    for r in range(warmup + repeats):
        for t in sizes:
            inputs, index = calls[t]
            _sync(device)
            t0 = time.perf_counter()
            engine.evaluate(inputs, index)
            _sync(device)
            if r >= warmup:
                times[t].append(time.perf_counter() - t0)
    base = statistics.median(times[sizes[0]]) if sizes[0] == 1 else None
    curve = []
    for t in sizes:
        ms = statistics.median(times[t]) * 1e3
        curve.append({"positions": t, "ms": ms, "ratio": ms / (base * 1e3) if base else None})
    return curve


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


def check_settings(samples: int, repeats: int, warmup: int, batch_size: int) -> None:
    """``ValueError`` naming the first bench setting out of range."""
    for name, value, low in (("samples", samples, 1), ("repeats", repeats, MIN_REPEATS), ("warmup", warmup, 1),
                             ("batch_size", batch_size, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            extra = " (docs/measurement.md: median of >= 5 interleaved repeats)" if name == "repeats" else ""
            raise ValueError(f"{name} must be an integer >= {low}{extra}, got {value!r}")


def run_bench(backbone: Any, specs: Sequence[MethodSpec], sampling: SamplingConfig, *, samples: int = 4,
              seed: int = 0, repeats: int = MIN_REPEATS, warmup: int = 1, batch_size: int = 1,
              conditions: Sequence[tuple[list[int], Condition]] | None = None,
              forward_cost_sizes: Sequence[int] = FORWARD_COST_SIZES, context: Mapping[str, Any] | None = None,
              draft_model: Any = None, neighbours: Callable[[int], torch.Tensor] | None = None,
              progress: bool = True, clock: Callable[[], float] = time.perf_counter) -> BenchResult:
    """Time ``specs`` (plus the AR baseline) on ``backbone`` and collect their figures.

    Args:
        backbone: the target model (backbone protocol).
        specs: methods to compare (:func:`parse_method_specs`); AR is added first if missing.
        sampling: the target distribution (same for all methods).
        samples: samples per round (>= 1); ``batch_size`` of them per decode call (ignored when
            ``conditions`` is given: its batches define the samples).
        seed: sample ``i`` uses ``seed_for(seed, i)``.
        repeats: timed rounds (>= 5; the median is reported). warmup: untimed rounds first (>= 1).
        conditions: batches of ``(sample indices, Condition)`` (default: class ``i % num_classes``).
        forward_cost_sizes: ``T`` values of the forward-cost curve (empty: skip it).
        context: fields copied into every record (model name, dtype, provenance…).
        draft_model, neighbours: resources methods may need (the pipeline's draft transformer and
            codebook neighbourhoods; see :func:`arvis.methods.with_resources`).
        clock: the timer (tests replace it).
    """
    check_settings(samples=samples, repeats=repeats, warmup=warmup, batch_size=batch_size)
    specs = list(specs)
    if not any(s.name == "ar" and not s.options for s in specs):
        specs.insert(0, MethodSpec("ar"))
    device = next(backbone.parameters()).device
    if conditions is None:
        num_classes = getattr(getattr(backbone, "config", None), "num_classes", None)
        if not num_classes or not getattr(backbone, "is_class_conditional", True):
            raise ValueError("conditions: required for a model that is not class-conditional")
        conditions = class_conditions(int(num_classes), samples, batch_size, device)
    samples = sum(len(idx) for idx, _ in conditions)
    methods = {s.label: build_method(s.name, **with_resources(s.name, s.options_dict, draft_model, neighbours))
               for s in specs}

    def run_once(spec: MethodSpec) -> tuple[float, list[Any], str]:
        elapsed, stats, digest = 0.0, [], hashlib.sha256()
        for idx, cond in conditions:
            gens = [image_generator(seed, i, device) for i in idx]
            _sync(device)
            t0 = clock()
            tokens, batch_stats = decode(backbone, cond, sampling, methods[spec.label], gens)
            _sync(device)
            elapsed += clock() - t0
            stats.extend(batch_stats.samples)
            digest.update(tokens.cpu().numpy().tobytes())
        return elapsed / samples, stats, digest.hexdigest()

    total = (warmup + repeats) * len(specs)
    bar = tqdm(total=total, desc="bench", unit="run", disable=not progress)
    for _ in range(warmup):
        for spec in specs:
            run_once(spec)
            bar.update(1)
    latencies: dict[str, list[float]] = {s.label: [] for s in specs}
    first: dict[str, list[Any]] = {}
    digests: dict[str, set[str]] = {s.label: set() for s in specs}
    for _ in range(repeats):
        for spec in specs:  # interleaved: every round runs every method once
            latency, stats, digest = run_once(spec)
            latencies[spec.label].append(latency)
            first.setdefault(spec.label, stats)
            digests[spec.label].add(digest)
            bar.update(1)
    bar.close()

    curve: list[dict[str, float]] = []
    if forward_cost_sizes:
        curve = forward_cost_curve(backbone, conditions[0][1], sampling, forward_cost_sizes)

    ar_latency = statistics.median(latencies["ar"])
    records = []
    for spec in specs:
        lat = latencies[spec.label]
        samples_stats = first[spec.label]
        record = {
            "method": spec.name,
            "spec": spec.label,
            "options": spec.options_dict,
            "lossless": is_lossless(spec.name, spec.options_dict),
            **dict(context or {}),
            "seed": seed,
            "samples": samples,
            "batch_size": batch_size,
            "repeats": repeats,
            "warmup": warmup,
            "sampling": dataclasses.asdict(sampling),
            "grid": list(backbone.layout.grid),
            **summarize(samples_stats),
            "latency_s": statistics.median(lat),
            "latency_repeats_s": lat,
            "speedup": ar_latency / statistics.median(lat),
            "deterministic": len(digests[spec.label]) == 1,
            "forward_cost": curve,
        }
        records.append(record)
    return BenchResult(records=records, forward_cost=curve, context=dict(context or {}))


def summarize(samples: Sequence[Any]) -> dict[str, Any]:
    """Figures of a list of :class:`~arvis.engine.DecodeStats`: means, histogram, sample 0's decode order."""
    n = len(samples)
    hist: Counter[int] = Counter()
    for s in samples:
        hist.update(s.accepted_per_forward)
    out: dict[str, Any] = {
        "tokens": sum(s.tokens for s in samples) / n,
        "target_forwards": sum(s.target_forwards for s in samples) / n,
        "draft_forwards": sum(s.draft_forwards for s in samples) / n,
        "step_compression": sum(s.step_compression for s in samples) / n,
        "accepted_per_forward": sum(s.mean_accepted_per_forward for s in samples) / n,
        "accepted_per_forward_histogram": {str(k): v for k, v in sorted(hist.items())},
        "peak_memory_mb": max(s.peak_memory_mb for s in samples),
        "commit_forward": samples[0].commit_forward,
        "per_sample": [{k: getattr(s, k) if k != "accepted_per_forward" else s.mean_accepted_per_forward
                        for k in FIGURES} for s in samples],
        "extra": summarize_extra(samples),
    }
    return out


def summarize_extra(samples: Sequence[Any]) -> dict[str, Any]:
    """Method-specific figures (``DecodeStats.extra``) over samples: ``max_*`` keys by max, other numbers by mean,
    anything else kept when all samples agree (e.g. ``tv_kind``)."""
    out: dict[str, Any] = {}
    for key in samples[0].extra:
        values = [s.extra.get(key) for s in samples]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[key] = max(values) if key.startswith("max_") else sum(values) / len(values)
        elif all(v == values[0] for v in values):
            out[key] = values[0]
    return out


# ----------------------------------------------------------------------------- tables
def _fmt(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


TABLE_COLUMNS = ("spec", "lossless", "target_forwards", "draft_forwards", "step_compression",
                 "accepted_per_forward", "latency_s", "speedup", "peak_memory_mb")


def table_rows(records: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for r in records:
        rows.append([r["spec"], "yes" if r["lossless"] else "no", _fmt(r["target_forwards"], 1),
                     _fmt(r["draft_forwards"], 1), _fmt(r["step_compression"]) + "x",
                     _fmt(r["accepted_per_forward"]), _fmt(r["latency_s"], 4), _fmt(r["speedup"]) + "x",
                     _fmt(r["peak_memory_mb"], 0)])
    return rows


def cost_rows(curve: Sequence[Mapping[str, float]]) -> list[list[str]]:
    return [[str(c["positions"]), _fmt(c["ms"], 3), "-" if c["ratio"] is None else _fmt(c["ratio"]) + "x"]
            for c in curve]


def _text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            for r in rows]
    return out


def _header_line(result: BenchResult) -> str:
    r = result.records[0]
    return (f"model={r.get('model', '?')} samples={r['samples']} batch_size={r['batch_size']} seed={r['seed']} "
            f"repeats={r['repeats']} (median, interleaved, warm-up {r['warmup']}) dtype={r.get('dtype')} "
            f"threads={r.get('threads')} device={r.get('device')} commit={str(r.get('git_commit', '?'))[:12]}")


def format_text(result: BenchResult, max_width: int = 200) -> str:
    """The latency table with the forward-cost curve beside it (below it when the line would be too wide)."""
    left = _text_table(TABLE_COLUMNS, table_rows(result.records))
    right = (["forward cost on this machine", *_text_table(("positions", "ms/forward", "vs T=1"),
                                                          cost_rows(result.forward_cost))]
             if result.forward_cost else [])
    width = max(len(s) for s in left)
    lines = [_header_line(result)]
    if right and width + 4 + max(len(s) for s in right) > max_width:
        return "\n".join(lines + left + [""] + right)
    left = [""] + left  # the cost table's title sits beside the blank line above the latency header
    for i in range(max(len(left), len(right))):
        a = left[i] if i < len(left) else ""
        b = right[i] if i < len(right) else ""
        lines.append((a.ljust(width) + "    " + b).rstrip())
    return "\n".join(lines)


def format_markdown(result: BenchResult) -> str:
    """A Markdown report: settings, the latency table, and the forward-cost curve beside it."""
    def md(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
        return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                *["| " + " | ".join(r) + " |" for r in rows]]

    r0 = result.records[0]
    lines = ["# arvis bench", "", f"`{_header_line(result)}`", "",
             f"Sampling: {json.dumps(r0['sampling'])}. latency_s = median wall time per sample over "
             f"{r0['repeats']} interleaved rounds; speedup = AR latency / method latency (same process, "
             f"seeds, dtype, threads).", "", *md(TABLE_COLUMNS, table_rows(result.records))]
    if result.forward_cost:
        lines += ["", "Forward cost on this machine (ms per target forward vs positions evaluated; "
                  "same model, batch and guidance):", "",
                  *md(("positions", "ms/forward", "vs T=1"), cost_rows(result.forward_cost))]
    return "\n".join(lines) + "\n"
