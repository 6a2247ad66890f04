"""docs/reliability.md's table is exactly the rows the tests declare (tests/reliability_rows.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_rows import DOC, declared_rows, render_table, rows_in, table_in_doc


def test_reliability_table_matches_the_tests():
    rows = declared_rows()
    assert len(rows) >= 20
    assert table_in_doc(DOC.read_text()) == render_table(rows), (
        "docs/reliability.md is out of date with the tests' reliability markers; "
        "run `python -m tests.reliability_rows --write` and review the diff")


def test_row_markers_must_be_literal_and_on_tests(tmp_path: Path):
    good = tmp_path / "test_good.py"
    good.write_text('import pytest\n\n@pytest.mark.reliability(area="a", probe="p | q", outcome="o")\n'
                    'def test_x():\n    pass\n')
    (row,) = rows_in(good)
    assert (row.area, row.probe, row.test) == ("a", "p | q", "test_good.py::test_x")
    assert "p \\| q" in render_table([row])  # a pipe cannot break the table
    for body in ('@pytest.mark.reliability(area="a", probe=NAME, outcome="o")\ndef test_x():\n    pass\n',
                 '@pytest.mark.reliability(area="a", probe="p")\ndef test_x():\n    pass\n',
                 'MARK = pytest.mark.reliability(area="a", probe="p", outcome="o")\n'):
        bad = tmp_path / "test_bad.py"
        bad.write_text("import pytest\n\n" + body)
        with pytest.raises(ValueError, match="reliability"):
            rows_in(bad)
