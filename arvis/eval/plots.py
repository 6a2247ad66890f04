"""PNG plots of bench and quality records (matplotlib, Agg backend; every file written atomically).

- :func:`plot_speedup_vs_window` — latency speedup and step compression against the window, one line
  per method name (specs that set ``window``), plus bars for every spec;
- :func:`plot_accepted_histogram` — how many tokens each target forward committed, per spec;
- :func:`plot_decode_order` — the decode-order heat map: for every token of sample 0, the index of the
  target forward that committed it (AR is a smooth raster ramp; parallel methods show blocks);
- :func:`plot_grid_maps` — any per-position figure as one heat map per method (e.g. where drafts are rejected);
- :func:`plot_forward_cost` — ms per forward against positions evaluated;
- :func:`plot_fid_vs_speed` — FID against speedup, one point per method spec.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from arvis.utils.serialization import atomic_path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str | os.PathLike) -> Path:
    plt = _pyplot()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_speedup_vs_window(records: Sequence[Mapping[str, Any]], path: str | os.PathLike) -> Path:
    plt = _pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    by_method: dict[str, list[Mapping[str, Any]]] = {}
    ar = next((r for r in records if r["spec"] == "ar"), None)
    for r in records:
        w = r.get("options", {}).get("window")
        if isinstance(w, int) and not isinstance(w, bool):
            by_method.setdefault(r["method"], []).append(r)
    for name, rs in sorted(by_method.items()):
        rs = sorted(rs, key=lambda r: r["options"]["window"])
        if ar is not None:  # AR is the window-1 point of every line
            rs = [{"options": {"window": 1}, "speedup": 1.0, "step_compression": 1.0}, *rs]
        windows = [r["options"]["window"] for r in rs]
        line = ax.plot(windows, [r["speedup"] for r in rs], "o-", label=f"{name} latency speedup")[0]
        ax.plot(windows, [r["step_compression"] for r in rs], "s--", color=line.get_color(),
                label=f"{name} step compression")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("window (positions per forward)")
    ax.set_ylabel("× over AR")
    ax.set_title("speedup vs window")
    if by_method:
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no spec sets a window", ha="center", va="center", transform=ax.transAxes)
    labels = [r["spec"] for r in records]
    x = range(len(records))
    bx.bar([i - 0.2 for i in x], [r["speedup"] for r in records], width=0.4, label="latency speedup")
    bx.bar([i + 0.2 for i in x], [r["step_compression"] for r in records], width=0.4, label="step compression")
    bx.axhline(1.0, color="gray", lw=0.8)
    bx.set_xticks(list(x), labels, rotation=30, ha="right", fontsize=8)
    bx.set_title("every spec")
    bx.legend(fontsize=8)
    return _save(fig, path)


def plot_accepted_histogram(records: Sequence[Mapping[str, Any]], path: str | os.PathLike) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    n = len(records)
    width = 0.8 / max(n, 1)
    for j, r in enumerate(records):
        hist = {int(k): v for k, v in r["accepted_per_forward_histogram"].items()}
        total = sum(hist.values()) or 1
        ks = sorted(hist)
        ax.bar([k + (j - (n - 1) / 2) * width for k in ks], [hist[k] / total for k in ks], width=width,
               label=f"{r['spec']} (mean {r['accepted_per_forward']:.2f})")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("tokens committed by a target forward")
    ax.set_ylabel("fraction of forwards")
    ax.set_title("accepted per forward")
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_decode_order(records: Sequence[Mapping[str, Any]], path: str | os.PathLike) -> Path:
    plt = _pyplot()
    n = len(records)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    for k, (ax, r) in enumerate(zip(axes.flat, records, strict=False)):
        grid = r.get("grid") or [int(math.isqrt(len(r["commit_forward"])))] * 2
        h, w = int(grid[-2]), int(grid[-1])
        order = list(r["commit_forward"])[: h * w]
        rows_ = [order[i * w:(i + 1) * w] for i in range(h)]
        im = ax.imshow(rows_, cmap="viridis", interpolation="nearest")
        ax.set_title(f"{r['spec']}\n{max(order) + 1} forwards", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        last_in_row = k % cols == cols - 1 or k == n - 1
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="committing forward" if last_in_row else None)
    fig.suptitle("decode order (sample 0): which target forward committed each token", fontsize=10, y=1.04)
    return _save(fig, path)


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


def plot_forward_cost(curve: Sequence[Mapping[str, float]], path: str | os.PathLike, title: str = "") -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ts = [c["positions"] for c in curve]
    ax.plot(ts, [c["ms"] for c in curve], "o-")
    for c in (c for c in curve if c["ratio"] is not None):
        ax.annotate(f"{c['ratio']:.2f}x", (c["positions"], c["ms"]), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("positions evaluated by one forward (T)")
    ax.set_ylabel("ms per forward")
    ax.set_title(title or "forward cost on this machine")
    return _save(fig, path)


def plot_fid_vs_speed(points: Sequence[Mapping[str, Any]], path: str | os.PathLike, floor: float | None = None
                      ) -> Path:
    """``points``: ``{"spec", "speedup", "fid"}`` per method; ``floor``: the real-vs-real floor line."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for p in points:
        ax.plot(p["speedup"], p["fid"], "o")
        ax.annotate(p["spec"], (p["speedup"], p["fid"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    if floor is not None:
        ax.axhline(floor, color="gray", ls="--", lw=0.8, label="real-vs-real floor")
        ax.legend(fontsize=8)
    ax.set_xlabel("latency speedup over AR")
    ax.set_ylabel("FID (lower is better)")
    ax.set_title("FID vs speed")
    return _save(fig, path)


def write_bench_plots(records: Sequence[Mapping[str, Any]], curve: Sequence[Mapping[str, float]],
                      folder: str | os.PathLike) -> list[Path]:
    """All bench plots into ``folder``; returns the files written."""
    folder = Path(folder)
    out = [plot_speedup_vs_window(records, folder / "speedup_vs_window.png"),
           plot_accepted_histogram(records, folder / "accepted_per_forward.png"),
           plot_decode_order(records, folder / "decode_order.png")]
    if curve:
        out.append(plot_forward_cost(curve, folder / "forward_cost.png"))
    return out
