"""docs/reliability.md's fault table stays true: every row names at least one test, and every
named test exists (its file, and a `def test_name(` in it)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reliability.md"
REF = re.compile(r"(tests/[\w/]+\.py)::(\w+)")


def _rows() -> list[list[str]]:
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0] != "fault":
                rows.append(cells)
    return rows


def test_the_table_has_its_rows() -> None:
    rows = _rows()
    assert len(rows) >= 10 and all(len(r) == 3 for r in rows), rows


def test_every_row_names_tests_that_exist() -> None:
    for fault, _, tests in _rows():
        refs = REF.findall(tests)
        assert refs, f"row {fault!r} names no test"
        for path, name in refs:
            source = REPO / path
            assert source.is_file(), f"row {fault!r}: {path} does not exist"
            assert re.search(rf"^def {name}\(", source.read_text(encoding="utf-8"), re.M), (
                f"row {fault!r}: {path} has no test {name}"
            )
