"""docs/report-schema.json against real documents: the plan, run and interrupted reports the
code writes from recorded fixtures (the real 2x H200 host's probe, its payload output and a
real testinfra JUnit), and the schema rejects a field whose type changed."""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from orchestrator import interrupt, timing
from orchestrator import report as rep
from orchestrator.apply import HostApplyStats
from orchestrator.catalog import default_catalog
from orchestrator.factsdir import load_host
from orchestrator.parsers import names, parse_host
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy
from orchestrator.validate import runner
from orchestrator.validate.runner import CommandOutput, validate_host
from orchestrator.verify.runner import parse_junit

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "report-schema.json").read_text("utf-8"))
REAL = ROOT / "tests" / "recorded" / "fixtures" / "real" / "h200x2-ubuntu2404-580"
DATA = Path(__file__).resolve().parent / "data"
CATALOG = default_catalog()
VALIDATOR = jsonschema.Draft202012Validator(
    SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
)


def _written(doc: dict[str, object]) -> Any:
    return json.loads(json.dumps(doc))  # as a reader gets it from the file


def _framed(text: str) -> str:
    return f"{runner.MARKER} begin\n{text.strip()}\n{runner.MARKER} end\n"


@pytest.fixture
def reports() -> Iterator[dict[str, Any]]:
    raw = dict(load_host(REAL))
    facts = parse_host("h200", raw)
    plan = plan_host(facts, load_policy("h200", {}), CATALOG)
    sim_raw = {**raw, names.GPUSIM: "profile: h200x2\n# exit=0\n"}
    sim = parse_host("lab1", sim_raw)
    sim_plan = plan_host(sim, load_policy("lab1", {}), CATALOG)
    device = (DATA / "gpucheck-h200x2-device.json").read_text("utf-8")

    def execute(script: str, *, timeout: float) -> CommandOutput:
        return CommandOutput(0, _framed(device), "")

    start = timing.now()
    checks = validate_host(
        facts, raw, catalog=CATALOG, policy=load_policy("h200", {}), execute=execute, runtime="host"
    )
    sim_checks = validate_host(sim, sim_raw, catalog=CATALOG, policy=load_policy("lab1", {}))
    timing.TIMINGS.record("h200", "validate", start, timing.now())
    timing.TIMINGS.record_role("h200", "docker", start, timing.now())
    verified = parse_junit((DATA / "verify-junit-localhost.xml").read_text("utf-8"))["localhost"]
    hosts = (
        rep.HostReport(
            "h200",
            facts=facts,
            plan=plan,
            apply=HostApplyStats(ok=10, changed=2, changed_tasks=("Install Docker",)),
            validation=rep.StageResult("done", tuple(checks)),
            verification=rep.StageResult("done", verified),
        ),
        rep.HostReport(
            "lab1", facts=sim, plan=sim_plan, validation=rep.StageResult("done", tuple(sim_checks))
        ),
        rep.HostReport("gone", detect_error="ssh: connection refused"),
        rep.HostReport("later", apply=HostApplyStats(touched=False)),
        rep.HostReport("broken", validation=rep.StageResult("error", note="ssh not found")),
    )
    run = rep.RunReport("all", hosts, artifact_dir="/tmp/artifacts/x", finished=timing.now())
    stopped = interrupt.interrupted_document(
        "apply",
        dt.datetime.now(dt.UTC),
        {"h200": "running: nvidia_driver : Install the driver packages"},
        ("h200", "later"),
        Path("/tmp/artifacts/y"),
        {"h200": interrupt.UpgradeSeen(step="drain", drained=True)},
    )
    yield {
        "plan": _written(rep.plan_document({"h200": plan, "lab1": sim_plan})),
        "run": _written(rep.report_document(run)),
        "validate": _written(rep.report_document(rep.RunReport("validate", hosts[:1]))),
        "interrupted": _written(stopped),
    }
    timing.reset()


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("kind", ["plan", "run", "validate", "interrupted"])
def test_real_documents_validate(reports: dict[str, Any], kind: str) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(reports[kind])]
    assert errors == []


def test_the_real_run_report_holds_what_the_schema_describes(reports: dict[str, Any]) -> None:
    """Every key the code writes is named in the schema (a new key is documented there)."""
    defs = SCHEMA["$defs"]
    host = reports["run"]["hosts"]["h200"]
    check = host["validation"]["checks"][0]
    assert check["seconds"] is not None  # health checks are timed
    assert set(check) <= set(defs["check"]["properties"])
    assert set(host) <= set(defs["host_report"]["properties"])
    assert set(host["facts"]) <= set(defs["facts"]["properties"])
    assert set(host["apply"]) <= set(defs["apply"]["properties"])
    assert set(host["plan"]) <= set(defs["host_plan"]["properties"])
    top = set(reports["run"]) - {"schema", "schema_version", "gpuprov_version", "hosts"}
    assert top <= set(defs["run_report"]["properties"])


# (document, path to a field, a value of another type)
CHANGED = [
    ("run", ["exit_code"], "0"),
    ("run", ["check_mode"], "false"),
    ("run", ["summary", "ok"], 1.5),
    ("run", ["hosts", "h200", "status"], "passed"),
    ("run", ["hosts", "h200", "facts", "gpu_count"], "2"),
    ("run", ["hosts", "h200", "facts", "secure_boot"], "no"),
    ("run", ["hosts", "h200", "apply", "changed_tasks"], "Install Docker"),
    ("run", ["hosts", "h200", "validation", "checks", 0, "value"], [2]),
    ("run", ["hosts", "h200", "validation", "checks", 0, "gpu"], "0"),
    ("run", ["hosts", "h200", "validation", "checks", 0, "seconds"], "0.001"),
    ("run", ["hosts", "h200", "validation", "checks", 0, "status"], True),
    ("run", ["hosts", "h200", "verification", "state"], 1),
    ("run", ["hosts", "h200", "timings", "stages", "validate", "seconds"], "1"),
    ("plan", ["hosts", "h200", "blocked"], 0),
    ("plan", ["hosts", "h200", "gpus", 0, "count"], "2"),
    ("plan", ["hosts", "h200", "roles", 0, "change"], "no"),
    ("interrupted", ["exit_code"], 1),
    ("interrupted", ["hosts", "h200", "drained"], "yes"),
]


@pytest.mark.parametrize(("kind", "path", "value"), CHANGED, ids=lambda v: str(v))
def test_a_field_whose_type_changed_is_rejected(
    reports: dict[str, Any], kind: str, path: list[Any], value: object
) -> None:
    doc = copy.deepcopy(reports[kind])
    where = doc
    for key in path[:-1]:
        where = where[key]
    assert path[-1] in where if isinstance(where, dict) else True
    where[path[-1]] = value
    assert not VALIDATOR.is_valid(doc), f"{kind} {path} = {value!r} passed the schema"


def test_a_missing_required_field_is_rejected(reports: dict[str, Any]) -> None:
    doc = copy.deepcopy(reports["run"])
    del doc["hosts"]["h200"]["validation"]["checks"][0]["status"]
    assert not VALIDATOR.is_valid(doc)
