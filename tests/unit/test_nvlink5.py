"""NVLink5 (HGX B200/B300): the probe's SW_MNG check run on a fake /sys/class/infiniband, its
parser, the facts, the planner's fabric manager + NVLink subnet manager plan, and the package
names shared by the planner, the driver role and the recorded reference."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from test_plan import DEBIAN_12, plan, role, variant

from orchestrator import nvlink5
from orchestrator.parsers import names, parse_host
from orchestrator.parsers.infiniband import parse_infiniband_vpd
from orchestrator.probe import probe_script, split_output

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "tests" / "recorded" / "reference" / "packages.yaml"
HGX_B200 = 0x2909  # tests/recorded/reference/gpus.md
# A VPD read-only section the way the probe meets it: binary, the SW_MNG mark among other
# keywords (simulated content; NVIDIA's check is only `grep -q SW_MNG`).
VPD_SW_MNG = b"\x82\x10NVIDIA simulated\x90\x20PN\x08MCX-TEST V2\x06SW_MNG\x78\x00"
VPD_NIC = b"\x82\x10NVIDIA simulated\x90\x20PN\x08MCX-TEST V2\x06ETHNIC\x78\x00"

LSMOD_NVLINK5 = (
    "ib_umad 45056 0 - Live 0xffffffffc1000000\n"
    "mlx5_core 2428928 0 - Live 0xffffffffc1100000\n# exit=0\n"
)


def b200_raw(vpd: str = "mlx5_0 SW_MNG\nmlx5_1 -\n", lsmod: str = LSMOD_NVLINK5) -> dict[str, str]:
    raw = variant({HGX_B200: 8}, os_release=DEBIAN_12)
    raw[names.INFINIBAND_VPD] = vpd + "# exit=0\n"
    raw[names.PROC_MODULES] = lsmod
    return raw


def test_probe_section_marks_sw_mng_devices(tmp_path: Path) -> None:
    ib = tmp_path / "infiniband"
    for name, vpd in (("mlx5_0", VPD_SW_MNG), ("mlx5_1", VPD_NIC)):
        (ib / name / "device").mkdir(parents=True)
        (ib / name / "device" / "vpd").write_bytes(vpd)
    (ib / "mlx5_2" / "device").mkdir(parents=True)  # a device without VPD: not listed
    script = probe_script().replace("/sys/class/infiniband", str(ib))
    assert script != probe_script()
    out = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, check=True)
    raw = split_output("local", out.stdout)
    assert raw[names.INFINIBAND_VPD] == "mlx5_0 SW_MNG\nmlx5_1 -\n# exit=0\n"
    devices = parse_infiniband_vpd(raw[names.INFINIBAND_VPD])
    assert [(d.name, d.sw_mng) for d in devices] == [("mlx5_0", True), ("mlx5_1", False)]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file")
def test_probe_section_says_when_the_vpd_is_unreadable(tmp_path: Path) -> None:
    vpd = tmp_path / "infiniband" / "mlx5_0" / "device" / "vpd"
    vpd.parent.mkdir(parents=True)
    vpd.write_bytes(VPD_SW_MNG)
    vpd.chmod(0)
    script = probe_script().replace("/sys/class/infiniband", str(tmp_path / "infiniband"))
    out = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, check=True)
    assert split_output("local", out.stdout)[names.INFINIBAND_VPD].startswith("mlx5_0 unreadable")


def test_no_infiniband_class_no_capture() -> None:
    script = probe_script().replace("/sys/class/infiniband", "/nonexistent/infiniband")
    out = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, check=True)
    assert names.INFINIBAND_VPD not in split_output("local", out.stdout)


def test_facts_of_an_nvlink5_host() -> None:
    facts = parse_host("b200", b200_raw())
    assert facts.errors == ()
    assert facts.nvlink5 and facts.nvlink5_ports == ("mlx5_0",)
    assert facts.nvlink5_missing_modules == ()
    bare = parse_host("b200", b200_raw(lsmod="# exit=0\n"))
    assert bare.nvlink5_missing_modules == ("mlx5_core", "ib_umad")


def test_no_sw_mng_is_not_nvlink5() -> None:
    facts = parse_host("h", b200_raw(vpd="mlx5_0 -\nmlx5_1 unreadable\n"))
    assert not facts.nvlink5 and facts.nvlink5_ports == ()
    assert not parse_host("h", variant({HGX_B200: 8})).nvlink5  # no capture at all


def test_a_garbled_capture_is_an_error_not_a_crash() -> None:
    facts = parse_host("h", b200_raw(vpd="mlx5_0 maybe\n"))
    assert not facts.nvlink5
    assert any(names.INFINIBAND_VPD in e and "mlx5_0 maybe" in e for e in facts.errors)


def test_plan_adds_fabric_manager_and_subnet_manager() -> None:
    p = plan(b200_raw(), "b200")
    assert not p.blockers, p.blockers
    assert p.nvswitches == 0  # NVLink5 switch trays are not NVSwitch PCI functions here
    driver = role(p, "nvidia_driver")
    assert driver.vars["nvidia_driver_fabricmanager"] is True
    assert driver.vars["nvidia_driver_nvlink5"] is True
    assert int(str(driver.vars["nvidia_driver_branch"])) >= nvlink5.MIN_BRANCH
    assert "NVLink5 fabric (SW_MNG in the VPD of mlx5_0)" in driver.reason
    assert "NVLink subnet manager (nvlsm, infiniband-diags)" in driver.reason
    assert "gated on Fabric State Completed" in driver.reason
    assert not any("mlx5_core" in w for w in p.warnings)


def test_plan_without_nvlink5_is_unchanged() -> None:
    p = plan(variant({HGX_B200: 8}, os_release=DEBIAN_12))
    driver = role(p, "nvidia_driver")
    assert "nvidia_driver_nvlink5" not in driver.vars
    assert driver.vars["nvidia_driver_fabricmanager"] is False


def test_plan_blocks_a_branch_without_the_subnet_manager() -> None:
    # Blackwell itself needs >= 570; the floor is the subnet manager's, checked on its own
    # (here with H100s, whose catalog minimum allows R550).
    raw = b200_raw()
    raw["sysfs-pci-devices.txt"] = variant({0x2330: 8})["sysfs-pci-devices.txt"]
    p = plan(raw, "b200", nvidia_driver_branch=550)
    assert any(
        "nvlsm" in b and ">= 570" in b and "R550" in b and "nvidia_driver_branch" in b
        for b in p.blockers
    ), p.blockers


def test_plan_warns_when_the_port_driver_is_not_loaded() -> None:
    p = plan(b200_raw(lsmod="ib_umad 45056 0 - Live 0xffffffffc1000000\n# exit=0\n"), "b200")
    assert any("mlx5_core" in w and "not loaded" in w for w in p.warnings), p.warnings
    # No module list at all (a kernel without /proc/modules, as on the lab's machine): no
    # claim about mlx5_core.
    unread = plan(b200_raw(lsmod="# exit=0\n"), "b200")
    assert not any("mlx5_core" in w for w in unread.warnings), unread.warnings


def test_package_names_agree_with_the_role_and_the_reference() -> None:
    role_vars = yaml.safe_load(
        (REPO / "roles" / "nvidia_driver" / "vars" / "nvlink5.yml").read_text()
    )["__nvidia_driver_nvlink5_packages"]
    assert tuple(role_vars["apt"]) == nvlink5.PACKAGES["apt"]
    assert tuple(role_vars["dnf"]) == nvlink5.PACKAGES["rpm"]
    reference = yaml.safe_load(REFERENCE.read_text())
    branches = reference["cuda_apt"]["branches"]
    for branch in ("570", "580"):
        assert tuple(branches[branch]["nvlink5_extra"]) == nvlink5.PACKAGES["apt"]
    assert "infiniband-diags" in branches["570"]["nvlink5_extra"]
    rpm = reference["cuda_rpm"]
    rpm_text = yaml.safe_dump(rpm)
    for package in nvlink5.PACKAGES["rpm"]:
        assert package in rpm_text, package
    # The branch floor: NVIDIA's scripts install nvlsm only from 570 (gdc_nvlink570).
    assert "nvlink5_extra" not in branches["550"] and "nvlink5_extra" in branches["570"]
    assert reference["nvlink5"]["detect"] == "grep -q SW_MNG /sys/class/infiniband/*/device/vpd"
    assert reference["nvlink5"]["certainty"] == "confirmed"
