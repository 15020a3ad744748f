"""The verification suite's tests run against recorded host outputs (no host, no Docker).

A `RecordedHost` answers testinfra's calls (run, file, exists, service) from real outputs: the
2x H200 device probe (`tests/unit/data/device-h200x2-probe`: driver 580.159.04 open modules
from no package, no Docker), the real fixture, and the derived `h200x2-mig` variant (GPU 0 in
MIG mode). Each suite test is called as pytest would, with the host and its expectation.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.mig_apply import QUERY
from orchestrator.parsers._text import split_exit
from orchestrator.verify.expect import Expectation, expectation_from_vars
from orchestrator.verify.suite import test_driver as suite_driver
from orchestrator.verify.suite import test_mig as suite_mig
from orchestrator.verify.suite import test_runtime as suite_runtime

UNIT = Path(__file__).resolve().parent
DEVICE = UNIT / "data" / "device-h200x2-probe"
MIG_HOST = UNIT / "fixtures_derived" / "h200x2-mig"
PERSISTENCE = "index,persistence_mode"
FLEET_LAYOUTS: dict[str, Any] = {
    "h200-mixed-gpu0": [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.71gb": 1, "2g.35gb": 1}},
    ],
    "h200-gpu0-as-probed": [
        {
            "devices": [0],
            "mig-enabled": True,
            "mig-devices": {"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2},
        },
        {"devices": [1], "mig-enabled": False},
    ],
    "h200-all-3g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.71gb": 2}}],
}


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str = ""


@dataclass(frozen=True)
class File:
    exists: bool
    content_string: str = ""


@dataclass(frozen=True)
class Service:
    is_running: bool
    is_enabled: bool


@dataclass
class RecordedHost:
    """testinfra's Host API over recorded outputs; an unknown command exits 127."""

    commands: dict[str, Result] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    services: dict[str, Service] = field(default_factory=dict)

    def run(self, command: str, *args: str) -> Result:
        line = command % tuple(shlex.quote(a) for a in args) if args else command
        return self.commands.get(line, Result(127, "", f"{line.split()[0]}: not found"))

    def file(self, path: str) -> File:
        return File(path in self.files, self.files.get(path, ""))

    def exists(self, command: str) -> bool:
        return any(c.split()[0] == command for c in self.commands)

    def service(self, name: str) -> Service:
        return self.services.get(name, Service(False, False))


def _body(path: Path) -> str:
    return split_exit(path.read_text()).body


def _columns(csv: Path, fields: str) -> str:
    """The real `--query-gpu` CSV cut down to `fields` (noheader), as that query prints it."""
    lines = _body(csv).splitlines()
    header = [h.strip() for h in lines[0].split(",")]
    wanted = [header.index(f) for f in fields.split(",")]
    rows = ([c.strip() for c in line.split(",")] for line in lines[1:] if line.strip())
    return "".join(", ".join(row[i] for i in wanted) + "\n" for row in rows)


def recorded_host(probe: Path, **extra: Result) -> RecordedHost:
    smi = {
        "nvidia-smi -L": "nvidia-smi-L.txt",
        "nvidia-smi --version": "nvidia-smi-version.txt",
        "nvidia-smi mig -lgip": "nvidia-smi-mig-lgip.txt",
        "nvidia-smi mig -lgipp": "nvidia-smi-mig-lgipp.txt",
        "nvidia-smi mig -lgi": "nvidia-smi-mig-lgi.txt",
        "nvidia-smi mig -lci": "nvidia-smi-mig-lci.txt",
    }
    commands = {
        cmd: Result(split_exit((probe / name).read_text()).exit_code or 0, _body(probe / name))
        for cmd, name in smi.items()
        if (probe / name).exists()
    }
    csv = probe / "nvidia-smi-query-gpu.csv"
    for fields in (QUERY, PERSISTENCE):
        commands[f"nvidia-smi --query-gpu={fields} --format=csv,noheader"] = Result(
            0, _columns(csv, fields)
        )
    commands["uname -r"] = Result(0, _body(probe / "uname-r.txt"))
    commands.update(extra)
    files = {
        "/proc/driver/nvidia/version": _body(probe / "proc-driver-nvidia-version.txt"),
        "/proc/modules": _body(probe / "lsmod.txt"),
        "/proc/cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/vda ro\n",
    }
    return RecordedHost(commands, files)


def expectation(**variables: Any) -> Expectation:
    return expectation_from_vars("gpu-1", variables)


DEVICE_PLAN = {
    "gpuprov_roles": ["nvidia_driver"],
    "nvidia_driver_version": "580.159.04",
    "nvidia_driver_flavour": "open",
    "nvidia_driver_fabricmanager": False,
}


# --- the real device: driver 580 open from no package, no Docker --------------------------


def test_device_loaded_module_and_nvml_match_the_plan() -> None:
    host = recorded_host(DEVICE)
    suite_driver.test_loaded_module_matches_plan(host, expectation(**DEVICE_PLAN))
    suite_driver.test_nvml_matches_loaded_module(host, expectation(**DEVICE_PLAN))


def test_device_other_planned_version_fails_naming_both() -> None:
    host = recorded_host(DEVICE)
    plan = {**DEVICE_PLAN, "nvidia_driver_version": "580.95.05"}
    with pytest.raises(AssertionError, match=r"loaded module is 580\.159\.04.*wants 580\.95\.05"):
        suite_driver.test_loaded_module_matches_plan(host, expectation(**plan))


@pytest.mark.parametrize("planned", [True, False])
def test_device_other_planned_branch_fails_unpinned(planned: bool) -> None:
    """issue 26: an unpinned plan of R575 on a host running 580.159.04 passed every check
    (Expectation had no branch); the planned branch is now checked, from the plan document
    as from the inventory."""
    host = recorded_host(DEVICE)
    variables = {**DEVICE_PLAN, "nvidia_driver_version": "", "nvidia_driver_branch": "575"}
    expect = expectation_from_vars("gpu-1", variables, planned=planned)
    assert (expect.driver_branch, expect.driver_version) == (575, None)
    with pytest.raises(
        AssertionError, match=r"loaded module is 580\.159\.04, of branch R580; the plan wants R575"
    ):
        suite_driver.test_loaded_module_matches_plan(host, expect)
    suite_driver.test_loaded_module_matches_plan(
        host,
        expectation_from_vars("gpu-1", {**variables, "nvidia_driver_branch": 580}, planned=planned),
    )


def test_recorded_packages_of_another_branch_fail() -> None:
    rows = {"nvidia-kernel-open-dkms": ("580.159.04-1", True)}
    held = ["nvidia-kernel-open-dkms"]
    host, _ = _role_recorded(rows, "580.159.04", held)
    plan = expectation_from_vars(
        "gpu-1",
        {**DEVICE_PLAN, "nvidia_driver_version": "", "nvidia_driver_branch": "590"},
        planned=True,
    )
    with pytest.raises(
        AssertionError, match=r"installed driver packages are 580\.159\.04.*wants R590"
    ):
        suite_driver.test_driver_packages_at_planned_version_and_held(host, plan)


def test_device_proprietary_plan_fails_on_open_modules() -> None:
    host = recorded_host(DEVICE)
    plan = {**DEVICE_PLAN, "nvidia_driver_flavour": "proprietary"}
    with pytest.raises(AssertionError, match="planned proprietary kernel modules"):
        suite_driver.test_loaded_module_matches_plan(host, expectation(**plan))


def test_device_without_driver_packages_skips_package_check_with_reason() -> None:
    host = recorded_host(DEVICE)
    host.commands[_dpkg_command()] = Result(1, "")
    with pytest.raises(pytest.skip.Exception, match=r"580\.159\.04, open\) comes from no package"):
        suite_driver.test_driver_packages_at_planned_version_and_held(
            host, expectation(**DEVICE_PLAN)
        )


def test_device_persistence_mode_stands_in_for_a_missing_daemon() -> None:
    host = recorded_host(DEVICE)
    host.commands[_dpkg_command()] = Result(1, "")
    suite_driver.test_persistenced_active_and_enabled(host, expectation(**DEVICE_PLAN))
    off = _columns(DEVICE / "nvidia-smi-query-gpu.csv", PERSISTENCE).replace(
        "1, Enabled", "1, Disabled"
    )
    host.commands[f"nvidia-smi --query-gpu={PERSISTENCE} --format=csv,noheader"] = Result(0, off)
    with pytest.raises(AssertionError, match=r"persistence mode is off on GPUs \[1\]"):
        suite_driver.test_persistenced_active_and_enabled(host, expectation(**DEVICE_PLAN))


def test_device_docker_and_toolkit_tests_skip_when_not_planned() -> None:
    plan = expectation(**DEVICE_PLAN)
    with pytest.raises(pytest.skip.Exception, match="docker is not in this host's plan"):
        suite_runtime.docker.__wrapped__(plan)  # type: ignore[attr-defined]
    with pytest.raises(pytest.skip.Exception, match="nvidia_container_toolkit is not in"):
        suite_runtime.toolkit.__wrapped__(plan)  # type: ignore[attr-defined]


def test_device_nouveau_absent_from_kernel_skips_with_reason() -> None:
    host = recorded_host(DEVICE)
    host.commands["modinfo -k 6.18.44-fc-v657-gpu nouveau"] = Result(1, "")
    with pytest.raises(pytest.skip.Exception, match="has no nouveau module"):
        suite_driver.test_nouveau_blacklisted(host, expectation(**DEVICE_PLAN))
    host.commands["modinfo -k 6.18.44-fc-v657-gpu nouveau"] = Result(0, "filename: nouveau.ko")
    with pytest.raises(pytest.fail.Exception, match="nouveau is not blacklisted"):
        suite_driver.test_nouveau_blacklisted(host, expectation(**DEVICE_PLAN))
    host.files["/proc/cmdline"] = "ro modprobe.blacklist=nouveau,floppy"
    suite_driver.test_nouveau_blacklisted(host, expectation(**DEVICE_PLAN))
    host.files["/proc/modules"] += "nouveau 3096576 0 - Live 0xffffffffc1000000\n"
    with pytest.raises(AssertionError, match="nouveau is loaded"):
        suite_driver.test_nouveau_blacklisted(host, expectation(**DEVICE_PLAN))
    del host.files["/proc/modules"]  # a kernel without module support: the blacklist decides
    suite_driver.test_nouveau_blacklisted(host, expectation(**DEVICE_PLAN))


# --- packages (dpkg), as Ubuntu's and Debian's driver packages show them ------------------


def _dpkg_command(*extra: str) -> str:
    """The command hoststate.packages runs for the driver globs (and `extra` names)."""
    globs = " ".join(f"'{g}'" for g in (*suite_driver.DRIVER_PACKAGE_GLOBS, *extra))
    return (
        "dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\t${Status}\\n' " + globs
    )


def _dpkg(rows: Mapping[str, tuple[str, bool]]) -> Result:
    lines = [
        f"{name}\t{version}\t{'hi ' if held else 'ii '}\t"
        f"{'hold' if held else 'install'} ok installed"
        for name, (version, held) in rows.items()
    ]
    return Result(0, "\n".join(lines) + "\n")


def _role_recorded(
    rows: Mapping[str, tuple[str, bool]], version: str, held: list[str]
) -> tuple[RecordedHost, str]:
    """A host showing dpkg `rows`, the role's record of `version` and `held`; its dpkg command."""
    command = _dpkg_command(*held)
    host = recorded_host(DEVICE, **{command: _dpkg(rows)})
    record = {"version": version, "held": held}
    host.files["/var/lib/gpuprov/nvidia_driver.json"] = json.dumps(record)
    return host, command


UBUNTU_580 = {
    "nvidia-driver-580-server-open": ("580.159.04-0ubuntu0.24.04.1", True),
    "nvidia-dkms-580-server-open": ("580.159.04-0ubuntu0.24.04.1", True),
    "libnvidia-compute-580-server": ("580.159.04-0ubuntu0.24.04.1", True),
    "nvidia-utils-580-server": ("580.159.04-0ubuntu0.24.04.1", True),
    "nvidia-container-toolkit": ("1.17.8-1", True),
}


def test_ubuntu_580_server_open_packages_pass_when_held() -> None:
    host = recorded_host(DEVICE, **{_dpkg_command(): _dpkg(UBUNTU_580)})
    suite_driver.test_driver_packages_at_planned_version_and_held(host, expectation(**DEVICE_PLAN))


def test_unheld_driver_package_fails_naming_it() -> None:
    rows = {**UBUNTU_580, "nvidia-dkms-580-server-open": ("580.159.04-0ubuntu0.24.04.1", False)}
    host = recorded_host(DEVICE, **{_dpkg_command(): _dpkg(rows)})
    with pytest.raises(AssertionError, match=r"not held.*\['nvidia-dkms-580-server-open'\]"):
        suite_driver.test_driver_packages_at_planned_version_and_held(
            host, expectation(**DEVICE_PLAN)
        )


def test_role_record_holds_packages_versioned_apart() -> None:
    """Debian: nvidia-persistenced 535.171.04 beside a 535.261.03 driver, libcuda1 (no glob
    matches it); the role held both."""
    rows = {
        "nvidia-open-kernel-dkms": ("535.261.03-1", True),
        "libcuda1": ("535.261.03-1", True),
        "nvidia-kernel-support": ("535.261.03-1", False),  # a dependency, not held by the role
        "nvidia-persistenced": ("535.171.04-1~deb12u1", False),
    }
    held = ["nvidia-open-kernel-dkms", "libcuda1", "nvidia-persistenced"]
    host, command = _role_recorded(rows, "535.261.03", held)
    plan = expectation(**{**DEVICE_PLAN, "nvidia_driver_version": "535.261.03"})
    with pytest.raises(AssertionError, match=r"not held.*\['nvidia-persistenced'\]"):
        suite_driver.test_driver_packages_at_planned_version_and_held(host, plan)
    rows["nvidia-persistenced"] = ("535.171.04-1~deb12u1", True)
    host.commands[command] = _dpkg(rows)
    suite_driver.test_driver_packages_at_planned_version_and_held(host, plan)
    del rows["libcuda1"]
    host.commands[command] = _dpkg(rows)
    with pytest.raises(AssertionError, match=r"installed and held are gone: \['libcuda1'\]"):
        suite_driver.test_driver_packages_at_planned_version_and_held(host, plan)


def test_unpinned_plan_checks_the_version_the_role_recorded() -> None:
    """The CUDA default leaves the version to the host: the packages must be at, and held at,
    what the role resolved and recorded (the check used to skip there)."""
    rows = {
        "nvidia-kernel-open-dkms": ("580.159.04-1", True),
        "nvidia-driver-cuda": ("580.159.04-1", False),
    }
    held = ["nvidia-kernel-open-dkms", "nvidia-driver-cuda"]
    host, command = _role_recorded(rows, "580.159.04", held)
    plan = expectation(**{**DEVICE_PLAN, "nvidia_driver_version": ""})
    with pytest.raises(AssertionError, match=r"not held.*\['nvidia-driver-cuda'\]"):
        suite_driver.test_driver_packages_at_planned_version_and_held(host, plan)
    rows["nvidia-driver-cuda"] = ("580.159.04-1", True)
    host.commands[command] = _dpkg(rows)
    suite_driver.test_driver_packages_at_planned_version_and_held(host, plan)


# --- MIG: the derived h200x2-mig host (GPU 0: 3g.71gb + 2g.35gb + 2x 1g.18gb) ---------------


def mig_plan(layout: str | None) -> Expectation:
    return expectation(
        gpuprov_roles=["nvidia_driver", "nvidia_container_toolkit", "mig"],
        mig_layout=layout,
        mig_configs=FLEET_LAYOUTS,
    )


def test_mig_skips_when_not_planned() -> None:
    with pytest.raises(pytest.skip.Exception, match="MIG is not in this host's plan"):
        suite_mig.planned_mig.__wrapped__(mig_plan(None))  # type: ignore[attr-defined]


def test_mig_layout_as_planned_passes() -> None:
    host = recorded_host(MIG_HOST)
    suite_mig.test_mig_mode_as_planned(host, mig_plan("h200-gpu0-as-probed"))
    suite_mig.test_mig_instances_as_planned(host, mig_plan("h200-gpu0-as-probed"))


def test_wrong_mig_instances_fail_with_both_layouts() -> None:
    host = recorded_host(MIG_HOST)
    with pytest.raises(
        AssertionError,
        match=r"GPU 0: GPU instances 1g\.18gb x2, 2g\.35gb x1, 3g\.71gb x1, layout wants "
        r"2g\.35gb x1, 3g\.71gb x1",
    ):
        suite_mig.test_mig_instances_as_planned(host, mig_plan("h200-mixed-gpu0"))


def test_mig_mode_off_where_layout_enables_it_fails() -> None:
    host = recorded_host(MIG_HOST)
    with pytest.raises(AssertionError, match=r"GPU 1: MIG mode Disabled \(pending Disabled\)"):
        suite_mig.test_mig_mode_as_planned(host, mig_plan("h200-all-3g"))


def test_mig_on_where_layout_disables_it_fails() -> None:
    host = recorded_host(MIG_HOST)
    with pytest.raises(AssertionError, match=r"GPU 0: MIG mode Enabled .* wants Disabled"):
        suite_mig.test_mig_mode_as_planned(host, mig_plan("disabled"))
    suite_mig.test_mig_mode_as_planned(recorded_host(DEVICE), mig_plan("disabled"))


def test_undefined_layout_fails_with_the_known_ones() -> None:
    with pytest.raises(pytest.fail.Exception, match="h200-all-3g"):
        suite_mig.test_mig_mode_as_planned(recorded_host(MIG_HOST), mig_plan("no-such"))


def _cdi(names: list[str]) -> str:
    devices = "".join(f'  - name: "{n}"\n    containerEdits: {{}}\n' for n in names)
    return f'cdiVersion: "0.5.0"\nkind: nvidia.com/gpu\ndevices:\n{devices}'


def test_cdi_spec_lists_mig_devices() -> None:
    host = recorded_host(MIG_HOST)
    names = ["0", "1", "all", "0:0", "0:1", "0:2", "0:3"]
    host.files["/etc/cdi/nvidia.yaml"] = _cdi(names)
    suite_mig.test_cdi_spec_lists_mig_devices(host, mig_plan("h200-gpu0-as-probed"))
    suite_runtime.test_cdi_spec_lists_every_gpu(host, mig_plan("h200-gpu0-as-probed"))
    host.files["/etc/cdi/nvidia.yaml"] = _cdi([n for n in names if n != "0:2"])
    with pytest.raises(AssertionError, match=r"lacks MIG devices \['0:2'\]"):
        suite_mig.test_cdi_spec_lists_mig_devices(host, mig_plan("h200-gpu0-as-probed"))


def test_cdi_mig_check_skips_without_the_toolkit() -> None:
    plan = replace(mig_plan("h200-gpu0-as-probed"), roles=("nvidia_driver", "mig"))
    with pytest.raises(pytest.skip.Exception, match="nvidia_container_toolkit is not in"):
        suite_mig.test_cdi_spec_lists_mig_devices(recorded_host(MIG_HOST), plan)
