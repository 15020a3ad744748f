"""The report: host status and exit code, the JSON documents, the closing table."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from orchestrator import report as rep
from orchestrator.apply import HostApplyStats
from orchestrator.catalog import default_catalog
from orchestrator.parsers import parse_host
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy
from orchestrator.result import CheckResult

REAL = Path(__file__).resolve().parents[2] / "tests" / "recorded" / "fixtures" / "real"
RAW = {p.name: p.read_text() for p in (REAL / "h200x2-ubuntu2404-580").iterdir()}
FACTS = parse_host("h200", RAW)
PLAN = plan_host(FACTS, load_policy("h200", {}), default_catalog())
SIM_FACTS = parse_host("sim", {**RAW, "gpusim.txt": "profile: h200\n# exit=0\n"})
SIM_PLAN = plan_host(SIM_FACTS, load_policy("sim", {}), default_catalog())
OK_APPLY = HostApplyStats(ok=10, changed=2, changed_tasks=("Install Docker", "Start Docker"))
PASS = CheckResult("gpu_count", "pass", 2, 2, "GPUs")
FAIL = CheckResult("nvlink_state", "fail", 17, 18, "links", "link 3 inactive; reseat", gpu=1)


def host(**kw: object) -> rep.HostReport:
    base: dict[str, object] = {"host": "h200", "facts": FACTS, "plan": PLAN}
    base.update(kw)
    return rep.HostReport(**base)  # type: ignore[arg-type]


def test_status_and_exit_codes() -> None:
    ok = host(apply=OK_APPLY, validation=rep.StageResult("done", (PASS,)))
    assert ok.status == "ok"
    assert rep.RunReport("all", (ok,)).exit_code == 0
    failed_check = host(apply=OK_APPLY, validation=rep.StageResult("done", (PASS, FAIL)))
    assert failed_check.status == "failed"
    failed_role = host(apply=HostApplyStats(ok=3, failed=1, failed_tasks=("Install: no",)))
    assert failed_role.status == "failed"
    unreachable = rep.HostReport("gone", detect_error="connection refused")
    assert unreachable.status == "unreachable"
    blocked_plan = plan_host(
        parse_host(
            "odd",
            {
                **RAW,
                "sysfs-pci-devices.txt": RAW["sysfs-pci-devices.txt"].replace(
                    "device=0x2335", "device=0x9999"
                ),
            },
        ),
        load_policy("odd", {}),
        default_catalog(),
    )
    blocked = rep.HostReport("odd", plan=blocked_plan)
    assert blocked.status == "blocked"
    assert rep.RunReport("all", (ok, blocked)).exit_code == 2
    assert rep.RunReport("all", (ok, blocked, failed_check)).exit_code == 1
    assert rep.RunReport("all", (ok, unreachable)).exit_code == 1
    # a stage that is not available is said, and does not fail the host
    na = host(verification=rep.StageResult("not_available", note="suite missing"))
    assert na.status == "ok"


def test_plan_document_has_ordered_roles() -> None:
    doc = rep.plan_document({"h200": PLAN, "sim": SIM_PLAN})
    assert doc["schema"] == "gpuprov.plan" and doc["schema_version"] == 1
    hosts = doc["hosts"]
    assert isinstance(hosts, dict)
    roles = hosts["h200"]["roles"]
    assert [r["name"] for r in roles] == ["nvidia_driver", "docker", "nvidia_container_toolkit"]
    assert roles[0]["vars"]["nvidia_driver_version"] == "580.159.04"
    assert roles[0]["change"] is False
    assert hosts["sim"]["simulated"] is True
    assert hosts["h200"]["gpus"] == [
        {"model": "H200 SXM 141GB", "sku": "h200-sxm-141gb", "device_id": "0x2335", "count": 2}
    ]
    json.dumps(doc)  # serialisable as is


def test_report_document() -> None:
    report = rep.RunReport(
        "all",
        (
            host(apply=OK_APPLY, validation=rep.StageResult("done", (PASS, FAIL))),
            rep.HostReport("gone", detect_error="timed out"),
        ),
        check_mode=False,
        artifact_dir="/tmp/a",
    )
    doc = rep.report_document(report)
    text = json.dumps(doc)
    assert doc["schema"] == "gpuprov.report" and doc["exit_code"] == 1
    assert doc["summary"] == {
        "ok": 0,
        "failed": 1,
        "unreachable": 1,
        "blocked": 0,
        "not_touched": 0,
    }
    hosts = json.loads(text)["hosts"]
    h = hosts["h200"]
    assert h["status"] == "failed"
    assert h["facts"]["driver"] == {"version": "580.159.04", "flavour": "open"}
    assert h["apply"]["changed_tasks"] == ["Install Docker", "Start Docker"]
    assert h["validation"]["checks"][1]["diagnosis"] == "link 3 inactive; reseat"
    assert h["verification"] == {"state": "not_run", "note": "", "checks": []}
    assert hosts["gone"]["detect_error"] == "timed out" and hosts["gone"]["plan"] is None


def render(report: rep.RunReport) -> str:
    buf = io.StringIO()
    rep.render_report(Console(file=buf, width=400, color_system=None), report)
    return buf.getvalue()


def test_closing_table() -> None:
    text = render(
        rep.RunReport(
            "all",
            (
                host(apply=OK_APPLY, validation=rep.StageResult("done", (PASS, FAIL))),
                rep.HostReport(
                    "sim",
                    facts=SIM_FACTS,
                    plan=SIM_PLAN,
                    verification=rep.StageResult("not_available", note="suite missing"),
                ),
            ),
        )
    )
    assert "2x H200 SXM 141GB (simulated)" in text
    assert "R580 open (no change)" in text
    assert "2 changed: Install Docker; Start Docker" in text
    assert "1 pass 1 fail: nvlink_state[gpu1]" in text
    assert "not available (suite missing)" in text
    # problems in full below the table
    assert "h200: validation nvlink_state[gpu1] failed: link 3 inactive; reseat" in text


def test_failed_tasks_and_blockers_listed_below_the_table() -> None:
    failed = HostApplyStats(ok=3, failed=1, failed_tasks=("Install driver: no such version",))
    text = render(
        rep.RunReport(
            "apply",
            (host(apply=failed), rep.HostReport("gone", detect_error="connection refused")),
        )
    )
    assert "0 changed, 1 failed (below)" in text
    assert "h200: failed task: Install driver: no such version" in text
    assert "gone: unreachable: connection refused" in text


def test_plan_tables() -> None:
    buf = io.StringIO()
    rep.render_plans(Console(file=buf, width=400, color_system=None), {"h200": PLAN})
    text = buf.getvalue()
    assert "h200: 2x H200 SXM 141GB" in text
    assert "no change: 580.159.04 open already loaded" in text


def test_documented_plan_example_is_real_output() -> None:
    """docs/report-schema.md shows what `provision plan --json` prints for the real fixture."""
    doc_md = Path(__file__).resolve().parents[2] / "docs" / "report-schema.md"
    example = json.loads(doc_md.read_text().split("```json\n", 1)[1].split("```", 1)[0])
    plan = plan_host(parse_host("h200-real", RAW), load_policy("h200-real", {}), default_catalog())
    real = rep.plan_document({"h200-real": plan})
    example.pop("gpuprov_version")
    real.pop("gpuprov_version")
    assert example == real


def test_detect_table() -> None:
    buf = io.StringIO()
    names = {i: g.model for g in default_catalog().gpus for i in g.device_ids}
    console = Console(file=buf, width=400, color_system=None)
    rep.render_detect(console, {"sim": SIM_FACTS}, {"gone": "connection refused"}, names)
    text = buf.getvalue()
    assert "2x H200 SXM 141GB (simulated)" in text
    assert "580.159.04 open" in text and "Ubuntu 24.04.3 LTS" in text
    assert "unreachable" in text and "connection refused" in text
    assert text.splitlines()[-1] == "2 hosts: 1 detected, 1 unreachable"


def test_a_host_the_stopped_rollout_never_reached_is_not_touched() -> None:
    stats = HostApplyStats(ok=40, failed=1, failed_tasks=("validate: x",))
    failed = rep.HostReport("n1", apply=stats)
    never = rep.HostReport("n2", apply=HostApplyStats(touched=False))
    report = rep.RunReport("apply", (failed, never))
    assert (failed.status, never.status) == ("failed", "not_touched")
    doc = rep.report_document(report)
    assert doc["summary"]["not_touched"] == 1 and report.exit_code == 1
