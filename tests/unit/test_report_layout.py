"""Tables at any width, a fleet summary line, and a compact table for large fleets."""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator import report as rep
from orchestrator import timing
from orchestrator.apply import HostApplyStats
from orchestrator.catalog import default_catalog
from orchestrator.parsers import parse_host
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy

REAL = Path(__file__).resolve().parents[1] / "recorded/fixtures/real/h200x2-ubuntu2404-580"
RAW = {p.name: p.read_text() for p in REAL.iterdir() if p.is_file()}
FACTS = parse_host("h200", RAW)
PLAN = plan_host(FACTS, load_policy("h200", {}), default_catalog())
CHANGED = HostApplyStats(ok=10, changed=2, changed_tasks=("Install Docker", "Start Docker"))


def _fleet(n: int, blocked: int = 0) -> rep.RunReport:
    hosts = []
    for i in range(n):
        name = f"gpu-node-{i:04d}.cluster.example.internal"
        plan = PLAN if i >= blocked else dataclasses.replace(PLAN, blockers=("no GPU",))
        hosts.append(rep.HostReport(name, FACTS, plan=plan, apply=CHANGED if i % 2 else None))
    return rep.RunReport("apply", tuple(hosts))


def _render(report: rep.RunReport, width: int, **kw: bool) -> str:
    buf = io.StringIO()
    rep.render_report(Console(file=buf, width=width, color_system=None), report, **kw)
    return buf.getvalue()


def _words(text: str) -> set[str]:
    return set(re.findall(r"[\w.-]{4,}", text))


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_no_word_is_broken_at_any_width(width: int) -> None:
    text = _render(_fleet(3), width)
    whole = _render(_fleet(3), 1000)
    # every word of a row as printed at any width is a word the wide table has too
    assert _words(text) <= _words(whole) | {"provision", "apply"}
    assert "gpu-node-0001.cluster.example.internal" in text


def test_narrow_or_piped_output_uses_the_compact_layout() -> None:
    text = _render(_fleet(2), 80)  # what a pipe or CI log gets without a terminal
    assert "  plan: R580 open (no change), docker, nvidia_container_toolkit" in text
    assert "┃" not in text  # no table frame squeezed into 80 columns


def test_a_fleet_summary_line_closes_the_report() -> None:
    text = _render(_fleet(4, blocked=1), 300)
    assert text.rstrip().splitlines()[-1] == "4 hosts: 3 ok, 0 failed, 1 blocked; 2 changed"


def test_1000_hosts_print_a_compact_table() -> None:
    text = _render(_fleet(1000, blocked=2), 200)
    lines = text.splitlines()
    assert len(lines) < 40, len(lines)
    assert text.count("499 hosts:") == 2  # ok with nothing changed; ok with 2 changed
    assert "gpu-node-0002.cluster.example.internal," in text
    assert "gpu-node-0003.cluster.example.internal," in text
    assert "gpu-node-0000.cluster.example.internal" in text  # a blocked host keeps its row
    assert lines[-1] == "1000 hosts: 998 ok, 0 failed, 2 blocked; 500 changed"
    assert len(_render(_fleet(1000), 200, full=True).splitlines()) > 2000


def test_the_json_report_records_each_stage_and_role_per_host() -> None:
    timing.reset()
    with timing.stage("plan", ["h200"]):
        pass
    from orchestrator.progress import ApplyProgress

    p = ApplyProgress(Console(file=io.StringIO()), ("h200",))
    for event, at, role in (
        ("runner_on_start", "2026-12-01T09:00:00.000000", "nvidia_driver"),
        ("runner_on_ok", "2026-12-01T09:02:30.500000", "nvidia_driver"),
        ("runner_on_start", "2026-12-01T09:02:31.000000", "docker"),
        ("runner_on_ok", "2026-12-01T09:03:01.000000", "docker"),
    ):
        p(
            {
                "event": event,
                "created": at,
                "event_data": {"host": "h200", "task": "t", "role": role},
            }
        )
    doc = rep.report_document(rep.RunReport("apply", (rep.HostReport("h200", FACTS, plan=PLAN),)))
    timings = doc["hosts"]["h200"]["timings"]  # type: ignore[index]
    assert timings["roles"]["nvidia_driver"]["seconds"] == 150.5
    assert timings["roles"]["docker"]["start"] == "2026-12-01T09:02:31.000+00:00"
    assert timings["stages"]["apply"]["seconds"] == 181.0
    assert set(timings["stages"]) == {"plan", "apply"}
    assert timings["stages"]["plan"]["seconds"] >= 0
    timing.reset()


def test_plan_of_1000_hosts_groups_identical_plans_and_closes_with_a_summary() -> None:
    blocked = dataclasses.replace(PLAN, blockers=("no GPU on the PCI bus; fix: ...",))
    plans = {f"node-{i:04d}": (blocked if i < 3 else PLAN) for i in range(1000)}
    buf = io.StringIO()
    rep.render_plans(Console(file=buf, width=160, color_system=None), plans)
    lines = buf.getvalue().splitlines()
    assert len(lines) < 40, len(lines)
    assert "997 hosts (node-0003, node-0004, node-0005, ... (994 more)): 2x H200" in lines[
        0
    ] + "".join(lines)
    assert lines[-1] == "1000 hosts: 997 planned, 3 blocked; 997 to change"
    small = io.StringIO()
    rep.render_plans(Console(file=small, width=160, color_system=None), {"h200": PLAN})
    assert small.getvalue().splitlines()[0].startswith("h200: 2x H200 SXM 141GB")
