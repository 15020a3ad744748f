"""JUnit XML for CI systems: one testcase per check per host, for every stage that ran.

Suites: `<host>.health` (host health checks), `<host>.gpu` (the payload's CUDA checks and the
container steps), `<host>.nccl` (the all-reduce judgment), `<host>.multinode` (the all-reduce
across hosts, `validate --multinode`), `<host>.dcgm` (DCGM's diag, `--dcgm-level`),
`<host>.verification` (testinfra).
`fail` is a <failure>, `skip` a <skipped>, `warn` a passing testcase whose <system-out> says
"warn: ..." (a warning never fails a host); a stage that did not run is one skipped testcase
saying why, a stage that broke one <error>.
Each testcase carries the check's own duration in `time` (CheckResult.seconds; a check not
timed on its own has no `time`), and its measured value, limit, unit and status as
<properties> and in <system-out>; a suite's `time` is the sum of its cases'.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from xml.etree import ElementTree as ET

from ..atomic import write_atomic
from ..errors import BadInputError
from ..report import RunReport, StageResult
from ..result import CheckResult
from .fabric import CHECK_NAMES as FABRIC_CHECK_NAMES
from .fabric import base_name
from .health import CHECK_NAMES


def suite_of(check: CheckResult) -> str:
    if check.name in CHECK_NAMES:
        return "health"
    if base_name(check.name) in FABRIC_CHECK_NAMES:
        return "fabric"
    if check.name.startswith("nccl_"):
        return "nccl"
    if check.name.startswith("multinode_"):
        return "multinode"
    if check.name.startswith("dcgm_"):
        return "dcgm"
    return "gpu"


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _case(parent: ET.Element, classname: str, check: CheckResult) -> None:
    case = ET.SubElement(parent, "testcase", classname=classname, name=check.label)
    if check.seconds is not None:
        case.set("time", f"{check.seconds:.6f}")
    props = ET.SubElement(case, "properties")
    for key, value in (
        ("status", check.status),
        ("value", check.value),
        ("limit", check.limit),
        ("unit", check.unit),
    ):
        ET.SubElement(props, "property", name=key, value=_text(value))
    value = f"{_text(check.value)} {check.unit}".strip() if check.value is not None else "none"
    detail = f"value {value}, limit {_text(check.limit) or 'none'}"
    if check.status == "fail":
        ET.SubElement(case, "failure", message=check.diagnosis or detail, type="fail").text = detail
    elif check.status == "skip":
        ET.SubElement(case, "skipped", message=check.diagnosis or "skipped")
    out = f"{check.diagnosis} ({detail})" if check.diagnosis else detail
    ET.SubElement(case, "system-out").text = f"{check.status}: {out}"


def _suite(root: ET.Element, name: str, stage: StageResult, checks: Iterable[CheckResult]) -> None:
    items = list(checks)
    suite = ET.SubElement(root, "testsuite", name=name)
    if stage.state == "error":
        case = ET.SubElement(suite, "testcase", classname=name, name="stage", time="0")
        ET.SubElement(case, "error", message=stage.note or "error")
    elif stage.state != "done":
        case = ET.SubElement(suite, "testcase", classname=name, name="stage", time="0")
        ET.SubElement(case, "skipped", message=stage.note or stage.state.replace("_", " "))
    for check in items:
        _case(suite, name, check)
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    suite.set("time", f"{sum(float(c.get('time', '0')) for c in cases):.6f}")


def junit_xml(report: RunReport) -> str:
    root = ET.Element("testsuites", name=f"gpuprov {report.command}")
    for host in report.hosts:
        v = host.validation
        if v.state != "not_run" or report.command in ("validate", "all"):
            for part in ("health", "fabric", "gpu", "nccl", "dcgm"):
                picked = [c for c in v.checks if suite_of(c) == part]
                if picked or (part == "health" and v.state != "done"):
                    _suite(root, f"{host.host}.{part}", v, picked)
        w = host.verification
        if w.state != "not_run" or report.command in ("verify", "all"):
            _suite(root, f"{host.host}.verification", w, w.checks)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def check_path(path: str) -> Path:
    """Before any work: the file's directory must exist (bad input, exit 2)."""
    p = Path(path)
    if p.is_dir() or not p.parent.is_dir():
        raise BadInputError(
            f"--junit {path}: "
            + ("is a directory" if p.is_dir() else "its directory does not exist"),
            fix="give a file path in an existing directory, e.g. --junit results/validate.xml",
        )
    return p


def write_junit(path: str, report: RunReport) -> None:
    write_atomic(path, junit_xml(report))  # a new or regular file only, never a device
