"""gpuprov.nvidia.validate and gpuprov.nvidia.verify from the collection installed alone give
the checks `provision validate` and `provision verify` give, on the same hosts (issue 49).

The collection is built from this checkout and installed into a folder of its own; the
playbooks run from a scratch directory by an ansible-playbook whose Python has ansible-core,
pytest and pytest-testinfra with their dependencies only (meta/ee-requirements.txt): no gpuprov
package, no checkout, no ansible.cfg. Each host's check names and statuses come from the
playbooks' set_stats (what an AWX workflow receives; the default callback prints them with
ANSIBLE_SHOW_CUSTOM_STATS) and must equal those of `provision`'s JSON report, and each host's
outcome its status there. A simulated GPU fault (gpusim's `xid`: an Xid 79 in the kernel log)
on one host fails that host only, in both.

Runs on the session lab after tests/lab/test_verify_lab.py converged it (group a), so the
hosts pass validation and verification before the fault; GPUPROV_TEST_LAB=<name> uses a
running lab instead (for iterating). Duration on the shared 2-core machine (2026-12-05, a
2-host Debian 12 p5 lab converged by `provision apply`): 2 passed in 94 s (setup: build and
install 9 s; validate, both ways, 15 s; verify, both ways, 65 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_without_provision_lab import _ansible_core_only, _user_env

from orchestrator.lab.running import RunningLab

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Outcome:
    """Per host: ok or failed, and each check's status by its label."""

    status: dict[str, str]
    checks: dict[str, dict[str, str]]
    output: str = ""  # the playbook's, for a failure's message


@pytest.fixture(scope="module")
def checks_lab(running_or_session_lab: Callable[[str], RunningLab]) -> RunningLab:
    return running_or_session_lab("GPUPROV_TEST_LAB")


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    """The built collection installed alone, and an ansible-playbook that sees ansible-core,
    pytest and pytest-testinfra only; (program, environment, working directory)."""
    root = tmp_path_factory.mktemp("checks-alone")
    galaxy = BIN / "ansible-galaxy"
    build = [str(galaxy), "collection", "build", "--output-path", str(root / "dist"), str(REPO)]
    subprocess.run(build, check=True, capture_output=True, cwd=root)
    (tarball,) = (root / "dist").glob("gpuprov-nvidia-*.tar.gz")
    collections = root / "collections"
    install = [str(galaxy), "collection", "install", "--force", "-p", str(collections)]
    subprocess.run([*install, str(tarball)], check=True, capture_output=True, env=_user_env())
    program = _ansible_core_only(root / "venv", also=("pytest-testinfra",))
    probe = "import importlib.util as u; print(u.find_spec('orchestrator'))"
    found = subprocess.run(
        [program.parent / "python", "-c", probe], capture_output=True, text=True, cwd=root
    )
    assert found.stdout.strip() == "None", found.stdout  # no orchestrator on the controller
    env = {
        **_user_env(),
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_SHOW_CUSTOM_STATS": "True",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "PATH": f"{program.parent}{os.pathsep}/usr/bin:/bin",
    }
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return program, env, elsewhere


def _label(check: dict[str, Any]) -> str:
    return check["name"] if check["gpu"] is None else f"{check['name']}[gpu{check['gpu']}]"


def _provision(lab: RunningLab, stage: str, report: Path) -> Outcome:
    done = subprocess.run(
        [str(BIN / "provision"), stage, "-i", str(lab.inventory), "--report", str(report)],
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    hosts = json.loads(report.read_text())["hosts"]
    part = "validation" if stage == "validate" else "verification"
    return Outcome(
        {h: r["status"] for h, r in hosts.items()},
        {h: {_label(c): c["status"] for c in r[part]["checks"]} for h, r in hosts.items()},
    )


def _playbook(lab: RunningLab, alone: tuple[Path, dict[str, str], Path], name: str) -> Outcome:
    program, env, cwd = alone
    done = subprocess.run(
        [str(program), "-i", str(lab.inventory), f"gpuprov.nvidia.{name}"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode in (0, 2), output[-4000:]  # 2: a host failed
    (line,) = [ln for ln in done.stdout.splitlines() if ln.strip().startswith("RUN:")]
    key = "gpuprov_validation" if name == "validate" else "gpuprov_verification"
    stats = json.loads(line.split("RUN:", 1)[1])[key]
    return Outcome(
        {h: s["status"] for h, s in stats.items()},
        {h: s["checks"] for h, s in stats.items()},
        output[-6000:],
    )


@pytest.fixture
def xid_on_one_host(checks_lab: RunningLab) -> Iterator[str]:
    host = checks_lab.host_for("debian12")
    on = checks_lab.ssh(host, "gpusim fault xid on")
    assert on.returncode == 0, on.stderr
    yield host
    checks_lab.ssh(host, "gpusim fault xid off")


def test_validate_gives_provisions_checks_and_a_gpu_fault_fails_only_its_host(
    checks_lab: RunningLab,
    alone: tuple[Path, dict[str, str], Path],
    xid_on_one_host: str,
    tmp_path: Path,
) -> None:
    expected = _provision(checks_lab, "validate", tmp_path / "validate.json")
    seen = _playbook(checks_lab, alone, "validate")
    assert seen.checks == expected.checks, seen.output
    assert seen.status == expected.status, seen.output
    others = set(checks_lab.hosts) - {xid_on_one_host}
    assert expected.status == {xid_on_one_host: "failed", **dict.fromkeys(others, "ok")}
    assert expected.checks[xid_on_one_host]["xid_errors"] == "fail"
    failed = {h: [c for c, s in checks.items() if s == "fail"] for h, checks in seen.checks.items()}
    assert failed == {xid_on_one_host: ["xid_errors"], **{h: [] for h in others}}


def test_verify_gives_provisions_checks(
    checks_lab: RunningLab, alone: tuple[Path, dict[str, str], Path], tmp_path: Path
) -> None:
    expected = _provision(checks_lab, "verify", tmp_path / "verify.json")
    seen = _playbook(checks_lab, alone, "verify")
    assert seen.checks == expected.checks and all(seen.checks.values()), seen.output
    assert seen.status == expected.status, seen.output
