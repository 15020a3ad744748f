"""The planner, on the real H200 fixture and variants derived from it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path

import pytest
from _helpers import H200 as REAL

from orchestrator.catalog import default_catalog
from orchestrator.errors import EXIT_BAD_INPUT, BadInputError, PolicyError
from orchestrator.facts import HostFacts
from orchestrator.parsers import parse_host
from orchestrator.plan import HostPlan, RolePlan, plan_fleet, plan_host
from orchestrator.policy import load_policy

NO_DRIVER_FILES = ("nvidia-smi", "proc-driver-nvidia", "nvidia-smi-")

DEBIAN_12 = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
DEBIAN_12 += "VERSION_CODENAME=bookworm\n# exit=0\n"
DEBIAN_13 = DEBIAN_12.replace("12", "13").replace("bookworm", "trixie")
UBUNTU_2204 = 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\n'
UBUNTU_2204 += "VERSION_CODENAME=jammy\n# exit=0\n"


def real_raw() -> dict[str, str]:
    return {p.name: p.read_text() for p in REAL.iterdir() if p.is_file()}


def pci_line(addr: str, device: int, cls: int, driver: str = "") -> str:
    link = 'current_link_speed="32.0 GT/s PCIe" current_link_width=16 '
    link += 'max_link_speed="32.0 GT/s PCIe" max_link_width=16'
    return (
        f"{addr} vendor=0x10de device={device:#06x} class={cls:#08x} subsystem_vendor=0x10de "
        f"subsystem_device=0x0000 {link} numa_node=0 driver={driver}"
    )


def variant(
    gpus: Mapping[int, int],
    nvswitches: tuple[int, int] | None = None,
    *,
    os_release: str = UBUNTU_2204,
    with_driver: bool = False,
    simulated: bool = False,
) -> dict[str, str]:
    """The real fixture's host, with other GPUs (device id -> count) and NVSwitches on its bus.

    Without `with_driver` every file that needs a loaded driver is dropped (no driver yet).
    """
    raw = {k: v for k, v in real_raw().items() if with_driver or not k.startswith(NO_DRIVER_FILES)}
    lines = [ln for ln in raw["sysfs-pci-devices.txt"].splitlines() if "vendor=0x10de" not in ln]
    lines = [ln for ln in lines if not ln.startswith("# exit")]
    bus = 0x10
    for device, count in gpus.items():
        for _ in range(count):
            lines.append(pci_line(f"0000:{bus:02x}:00.0", device, 0x030200))
            bus += 1
    if nvswitches:
        device, count = nvswitches
        for _ in range(count):
            lines.append(pci_line(f"0000:{bus:02x}:00.0", device, 0x068000))
            bus += 1
    raw["sysfs-pci-devices.txt"] = "\n".join(lines) + "\n# exit=0\n"
    raw["os-release.txt"] = os_release
    if simulated:
        raw["gpusim.txt"] = "profile: p5.48xlarge\n# exit=0\n"
    return raw


def plan(
    raw: Mapping[str, str], host: str = "node", today: dt.date | None = None, **policy: object
) -> HostPlan:
    facts = parse_host(host, raw)
    return plan_host(facts, load_policy(host, policy), default_catalog(), today=today)


def role(p: HostPlan, name: str) -> RolePlan:
    return next(r for r in p.roles if r.name == name)


# --- the real host -----------------------------------------------------------------------


def test_real_h200_host() -> None:
    p = plan(real_raw(), "h200")
    assert not p.blockers
    assert [r.name for r in p.roles] == ["nvidia_driver", "docker", "nvidia_container_toolkit"]
    assert p.gpu_summary == "2x H200 SXM 141GB"
    assert p.nvswitches == 0
    driver = role(p, "nvidia_driver")
    assert dict(driver.vars) == {
        "nvidia_driver_branch": "580",
        "nvidia_driver_version": "580.159.04",
        "nvidia_driver_flavour": "open",
        "nvidia_driver_source": "cuda",
        "nvidia_driver_fabricmanager": False,
        # owned by the plan, true or false: an inventory value never reaches the role
        "nvidia_driver_nvlink5": False,
        "nvidia_driver_imex": False,
        "nvidia_driver_reboot": "forbid",
        # passed on as the inventory sets them (here: the role's defaults)
        "nvidia_driver_persistenced": True,
        "nvidia_driver_state_file": "/var/lib/gpuprov/nvidia_driver.json",
    }
    assert driver.change is False
    assert driver.reason.startswith("no change: 580.159.04 open already loaded; ")
    assert "no NVSwitch on the PCI bus" in driver.reason
    assert "fabric state Completed" in driver.reason  # the VM's GPUs report it
    assert role(p, "docker").reason == "install Docker from Docker's repository"
    assert p.role_vars()["gpuprov_roles"] == [
        "nvidia_driver",
        "docker",
        "nvidia_container_toolkit",
    ]
    assert not p.simulated


def test_real_host_without_driver_plans_an_install() -> None:
    raw = {k: v for k, v in real_raw().items() if not k.startswith(NO_DRIVER_FILES)}
    p = plan(raw)
    driver = role(p, "nvidia_driver")
    assert driver.change is True
    assert driver.vars["nvidia_driver_version"] == ""
    assert driver.reason.startswith(
        "install R580 open from NVIDIA's CUDA repository "
        "(newest LTSB branch supporting H200 SXM 141GB); "
    )


# --- derived variants ---------------------------------------------------------------------


def test_8x_h100_with_4_nvswitches_gets_the_fabric_manager() -> None:
    p = plan(variant({0x2330: 8}, (0x22A3, 4)))
    assert not p.blockers and not p.warnings
    assert p.gpu_summary == "8x H100 SXM5 80GB"
    assert p.nvswitches == 4
    driver = role(p, "nvidia_driver")
    assert driver.vars["nvidia_driver_fabricmanager"] is True
    assert driver.vars["nvidia_driver_branch"] == "580"
    assert driver.reason.endswith("fabric manager: 4 NVSwitch devices on the PCI bus")


def test_8x_a100_with_6_gen2_nvswitches() -> None:
    p = plan(variant({0x20B0: 8}, (0x1AF1, 6)))
    assert not p.blockers
    assert p.nvswitches == 6
    assert role(p, "nvidia_driver").vars["nvidia_driver_fabricmanager"] is True


def test_missing_nvswitch_is_a_warning() -> None:
    p = plan(variant({0x2330: 8}, (0x22A3, 3)))
    assert any("3 NVSwitch devices" in w and "has 4" in w for w in p.warnings)


def test_nvswitch_bridge_functions_are_not_counted() -> None:
    p = plan(variant({0x2330: 8}, (0x22A9, 2)))
    assert p.nvswitches == 0
    assert role(p, "nvidia_driver").vars["nvidia_driver_fabricmanager"] is False


def test_l40s_is_ada_open_no_fabric_manager() -> None:
    p = plan(variant({0x26B9: 1}))
    assert p.gpu_summary == "1x L40S"
    driver = role(p, "nvidia_driver")
    assert driver.vars["nvidia_driver_flavour"] == "open"
    assert driver.vars["nvidia_driver_fabricmanager"] is False
    # the reference gives no minimum driver for L40S: said, not guessed
    assert any("no verified minimum driver for L40S" in w for w in p.warnings)


def test_v100_gets_proprietary_modules() -> None:
    p = plan(variant({0x1DB1: 8}))
    assert role(p, "nvidia_driver").vars["nvidia_driver_flavour"] == "proprietary"


def test_volta_with_blackwell_is_blocked() -> None:
    p = plan(variant({0x1DB1: 4, 0x2901: 4}))
    assert p.blocked
    assert any("needs both kernel-module flavours" in b for b in p.blockers)


def test_open_policy_on_volta_is_blocked() -> None:
    p = plan(variant({0x1DB1: 1}), nvidia_driver_flavour="open")
    assert any("nvidia_driver_flavour=open" in b and "V100" in b for b in p.blockers)


def test_unknown_gpu_blocks_that_host_only() -> None:
    catalog = default_catalog()
    facts = {
        "good": parse_host("good", real_raw()),
        "odd": parse_host("odd", variant({0x2330: 7, 0x9999: 1})),
    }
    policies = {h: load_policy(h, {}) for h in facts}
    plans = plan_fleet(facts, policies, catalog)
    assert not plans["good"].blocked
    odd = plans["odd"]
    assert odd.blocked
    assert len(odd.blockers) == 1
    assert "10de:9999 at 0000:17:00.0 is not in the catalog" in odd.blockers[0]
    assert "unknown 10de:9999" in odd.gpu_summary


def test_no_gpu_is_a_blocker() -> None:
    p = plan(variant({}))
    assert p.blocked and "no NVIDIA GPU" in p.blockers[0]


def test_pinned_470_on_h100_is_bad_input_before_any_change() -> None:
    with pytest.raises(PolicyError) as info:
        plan(variant({0x2330: 8}, (0x22A3, 4)), "p5-node-01", nvidia_driver_branch=470)
    text = str(info.value)
    assert text.startswith("p5-node-01: nvidia_driver_branch=470 is too old")
    assert "H100 SXM5 80GB needs >= 525.85.05" in text
    assert "fix: pin a branch of at least 525" in text
    assert info.value.exit_code == EXIT_BAD_INPUT


def test_pinned_branch_equal_to_the_minimum_warns_about_the_release() -> None:
    p = plan(variant({0x2335: 8}, (0x22A3, 4)), nvidia_driver_branch=550)
    assert role(p, "nvidia_driver").vars["nvidia_driver_branch"] == "550"
    assert any("needs >= 550.90.07" in w for w in p.warnings)
    with pytest.raises(PolicyError, match=r"550\.90\.07"):
        plan(
            variant({0x2335: 8}, (0x22A3, 4)),
            nvidia_driver_branch=550,
            nvidia_driver_version="550.54.14",
        )


def test_distribution_driver_on_debian_12_is_too_old_for_h200() -> None:
    p = plan(
        variant({0x2335: 8}, (0x22A3, 4), os_release=DEBIAN_12),
        nvidia_driver_source="distribution",
    )
    assert p.blocked
    assert "debian 12's archive has driver 535.309.01, too old" in p.blockers[0]
    assert "H200 SXM 141GB needs >= 550.90.07" in p.blockers[0]


def test_distribution_driver_on_debian_13_fits_h200() -> None:
    p = plan(
        variant({0x2335: 8}, (0x22A3, 4), os_release=DEBIAN_13),
        nvidia_driver_source="distribution",
    )
    assert not p.blockers
    driver = role(p, "nvidia_driver")
    assert driver.vars["nvidia_driver_version"] == "550.163.01"
    assert driver.vars["nvidia_driver_branch"] == "550"
    assert any("Debian's archive has no fabric manager" in w for w in p.warnings)


def test_lab_p5_on_debian_12_with_eol_warning() -> None:
    p = plan(
        variant({0x2330: 8}, (0x22A3, 4), os_release=DEBIAN_12, simulated=True),
        today=dt.date(2026, 11, 29),
        nvidia_driver_source="distribution",
    )
    assert not p.blockers
    assert p.simulated and p.gpu_summary == "8x H100 SXM5 80GB (simulated)"
    driver = role(p, "nvidia_driver")
    assert (driver.vars["nvidia_driver_version"], driver.vars["nvidia_driver_flavour"]) == (
        "535.309.01",
        "proprietary",
    )
    assert "debian 12's packaged driver" in driver.reason
    assert any("R535 reached end of life in June 2026" in w for w in p.warnings)
    assert any("proprietary kernel modules instead of open" in w for w in p.warnings)


def test_cuda_source_on_an_os_without_a_cuda_repository_is_blocked() -> None:
    p = plan(variant({0x2330: 8}, os_release=DEBIAN_13))
    assert any("no path for debian 13" in b for b in p.blockers)


def test_replacing_a_loaded_driver_with_reboot_forbidden_warns() -> None:
    raw = real_raw()
    raw["proc-driver-nvidia-version.txt"] = raw["proc-driver-nvidia-version.txt"].replace(
        "580.159.04", "535.261.03"
    )
    p = plan(raw)
    driver = role(p, "nvidia_driver")
    assert driver.change is True
    assert driver.reason.startswith("upgrade 535.261.03 open -> R580 open")
    assert "rolling: drained" in driver.reason and "resumable (driver_upgrade)" in driver.reason
    assert any("reboot required" in w for w in p.warnings)
    assert any("driver/library mismatch" in w for w in p.warnings)  # NVML still says 580


def test_pinned_version_other_than_loaded_is_a_change() -> None:
    p = plan(real_raw(), nvidia_driver_branch=580, nvidia_driver_version="580.65.06")
    driver = role(p, "nvidia_driver")
    assert driver.change is True and driver.vars["nvidia_driver_version"] == "580.65.06"
    assert any("downgrade from 580.159.04" in w for w in p.warnings)


def test_default_runtime_without_the_toolkit_is_bad_input() -> None:
    """A policy that contradicts itself stops the run before any host changes (it was a
    blocker found only once the host was planned)."""
    with pytest.raises(PolicyError, match="nvidia_container_toolkit_default_runtime=true but"):
        plan(
            real_raw(),
            gpuprov_roles=["nvidia_driver", "docker"],
            nvidia_container_toolkit_default_runtime=True,
        )


MIG_CONFIGS = {
    "all-3g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.71gb": 2}}],
    "too-big": [{"devices": "all", "mig-enabled": True, "mig-devices": {"4g.71gb": 2}}],
}


def test_mig_layout_adds_the_mig_role_last() -> None:
    p = plan(
        real_raw(), mig_layout="all-3g", mig_configs=MIG_CONFIGS, gpuprov_validation_nccl=False
    )
    assert not p.blockers
    assert [r.name for r in p.roles][-1] == "mig"
    assert role(p, "mig").reason == "layout all-3g: MIG on 2 of 2 GPUs"
    assert p.role_vars()["mig_layout"] == "all-3g"


def test_mig_with_the_nccl_requirement_is_blocked() -> None:
    p = plan(real_raw(), mig_layout="all-3g", mig_configs=MIG_CONFIGS)
    assert any("multi-GPU NCCL" in b for b in p.blockers)


def test_mig_layout_that_cannot_fit_is_bad_input() -> None:
    with pytest.raises(BadInputError, match=r"4g\.71gb"):
        plan(real_raw(), mig_layout="too-big", mig_configs=MIG_CONFIGS)


def test_mig_on_a_gpu_without_mig_is_bad_input() -> None:
    with pytest.raises(BadInputError):
        plan(
            variant({0x26B9: 1}),
            mig_layout="l",
            mig_configs={"l": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]},
            gpuprov_validation_nccl=False,
        )


def test_mig_disabled_on_a_host_with_mig_off() -> None:
    p = plan(real_raw(), mig_layout="disabled")
    assert role(p, "mig").reason == "layout disabled: MIG already off"


def test_plan_is_pure(tmp_path: Path) -> None:
    facts: HostFacts = parse_host("h", real_raw())
    policy = load_policy("h", {})
    first = plan_host(facts, policy, default_catalog())
    assert first == plan_host(facts, policy, default_catalog())


def test_secure_boot_with_a_driver_to_build_warns() -> None:
    raw = variant({0x2330: 8}, (0x22A3, 4), os_release=DEBIAN_12)
    raw["secureboot.txt"] = "SecureBoot enabled\n# exit=0\n"
    p = plan(raw, nvidia_driver_source="distribution")
    assert any(w.startswith("Secure Boot is on: modules built by DKMS") for w in p.warnings)
    raw["secureboot.txt"] = "SecureBoot disabled\n# exit=0\n"
    p = plan(raw, nvidia_driver_source="distribution")
    assert not any("Secure Boot" in w for w in p.warnings)


def test_installed_docker_from_another_source_warns() -> None:
    raw = real_raw()
    raw["dpkg-query.txt"] = (  # the probe's format: name, version, want, status (tabs)
        "docker-ce\t\tunknown\tnot-installed\n"
        "docker.io\t20.10.24+dfsg1-1+deb12u1+b6\tinstall\tinstalled\n# exit=0\n"
    )
    p = plan(raw)
    assert any("docker.io is installed but docker_source=docker" in w for w in p.warnings)
    assert not any("docker.io" in w for w in plan(raw, docker_source="distribution").warnings)


def test_detection_errors_are_warnings() -> None:
    raw = real_raw()
    raw["nvidia-smi-L.txt"] = "NVIDIA-SMI has failed because it couldn't communicate\n# exit=9\n"
    p = plan(raw)
    assert any(w.startswith("detection: nvidia-smi-L.txt: exit 9") for w in p.warnings)


def test_a_loaded_release_too_old_for_the_gpu_is_replaced_within_its_branch() -> None:
    raw = real_raw()
    for name in ("proc-driver-nvidia-version.txt", "nvidia-smi-version.txt"):
        raw[name] = raw[name].replace("580.159.04", "550.54.14").replace("580.159", "550.54")
    p = plan(raw, nvidia_driver_branch=550)
    driver = role(p, "nvidia_driver")
    assert driver.change is True
    assert driver.reason.startswith("upgrade 550.54.14 open -> R550 open")
    assert any("needs >= 550.90.07" in w for w in p.warnings)


def test_distribution_version_pin_must_be_what_the_archive_has() -> None:
    raw = variant({0x2330: 8}, (0x22A3, 4), os_release=DEBIAN_12)
    p = plan(raw, nvidia_driver_source="distribution", nvidia_driver_version="535.54.03")
    assert any(
        "debian 12's archive has no proprietary driver 535.54.03 (it has 535.261.03 "
        "(open/proprietary), 535.309.01 (proprietary))" in b
        for b in p.blockers
    )
    ok = plan(raw, nvidia_driver_source="distribution", nvidia_driver_version="535.261.03")
    assert not ok.blockers


def test_debian_12_security_release_is_proprietary_only() -> None:
    raw = variant({0x2330: 8}, (0x22A3, 4), os_release=DEBIAN_12)
    opened = plan(
        raw,
        nvidia_driver_source="distribution",
        nvidia_driver_version="535.309.01",
        nvidia_driver_flavour="open",
    )
    assert any("has no open driver 535.309.01" in b for b in opened.blockers)
    prop = plan(raw, nvidia_driver_source="distribution", nvidia_driver_flavour="proprietary")
    driver = role(prop, "nvidia_driver")
    assert not prop.blockers and driver.vars["nvidia_driver_version"] == "535.309.01"
    # auto: the catalog prefers the proprietary modules on Debian (the open ones do not build
    # against the current kernel), so the newest proprietary release.
    auto = role(plan(raw, nvidia_driver_source="distribution"), "nvidia_driver")
    assert (auto.vars["nvidia_driver_version"], auto.vars["nvidia_driver_flavour"]) == (
        "535.309.01",
        "proprietary",
    )
    opened = role(
        plan(raw, nvidia_driver_source="distribution", nvidia_driver_flavour="open"),
        "nvidia_driver",
    )
    assert opened.vars["nvidia_driver_version"] == "535.261.03"


def test_cuda_version_floor() -> None:
    assert not plan(real_raw(), gpuprov_cuda_version="13.0").warnings
    p5_deb12 = variant({0x2330: 8}, (0x22A3, 4), os_release=DEBIAN_12)
    p = plan(p5_deb12, nvidia_driver_source="distribution", gpuprov_cuda_version="13.0")
    assert any(
        "driver 535.309.01 cannot run CUDA 13.0 applications (CUDA 13.x needs >= 580)" in b
        for b in p.blockers
    )
    p = plan(p5_deb12, nvidia_driver_source="distribution", gpuprov_cuda_version="12.8")
    assert not p.blockers
    assert any("below CUDA 12.8's minimum 570.26" in w for w in p.warnings)
    assert not plan(
        p5_deb12, nvidia_driver_source="distribution", gpuprov_cuda_version="12.2"
    ).blockers
    # a branch-level target (version resolved on the host) equal to the minimum's branch
    p = plan(variant({0x2330: 8}), nvidia_driver_branch=580, gpuprov_cuda_version="13.0")
    assert any("CUDA 13.0 needs >= 580.65.06" in w for w in p.warnings)
    with pytest.raises(PolicyError, match="not in the catalog's CUDA table"):
        plan(real_raw(), gpuprov_cuda_version="14.0")


# --- the driver packages the plan names (rendered from the role's own OS data) -----------


def test_p5_plan_names_the_unsuffixed_fabric_manager_from_580() -> None:
    p = plan(variant({0x2330: 8}, (0x22A3, 4)))
    driver = role(p, "nvidia_driver")
    assert driver.packages is not None
    assert driver.packages["driver"] == [
        "nvidia-headless-580-open",
        "nvidia-dkms-580-open",
        "nvidia-utils-580",
        "libnvidia-compute-580",
    ]
    assert driver.packages["fabricmanager"] == ["nvidia-fabricmanager", "libnvidia-nscq"]
    assert driver.packages["install_first"] == []
    assert "nvidia-fabricmanager" in driver.packages["held"]
    assert str(driver.packages["repository"]).endswith("/cuda/repos/ubuntu2204/x86_64/")
    assert "nvidia-fabricmanager, libnvidia-nscq" in driver.packages_line


def test_p5_plan_at_575_keeps_the_suffixed_fabric_manager() -> None:
    p = plan(variant({0x2330: 8}, (0x22A3, 4)), nvidia_driver_version="575.57.08")
    driver = role(p, "nvidia_driver")
    assert driver.packages is not None
    assert driver.packages["fabricmanager"] == ["nvidia-fabricmanager-575", "libnvidia-nscq-575"]


def test_p5_plan_at_595_installs_the_pinning_package_first() -> None:
    p = plan(variant({0x2330: 8}, (0x22A3, 4), os_release=DEBIAN_12), nvidia_driver_branch="595")
    driver = role(p, "nvidia_driver")
    assert driver.packages is not None
    assert driver.packages["install_first"] == ["nvidia-driver-pinning-595"]
    assert driver.packages["held"][0] == "nvidia-driver-pinning-595"
    assert driver.packages_line.startswith("first nvidia-driver-pinning-595;")


def test_ubuntu_archive_plan_names_the_prebuilt_module_for_the_running_kernel() -> None:
    raw = variant({0x2330: 8}, (0x22A3, 4))
    facts = parse_host("node", raw)
    p = plan(raw, nvidia_driver_source="distribution", nvidia_driver_branch="580")
    driver = role(p, "nvidia_driver")
    assert driver.packages is not None
    assert driver.packages["prebuilt_modules"] == [
        f"linux-modules-nvidia-580-server-open-{facts.kernel}"
    ]
    assert driver.packages["dkms_modules"] == ["nvidia-dkms-580-server-open"]
    assert driver.packages["repository"] == "the distribution's archive"
    assert driver.packages["fabricmanager"] == ["nvidia-fabricmanager-580", "libnvidia-nscq-580"]
    assert driver.packages["fabricmanager_repository"] == "the distribution's archive"


def test_a_combination_without_recorded_packages_is_blocked_with_the_reason() -> None:
    # 595's Ubuntu names record no proprietary set; an A100 may run either flavour (Volta,
    # which needs the proprietary modules, stops at R580: a pinned 595 is bad input there).
    p = plan(variant({0x20B2: 8}), nvidia_driver_branch="595", nvidia_driver_flavour="proprietary")
    assert any(
        "no proprietary kernel modules for branch 595 (flavours there: open)" in b
        for b in p.blockers
    ), p.blockers
