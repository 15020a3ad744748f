"""`dcgmi diag -j` parsed into our checks (orchestrator/parsers/dcgm_diag.py,
orchestrator/validate/dcgm.py), fed with the JSON shapes DCGM 4 prints as the reference
records them (tests/recorded/reference/dcgm.yaml `diag_json`), built by the lab's dcgmi test
double from that reference (tests/lab/aptrepo/dcgm.py, payload/dcgmi), for every level and
every status, and variants of them. No DCGM run on real hardware is recorded: no registry
this project reaches carries DCGM."""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from _helpers import load_module

from orchestrator.facts import HostFacts
from orchestrator.factsdir import load_host
from orchestrator.parsers import parse_host
from orchestrator.parsers._text import ParseError
from orchestrator.parsers.dcgm_diag import parse_dcgm_diag
from orchestrator.validate import dcgm
from orchestrator.validate.runner import CommandOutput

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lab"))

from aptrepo import dcgm as dcgm_double  # noqa: E402

HOST = "node-1"


DCGMI = load_module("dcgmi_double", REPO / "tests/lab/aptrepo/payload/dcgmi")
SHAPES = dcgm_double.diag_shapes("4.6.0")
REF = dcgm_double.data()


def gpus(count: int = 8, **overrides: Any) -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        gpu = {
            "id": i,
            "serial": f"165000000{i}",
            "device_id": "2335",
            "mig": False,
            "compute_instances": 0,
            "memory_mismatch": False,
        }
        out.append({**gpu, **overrides.get(str(i), {})})
    return out


def run(level: str, devices: list[dict[str, Any]]) -> tuple[str, int]:
    refused = DCGMI.refusal(SHAPES, devices)
    if refused is not None:
        return json.dumps(DCGMI.runtime_error(SHAPES, "Error: " + refused)), 226
    doc, rc = DCGMI.document(SHAPES, level, devices)
    return json.dumps(doc, indent=3), rc


# --- the shapes: from the reference --------------------------------------------------------


def test_levels_are_cumulative_and_name_the_reference_tests() -> None:
    levels = SHAPES["levels"]
    assert levels["1"] == ["software"]
    assert levels["2"] == ["software", *REF["dcgm"]["diag"]["levels"]["2"]["adds"]]
    assert set(levels["1"]) < set(levels["2"]) < set(levels["3"]) < set(levels["4"])
    assert {"memtest", "pulse_test"} == set(levels["4"]) - set(levels["3"])
    # conditional tests (proprietary package, env var) are left out, as DCGM leaves out a
    # test that did not run
    assert "eud" not in levels["3"] and "rist" not in levels["3"]


@pytest.mark.parametrize("level", ["1", "2", "3", "4"])
def test_every_level_passes_on_every_gpu(level: str) -> None:
    out, rc = run(level, gpus())
    report = parse_dcgm_diag(out)
    assert rc == 0
    assert sorted(t.name for t in report.tests) == sorted(SHAPES["levels"][level])
    assert [t.category for t in report.tests] == sorted(
        (t.category for t in report.tests), key=SHAPES["categories"].index
    )
    assert report.statuses == {"pass"}
    assert report.version == "4.6.0"
    assert [g.gpu for g in report.gpus] == list(range(8))
    checks = dcgm.judge(rc, out, "", int(level), host=HOST)
    per_gpu = [c for c in checks if c.name != dcgm.RUN_CHECK]
    assert len(per_gpu) == 8 * len(SHAPES["levels"][level])
    assert {c.status for c in checks} == {"pass"}
    assert checks[-1].name == dcgm.RUN_CHECK and checks[-1].value == "exit 0"


def test_a_failing_memory_test_names_the_gpu_and_dcgms_error() -> None:
    out, rc = run("2", gpus(**{"3": {"memory_mismatch": True}}))
    assert rc == 205  # memory mismatch is an "isolate" error (dcgm_errors.c)
    checks = dcgm.judge(rc, out, "", 2, host=HOST)
    failed = [c for c in checks if c.status == "fail"]
    memory = next(c for c in failed if c.name == "dcgm_memory")
    assert memory.gpu == 3 and memory.label == "dcgm_memory[gpu3]"
    assert "error 58 DCGM_FR_MEMORY_MISMATCH" in memory.diagnosis
    assert "A memory mismatch was detected on GPU 3" in memory.diagnosis
    assert "isolate" in memory.diagnosis
    run_check = next(c for c in failed if c.name == dcgm.RUN_CHECK)
    assert "exit 205" in run_check.diagnosis and "dcgm_memory[gpu3]" in run_check.diagnosis
    assert {c.label for c in failed} == {"dcgm_memory[gpu3]", dcgm.RUN_CHECK}


def test_a_non_isolate_failure_exits_226() -> None:
    # a variant: the same failure carrying a "config" priority error (persistence mode, 29)
    doc, _ = DCGMI.document(SHAPES, "1", gpus(2))
    result = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][1]
    error = REF["diag_json"]["errors"]["DCGM_FR_PERSISTENCE_MODE"]
    result["status"] = "Fail"
    result["warnings"] = [
        {
            "warning": error["message"].replace("%u", "1"),
            "error_id": error["id"],
            "error_category": error["category"],
            "error_severity": REF["diag_json"]["priorities"][error["priority"]],
        }
    ]
    checks = dcgm.judge(226, json.dumps(doc), "", 1, host=HOST)
    bad = {c.label: c for c in checks if c.status == "fail"}
    assert set(bad) == {"dcgm_software[gpu1]", dcgm.RUN_CHECK}
    assert "error 29 DCGM_FR_PERSISTENCE_MODE: Persistence mode for GPU 1 is disabled." in (
        bad["dcgm_software[gpu1]"].diagnosis
    )
    assert "config" in bad["dcgm_software[gpu1]"].diagnosis
    assert "exit 226 (a test failed)" in bad[dcgm.RUN_CHECK].diagnosis


@pytest.mark.parametrize(("word", "status"), [("Warn", "warn"), ("Skip", "skip")])
def test_warn_and_skip_are_kept_and_do_not_fail(word: str, status: str) -> None:
    doc, _ = DCGMI.document(SHAPES, "2", gpus(2))
    pcie = doc["DCGM Diagnostic"]["test_categories"][-1]["tests"][0]
    assert pcie["name"] == "pcie"
    pcie["results"][0]["status"] = word
    checks = dcgm.judge(0, json.dumps(doc), "", 2, host=HOST)
    got = next(c for c in checks if c.label == "dcgm_pcie[gpu0]")
    assert got.status == status and "pcie on GPU 0" in got.diagnosis
    assert not [c for c in checks if c.status == "fail"]


def test_a_not_run_result_is_a_skip() -> None:
    doc, _ = DCGMI.document(SHAPES, "1", gpus(1))
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]["status"] = "Not Run"
    report = parse_dcgm_diag(json.dumps(doc))
    assert "not_run" in report.statuses
    checks = dcgm.judge(0, json.dumps(doc), "", 1, host=HOST)
    assert [c.status for c in checks if c.name == "dcgm_software"] == ["skip"]


def test_exit_0_with_a_failed_test_is_a_failure() -> None:
    out, _ = run("2", gpus(2, **{"0": {"memory_mismatch": True}}))
    checks = dcgm.judge(0, out, "", 2, host=HOST)
    run_check = next(c for c in checks if c.name == dcgm.RUN_CHECK)
    assert run_check.status == "fail" and "exited 0 but" in run_check.diagnosis


def test_exit_226_with_no_failed_test_is_a_failure() -> None:
    out, _ = run("2", gpus(2))
    checks = dcgm.judge(226, out, "", 2, host=HOST)
    assert [c.label for c in checks if c.status == "fail"] == [dcgm.RUN_CHECK]


# --- MIG ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("devices", "key"),
    [
        (gpus(2, **{"0": {"mig": True, "compute_instances": 1}}), "multi_gpu"),
        (gpus(1, **{"0": {"mig": True}}), "no_compute_instance"),
    ],
)
def test_dcgms_mig_refusal_is_a_skip_with_its_reason(devices: list[Any], key: str) -> None:
    out, rc = run("2", devices)
    report = parse_dcgm_diag(out)
    assert report.tests == () and report.runtime_error is not None
    marker = REF["diag_json"]["mig_refusals"][key].split("%u")[0]
    assert marker in report.runtime_error
    checks = dcgm.judge(rc, out, "", 2, host=HOST)
    assert [(c.name, c.status) for c in checks] == [(dcgm.RUN_CHECK, "skip")]
    assert "DCGM refused" in checks[0].diagnosis and "fix: disable MIG" in checks[0].diagnosis


def test_the_mig_mix_refusal_text_is_dcgms() -> None:
    # DCGM returns the mixed-mode refusal when the multi-GPU one does not apply first: with
    # -i on two GPUs it is the multi-GPU one; the mixed text is still recorded and matched
    text = REF["diag_json"]["mig_refusals"]["mixed"]
    out = json.dumps(DCGMI.runtime_error(SHAPES, "Error: " + text))
    checks = dcgm.judge(226, out, "", 1, host=HOST)
    assert checks[0].status == "skip" and text in checks[0].diagnosis


REAL = REPO / "tests/recorded/fixtures/real/h200x2-ubuntu2404-580"


def _facts(modes: list[str]) -> HostFacts:
    """The real 2x H200 host's facts, its GPUs' MIG modes set to `modes`."""
    facts = parse_host(HOST, dict(load_host(REAL)))
    smi = tuple(
        dataclasses.replace(facts.smi_gpus[i % 2], index=i, mig_mode_current=m)
        for i, m in enumerate(modes)
    )
    return dataclasses.replace(facts, smi_gpus=smi)


@pytest.mark.parametrize(
    ("modes", "refuses"),
    [
        (["Disabled", "Disabled"], False),
        (["Enabled", "Enabled"], True),
        (["Enabled", "Disabled"], True),
        (["Enabled"], False),  # one GPU: DCGM runs it on a compute instance
    ],
)
def test_mig_is_refused_before_anything_runs(modes: list[str], refuses: bool) -> None:
    calls: list[str] = []

    def execute(script: str, *, timeout: float) -> CommandOutput:
        calls.append(script)
        out, rc = run("1", gpus(len(modes)))
        return CommandOutput(rc, out, "")

    checks = dcgm.run_dcgm(execute, _facts(modes), 1, simulated=False)
    assert (calls == []) is refuses
    if refuses:
        assert checks[0].status == "skip" and "MIG is enabled on GPU 0" in checks[0].diagnosis


# --- the run: deadlines, absent tool, broken output ----------------------------------------


@pytest.mark.parametrize("level", dcgm.LEVELS)
def test_deadlines_nest(level: int) -> None:
    line, limit = dcgm.diag_command(level)
    data = dcgm.load_data()
    outer = data.levels[level].deadline_s
    assert f"timeout --kill-after=10 {outer} dcgmi diag -r {level} -j" in line
    assert f"--timeout {outer - data.deadline_margin_s}" in line
    assert limit > outer + 10


def test_level_4_allows_awss_timeout() -> None:
    # dcgm.diag.levels.4: "45 min to 2.25 h by GPU count (AWS, timeout 9000 s)"
    assert "9000 s" in REF["dcgm"]["diag"]["levels"]["4"]["duration"]
    assert dcgm.load_data().levels[4].deadline_s >= 9000


def test_absent_dcgmi_says_how_to_install_it() -> None:
    checks = dcgm.judge(127, "", "sh: 1: dcgmi: not found", 2, host=HOST)
    assert checks[0].status == "fail" and "add dcgm to gpuprov_roles" in checks[0].diagnosis


def test_a_killed_run_names_the_deadline() -> None:
    checks = dcgm.judge(124, "", "", 3, host=HOST)
    assert checks[0].status == "fail" and "3600 s" in checks[0].diagnosis


def test_other_runtime_errors_fail_with_dcgms_text() -> None:
    out = json.dumps(
        DCGMI.runtime_error(SHAPES, "Error: Diagnostic could not be run while DCGM is paused.")
    )
    checks = dcgm.judge(255, out, "", 1, host=HOST)
    assert checks[0].status == "fail" and "while DCGM is paused" in checks[0].diagnosis


@pytest.mark.parametrize(
    "text",
    ["", "Error: unable to connect", "[]", '{"DCGM Diagnostic": {}}', '{"other": 1}'],
)
def test_output_that_is_not_dcgms_json_fails_the_run(text: str) -> None:
    with pytest.raises(ParseError):
        parse_dcgm_diag(text)
    checks = dcgm.judge(1, text, "", 1, host=HOST)
    assert [(c.name, c.status) for c in checks] == [(dcgm.RUN_CHECK, "fail")]


def test_a_status_outside_dcgms_words_is_refused() -> None:
    doc, _ = DCGMI.document(SHAPES, "1", gpus(1))
    bad = copy.deepcopy(doc)
    bad["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]["status"] = "OK"
    with pytest.raises(ParseError, match="unknown status"):
        parse_dcgm_diag(json.dumps(bad))


def test_simulated_runs_say_so() -> None:
    out, rc = run("2", gpus(2, **{"1": {"memory_mismatch": True}}))
    checks = dcgm.judge(rc, out, "", 2, host=HOST, simulated=True)
    memory = next(c for c in checks if c.label == "dcgm_memory[gpu1]")
    assert "simulated" in memory.diagnosis and memory.value == "fail (simulated)"


# --- in the validation stage ---------------------------------------------------------------


def test_validate_host_reports_dcgm_beside_our_own_checks() -> None:
    from orchestrator.catalog import default_catalog
    from orchestrator.policy import load_policy
    from orchestrator.validate.runner import validate_host

    raw = dict(load_host(REAL))
    facts = parse_host(HOST, raw)
    scripts: list[str] = []

    def execute(script: str, *, timeout: float) -> CommandOutput:
        scripts.append(script)
        if "dcgmi diag" in script:
            out, rc = run("2", gpus(2, **{"1": {"memory_mismatch": True}}))
            return CommandOutput(rc, out, "")
        return CommandOutput(1, "", "no payload here")  # our GPU payload: not this test's

    checks = validate_host(
        facts,
        raw,
        catalog=default_catalog(),
        policy=load_policy(HOST, {}),
        execute=execute,
        runtime="host",
        dcgm_level=2,
    )
    names = {c.name for c in checks}
    assert "gpu_count" in names and "gpu_payload" in names  # ours still ran
    assert {"dcgm_software", "dcgm_memory", "dcgm_pcie", dcgm.RUN_CHECK} <= names
    assert scripts[-1].startswith("timeout --kill-after=10 1200 dcgmi diag -r 2 -j --timeout 1140")
    memory = next(c for c in checks if c.label == "dcgm_memory[gpu1]")
    assert memory.status == "fail" and "error 58" in memory.diagnosis


def test_the_cli_takes_a_dcgm_level_for_validate_only() -> None:
    from orchestrator.cli import build_parser
    from orchestrator.pipeline import StageOptions

    args = build_parser().parse_args(["validate", "-i", "x.ini", "--dcgm-level", "3"])
    assert StageOptions.of(args).dcgm_level == 3
    for bad in (["validate", "--dcgm-level", "5"], ["verify", "--dcgm-level", "2"]):
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args(bad)
        assert exc.value.code == 2


def test_junit_puts_dcgm_in_a_suite_of_its_own() -> None:
    from orchestrator.report import HostReport, RunReport, StageResult
    from orchestrator.validate.junit import junit_xml

    out, rc = run("2", gpus(2, **{"1": {"memory_mismatch": True}}))
    checks = tuple(dcgm.judge(rc, out, "", 2, host=HOST))
    report = RunReport("validate", (HostReport(HOST, validation=StageResult("done", checks)),))
    xml = junit_xml(report)
    assert f'testsuite name="{HOST}.dcgm"' in xml
    assert 'name="dcgm_memory[gpu1]"' in xml and "error 58" in xml
