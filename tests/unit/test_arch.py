"""The CPU architecture: detected (`uname -m`), shown in plan and report, and the driver's
CUDA repository path follows it (x86_64, or sbsa for aarch64: reference/packages.yaml)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from orchestrator import report as rep
from orchestrator.catalog import default_catalog
from orchestrator.parsers import names, parse_host
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy

REAL = Path(__file__).resolve().parents[1] / "recorded/fixtures/real/h200x2-ubuntu2404-580"
RAW = {p.name: p.read_text() for p in REAL.iterdir() if p.is_file()}
NO_DRIVER = {k: v for k, v in RAW.items() if not k.startswith(("nvidia-smi", "proc-driver"))}


def _plan(raw: dict[str, str]) -> object:
    return plan_host(parse_host("gh", raw), load_policy("gh", {}), default_catalog())


def test_the_real_capture_without_uname_m_takes_the_drivers_architecture() -> None:
    assert names.UNAME_M not in RAW
    assert parse_host("h200", RAW).arch == "x86_64"  # "Kernel Module for x86_64"
    assert parse_host("h200", NO_DRIVER).arch == ""


def test_aarch64_host_plans_the_sbsa_repository_and_shows_it() -> None:
    raw = {**NO_DRIVER, names.UNAME_M: "aarch64\n# exit=0\n"}
    plan = _plan(raw)
    assert plan.arch == "aarch64"  # type: ignore[attr-defined]
    assert plan.repository == "ubuntu2404/sbsa"  # type: ignore[attr-defined]
    assert rep.plan_dict(plan)["repository"] == "ubuntu2404/sbsa"  # type: ignore[arg-type]
    buf = io.StringIO()
    rep.render_plans(Console(file=buf, width=200, color_system=None), {"gh": plan})  # type: ignore[dict-item]
    assert "aarch64, driver from CUDA repository ubuntu2404/sbsa" in buf.getvalue()
    x86 = _plan({**NO_DRIVER, names.UNAME_M: "x86_64\n# exit=0\n"})
    assert x86.repository == "ubuntu2404/x86_64"  # type: ignore[attr-defined]


def test_an_architecture_without_a_cuda_repository_is_blocked() -> None:
    plan = _plan({**NO_DRIVER, names.UNAME_M: "ppc64le\n# exit=0\n"})
    blockers = plan.blockers  # type: ignore[attr-defined]
    assert any("CPU architecture ppc64le" in b and "x86_64, aarch64" in b for b in blockers)


def test_the_report_shows_the_architecture() -> None:
    facts = parse_host("h200", RAW)
    plan = plan_host(facts, load_policy("h200", {}), default_catalog())
    doc = rep.report_document(rep.RunReport("plan", (rep.HostReport("h200", facts, plan=plan),)))
    assert doc["hosts"]["h200"]["facts"]["arch"] == "x86_64"  # type: ignore[index]
    buf = io.StringIO()
    rep.render_report(
        Console(file=buf, width=300, color_system=None),
        rep.RunReport("plan", (rep.HostReport("h200", facts, plan=plan),)),
    )
    assert "2x H200 SXM 141GB, x86_64" in buf.getvalue()
