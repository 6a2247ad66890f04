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
