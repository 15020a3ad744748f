"""`provision` end to end without SSH: offline plans from saved facts, and the apply wiring on
local-connection hosts whose facts come from the real fixture."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _helpers import H200, copy_facts

from orchestrator import apply as apply_mod
from orchestrator import pipeline
from orchestrator.cli import main
from orchestrator.errors import BadInputError
from orchestrator.parsers import parse_host

# the same host under another GPU id: an unknown one ("odd"), an H100 ("p5")
OTHER_GPU = {"odd": "device=0x9999", "p5": "device=0x2330"}


def facts_dir(tmp_path: Path, unknown: bool = False, h100: bool = False) -> Path:
    names = ("h200-real", *(("odd",) if unknown else ()), *(("p5",) if h100 else ()))
    root = copy_facts(tmp_path, names)
    for name in names[1:]:
        pci = root / name / "sysfs-pci-devices.txt"
        pci.write_text(pci.read_text().replace("device=0x2335", OTHER_GPU[name]))
    return root


def validation(local_fleet: dict[str, Path]) -> Any:
    """`validate --limit h200-real` on the local fleet: the report's validation of h200-real."""
    report = local_fleet["tmp"] / "r.json"
    argv = ["-i", str(local_fleet["inventory"]), "--limit", "h200-real", "--report", str(report)]
    main(["validate", *argv])
    return json.loads(report.read_text())["hosts"]["h200-real"]["validation"]


def test_plan_offline_json_plans_the_real_h200(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["plan", "--facts", str(facts_dir(tmp_path)), "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    doc = json.loads(out)
    host = doc["hosts"]["h200-real"]
    assert [r["name"] for r in host["roles"]] == [
        "nvidia_driver",
        "docker",
        "nvidia_container_toolkit",
    ]
    driver = host["roles"][0]
    assert driver["vars"]["nvidia_driver_fabricmanager"] is False
    assert driver["vars"]["nvidia_driver_version"] == "580.159.04"
    assert driver["vars"]["nvidia_driver_flavour"] == "open"
    assert driver["reason"].startswith("no change: 580.159.04 open already loaded")
    assert host["nvswitches"] == 0 and not host["blockers"]


def test_unknown_gpu_blocks_one_host_and_plans_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.json"
    rc = main(
        [
            "plan",
            "--facts",
            str(facts_dir(tmp_path, unknown=True)),
            "--json",
            "--report",
            str(report),
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert rc == 2
    assert doc["hosts"]["h200-real"]["roles"] and not doc["hosts"]["h200-real"]["blockers"]
    assert "10de:9999 at 0000:00:06.0" in doc["hosts"]["odd"]["blockers"][0]
    saved = json.loads(report.read_text())
    assert saved["schema"] == "gpuprov.report" and saved["exit_code"] == 2
    assert saved["hosts"]["odd"]["status"] == "blocked"


def test_plan_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--facts", str(facts_dir(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "h200-real: 2x H200 SXM 141GB" in out and "nvidia_driver" in out


def inventory(tmp_path: Path, hosts: dict[str, str], extra: str = "") -> Path:
    path = tmp_path / "inventory.ini"
    lines = [
        f"{h} ansible_connection=local ansible_python_interpreter={sys.executable} {v}"
        for h, v in hosts.items()
    ]
    path.write_text("[gpu_nodes]\n" + "\n".join(lines) + "\n" + extra)
    return path


def test_pinned_470_on_h100_is_exit_2_naming_host_value_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = inventory(tmp_path, {"p5": "nvidia_driver_branch=470", "h200-real": ""})
    rc = main(["plan", "--facts", str(facts_dir(tmp_path, h100=True)), "-i", str(inv)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "p5: nvidia_driver_branch=470 is too old" in err
    assert "H100 SXM5 80GB needs >= 525.85.05" in err and "fix: pin a branch" in err


def test_wrong_typed_policy_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = inventory(tmp_path, {"h200-real": "nvidia_driver_reboot=sometimes"})
    rc = main(["plan", "--facts", str(facts_dir(tmp_path)), "-i", str(inv)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "h200-real: nvidia_driver_reboot='sometimes'" in err and "allow or forbid" in err


def test_missing_inventory_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["apply", "-i", str(tmp_path / "nope.ini")]) == 2
    assert "does not exist" in capsys.readouterr().err


# --- apply wiring: real ansible-runner, local hosts, facts from the fixture --------------

RECORD_PLAYBOOK = """\
- name: Record the plan
  hosts: gpu_nodes
  gather_facts: false
  pre_tasks:
    - name: Take this host's variables from the plan (as site.yml does)
      ansible.builtin.import_tasks: __PLAN_TASKS__
  tasks:
    - name: Write the planned driver variables
      ansible.builtin.copy:
        dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
        content: "{{ {'branch': nvidia_driver_branch, 'version': nvidia_driver_version,
                      'fm': nvidia_driver_fabricmanager, 'roles': gpuprov_roles} | to_json }}"
        mode: "0644"
""".replace("__PLAN_TASKS__", str(apply_mod.SITE_PLAYBOOK.parent / "tasks" / "plan.yml"))


@pytest.fixture
def local_fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Two local hosts with the H200 fixture as facts, one with an unknown GPU; a playbook
    that records the variables it was given. Detection is replaced (no SSH here)."""
    out = tmp_path / "out"
    out.mkdir()
    facts = facts_dir(tmp_path, unknown=True)
    raw = {h: {f.name: f.read_text() for f in (facts / h).iterdir()} for h in ("h200-real", "odd")}

    def fake_detect(fleet: pipeline.Fleet, console: object, **_: object) -> pipeline.Detected:
        return pipeline.Detected(
            raw={h: raw[h] for h in fleet.hosts},
            facts={h: parse_host(h, raw[h]) for h in fleet.hosts},
            errors={},
        )

    playbook = tmp_path / "site.yml"
    playbook.write_text(RECORD_PLAYBOOK)
    monkeypatch.setattr(pipeline, "_detect", fake_detect)
    monkeypatch.setattr(apply_mod, "SITE_PLAYBOOK", playbook)
    monkeypatch.chdir(tmp_path)  # artifacts/<timestamp>/ lands here
    inv = inventory(tmp_path, {"h200-real": "", "odd": ""}, f"[gpu_nodes:vars]\nout_dir={out}\n")
    return {"inventory": inv, "out": out, "tmp": tmp_path}


@pytest.mark.ansible
def test_apply_passes_plan_vars_and_skips_blocked_hosts(
    local_fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    report = local_fleet["tmp"] / "report.json"
    rc = main(["apply", "-i", str(local_fleet["inventory"]), "--report", str(report)])
    assert rc == 2  # one host blocked (bad input); the other applied
    recorded = json.loads((local_fleet["out"] / "h200-real.json").read_text())
    assert recorded == {
        "branch": "580",
        "version": "580.159.04",
        "fm": False,
        "roles": ["nvidia_driver", "docker", "nvidia_container_toolkit"],
    }
    assert not (local_fleet["out"] / "odd.json").exists()
    doc = json.loads(report.read_text())
    assert doc["hosts"]["h200-real"]["apply"]["changed_tasks"] == [
        "Write the planned driver variables"
    ]
    assert doc["hosts"]["odd"]["apply"] is None
    artifacts = Path(doc["artifact_dir"])
    assert (artifacts / "plan.json").exists()
    assert artifacts.parent == (local_fleet["tmp"] / "artifacts").resolve()


@pytest.mark.ansible
def test_apply_check_mode_and_limit(
    local_fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["apply", "-i", str(local_fleet["inventory"]), "--limit", "h200-real", "--check"])
    assert rc == 0
    assert not (local_fleet["out"] / "h200-real.json").exists()
    assert "check mode" in capsys.readouterr().out


def test_bad_serial_stops_before_any_host(
    local_fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["apply", "-i", str(local_fleet["inventory"]), "--serial", "lots"])
    assert rc == 2
    assert "--serial 'lots'" in capsys.readouterr().err
    assert not list(local_fleet["out"].iterdir())


def test_validate_says_plainly_when_not_available(
    local_fleet: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_import = pipeline.importlib.import_module

    def no_runner(name: str) -> object:
        if name == "orchestrator.validate.runner":
            raise ModuleNotFoundError(name)
        return real_import(name)

    monkeypatch.setattr(pipeline.importlib, "import_module", no_runner)
    result = validation(local_fleet)
    assert result["state"] == "not_available"
    assert result["note"]
    assert "available" in capsys.readouterr().out  # the table says so (wrapped at 80 columns)


def test_validate_runs_the_health_checks_and_skips_cuda_on_simulated_hosts(
    local_fleet: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wired to orchestrator.validate: real health checks over the fixture's facts; the
    CUDA checks say "skip" on a simulated host, never pass."""
    raw = {f.name: f.read_text() for f in H200.iterdir()}
    raw["gpusim.txt"] = "profile: h200\n# exit=0\n"

    def simulated(fleet: pipeline.Fleet, console: object, **_: object) -> pipeline.Detected:
        return pipeline.Detected(
            {"h200-real": raw}, {"h200-real": parse_host("h200-real", raw)}, {}
        )

    monkeypatch.setattr(pipeline, "_detect", simulated)
    result = validation(local_fleet)
    assert result["state"] == "done"
    checks = {c["name"]: c for c in result["checks"]}
    assert checks["gpu_count"]["status"] == "pass"
    assert any(c["status"] == "skip" and "simulated" in c["diagnosis"] for c in checks.values())
    assert not any(c["status"] == "pass" and "simulated" in c["diagnosis"] for c in checks.values())


@pytest.mark.ansible
def test_no_stage_runs_the_whole_pipeline(
    local_fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    report = local_fleet["tmp"] / "all.json"
    rc = main(["-i", str(local_fleet["inventory"]), "--check", "--report", str(report)])
    doc = json.loads(report.read_text())
    assert doc["command"] == "all" and doc["check_mode"] is True
    assert rc == 2  # the host with the unknown GPU is blocked
    h = doc["hosts"]["h200-real"]
    assert h["apply"]["changed_tasks"] == ["Write the planned driver variables"]
    assert h["validation"]["note"] == "check mode: nothing was applied"
    assert not (local_fleet["out"] / "h200-real.json").exists()


@pytest.mark.ansible
def test_the_whole_pipeline_starts_the_suite_before_detection_and_verifies_into_the_run(
    local_fleet: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`provision` (no stage) starts the suite's processes before detection, as verify does;
    after the apply their files join the apply's run folder and their own folder goes."""
    root = local_fleet["tmp"] / "artifacts"
    seen: list[list[str]] = []
    detect = pipeline._detect

    def watched(fleet: pipeline.Fleet, console: object, **kw: Any) -> pipeline.Detected:
        seen.append([p.name for p in root.glob(".verify-*")])
        return detect(fleet, console, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "_detect", watched)
    report = local_fleet["tmp"] / "all.json"
    main(["-i", str(local_fleet["inventory"]), "--report", str(report)])
    doc = json.loads(report.read_text())
    assert seen and len(seen[0]) == 1  # the suite's folder, there when detection began
    run = Path(doc["artifact_dir"])
    assert (run / "verify-junit.xml").is_file() and (run / "verify-0.log").is_file()
    assert doc["hosts"]["h200-real"]["verification"]["state"] in ("done", "failed")
    assert not list(root.glob(".verify-*"))


def test_bad_input_after_the_suite_started_ends_it_and_leaves_nothing(
    local_fleet: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = local_fleet["tmp"] / "artifacts"
    started: list[Any] = []
    start = pipeline._start_suite

    def recorded(*args: Any, **kw: Any) -> Any:
        started.append(start(*args, **kw))
        return started[-1]

    def bad(fleet: pipeline.Fleet, console: object, **_: object) -> pipeline.Detected:
        raise BadInputError("h200-real: a bad value", fix="fix it")

    monkeypatch.setattr(pipeline, "_start_suite", recorded)
    monkeypatch.setattr(pipeline, "_detect", bad)
    assert main(["-i", str(local_fleet["inventory"])]) == 2
    ((folder, suite),) = started
    assert not folder.exists() and not list(root.glob(".verify-*"))
    assert all(s.proc is not None and s.proc.poll() is not None for s in suite._shards)


def test_a_killed_runs_suite_folder_is_removed_by_the_next_run(tmp_path: Path) -> None:
    """SIGKILL leaves a `.verify-*` folder (no cleanup runs): the next run removes the folders
    whose process is gone, and leaves a live process's, another machine's and unnamed ones."""
    host = pipeline._HOST
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        names = {
            "gone": f".verify-{killed.pid}-{host}-abcd_123",
            "live": f".verify-{live.pid}-{host}-abcd_124",
            "mine": f".verify-{os.getpid()}-{host}-abcd_125",
            "other machine": f".verify-{killed.pid}-not{host}-abcd_126",
            "unnamed": ".verify-k2j3h4g5",
        }
        for name in names.values():
            (tmp_path / name).mkdir()
            (tmp_path / name / "verify-0.log").write_text("x")
        pipeline._sweep_suite_folders(tmp_path)
        left = {what for what, name in names.items() if (tmp_path / name).is_dir()}
        assert left == {"live", "mine", "other machine", "unnamed"}
    finally:
        live.kill()
        live.wait()


def test_the_suite_folder_before_an_apply_names_its_process(
    local_fleet: dict[str, Path], tmp_path: Path
) -> None:
    fleet = pipeline._load_inventory(str(local_fleet["inventory"]), None)
    opts = pipeline.StageOptions(artifacts_dir=str(tmp_path / "artifacts"))
    early = pipeline._start_suite(fleet, opts, before_apply=True)
    assert early is not None
    try:
        named = pipeline._SUITE_FOLDER.fullmatch(early[0].name)
        assert named is not None
        assert (int(named.group(1)), named.group(2)) == (os.getpid(), pipeline._HOST)
    finally:
        pipeline._drop_suite(early)
    assert not early[0].exists()


def test_detect_save_then_plan_offline_on_this_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real detection (connection local: the probe runs here), saved, then planned offline."""
    inv = inventory(tmp_path, {"localhost": ""})
    saved = tmp_path / "saved"
    assert main(["detect", "-i", str(inv), "--save", str(saved)]) == 0
    files = {p.name for p in (saved / "localhost").iterdir()}
    assert {"os-release.txt", "uname-r.txt", "sysfs-pci-devices.txt"} <= files
    capsys.readouterr()
    rc = main(["plan", "--facts", str(saved), "--json"])
    host = json.loads(capsys.readouterr().out)["hosts"]["localhost"]
    pci = (saved / "localhost" / "sysfs-pci-devices.txt").read_text()
    gpus = [ln for ln in pci.splitlines() if "vendor=0x10de" in ln and "class=0x03" in ln]
    assert sum(g["count"] for g in host["gpus"]) == len(gpus)
    if not gpus:  # a machine without a GPU is refused, with the fix
        assert rc == 2 and host["blockers"][0].startswith("no NVIDIA GPU on the PCI bus")


def test_limit_over_saved_facts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    facts = str(facts_dir(tmp_path, unknown=True, h100=True))
    assert main(["plan", "--facts", facts, "--limit", "h200-*:p5", "--json"]) == 0
    assert sorted(json.loads(capsys.readouterr().out)["hosts"]) == ["h200-real", "p5"]
    assert main(["plan", "--facts", facts, "--limit", "nope"]) == 2
    assert "--limit 'nope' matches no host of the saved facts in" in capsys.readouterr().err
