"""The planner's output over every fixture and a matrix of inventories (tests/unit/plancases.py)
is the golden file's, byte for byte: a refactor of the planner changes no plan, no reason, no
warning and no plan document entry unless the golden file is rewritten with it (and the diff
reviewed: `python tests/unit/plancases.py --write`)."""

from __future__ import annotations

import difflib

from plancases import GOLDEN, render


def test_every_case_plans_as_the_golden_file_says() -> None:
    expected, actual = GOLDEN.read_text(), render()
    if actual != expected:
        diff = difflib.unified_diff(
            expected.splitlines(), actual.splitlines(), "golden", "now", n=2, lineterm=""
        )
        raise AssertionError("the plans changed:\n" + "\n".join(list(diff)[:80]))
