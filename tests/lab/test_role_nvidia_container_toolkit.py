"""The nvidia_container_toolkit role on the lab's Debian 12 and 13 hosts, against the local
signed repository of test doubles (tests/lab/aptrepo): repository and key set-up verified by
apt, pinned and held packages, version changes both ways, the nvidia runtime in Docker (a
container from a locally built image runs through it), default runtime on and off, CDI
refresh units, the /dev/char udev rule, idempotence and check mode.

The GPUs are simulated and no driver role runs here, so `nvidia-smi` is absent: the CDI spec
itself is not written on these hosts (the role says so; the spec's content is unit-tested
with the real fixture in tests/unit/test_role_runtime_nvidia_ctk.py).
Runs on the session lab (`lab`); GPUPROV_TEST_LAB=<name> uses an already running lab."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.lab.running import RunningLab

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aptrepo.converge import BUILD_AND_RUN, STATE_DIR, Run, converge, lab_network, lab_repo_vars
from aptrepo.packages import TOOLKIT_VERSIONS
from aptrepo.serve import ensure_served

pytestmark = pytest.mark.lab

ROLES = ("docker", "nvidia_container_toolkit")
PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
KEYRING = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
SOURCES = "/etc/apt/sources.list.d/nvidia-container-toolkit.sources"
OLD, NEW = TOOLKIT_VERSIONS  # 1.17.8-1 ships no CDI refresh units, 1.18.0-1 does


@pytest.fixture(scope="module")
def runtime_lab(running_or_session_lab: Callable[[str], RunningLab]) -> RunningLab:
    return running_or_session_lab("GPUPROV_TEST_LAB")


@pytest.fixture(scope="module")
def policy(runtime_lab: RunningLab) -> dict[str, object]:
    return {**lab_repo_vars(runtime_lab.name), "nvidia_container_toolkit_version": OLD}


@pytest.fixture(scope="module")
def converged(
    runtime_lab: RunningLab, policy: dict[str, object], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Run, Run]:
    work = tmp_path_factory.mktemp("toolkit")
    first = converge(runtime_lab.inventory, ROLES, policy, work / "first")
    second = converge(runtime_lab.inventory, ROLES, policy, work / "second")
    return first, second


def sh(lab: RunningLab, host: str, command: str, *, ok: bool = True) -> str:
    done = lab.ssh(host, command, timeout=600)
    if ok:  # stdout only: what the command printed, not its warnings
        assert done.returncode == 0, f"{host}: {command}: {done.stderr or done.stdout}"
        return done.stdout
    return done.stdout + done.stderr


def versions(lab: RunningLab, host: str) -> dict[str, str]:
    out = sh(lab, host, "dpkg-query -W -f '${Package} ${Version}\\n' " + " ".join(PACKAGES))
    return dict(line.split() for line in out.strip().splitlines())


def test_converges_then_changes_nothing(
    runtime_lab: RunningLab, converged: tuple[Run, Run]
) -> None:
    first, second = converged
    assert first.returncode == 0, first.output[-3000:]
    assert {runtime_lab.host_os[h] for h in first.recap} == {"debian12", "debian13"}
    assert second.returncode == 0, second.output[-3000:]
    assert set(second.changed().values()) == {0}, second.output[-3000:]


def test_check_mode_changes_nothing(
    runtime_lab: RunningLab, policy: dict[str, object], converged: tuple[Run, Run], tmp_path: Path
) -> None:
    run = converge(runtime_lab.inventory, ROLES, policy, tmp_path, check=True)
    assert run.returncode == 0, run.output[-3000:]
    assert set(run.changed().values()) == {0}, run.output[-3000:]


def test_packages_are_pinned_and_held(runtime_lab: RunningLab, converged: tuple[Run, Run]) -> None:
    for host in runtime_lab.hosts:
        assert versions(runtime_lab, host) == dict.fromkeys(PACKAGES, OLD)
        held = sh(runtime_lab, host, "apt-mark showhold").split()
        assert set(PACKAGES) <= set(held)
        # The stand-in says which version it is, as the real nvidia-ctk does.
        first_line = sh(runtime_lab, host, "nvidia-ctk --version").splitlines()[0]
        assert first_line == f"NVIDIA Container Toolkit CLI version {OLD.split('-')[0]}"


def test_repository_is_verified_with_the_served_key(
    runtime_lab: RunningLab, policy: dict[str, object], converged: tuple[Run, Run]
) -> None:
    fingerprint = ensure_served(STATE_DIR, network=lab_network(runtime_lab.name)).fingerprint
    for host in runtime_lab.hosts:
        sources = sh(runtime_lab, host, f"cat {SOURCES}")
        assert f"Signed-By: {KEYRING}" in sources
        assert f"URIs: {policy['nvidia_container_toolkit_repo_base_url']}/deb/$(ARCH)" in sources
        assert "Suites: /" in sources
        keys = sh(runtime_lab, host, f"gpg --batch --show-keys --with-colons {KEYRING}")
        assert f"fpr:::::::::{fingerprint}:" in keys
        update = sh(runtime_lab, host, "apt-get update 2>&1")
        assert "NO_PUBKEY" not in update and "not signed" not in update


def test_a_wrong_key_is_refused_by_apt_and_repaired_by_the_role(
    runtime_lab: RunningLab, policy: dict[str, object], converged: tuple[Run, Run], tmp_path: Path
) -> None:
    host = runtime_lab.host_for("debian12")
    other = (
        "export GNUPGHOME=$(mktemp -d) && "
        "gpg --batch --passphrase '' --quick-gen-key 'not the repository <x@invalid>' "
        f"ed25519 sign never 2>/dev/null && gpg --batch --yes --export -o {KEYRING} && "
        'rm -rf "$GNUPGHOME"'
    )
    sh(runtime_lab, host, other)
    refused = sh(runtime_lab, host, "apt-get update 2>&1", ok=False)
    assert "NO_PUBKEY" in refused or "not signed" in refused, refused
    run = converge(runtime_lab.inventory, ROLES, policy, tmp_path, limit=host)
    assert run.returncode == 0, run.output[-3000:]
    assert "changed: [" + host + "]" in run.output.split("Write the repository keyring")[1][:400]
    update = sh(runtime_lab, host, "apt-get update 2>&1")
    assert "NO_PUBKEY" not in update


def test_docker_lists_the_nvidia_runtime_and_runs_a_local_image_through_it(
    runtime_lab: RunningLab, converged: tuple[Run, Run]
) -> None:
    for host in runtime_lab.hosts:
        runtimes = json.loads(sh(runtime_lab, host, "docker info --format '{{json .Runtimes}}'"))
        assert runtimes["nvidia"]["path"] == "nvidia-container-runtime"
        before = sh(
            runtime_lab, host, "cat /var/log/nvidia-container-runtime.log 2>/dev/null | wc -l"
        )
        script = BUILD_AND_RUN.format(tag="gpuprov-test/tiny:1", runtime="nvidia")
        out = sh(runtime_lab, host, script)
        assert out.strip().splitlines()[-1] == "hello from a locally built image"
        log = sh(runtime_lab, host, "cat /var/log/nvidia-container-runtime.log")
        assert len(log.splitlines()) > int(before.strip() or 0)
        assert " create " in log


def test_cdi_refresh_units_and_dev_char_rule_are_in_place(
    runtime_lab: RunningLab, converged: tuple[Run, Run]
) -> None:
    first, _ = converged
    for host in runtime_lab.hosts:
        assert sh(runtime_lab, host, "systemctl is-enabled nvidia-cdi-refresh.path").strip() == (
            "enabled"
        )
        assert sh(runtime_lab, host, "systemctl is-active nvidia-cdi-refresh.path").strip() == (
            "active"
        )
        assert "enabled" in sh(runtime_lab, host, "systemctl is-enabled nvidia-cdi-refresh.service")
        # 1.17.8 ships no refresh units: the role's own, under /etc.
        fragment = sh(
            runtime_lab, host, "systemctl show -P FragmentPath nvidia-cdi-refresh.service"
        )
        assert fragment.strip() == "/etc/systemd/system/nvidia-cdi-refresh.service"
        dropin = sh(runtime_lab, host, "systemctl cat nvidia-cdi-refresh.service")
        assert "ExecStart=/usr/bin/nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in dropin
        rule = sh(runtime_lab, host, "cat /etc/udev/rules.d/71-nvidia-dev-char.rules")
        assert "nvidia-ctk system create-dev-char-symlinks --create-all" in rule
        # No driver on these hosts: no spec, and the role says why.
        assert sh(runtime_lab, host, "test -e /etc/cdi/nvidia.yaml; echo $?", ok=False).strip() == (
            "1"
        )
    assert "no CDI specification written: nvidia-smi -L failed" in first.output


def test_version_change_moves_all_packages_and_switches_units(
    runtime_lab: RunningLab, policy: dict[str, object], converged: tuple[Run, Run], tmp_path: Path
) -> None:
    host = runtime_lab.host_for("debian12")
    upstream_new = NEW.split("-")[0]  # the upstream form: "any revision of 1.18.0"
    try:
        up = converge(
            runtime_lab.inventory,
            ROLES,
            {**policy, "nvidia_container_toolkit_version": upstream_new},
            tmp_path / "up",
            limit=host,
        )
        assert up.returncode == 0, up.output[-3000:]
        assert versions(runtime_lab, host) == dict.fromkeys(PACKAGES, NEW)
        assert set(PACKAGES) <= set(sh(runtime_lab, host, "apt-mark showhold").split())
        fragment = sh(
            runtime_lab, host, "systemctl show -P FragmentPath nvidia-cdi-refresh.service"
        )
        assert fragment.strip().endswith("/lib/systemd/system/nvidia-cdi-refresh.service")
        assert not fragment.startswith("/etc/")
        again = converge(
            runtime_lab.inventory,
            ROLES,
            {**policy, "nvidia_container_toolkit_version": upstream_new},
            tmp_path / "again",
            limit=host,
        )
        assert again.recap[host].changed == 0, again.output[-3000:]
    finally:
        down = converge(runtime_lab.inventory, ROLES, policy, tmp_path / "down", limit=host)
    assert down.returncode == 0, down.output[-3000:]
    assert versions(runtime_lab, host) == dict.fromkeys(PACKAGES, OLD)
    fragment = sh(runtime_lab, host, "systemctl show -P FragmentPath nvidia-cdi-refresh.service")
    assert fragment.strip() == "/etc/systemd/system/nvidia-cdi-refresh.service"


def test_default_runtime_on_and_off(
    runtime_lab: RunningLab, policy: dict[str, object], converged: tuple[Run, Run], tmp_path: Path
) -> None:
    host = runtime_lab.host_for("debian13")
    info = "docker info --format '{{.DefaultRuntime}}'"
    on = {**policy, "nvidia_container_toolkit_default_runtime": True}
    try:
        run = converge(runtime_lab.inventory, ROLES, on, tmp_path / "on", limit=host)
        assert run.returncode == 0, run.output[-3000:]
        assert json.loads(sh(runtime_lab, host, "cat /etc/docker/daemon.json"))[
            "default-runtime"
        ] == ("nvidia")
        assert sh(runtime_lab, host, info).strip() == "nvidia"
    finally:
        off = converge(runtime_lab.inventory, ROLES, policy, tmp_path / "off", limit=host)
    assert off.returncode == 0, off.output[-3000:]
    assert "default-runtime" not in json.loads(sh(runtime_lab, host, "cat /etc/docker/daemon.json"))
    assert sh(runtime_lab, host, info).strip() == "runc"


def test_default_runtime_without_the_toolkit_role_is_refused(
    runtime_lab: RunningLab, policy: dict[str, object], converged: tuple[Run, Run], tmp_path: Path
) -> None:
    host = runtime_lab.host_for("debian12")
    bad = {
        **policy,
        "nvidia_container_toolkit_default_runtime": True,
        "gpuprov_roles": ["docker"],
    }
    run = converge(runtime_lab.inventory, ("docker",), bad, tmp_path, limit=host)
    assert run.returncode != 0
    assert run.recap[host].changed == 0
    assert "nvidia_container_toolkit_default_runtime is true but the role" in run.output
