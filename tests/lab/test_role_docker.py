"""The docker role on the lab's Debian 12 and 13 hosts (Debian's docker.io, for real):
converge, idempotence, check mode, daemon.json merged without losing keys we do not own, an
invalid daemon.json refused before any change, and a container from an image built on the
host (no registry).

Runs on the session lab (`lab` fixture); GPUPROV_TEST_LAB=<name> runs it on an already
running lab instead (`provision lab up --name <name> ...`), which it leaves running."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.lab.running import RunningLab

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aptrepo.converge import BUILD_AND_RUN, Run, converge, lab_repo_vars

pytestmark = pytest.mark.lab

DAEMON_JSON = "/etc/docker/daemon.json"
ROLES = ("docker",)


@pytest.fixture(scope="module")
def runtime_lab(running_or_session_lab: Callable[[str], RunningLab]) -> RunningLab:
    return running_or_session_lab("GPUPROV_TEST_LAB")


@pytest.fixture(scope="module")
def policy(runtime_lab: RunningLab) -> dict[str, object]:
    return lab_repo_vars(runtime_lab.name)


@pytest.fixture(scope="module")
def converged(
    runtime_lab: RunningLab, policy: dict[str, object], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Run, Run]:
    work = tmp_path_factory.mktemp("docker")
    first = converge(runtime_lab.inventory, ROLES, policy, work / "first")
    second = converge(runtime_lab.inventory, ROLES, policy, work / "second")
    return first, second


def sh(lab: RunningLab, host: str, command: str) -> str:
    done = lab.ssh(host, command, timeout=600)
    assert done.returncode == 0, f"{host}: {command}: {done.stderr or done.stdout}"
    return done.stdout


def write_file(lab: RunningLab, host: str, path: str, text: str) -> None:
    encoded = base64.b64encode(text.encode()).decode()
    sh(lab, host, f"echo {encoded} | base64 -d > {path}")


def daemon_json(lab: RunningLab, host: str) -> dict[str, object]:
    data = json.loads(sh(lab, host, f"cat {DAEMON_JSON}"))
    assert isinstance(data, dict)
    return data


def test_converges_on_debian_12_and_13(runtime_lab: RunningLab, converged: tuple[Run, Run]) -> None:
    first, _ = converged
    assert first.returncode == 0, first.output[-3000:]
    assert set(first.recap) == set(runtime_lab.hosts)
    assert {runtime_lab.host_os[h] for h in first.recap} == {"debian12", "debian13"}


def test_second_converge_changes_nothing(converged: tuple[Run, Run]) -> None:
    _, second = converged
    assert second.returncode == 0, second.output[-3000:]
    assert set(second.changed().values()) == {0}, second.output[-3000:]


def test_check_mode_changes_nothing(
    runtime_lab: RunningLab,
    policy: dict[str, object],
    converged: tuple[Run, Run],
    tmp_path: Path,
) -> None:
    before = {h: sh(runtime_lab, h, f"sha256sum {DAEMON_JSON}") for h in runtime_lab.hosts}
    run = converge(runtime_lab.inventory, ROLES, policy, tmp_path, check=True)
    assert run.returncode == 0, run.output[-3000:]
    assert set(run.changed().values()) == {0}, run.output[-3000:]
    assert before == {h: sh(runtime_lab, h, f"sha256sum {DAEMON_JSON}") for h in runtime_lab.hosts}


def test_engine_is_held_and_runs_with_the_policy(
    runtime_lab: RunningLab, converged: tuple[Run, Run]
) -> None:
    for host in runtime_lab.hosts:
        assert "docker.io" in sh(runtime_lab, host, "apt-mark showhold").split()
        assert sh(runtime_lab, host, "systemctl is-enabled docker").strip() == "enabled"
        info = json.loads(sh(runtime_lab, host, "docker info --format '{{json .}}'"))
        assert info["LoggingDriver"] == "json-file"
        assert info["LiveRestoreEnabled"] is True
        data = daemon_json(runtime_lab, host)
        assert data["default-shm-size"] == "1G"
        assert data["log-opts"] == {"max-size": "100m", "max-file": "3"}


def test_keys_we_do_not_own_survive_and_owned_keys_are_restored(
    runtime_lab: RunningLab, policy: dict[str, object], converged: tuple[Run, Run], tmp_path: Path
) -> None:
    host = runtime_lab.host_for("debian12")
    data = daemon_json(runtime_lab, host)
    # An operator adds a key of their own and flips one the role owns.
    data["labels"] = ["gpuprov-test=keep-me"]
    data["live-restore"] = False
    write_file(runtime_lab, host, DAEMON_JSON, json.dumps(data))
    run = converge(runtime_lab.inventory, ROLES, policy, tmp_path, limit=host)
    assert run.returncode == 0, run.output[-3000:]
    assert run.recap[host].changed >= 1
    assert "RUNNING HANDLER [docker : Restart docker]" in run.output
    after = daemon_json(runtime_lab, host)
    assert after["labels"] == ["gpuprov-test=keep-me"]
    assert after["live-restore"] is True
    # The restarted engine reads both.
    info = json.loads(sh(runtime_lab, host, "docker info --format '{{json .}}'"))
    assert "gpuprov-test=keep-me" in info["Labels"]
    assert info["LiveRestoreEnabled"] is True


def test_invalid_daemon_json_stops_before_any_change(
    runtime_lab: RunningLab, policy: dict[str, object], converged: tuple[Run, Run], tmp_path: Path
) -> None:
    host = runtime_lab.host_for("debian13")
    original = sh(runtime_lab, host, f"cat {DAEMON_JSON}")
    since = sh(runtime_lab, host, "systemctl show -P ActiveEnterTimestamp docker")
    broken = '{"log-driver": "json-file",,}'
    write_file(runtime_lab, host, DAEMON_JSON, broken)
    try:
        run = converge(runtime_lab.inventory, ROLES, policy, tmp_path, limit=host)
        assert run.returncode != 0
        assert run.recap[host].failed == 1
        assert run.recap[host].changed == 0
        assert f"{DAEMON_JSON} is not valid JSON" in run.output
        assert "Expecting property name enclosed in double quotes" in run.output
        assert sh(runtime_lab, host, f"cat {DAEMON_JSON}") == broken
        assert sh(runtime_lab, host, "systemctl show -P ActiveEnterTimestamp docker") == since
    finally:
        write_file(runtime_lab, host, DAEMON_JSON, original)


def test_a_container_from_an_image_built_on_the_host_runs(
    runtime_lab: RunningLab, converged: tuple[Run, Run]
) -> None:
    for host in runtime_lab.hosts:
        out = sh(runtime_lab, host, BUILD_AND_RUN.format(tag="gpuprov-test/tiny:1", runtime="runc"))
        assert out.strip().splitlines()[-1] == "hello from a locally built image"


def test_a_docker_repository_key_with_another_fingerprint_stops_before_any_change(
    runtime_lab: RunningLab, policy: dict[str, object], converged: tuple[Run, Run], tmp_path: Path
) -> None:
    """docker_source=docker with a key that is not Docker's (a fresh one, served from the
    host's own disk): the role stops before it removes docker.io or adds the repository, and
    names both fingerprints. (The lab has no docker-ce test doubles, so the accepted-key path
    is covered for the toolkit's repository, whose check is the same code.)"""
    host = runtime_lab.host_for("debian12")
    make = (
        "export GNUPGHOME=$(mktemp -d) && "
        "gpg --batch --passphrase '' --quick-gen-key 'not docker <x@invalid>' "
        "ed25519 sign never 2>/dev/null && gpg --batch --armor --export > /root/not-docker.asc && "
        "gpg --batch --with-colons --show-keys /root/not-docker.asc | grep -m1 '^fpr' | "
        'cut -d: -f10 && rm -rf "$GNUPGHOME"'
    )
    wrong = sh(runtime_lab, host, make).strip()
    state = "dpkg-query -W docker.io; ls /etc/apt/sources.list.d /etc/apt/keyrings 2>&1"
    before = sh(runtime_lab, host, state)
    bad = {
        **policy,
        "docker_source": "docker",
        "docker_ce_repo_key_url": "file:///root/not-docker.asc",
    }
    run = converge(runtime_lab.inventory, ROLES, bad, tmp_path, limit=host)
    assert run.returncode != 0
    assert run.recap[host].failed == 1 and run.recap[host].changed == 0, run.output[-3000:]
    # Docker's published apt key (vars/Debian.yml, a lead) is what is expected by default.
    expected = "9DC858229FC7DD38854AE2D88D81803C0EBFCD88"
    assert f"has fingerprint {wrong}, but" in run.output, run.output[-3000:]
    assert f"(docker_ce_repo_key_fingerprint) is {expected}" in run.output
    assert "Remove packages that conflict" not in run.output
    assert sh(runtime_lab, host, state) == before


def test_a_restart_an_interrupted_run_owed_is_done_by_the_next_run(
    runtime_lab: RunningLab, policy: dict[str, object], converged: tuple[Run, Run], tmp_path: Path
) -> None:
    """Issue 48: a run stopped between "Write daemon.json" and Docker's restart. Left here as
    the role leaves it: daemon.json already holds the new configuration (a label the role
    keeps), the pending-restart marker beside it, dockerd still on the old one. The rerun
    finds nothing to write; it must restart Docker anyway, then clear the marker."""
    host = runtime_lab.host_for("debian12")
    marker = "/var/lib/gpuprov/docker-restart-pending"
    data = daemon_json(runtime_lab, host)
    data["labels"] = ["gpuprov-test=written-not-applied"]
    write_file(runtime_lab, host, DAEMON_JSON, json.dumps(data, indent=2, sort_keys=True))
    sh(runtime_lab, host, f"mkdir -p /var/lib/gpuprov && echo interrupted > {marker}")
    info = json.loads(sh(runtime_lab, host, "docker info --format '{{json .}}'"))
    assert "gpuprov-test=written-not-applied" not in (info["Labels"] or [])  # the old config
    run = converge(runtime_lab.inventory, ROLES, policy, tmp_path, limit=host)
    assert run.returncode == 0, run.output[-3000:]
    info = json.loads(sh(runtime_lab, host, "docker info --format '{{json .}}'"))
    assert "gpuprov-test=written-not-applied" in info["Labels"], run.output[-3000:]
    assert runtime_lab.ssh(host, f"test -e {marker}").returncode != 0
