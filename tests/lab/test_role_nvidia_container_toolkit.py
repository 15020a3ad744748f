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

import base64
import json
import os
import shutil
import subprocess
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
# The toolkit's own cases (keys, versions, CDI) converge the toolkit role alone on hosts the
# module's first converge gave Docker: a converge of both roles costs a third more module runs
# (CI is CPU-bound), and the docker role's own cases, its idempotence included, are
# tests/lab/test_role_docker.py's and this module's first, second and check-mode runs.
TOOLKIT = ("nvidia_container_toolkit",)
PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
KEYRING = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
SOURCES = "/etc/apt/sources.list.d/nvidia-container-toolkit.sources"
OLD, NEW = TOOLKIT_VERSIONS  # 1.17.8-1 ships no CDI refresh units, 1.18.0-1 does
OWN_UNIT = "/usr/local/lib/systemd/system/nvidia-cdi-refresh.service"  # the role's, for 1.17


@pytest.fixture(scope="module")
def runtime_lab(running_or_session_lab: Callable[[str], RunningLab]) -> RunningLab:
    return running_or_session_lab("GPUPROV_TEST_LAB")


@pytest.fixture(scope="module")
def fingerprint(runtime_lab: RunningLab) -> str:
    """The throwaway key's fingerprint: what the lab's policy expects instead of NVIDIA's."""
    return ensure_served(STATE_DIR, network=lab_network(runtime_lab.name)).fingerprint


@pytest.fixture(scope="module")
def policy(runtime_lab: RunningLab, fingerprint: str) -> dict[str, object]:
    # The lab policy names the throwaway key's fingerprint (here until aptrepo's lab_policy
    # passes it itself; its value wins).
    return {
        "nvidia_container_toolkit_repo_key_fingerprint": fingerprint,
        **lab_repo_vars(runtime_lab.name),
        "nvidia_container_toolkit_version": OLD,
    }


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
    runtime_lab: RunningLab, policy: dict[str, object], converged: tuple[Run, Run], fingerprint: str
) -> None:
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
    run = converge(runtime_lab.inventory, TOOLKIT, policy, tmp_path, limit=host)
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
        # 1.17.8 ships no refresh units: the role's own, where no package puts units.
        fragment = sh(
            runtime_lab, host, "systemctl show -P FragmentPath nvidia-cdi-refresh.service"
        )
        assert fragment.strip() == OWN_UNIT
        dropin = sh(runtime_lab, host, "systemctl cat nvidia-cdi-refresh.service")
        assert "ExecStart=/usr/bin/nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in dropin
        assert "Environment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/etc/cdi/nvidia.yaml" in dropin
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
            TOOLKIT,
            {**policy, "nvidia_container_toolkit_version": upstream_new},
            tmp_path / "up",
            limit=host,
        )
        assert up.returncode == 0, up.output[-3000:]
        assert versions(runtime_lab, host) == dict.fromkeys(PACKAGES, NEW)
        assert set(PACKAGES) <= set(sh(runtime_lab, host, "apt-mark showhold").split())
        # The package's own units, wherever its version ships them; none of ours is left.
        fragment = sh(
            runtime_lab, host, "systemctl show -P FragmentPath nvidia-cdi-refresh.service"
        ).strip()
        assert fragment in sh(runtime_lab, host, "dpkg-query -L nvidia-container-toolkit-base")
        assert sh(runtime_lab, host, f"test -e {OWN_UNIT}; echo $?", ok=False).strip() == "1"
        again = converge(
            runtime_lab.inventory,
            TOOLKIT,
            {**policy, "nvidia_container_toolkit_version": upstream_new},
            tmp_path / "again",
            limit=host,
        )
        assert again.recap[host].changed == 0, again.output[-3000:]
    finally:
        down = converge(runtime_lab.inventory, TOOLKIT, policy, tmp_path / "down", limit=host)
    assert down.returncode == 0, down.output[-3000:]
    assert versions(runtime_lab, host) == dict.fromkeys(PACKAGES, OLD)
    fragment = sh(runtime_lab, host, "systemctl show -P FragmentPath nvidia-cdi-refresh.service")
    assert fragment.strip() == OWN_UNIT


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


def put(lab: RunningLab, host: str, path: str, text: str) -> None:
    encoded = base64.b64encode(text.encode()).decode()
    sh(lab, host, f"echo {encoded} | base64 -d > {path}")


def rotated_key(fingerprint: str, work: Path) -> str:
    """The served key re-issued with a new expiry: new key material, the same fingerprint (a
    copy of the throwaway key's home, so the served key stays as it is)."""
    home = work / "gnupg"
    shutil.copytree(STATE_DIR / "gnupg", home, ignore=shutil.ignore_patterns("S.*"))
    env = {**os.environ, "GNUPGHOME": str(home)}
    gpg = ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    listing = subprocess.run(
        [*gpg, "--with-colons", "--list-keys", fingerprint],
        env=env,
        check=True,
        capture_output=True,
    ).stdout.decode()
    created = int(next(ln.split(":")[5] for ln in listing.splitlines() if ln.startswith("pub:")))
    # The new self-signature dated just after the key's creation, so that it binds the key
    # at the time the repository was signed (Debian 13's sqv checks that).
    faked = ["--faked-system-time", f"{created + 1}!"]
    subprocess.run([*gpg, *faked, "--quick-set-expire", fingerprint, "3y"], env=env, check=True)
    done = subprocess.run(
        [*gpg, "--armor", "--export", fingerprint], env=env, check=True, capture_output=True
    )
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False)
    return done.stdout.decode()


def test_a_rotated_key_is_fetched_again_and_picked_up(
    runtime_lab: RunningLab,
    policy: dict[str, object],
    converged: tuple[Run, Run],
    fingerprint: str,
    tmp_path: Path,
) -> None:
    host = runtime_lab.host_for("debian13")
    put(runtime_lab, host, "/root/rotated-key.asc", rotated_key(fingerprint, tmp_path))
    rotated = {**policy, "nvidia_container_toolkit_repo_key_url": "file:///root/rotated-key.asc"}
    try:
        run = converge(runtime_lab.inventory, TOOLKIT, rotated, tmp_path / "rotated", limit=host)
        assert run.returncode == 0, run.output[-3000:]
        for task in ("Save the verified repository key", "Write the repository keyring"):
            assert "changed: [" + host + "]" in run.output.split(task)[1][:400], task
        keys = sh(runtime_lab, host, f"gpg --batch --show-keys --with-colons {KEYRING}")
        expiry = next(line.split(":")[6] for line in keys.splitlines() if line.startswith("pub:"))
        assert expiry, "the keyring still holds the key without an expiry date"
        assert "NO_PUBKEY" not in sh(runtime_lab, host, "apt-get update 2>&1")
    finally:
        back = converge(runtime_lab.inventory, TOOLKIT, policy, tmp_path / "back", limit=host)
    assert back.returncode == 0, back.output[-3000:]
    assert "changed: [" + host + "]" in back.output.split("Write the repository keyring")[1][:400]


def test_a_key_with_another_fingerprint_stops_the_role_before_any_change(
    runtime_lab: RunningLab,
    policy: dict[str, object],
    converged: tuple[Run, Run],
    fingerprint: str,
    tmp_path: Path,
) -> None:
    host = runtime_lab.host_for("debian12")
    make = (
        "export GNUPGHOME=$(mktemp -d) && "
        "gpg --batch --passphrase '' --quick-gen-key 'not the repository <x@invalid>' "
        "ed25519 sign never 2>/dev/null && gpg --batch --armor --export > /root/wrong-key.asc && "
        "gpg --batch --with-colons --show-keys /root/wrong-key.asc | grep -m1 '^fpr' | "
        'cut -d: -f10 && rm -rf "$GNUPGHOME"'
    )
    wrong = sh(runtime_lab, host, make).strip()
    state = f"sha256sum {KEYRING} {SOURCES}; dpkg-query -W nvidia-container-toolkit"
    before = sh(runtime_lab, host, state)
    bad = {**policy, "nvidia_container_toolkit_repo_key_url": "file:///root/wrong-key.asc"}
    run = converge(runtime_lab.inventory, TOOLKIT, bad, tmp_path, limit=host)
    assert run.returncode != 0
    assert run.recap[host].failed == 1 and run.recap[host].changed == 0, run.output[-3000:]
    assert f"has fingerprint {wrong}, but" in run.output, run.output[-3000:]
    assert f"nvidia_container_toolkit_repo_key_fingerprint is {fingerprint}" in run.output
    assert "Nothing was installed" in run.output
    # The toolkit tasks after the check never ran.
    assert "Install the toolkit packages" not in run.output
    assert sh(runtime_lab, host, state) == before


# A stand-in for the driver role's result (as test_role_mig.py's, in the CUDA repository's
# layout): a built module for the simulated kernel listed in modules.dep (what depmod leaves,
# and what the refresh path unit watches), NVML and /usr/bin/nvidia-smi, which gpusim detects
# as an installed driver, so `nvidia-smi -L` lists the profile's GPUs. The modules.dep line
# goes under the machine's real release too: systemd (PID 1, without gpusim's uname shim)
# expands the refresh units' %v to it.
STAND_IN_DRIVER = r"""
set -e
rel=$(uname -r)
mkdir -p /lib/modules/$rel/updates/dkms /usr/lib/x86_64-linux-gnu
printf 'gpuprov-test-stand-in\0version=580.159.04\0license=Dual MIT/GPL\0' \
    > /lib/modules/$rel/updates/dkms/nvidia.ko
for r in $rel $(cat /proc/sys/kernel/osrelease); do
    mkdir -p /lib/modules/$r && echo 'updates/dkms/nvidia.ko:' >> /lib/modules/$r/modules.dep
done
: > /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04
install -m 0755 /dev/null /usr/bin/nvidia-smi
gpusim sync
modprobe nvidia
nvidia-smi -L
"""
REMOVE_STAND_IN_DRIVER = r"""
set -e
modprobe -r nvidia || true
rel=$(uname -r)
rm -f /lib/modules/$rel/updates/dkms/nvidia.ko /usr/bin/nvidia-smi \
    /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04
for r in $rel $(cat /proc/sys/kernel/osrelease); do
    sed -i '/^updates\/dkms\/nvidia.ko:/d' /lib/modules/$r/modules.dep
done
gpusim sync
rm -f /etc/cdi/nvidia.yaml /var/run/cdi/nvidia.yaml
"""
DROP_IN_1_18_0 = "/etc/containerd/config.d/99-nvidia.toml"  # packages.yaml behaviour 1.18.0
SPECS = "ls /etc/cdi/nvidia.yaml /var/run/cdi/nvidia.yaml 2>/dev/null || true"


def test_toolkit_1_18_leaves_one_fresh_cdi_spec_and_reruns_without_restarts(
    runtime_lab: RunningLab, policy: dict[str, object], converged: tuple[Run, Run], tmp_path: Path
) -> None:
    host = runtime_lab.host_for("debian12")
    config = "/etc/containerd/config.toml"
    sh(runtime_lab, host, f"cp -a {config} /root/config.toml.before 2>/dev/null || true")
    # containerd as before any toolkit: 1.18 then registers the runtime in its drop-in,
    # which a rerun must recognise (it reads only config.toml otherwise, and restarts).
    sh(runtime_lab, host, f"sed -i '/runtimes\\.nvidia/,$d' {config}")
    gpus = sh(runtime_lab, host, STAND_IN_DRIVER)
    uuids = [line.split("UUID: ")[1].rstrip(")") for line in gpus.splitlines() if "UUID" in line]
    assert uuids
    new = {
        **policy,
        "nvidia_container_toolkit_version": NEW,
        "nvidia_container_toolkit_configure_containerd": True,
    }
    try:
        first = converge(runtime_lab.inventory, TOOLKIT, new, tmp_path / "first", limit=host)
        assert first.returncode == 0, first.output[-3000:]
        assert sh(runtime_lab, host, SPECS).split() == ["/etc/cdi/nvidia.yaml"]
        spec = sh(runtime_lab, host, "cat /etc/cdi/nvidia.yaml")
        assert all(f'name: "{uuid}"' in spec for uuid in uuids)
        dropin = sh(runtime_lab, host, f"cat {DROP_IN_1_18_0}; grep -c nvidia {config} || true")
        assert "runtimes.nvidia]" in dropin, dropin
        again = converge(runtime_lab.inventory, TOOLKIT, new, tmp_path / "again", limit=host)
        assert again.recap[host].changed == 0, again.output[-3000:]
        assert "RUNNING HANDLER" not in again.output  # no docker or containerd restart
        # What the MIG role does after a layout change: the refresh unit writes the same spec.
        sh(runtime_lab, host, "rm /etc/cdi/nvidia.yaml && systemctl start nvidia-cdi-refresh")
        assert sh(runtime_lab, host, SPECS).split() == ["/etc/cdi/nvidia.yaml"]
        assert sh(runtime_lab, host, "cat /etc/cdi/nvidia.yaml") == spec
        # A second spec where CDI looks last (and which would win) is removed on the next run.
        sh(runtime_lab, host, "mkdir -p /var/run/cdi && cp /etc/cdi/nvidia.yaml /var/run/cdi/")
        third = converge(runtime_lab.inventory, TOOLKIT, new, tmp_path / "third", limit=host)
        assert third.recap[host].changed == 1, third.output[-3000:]
        assert sh(runtime_lab, host, SPECS).split() == ["/etc/cdi/nvidia.yaml"]
    finally:
        sh(runtime_lab, host, REMOVE_STAND_IN_DRIVER)
        restore = f"test -e /root/config.toml.before && cp -a /root/config.toml.before {config}"
        sh(runtime_lab, host, f"{restore}; rm -f /etc/containerd/con*.d/99-nvidia.toml", ok=False)
        sh(runtime_lab, host, "systemctl restart containerd docker")
        down = converge(runtime_lab.inventory, TOOLKIT, policy, tmp_path / "down", limit=host)
    assert down.returncode == 0, down.output[-3000:]
    assert versions(runtime_lab, host) == dict.fromkeys(PACKAGES, OLD)
