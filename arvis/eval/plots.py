"""PNG plots of bench and quality records (matplotlib, Agg backend; every file written atomically).

- :func:`plot_speedup_vs_window` — latency speedup and step compression against the window, one line
  per method name (specs that set ``window``), plus bars for every spec;
- :func:`plot_accepted_histogram` — how many tokens each target forward committed: grouped bars for a
  few specs, one small panel per spec (shared axes) for many;
- :func:`plot_decode_order` — the decode-order heat map of sample 0: when in the decode (first to last
  target forward, one shared colour scale) each token was committed; AR is a smooth raster ramp,
  parallel methods show blocks;
- :func:`plot_grid_maps` — any per-position figure as one heat map per method (e.g. where drafts are rejected);
- :func:`plot_forward_cost` — ms per forward against positions evaluated;
- :func:`plot_fid_vs_speed` — FID against speedup, one point per method spec.

Every title names the model the records come from (their ``model`` field). Each ``plot_*`` has a
``*_figure`` twin that returns the matplotlib figure (tests inspect its layout).
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from arvis.utils.files import atomic_path

# One colour per method family, so that specs of one method read as one family across plots.
FAMILY_COLOURS = {"ar": "#555555", "sjd": "#1f77b4", "mc-sjd": "#ff7f0e", "zipar": "#2ca02c",
                  "speculative": "#d62728"}
OTHER_COLOURS = ("#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
GROUPED_BARS_MAX = 4  # more specs than this: one small panel per spec


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str | os.PathLike) -> Path:
    plt = _pyplot()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    return path


def model_of(records: Sequence[Mapping[str, Any]], model: str | None = None) -> str:
    """The model the records describe (their ``model`` field; several: joined), for titles."""
    if model:
        return str(model)
    names = list(dict.fromkeys(str(r["model"]) for r in records if r.get("model")))
    return ", ".join(names) if names else "model not recorded"


def family_colour(spec: str, index: int = 0) -> str:
    return FAMILY_COLOURS.get(spec.split(":", 1)[0], OTHER_COLOURS[index % len(OTHER_COLOURS)])


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text.replace(",", ", "), width, break_long_words=False)) or text


# ----------------------------------------------------------------------------- speedup vs window
def compression_vs_ar(record: Mapping[str, Any], ar: Mapping[str, Any] | None) -> float:
    """``record``'s step compression over AR's (AR's target forwards over its own, the same AR run): the step
    compression itself for token models, whose AR commits one token per forward; a next-scale AR commits a
    whole scale per forward, and its raw step compression (21.67 on a 6-scale VAR) is no speed-up."""
    if record.get("forwards_vs_ar") is not None:
        return float(record["forwards_vs_ar"])
    base = ar.get("step_compression") if ar is not None else None
    return record["step_compression"] / base if base else record["step_compression"]


def speedup_vs_window_figure(records: Sequence[Mapping[str, Any]], model: str | None = None) -> Any:
    plt = _pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.6), layout="constrained")
    by_method: dict[str, list[Mapping[str, Any]]] = {}
    ar = next((r for r in records if r["spec"] == "ar"), None)
    for r in records:
        w = r.get("options", {}).get("window")
        if isinstance(w, int) and not isinstance(w, bool) and len(r.get("options", {})) == 1:
            by_method.setdefault(r["method"], []).append(r)
    for k, (name, rs) in enumerate(sorted(by_method.items())):
        rs = sorted(rs, key=lambda r: r["options"]["window"])
        if ar is not None:  # AR is the window-1 point of every line
            rs = [{"options": {"window": 1}, "speedup": 1.0, "step_compression": 1.0}, *rs]
        windows = [r["options"]["window"] for r in rs]
        colour = family_colour(name, k)
        ax.plot(windows, [r["speedup"] for r in rs], "o-", color=colour, label=f"{name}: latency speedup")
        ax.plot(windows, [compression_vs_ar(r, ar) for r in rs], "s--", color=colour,
                label=f"{name}: step compression")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("window (positions per forward)")
    ax.set_ylabel("× over plain AR")
    ax.set_title("by window (specs that set only the window)", fontsize=10)
    if by_method:
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no spec sets only a window", ha="center", va="center", transform=ax.transAxes)
    x = range(len(records))
    bx.barh([i + 0.2 for i in x], [r["speedup"] for r in records], height=0.4, label="latency speedup",
            color="#1f77b4")
    bx.barh([i - 0.2 for i in x], [compression_vs_ar(r, ar) for r in records], height=0.4,
            label="step compression (vs AR's)", color="#ff7f0e")
    bx.axvline(1.0, color="gray", lw=0.8)
    bx.set_yticks(list(x), [r["spec"] for r in records], fontsize=8)
    bx.invert_yaxis()
    bx.set_xlabel("× over plain AR")
    bx.set_title("every spec", fontsize=10)
    bx.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Speedup over plain AR — {model_of(records, model)}", fontsize=12)
    return fig


def plot_speedup_vs_window(records: Sequence[Mapping[str, Any]], path: str | os.PathLike,
                           model: str | None = None) -> Path:
    return _save(speedup_vs_window_figure(records, model), path)


# ----------------------------------------------------------------------------- accepted per forward
def _histogram(record: Mapping[str, Any]) -> tuple[list[int], list[float]]:
    hist = {int(k): v for k, v in record["accepted_per_forward_histogram"].items()}
    total = sum(hist.values()) or 1
    ks = sorted(hist)
    return ks, [hist[k] / total for k in ks]


def accepted_histogram_figure(records: Sequence[Mapping[str, Any]], model: str | None = None) -> Any:
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    title = f"Tokens committed per target forward — {model_of(records, model)}"
    n = len(records)
    if n <= GROUPED_BARS_MAX:
        fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
        width = 0.8 / max(n, 1)
        for j, r in enumerate(records):
            ks, fractions = _histogram(r)
            ax.bar([k + (j - (n - 1) / 2) * width for k in ks], fractions, width=width,
                   color=family_colour(r["spec"], j), alpha=0.35 + 0.65 * (j + 1) / n,
                   label=f"{r['spec']} (mean {r['accepted_per_forward']:.2f})")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("tokens committed by a target forward")
        ax.set_ylabel("fraction of forwards")
        ax.legend(fontsize=8)
        fig.suptitle(title, fontsize=11)
        return fig
    cols = min(5, n)
    rows = math.ceil(n / cols)
    height = 2.4 * rows + 0.9
    fig, axes = plt.subplots(rows, cols, figsize=(2.9 * cols, height), sharex=True, sharey=True, squeeze=False)
    # Fixed margins (constrained layout is slow with many panels): room for two-line panel titles and the title.
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.45 / height, top=1 - 0.95 / height, wspace=0.12,
                        hspace=0.75)
    top = max(max(_histogram(r)[0] or [1]) for r in records)
    for k, (ax, r) in enumerate(zip(axes.flat, records, strict=False)):
        ks, fractions = _histogram(r)
        ax.bar(ks, fractions, width=0.85, color=family_colour(r["spec"], k))
        ax.set_title(f"{_wrap(r['spec'], 30)}\nmean {r['accepted_per_forward']:.2f} tokens", fontsize=8)
        ax.set_xlim(0.3, top + 0.7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=6))
        ax.tick_params(labelsize=7)
        ax.grid(axis="y", lw=0.4, alpha=0.5)
    for ax in axes.flat[n:]:
        ax.axis("off")
    fig.supxlabel("tokens committed by a target forward", fontsize=9, y=0.05 / height)
    fig.supylabel("fraction of forwards", fontsize=9, x=0.005)
    fig.suptitle(title, fontsize=12, y=1 - 0.15 / height)
    return fig


def plot_accepted_histogram(records: Sequence[Mapping[str, Any]], path: str | os.PathLike,
                            model: str | None = None) -> Path:
    return _save(accepted_histogram_figure(records, model), path)


# ----------------------------------------------------------------------------- decode order
def decode_order_figure(records: Sequence[Mapping[str, Any]], model: str | None = None) -> Any:
    plt = _pyplot()
    n = len(records)
    cols = min(n, 5)
    rows = math.ceil(n / cols)
    title = _wrap(f"Decode order of sample 0 (when each token was committed) — {model_of(records, model)}",
                  int(14 * (2.6 * cols + 0.9)))
    head = 0.25 * (title.count("\n") + 1) + 0.5  # inches: the title's lines, then two-line panel titles
    height = 2.6 * rows + head
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols + 0.9, height), squeeze=False)
    fig.subplots_adjust(left=0.02, right=0.86, bottom=0.02, top=1 - head / height, wspace=0.08,
                        hspace=0.36)
    image = None
    for ax, r in zip(axes.flat, records, strict=False):
        grid = r.get("grid") or [int(math.isqrt(len(r["commit_forward"])))] * 2
        h, w = int(grid[-2]), int(grid[-1])
        order = list(r["commit_forward"])[: h * w]
        last = max(max(order), 1)
        progress = [[order[i * w + j] / last for j in range(w)] for i in range(h)]  # 0 = first, 1 = last forward
        image = ax.imshow(progress, cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
        ax.set_title(f"{_wrap(r['spec'], 26)}\n{max(order) + 1} forwards", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in axes.flat[n:]:
        ax.axis("off")
    if image is not None:
        bar = fig.colorbar(image, cax=fig.add_axes((0.89, 0.3, 0.015, 0.4)), ticks=[0, 1])
        bar.ax.set_yticklabels(["first\nforward", "last\nforward"], fontsize=8)
    fig.suptitle(title, fontsize=11, y=1 - 0.05 / height, va="top")
    return fig


def plot_grid_maps(maps: Mapping[str, Sequence[Sequence[float]]], path: str | os.PathLike, title: str,
                   colorbar: str) -> Path:
    """One heat map per entry of ``maps`` (label → ``H x W`` values), on a shared colour scale."""
    plt = _pyplot()
    n = len(maps)
    cols = min(max(n, 1), 4)
    rows = max(math.ceil(n / cols), 1)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    top = max((max(max(row) for row in m) for m in maps.values()), default=1.0) or 1.0
    for ax, (label, values) in zip(axes.flat, maps.items(), strict=False):
        im = ax.imshow(values, cmap="magma", vmin=0.0, vmax=top, interpolation="nearest")
        ax.set_title(label, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label=colorbar)
    fig.suptitle(title, fontsize=10, y=1.04)
    return _save(fig, path)


def plot_decode_order(records: Sequence[Mapping[str, Any]], path: str | os.PathLike, model: str | None = None) -> Path:
    return _save(decode_order_figure(records, model), path)


# ----------------------------------------------------------------------------- forward cost, FID vs speed
def forward_cost_figure(curve: Sequence[Mapping[str, float]], model: str | None = None) -> Any:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    ts = [c["positions"] for c in curve]
    ax.plot(ts, [c["ms"] for c in curve], "o-")
    for c in (c for c in curve if c["ratio"] is not None):
        ax.annotate(f"{c['ratio']:.2f}x", (c["positions"], c["ms"]), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("positions evaluated by one forward (T)")
    ax.set_ylabel("ms per forward")
    fig.suptitle(f"Forward cost on this machine — {model or 'model not recorded'}", fontsize=11)
    return fig


def plot_forward_cost(curve: Sequence[Mapping[str, float]], path: str | os.PathLike, model: str | None = None,
                      title: str = "") -> Path:
    fig = forward_cost_figure(curve, model or title or None)
    return _save(fig, path)


def fid_vs_speed_figure(points: Sequence[Mapping[str, Any]], floor: float | None = None,
                        model: str | None = None) -> Any:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    for k, p in enumerate(points):
        ax.plot(p["speedup"], p["fid"], "o", color=family_colour(p["spec"], k), ms=7)
        ax.annotate(p["spec"], (p["speedup"], p["fid"]), textcoords="offset points", xytext=(5, 4 + 7 * (k % 3)),
                    fontsize=7)
    if floor is not None:
        ax.axhline(floor, color="gray", ls="--", lw=0.8, label="real-vs-real floor")
        ax.legend(fontsize=8)
    ax.set_xlabel("latency speedup over plain AR")
    ax.set_ylabel("FID (lower is better)")
    fig.suptitle(f"FID vs speed — {model or 'model not recorded'}", fontsize=11)
    return fig


def plot_fid_vs_speed(points: Sequence[Mapping[str, Any]], path: str | os.PathLike, floor: float | None = None,
                      model: str | None = None) -> Path:
    """``points``: ``{"spec", "speedup", "fid"}`` per method; ``floor``: the real-vs-real floor line."""
    return _save(fid_vs_speed_figure(points, floor, model), path)


def write_bench_plots(records: Sequence[Mapping[str, Any]], curve: Sequence[Mapping[str, float]],
                      folder: str | os.PathLike) -> list[Path]:
    """All bench plots into ``folder``; returns the files written."""
    folder = Path(folder)
    model = model_of(records)
    out = [plot_speedup_vs_window(records, folder / "speedup_vs_window.png", model),
           plot_accepted_histogram(records, folder / "accepted_per_forward.png", model),
           plot_decode_order(records, folder / "decode_order.png", model)]
    if curve:
        out.append(plot_forward_cost(curve, folder / "forward_cost.png", model))
    return out
