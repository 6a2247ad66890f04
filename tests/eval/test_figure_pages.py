"""Every committed figure page is what ``python eval/figures.py --suite NAME --report-only`` builds from the
committed JSON records: the pages are reproducible by their one command and nothing in them is typed by hand."""

from __future__ import annotations

import pytest

from tests import REPO_ROOT
from tests.eval.eval_modules import eval_module

FIGURES = REPO_ROOT / "docs" / "figures"
# (page under docs/figures, the command line that builds it: the documented one, docs/emoji.md for the emoji sets)
PAGES = [
    *((f"{suite}.md", ["--suite", suite]) for suite in ("sjd", "zipar", "relaxed", "latency", "methods2026",
                                                         "windows", "var", "mar", "video", "emu3", "janus", "mulo")),
    *((f"emoji/{suite}.md", ["--suite", suite, "--model", "arvis/weights/llamagen-c2i-emoji", "--out",
                             str(FIGURES / "emoji")]) for suite in ("sjd", "zipar", "relaxed")),
    *((f"emoji-names/{suite}.md", ["--suite", suite, "--model", "emoji-names", "--out", str(FIGURES / "emoji-names"),
                                   "--fid-num", "246"]) for suite in ("sjd", "zipar", "relaxed", "methods2026")),
]


@pytest.mark.parametrize("page, argv", PAGES, ids=[p for p, _ in PAGES])
def test_committed_page_is_rebuilt_from_its_records(page, argv):
    figures = eval_module("figures")
    run = figures.plan([*argv, "--report-only"] if "--out" in argv else [*argv, "--out", str(FIGURES), "--report-only"])
    (suite,) = run.suites
    built = suite.page_text(run.settings[suite.name], run.jobs[suite.name])
    assert built == (FIGURES / page).read_text(), f"{page} differs from what its records build"



def test_every_suite_has_its_page_checked():
    assert {page.removesuffix(".md") for page, _ in PAGES if "/" not in page} == set(eval_module("figures").SUITES)


def test_a_bench_row_shows_only_its_own_models_fid():
    """A page's FID records belong to its figure set's model: a bench of another model on the same page (Emu3 beside
    c2i) shows none of them, and an alias and its shipped folder name are the same model."""
    tables = eval_module("figure_tables")
    fids = {("ar", 0, 1000): {"model": "c2i", "fid": 12.05, "num_generated": 1000, "seed": 0}}
    row = {"spec": "ar", "lossless": True, "target_forwards": 256.0, "draft_forwards": 0.0, "step_compression": 1.0,
           "accepted_per_forward": 1.0, "latency_s": 1.0, "speedup": 1.0}
    ar_row = lambda model: tables.bench_table([{**row, "model": model}], fids)[-1]  # noqa: E731
    assert "12.05 (1000)" in ar_row("c2i") and "12.05 (1000)" in ar_row("llamagen-c2i-photos")
    assert "12.05" not in ar_row("emu3")
