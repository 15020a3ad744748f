"""Off a terminal (a pipe, a file, a CI log) the plan and run reports use the compact layout
whatever the width, and warnings are not wrapped; on a terminal wide enough, the table."""

from __future__ import annotations

import io

from rich.console import Console
from test_report_layout import _fleet

from orchestrator import report as rep
from orchestrator.catalog import default_catalog
from orchestrator.factsdir import load_dir
from orchestrator.parsers import parse_host
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy

FACTS_DIR = "tests/recorded/fixtures/real"


def _print(render: object, *, terminal: bool, width: int) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=terminal)
    render(console)  # type: ignore[operator]
    return buf.getvalue()


def test_off_a_terminal_the_report_is_compact_at_any_width() -> None:
    report = _fleet(2)
    for width in (80, 300):
        text = _print(lambda c: rep.render_report(c, report), terminal=False, width=width)
        assert "┃" not in text and "│" not in text, width
        assert "  plan: R580 open (no change), docker, nvidia_container_toolkit" in text
    wide = _print(lambda c: rep.render_report(c, report), terminal=True, width=300)
    assert "┃" in wide  # a terminal wide enough still gets the table


def test_off_a_terminal_the_plan_is_the_same_at_every_width_and_warnings_stay_whole() -> None:
    import datetime as dt

    raw = load_dir(FACTS_DIR)
    plans = {
        h: plan_host(
            parse_host(h, r), load_policy(h, {}), default_catalog(), today=dt.date(2026, 12, 1)
        )
        for h, r in raw.items()
    }
    texts = {
        w: _print(lambda c: rep.render_plans(c, plans), terminal=False, width=w)
        for w in (60, 80, 200)
    }
    assert texts[60] == texts[80] == texts[200]
    assert "┃" not in texts[80]
    warnings = [w for p in plans.values() for w in p.warnings]
    for w in warnings:
        assert f"  warning: {w}" in texts[60].splitlines()


def test_on_a_40_column_terminal_long_reasons_and_warnings_wrap_under_their_indent() -> None:
    """Issue 27 (13): at COLUMNS=40 the reasons ran past the edge and warnings wrapped to
    column 0; now every line fits and every continuation keeps the block's indent."""
    import datetime as dt

    raw = load_dir("tests/unit/fixtures_derived")  # the V100 host: a long reason, 2 warnings
    raw = {h: r for h, r in raw.items() if h.startswith("v100")}
    plans = {
        h: plan_host(
            parse_host(h, r), load_policy(h, {}), default_catalog(), today=dt.date(2026, 12, 1)
        )
        for h, r in raw.items()
    }
    assert plans and any(p.warnings for p in plans.values())
    text = _print(lambda c: rep.render_plans(c, plans), terminal=True, width=40)
    lines = text.split("\n1 hosts:")[0].splitlines()  # the closing summary line aside
    body = [ln for ln in lines if ln.strip() and not ln.startswith(tuple(plans))]
    assert all(len(ln) <= 40 for ln in body), [ln for ln in body if len(ln) > 40]
    block = [ln for ln in body if not ln.startswith(("nvidia_", "docker", "mig"))]
    assert all(ln.startswith("  ") for ln in block), [ln for ln in block if ln[:2] != "  "]
    words = " ".join(ln.strip() for ln in block).split()
    for w in (w for p in plans.values() for w in p.warnings):
        assert " ".join(w.split()[:6]) in " ".join(words)
