"""What a new user meets first, and bad input or faults that must never become a traceback:
paths checked before any host is touched, atomic writes, a closed pipe, Ctrl-C, options a
stage does not use, offline --limit by Ansible's pattern rules, --help and --version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from _helpers import REPO as ROOT
from _helpers import copy_facts, write_inventory

from orchestrator import pipeline, progress, report
from orchestrator.cli import build_parser, main

inventory = write_inventory


def facts_dir(tmp_path: Path, names: tuple[str, ...] = ("h200-real",)) -> Path:
    return copy_facts(tmp_path, names)


LOCAL = "[gpu_nodes]\nn1 ansible_connection=local\n"


# --- paths -------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", ["apply", "detect", "validate", "verify", None])
def test_report_in_a_missing_directory_is_exit_2_before_any_host(
    tmp_path: Path, stage: str | None, no_hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "no" / "such" / "report.json"
    argv = [
        *([stage] if stage else []),
        "-i",
        str(inventory(tmp_path, LOCAL)),
        "--report",
        str(bad),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--report {bad}: directory {bad.parent} does not exist" in err
    assert f"fix: create it first (mkdir -p {bad.parent})" in err
    assert "Traceback" not in err and no_hosts == []


def test_report_onto_a_directory_is_exit_2(
    tmp_path: Path, no_hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["detect", "-i", str(inventory(tmp_path, LOCAL)), "--report", str(tmp_path)]) == 2
    assert f"--report {tmp_path} is a directory" in capsys.readouterr().err


def test_detect_save_onto_a_file_is_exit_2_before_any_host(
    tmp_path: Path, no_hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    existing = tmp_path / "facts.txt"
    existing.write_text("not a directory\n")
    inv = inventory(tmp_path, LOCAL)
    assert main(["detect", "-i", str(inv), "--save", str(existing)]) == 2
    err = capsys.readouterr().err
    assert f"--save {existing}: {existing} exists and is not a directory" in err
    assert "fix: pass a directory path for --save" in err
    assert main(["detect", "-i", str(inv), "--save", str(existing / "sub")]) == 2
    assert existing.read_text() == "not a directory\n" and no_hosts == []


def test_missing_facts_directory_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--facts", str(tmp_path / "nope")]) == 2
    assert "--facts" in capsys.readouterr().err


def test_reports_are_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "report.json"
    report.write_document(target, {"a": 1})
    assert json.loads(target.read_text()) == {"a": 1}

    def crash(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        report.write_document(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 1}  # the old report, whole
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temporary left


def test_saved_facts_replace_a_host_whole(tmp_path: Path) -> None:
    from orchestrator.factsdir import load_dir, save_dir

    save_dir(tmp_path, {"h": {"a.txt": "old\n", "gone.txt": "x\n"}})
    save_dir(tmp_path, {"h": {"a.txt": "new\n"}})
    assert load_dir(tmp_path) == {"h": {"a.txt": "new\n"}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h"]


# --- a closed pipe, Ctrl-C -----------------------------------------------------------------


def test_plan_json_into_head_exits_quietly(tmp_path: Path) -> None:
    facts = facts_dir(tmp_path, tuple(f"h{i:03d}" for i in range(60)))  # > a pipe's buffer
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            "bash",
            "-c",
            f"{sys.executable} -m orchestrator.cli plan --facts {facts} --json | head -1; "
            'exit "${PIPESTATUS[0]}"',
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.stdout == "{\n"
    assert done.stderr == ""  # no BrokenPipeError traceback, no message
    assert done.returncode == 141


def test_ctrl_c_exits_130_names_hosts_mid_change_and_leaves_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rich.console import Console

    monkeypatch.chdir(tmp_path)
    # this process's newest run directory is what an interrupted report names first: a run
    # of an earlier test in the same worker must not stand in for this one's
    monkeypatch.setattr("orchestrator.apply.LAST_RUN_DIR", [])
    run_dir = tmp_path / "artifacts" / "20261201T000000Z"

    def interrupted_apply(args: object) -> int:
        run_dir.mkdir(parents=True)
        with progress.ApplyProgress(Console(file=open(os.devnull, "w")), ("a", "b", "c")) as live:
            live({"event": "runner_on_start", "event_data": {"host": "a", "task": "Build DKMS"}})
            live({"event": "runner_on_start", "event_data": {"host": "b", "task": "Pin"}})
            live(
                {
                    "event": "runner_on_ok",
                    "event_data": {"host": "b", "task": "Pin", "res": {"changed": True}},
                }
            )
            raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "run_apply", interrupted_apply)
    out = tmp_path / "report.json"
    rc = main(["apply", "-i", str(inventory(tmp_path, LOCAL)), "--report", str(out)])
    err = capsys.readouterr().err
    assert rc == 130
    assert "hosts mid-change (may be half-applied): a (running: Build DKMS); b (1 changed)" in err
    assert "Traceback" not in err
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True and doc["exit_code"] == 130
    assert doc["hosts"]["a"] == {"status": "interrupted", "at": "running: Build DKMS"}
    assert doc["hosts"]["c"]["status"] == "not_touched"
    assert json.loads((run_dir / "report.json").read_text()) == doc
    assert f"artifacts: {run_dir}" in err


# --- options a stage does not use ----------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--serial", "2"],
        ["plan", "--max-unavailable", "1"],
        ["--check", "plan"],
        ["detect", "--max-fail-percent", "10"],
        ["validate", "--check"],
    ],
)
def test_rollout_options_are_refused_by_stages_that_do_not_roll_out(
    tmp_path: Path, argv: list[str], no_hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "-i", str(inventory(tmp_path, LOCAL))]) == 2
    err = capsys.readouterr().err
    assert "of `provision apply` and the full run" in err and "does not use" in err
    assert no_hosts == []


def test_max_unavailable_is_checked_even_when_every_host_is_unreachable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = inventory(tmp_path, "[gpu_nodes]\ndead ansible_host=127.0.0.1 ansible_port=1\n")
    assert main(["apply", "-i", str(inv), "--max-unavailable", "abc"]) == 2
    assert "--max-unavailable 'abc' is neither a host count" in capsys.readouterr().err


# --- offline --limit: Ansible's pattern rules ------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "hosts"),
    [
        ("east", ["e1", "e2"]),
        ("gpu_nodes:!e2", ["e1", "w1"]),
        ("east:&big", ["e2"]),
        ("e*", ["e1", "e2"]),
        ("~^w\\d$", ["w1"]),
        ("east,w1", ["e1", "e2", "w1"]),
        ("east[0]", ["e1"]),
    ],
)
def test_offline_limit_follows_ansible_patterns(
    tmp_path: Path, limit: str, hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    facts = facts_dir(tmp_path, ("e1", "e2", "w1"))
    inv = inventory(
        tmp_path,
        "[east]\ne1\ne2\n[west]\nw1\n[big]\ne2\n[gpu_nodes:children]\neast\nwest\n",
    )
    assert main(["plan", "--facts", str(facts), "-i", str(inv), "--limit", limit, "--json"]) == 0
    assert sorted(json.loads(capsys.readouterr().out)["hosts"]) == hosts


def test_offline_limit_without_inventory_still_excludes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = facts_dir(tmp_path, ("e1", "e2", "w1"))
    assert main(["plan", "--facts", str(facts), "--limit", "all:!e2", "--json"]) == 0
    assert sorted(json.loads(capsys.readouterr().out)["hosts"]) == ["e1", "w1"]


# --- help and version ------------------------------------------------------------------------


def test_help_explains_stages_and_that_no_stage_is_the_full_run() -> None:
    text = build_parser().format_help()
    assert "Without a STAGE, provision runs the full pipeline, which CHANGES the hosts" in text
    for stage in ("detect", "plan", "apply", "validate", "verify", "lab"):
        assert f"\n  {stage} " in text
    assert "interrupted        130 (Ctrl-C)" in text


@pytest.mark.parametrize("stage", ["detect", "plan", "apply", "validate", "verify", "lab"])
def test_each_stage_help_has_a_description(stage: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([stage, "--help"])
    out = capsys.readouterr().out
    _usage, _, rest = out.partition("\n\n")
    assert rest.split("\n")[0] and not rest.startswith("options:")


def test_one_version_source_for_cli_report_and_package(capsys: pytest.CaptureFixture[str]) -> None:
    """orchestrator.__version__ is the one source: --version and the report print it, and the
    installed package's metadata (pyproject reads it as a dynamic attr) agrees."""
    import orchestrator

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"provision {orchestrator.__version__}\n"
    assert report.GPUPROV_VERSION == orchestrator.__version__ == metadata.version("gpuprov")


def test_lab_refuses_the_stage_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--serial", "2", "lab", "status"]) == 2
    assert "--serial: `provision lab` does not use it" in capsys.readouterr().err


def test_a_report_that_cannot_be_written_at_the_end_keeps_the_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "gone" / "report.json"
    target.parent.mkdir()
    facts = facts_dir(tmp_path)
    real_plan = pipeline._plan

    def plan_then_vanish(*a: object, **kw: object) -> object:
        target.parent.rmdir()  # the directory disappears while the run goes on
        return real_plan(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "_plan", plan_then_vanish)
    # issue 48: exit 1, not 0: a CI job must not take a missing report for a passing run
    assert main(["plan", "--facts", str(facts), "--report", str(target), "--json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["hosts"]["h200-real"]
    assert f"the report could not be written to {target}" in err and "Traceback" not in err


def test_an_unreadable_saved_file_is_exit_2_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = facts_dir(tmp_path)
    pci = facts / "h200-real" / "sysfs-pci-devices.txt"
    read_text = Path.read_text

    def unreadable(self: Path, *a: object, **kw: object) -> str:
        if self == pci:  # as chmod 0 would for a non-root user (tests may run as root)
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", unreadable)
    assert main(["plan", "--facts", str(facts)]) == 2
    err = capsys.readouterr().err
    assert f"saved facts file {pci} cannot be read: Permission denied" in err
    assert "Traceback" not in err
