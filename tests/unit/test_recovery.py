"""Issue 48: what a stopped run left on a host is detected and shown by the plan before the
next apply recovers it: dpkg's journal of an interrupted run (apt refuses every install until
`dpkg --configure -a`), and a restart a role still owes (roles/docker's marker)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from test_plan import variant

from orchestrator.catalog import default_catalog
from orchestrator.parsers import names, parse_host
from orchestrator.parsers.recovery import parse_recovery
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy
from orchestrator.probe import probe_script
from orchestrator.report import plan_dict

REPO = Path(__file__).resolve().parents[2]


def test_the_probe_lists_dpkg_s_journal_and_pending_restarts_only_when_there_are_any(
    tmp_path: Path,
) -> None:
    """The probe's own `recovery` function, run against a copy of its paths under tmp_path."""
    script = probe_script()
    body = script[script.index("recovery() {") : script.index('[ -n "$(recovery)" ]')]
    body = body.replace("/var/lib/", f"{tmp_path}/var/lib/")
    (tmp_path / "var/lib/dpkg/updates").mkdir(parents=True)
    (tmp_path / "var/lib/gpuprov").mkdir(parents=True)

    def run() -> str:
        return subprocess.run(
            ["sh", "-c", body + "recovery"], capture_output=True, text=True, check=True
        ).stdout

    assert run() == ""
    (tmp_path / "var/lib/dpkg/updates/tmp.i").write_text("")  # dpkg's own temporary file
    assert run() == ""
    for n in ("0000", "0001"):
        (tmp_path / "var/lib/dpkg/updates" / n).write_text("")
    (tmp_path / "var/lib/gpuprov/docker-restart-pending").write_text("x\n")
    assert run() == "dpkg_journal 2\nrestart_pending docker-restart-pending\n"


def test_the_causes_read_from_the_capture() -> None:
    causes = parse_recovery(
        "dpkg_journal 2\nrestart_pending docker-restart-pending\nsomething_new x\n# exit=0\n"
    )
    assert causes[0].startswith("dpkg was interrupted (2 file(s) in /var/lib/dpkg/updates/)")
    assert "Docker's restart after daemon.json changed" in causes[1]
    assert causes[2] == "something_new x"


def test_the_plan_says_needs_recovery_in_text_and_json() -> None:
    raw = variant({0x2335: 2})
    raw[names.RECOVERY] = "dpkg_journal 1\n# exit=0\n"
    facts = parse_host("h", raw)
    plan = plan_host(facts, load_policy("h", {}), default_catalog())
    said = [w for w in plan.warnings if w.startswith("needs_recovery: dpkg was interrupted")]
    assert said and "`dpkg --configure -a`" in said[0], plan.warnings
    assert not plan.blocked
    assert said[0] in json.loads(json.dumps(plan_dict(plan)))["warnings"]  # `plan --json`


def test_a_host_without_anything_to_recover_says_nothing() -> None:
    plan = plan_host(parse_host("h", variant({0x2335: 2})), load_policy("h", {}), default_catalog())
    assert not [w for w in plan.warnings if w.startswith("needs_recovery")]


def test_site_yml_replays_dpkg_s_journal_after_the_lock_and_before_any_role() -> None:
    play = yaml.safe_load((REPO / "playbooks/site.yml").read_text())[0]
    names_ = [t["name"] for t in play["pre_tasks"]]
    lock = names_.index("Take gpuprov's run lock (provision apply; orchestrator/hostlock.py)")
    look = names_.index("Look for the journal of an interrupted dpkg run")
    replay = names_.index("Finish the interrupted dpkg run before any role")
    assert lock < look < replay
    task = play["pre_tasks"][replay]
    assert task["ansible.builtin.command"]["argv"] == ["dpkg", "--configure", "-a"]
    assert play["environment"]["GPUPROV_RUN"]  # every task's processes carry the run


def test_detect_says_needs_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from typing import Any

    from _helpers import H200, write_inventory

    from orchestrator import pipeline
    from orchestrator.cli import main

    raw = {p.name: p.read_text() for p in H200.iterdir() if p.is_file()}
    raw[names.RECOVERY] = "restart_pending docker-restart-pending\n# exit=0\n"

    def detect(fleet: Any, console: Any, *, record: bool = False) -> pipeline.Detected:
        return pipeline.Detected({"n1": raw}, {"n1": parse_host("n1", raw)}, {})

    monkeypatch.setattr(pipeline, "_detect", detect)
    inv = write_inventory(tmp_path, "[gpu_nodes]\nn1 ansible_connection=local\n")
    assert main(["detect", "-i", str(inv)]) == 0
    out = capsys.readouterr().out
    assert "n1: needs_recovery: a stopped run owes Docker's restart" in out, out


def test_detect_json_says_needs_recovery_and_drained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`provision detect --json`: each host's facts carry `needs_recovery` (the causes) and
    `drained` (why the host is out of service; null when it is in service), as its text and
    `plan` say them (issue 48)."""
    from typing import Any

    from _helpers import H200, write_inventory

    from orchestrator import pipeline
    from orchestrator.cli import main

    raw = {p.name: p.read_text() for p in H200.iterdir() if p.is_file()}
    plain = dict(raw)
    raw[names.RECOVERY] = "dpkg_journal 2\n# exit=0\n"
    state = {
        "target": "595.91.07 open",
        "done": ["preflight", "drain"],
        "status": "in_progress",
        "failed_step": "",
        "history": [{"step": "drain", "result": "done", "at": "2026-12-01T17:00:05Z"}],
    }
    raw[names.UPGRADE_STATE] = json.dumps(state) + "\n# exit=0\n"
    hosts = {"n1": raw, "n2": plain}

    def detect(fleet: Any, console: Any, *, record: bool = False) -> pipeline.Detected:
        return pipeline.Detected(hosts, {h: parse_host(h, r) for h, r in hosts.items()}, {})

    monkeypatch.setattr(pipeline, "_detect", detect)
    inv = write_inventory(
        tmp_path, "[gpu_nodes]\nn1 ansible_connection=local\nn2 ansible_connection=local\n"
    )
    assert main(["detect", "-i", str(inv), "--json"]) == 0
    said = capsys.readouterr()
    out, text = said.out, said.out + said.err  # with --json, the text goes to stderr
    doc = json.loads(out[out.index("{\n") :])
    n1, n2 = doc["hosts"]["n1"]["facts"], doc["hosts"]["n2"]["facts"]
    assert n1["needs_recovery"] == [parse_recovery("dpkg_journal 2\n# exit=0\n")[0]]
    assert n1["needs_recovery"][0].startswith("dpkg was interrupted (2 file(s)")
    assert n1["drained"] == (
        "drained by an unfinished upgrade to 595.91.07 open since 2026-12-01T17:00:05Z"
    )
    assert n2["needs_recovery"] == [] and n2["drained"] is None
    assert "n1: drained by an unfinished upgrade to 595.91.07 open" in text
    plan = plan_host(parse_host("n1", raw), load_policy("n1", {}), default_catalog())
    assert any(w.startswith("drained: drained by an unfinished upgrade") for w in plan.warnings)
