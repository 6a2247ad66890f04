"""The plots are legible: many specs get small panels, titles never overlap, no large empty margins,
and every title names the model the records come from."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from tests import REPO_ROOT

pytest.importorskip("matplotlib")

from arvis.eval import plots  # noqa: E402

FIGURES = REPO_ROOT / "docs" / "figures"


def records(n: int, model: str = "c2i") -> list[dict]:
    out = []
    for k in range(n):
        window = 2 ** (k % 6 + 1)
        spec = "ar" if k == 0 else f"{['sjd', 'mc-sjd', 'zipar'][k % 3]}:window={window},init=neighbour_distribution"
        order = [min(i // max(1, k + 1), 255) for i in range(256)]
        out.append({"spec": spec, "method": spec.split(":")[0], "options": {"window": window}, "model": model,
                    "accepted_per_forward_histogram": {str(j + 1): 10 + j * k for j in range(1 + k % 5)},
                    "accepted_per_forward": 1.0 + k / 5, "speedup": 1 + k / 10, "step_compression": 1 + k / 4,
                    "commit_forward": order, "grid": [16, 16]})
    return out


def texts(fig) -> list:
    fig.canvas.draw()
    found = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        if ax.get_visible() and ax.axison:
            found.append(ax.title)
    return [t for t in found if t.get_text()]


def test_many_specs_get_one_panel_each_and_titles_do_not_overlap():
    recs = records(17)
    fig = plots.accepted_histogram_figure(recs)
    titled = [ax for ax in fig.axes if ax.axison and ax.get_title()]
    assert len(titled) == 17
    assert all(r["spec"].split(":")[0] in ax.get_title() for r, ax in zip(recs, titled, strict=True))
    assert "c2i" in fig._suptitle.get_text()
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in texts(fig)]
    assert not [(a, b) for a, b in itertools.combinations(boxes, 2) if a.overlaps(b)]
    few = plots.accepted_histogram_figure(records(3))
    assert len([ax for ax in few.axes if ax.axison]) == 1 and len(few.axes[0].get_legend().get_texts()) == 3


@pytest.mark.parametrize("n", [2, 5, 13])
def test_decode_order_titles_do_not_overlap_and_the_margins_are_small(n, tmp_path):
    fig = plots.decode_order_figure(records(n))
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in texts(fig)]
    assert not [(a, b) for a, b in itertools.combinations(boxes, 2) if a.overlaps(b)]
    path = plots.plot_decode_order(records(n), tmp_path / "order.png")
    from PIL import Image

    with Image.open(path) as im:
        pixels = np.asarray(im.convert("L"))
    blank_rows = (pixels > 250).all(axis=1)
    top = int(np.argmax(~blank_rows))
    bottom = int(np.argmax(~blank_rows[::-1]))
    assert (top + bottom) / len(blank_rows) < 0.1, (top, bottom, len(blank_rows))


def test_every_plot_names_the_model(tmp_path):
    recs = records(4, model="llamagen-c2i-photos")
    curve = [{"positions": t, "ms": 2.0 * t ** 0.5, "ratio": t ** 0.5} for t in (1, 2, 4)]
    figures = [plots.speedup_vs_window_figure(recs), plots.accepted_histogram_figure(recs),
               plots.decode_order_figure(recs), plots.forward_cost_figure(curve, "llamagen-c2i-photos"),
               plots.fid_vs_speed_figure([{"spec": "ar", "speedup": 1.0, "fid": 12.0}], 0.6, "llamagen-c2i-photos")]
    for fig in figures:
        assert "llamagen-c2i-photos" in fig._suptitle.get_text()
    written = plots.write_bench_plots(recs, curve, tmp_path)
    assert sorted(p.name for p in written) == ["accepted_per_forward.png", "decode_order.png", "forward_cost.png",
                                              "speedup_vs_window.png"]


@pytest.mark.slow
def test_the_published_plots_are_rebuilt_from_their_records(tmp_path):
    """docs/figures' plots come from the JSON records beside them (rebuilt here, the same file names)."""
    for suite in ("sjd", "zipar"):
        recs = json.loads((FIGURES / suite / "batch1-fp32.json").read_text())
        written = plots.write_bench_plots(recs, recs[0]["forward_cost"], tmp_path / suite)
        assert sorted(p.name for p in written) == sorted(p.name for p in (FIGURES / suite / "batch1-fp32-plots").iterdir())
