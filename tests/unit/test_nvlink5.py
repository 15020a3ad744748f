"""NVLink5 (HGX B200/B300): the probe's SW_MNG check run on fake sysfs trees (the InfiniBand
class and the Mellanox PCI functions' VPD, tests/unit/fixtures_derived/nvlink5-sysfs.yaml), its
parsers, the facts, the planner's fabric manager + NVLink subnet manager plan or its blocker /
warning when detection cannot see the ports, and the package names shared by the planner, the
driver role and the recorded reference."""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_plan import DEBIAN_12, plan, real_raw, role, variant

from orchestrator import nvlink5
from orchestrator.catalog import default_catalog
from orchestrator.facts import HostFacts
from orchestrator.parsers import names, parse_host
from orchestrator.parsers._text import ParseError
from orchestrator.parsers.infiniband import parse_infiniband_vpd, parse_pci_vpd
from orchestrator.plan import HostPlan, plan_host
from orchestrator.policy import load_policy
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
    assert driver.vars["nvidia_driver_nvlink5"] is False
    assert driver.vars["nvidia_driver_fabricmanager"] is False


def test_plan_blocks_a_branch_without_the_subnet_manager() -> None:
    # Blackwell itself needs >= 570 (its catalog minimum), so no planned branch reaches this
    # floor through plan_host; the floor is the subnet manager's, checked on its own.
    b200 = default_catalog().gpu(HGX_B200)
    assert b200 is not None
    facts = parse_host("b200", b200_raw())
    got = nvlink5.plan_nvlink5(facts, [b200] * 8, 550, "cuda")
    assert got is not None and got.planned
    assert any(
        "nvlsm" in b and ">= 570" in b and "R550" in b and "nvidia_driver_branch" in b
        for b in got.blockers
    ), got.blockers


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


# --- bare 8x HGX B200 hosts: the probe on sysfs-shaped trees (fixtures_derived) ---------------

SYSFS = yaml.safe_load(
    (Path(__file__).parent / "fixtures_derived" / "nvlink5-sysfs.yaml").read_text()
)


def _large(tag: int, data: bytes) -> bytes:
    """A VPD large resource: its tag, a 2-byte little-endian length, the data."""
    return bytes([tag]) + len(data).to_bytes(2, "little") + data


def vpd_bytes(spec: dict[str, Any]) -> bytes:
    """PCI VPD: identifier string (0x82), read-only section (0x90) of keywords, end (0x78)."""
    ident = str(spec["id_string"]).encode()
    ro = b"".join(k.encode() + bytes([len(v)]) + v.encode() for k, v in spec["keywords"])
    ro += b"RV\x01\x00"  # the checksum keyword (value not computed: nobody checks it here)
    return _large(0x82, ident) + _large(0x90, ro) + b"\x78"


def pci_function(root: Path, address: str, values: dict[str, str], driver: str = "") -> Path:
    d = root / "bus" / "pci" / "devices" / address
    d.mkdir(parents=True)
    defaults = {
        "subsystem_vendor": "0x10de",
        "subsystem_device": "0x0000",
        "current_link_speed": "32.0 GT/s PCIe",
        "current_link_width": "16",
        "max_link_speed": "32.0 GT/s PCIe",
        "max_link_width": "16",
        "numa_node": "0",
    }
    for name, value in {**defaults, **values}.items():
        (d / name).write_text(value + "\n")
    if driver:
        (root / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        (d / "driver").symlink_to(root / "bus" / "pci" / "drivers" / driver)
    return d


def bare_b200(root: Path, host: str) -> None:
    """The host `host` of the fixture as a sysfs tree under root (/sys)."""
    spec = SYSFS["hosts"][host]
    gpus = SYSFS["gpus"]
    for n in range(8):
        pci_function(
            root,
            f"0000:{gpus['first_bus'] + n:02x}:00.0",
            {"vendor": "0x10de", "device": gpus["device"], "class": gpus["class"]},
        )
    mlx = SYSFS["mellanox"]
    functions = [] if spec.get("no_bridges") else [(a, "bridge") for a in mlx["bridges"]]
    functions += [(a, "nic") for a in mlx["nics"]]
    for i, (address, kind) in enumerate(functions):
        values = {"vendor": "0x15b3", "device": mlx["device"], "class": mlx["class"]}
        d = pci_function(root, address, {**values, "subsystem_vendor": "0x15b3"}, "mlx5_core")
        vpd = d / "vpd"
        vpd.write_bytes(vpd_bytes(SYSFS["vpd"][kind]))
        vpd.chmod(int(spec["vpd_mode"], 8))
        if spec["infiniband"]:
            ib = f"mlx5_{i}"
            (d / "infiniband" / ib).mkdir(parents=True)
            (root / "class" / "infiniband").mkdir(parents=True, exist_ok=True)
            (root / "class" / "infiniband" / ib).mkdir()
            (root / "class" / "infiniband" / ib / "device").symlink_to(d)


# Detection without root: the probe run as nobody (setpriv), where the tests run as root.
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
# The probe needs a /dev/null that anyone can write (seen replaced by a root-only regular file
# on the shared development machine, 2026-12-01 17:49).
CAN_DROP_ROOT = (os.geteuid() != 0 or shutil.which("setpriv") is not None) and (
    stat.S_ISCHR(os.stat("/dev/null").st_mode)
)


def probe_bare(tmp_path: Path, host: str, *, as_user: bool = False) -> dict[str, str]:
    if as_user and os.geteuid() == 0:
        # pytest's base directory is root-only (0700): a tree nobody can walk to
        tmp_path = Path(tempfile.mkdtemp(prefix="gpuprov-nvlink5-", dir="/tmp"))
        tmp_path.chmod(0o755)
    root = tmp_path / "sys"
    bare_b200(root, host)
    script = probe_script().replace("/sys/bus/pci/devices", str(root / "bus/pci/devices"))
    script = script.replace("/sys/class/infiniband", str(root / "class/infiniband"))
    argv = ["sh", "-s"]
    if as_user and os.geteuid() == 0:
        argv = [*AS_NOBODY, *argv]
    try:
        out = subprocess.run(
            argv, input=script, capture_output=True, text=True, check=True, cwd=tmp_path
        )
    finally:
        if tmp_path.name.startswith("gpuprov-nvlink5-"):
            shutil.rmtree(tmp_path)
    raw = split_output("b200", out.stdout)
    raw[names.OS_RELEASE] = DEBIAN_12
    raw[names.PROC_MODULES] = LSMOD_NVLINK5
    return raw


def plan_of(raw: dict[str, str]) -> tuple[HostFacts, HostPlan]:
    facts = parse_host("b200", raw)
    return facts, plan_host(facts, load_policy("b200", {}), default_catalog())


def test_bare_b200_vpd_readable_without_the_infiniband_class(tmp_path: Path) -> None:
    raw = probe_bare(tmp_path, "vpd-readable-no-ib-class")
    assert names.INFINIBAND_VPD not in raw  # mlx5_ib not loaded: no class path
    assert (
        raw[names.PCI_VPD] == "0000:0b:00.0 SW_MNG\n0000:0b:00.1 SW_MNG\n0000:c1:00.0 -\n# exit=0\n"
    )
    facts, p = plan_of(raw)
    assert len(facts.gpus) == 8 and facts.nvlink5
    assert facts.nvlink5_ports == ("0000:0b:00.0", "0000:0b:00.1")
    assert not p.blockers, p.blockers
    driver = role(p, "nvidia_driver")
    assert driver.vars["nvidia_driver_fabricmanager"] is True
    assert driver.vars["nvidia_driver_nvlink5"] is True
    assert "NVLink5 fabric (SW_MNG in the VPD of 0000:0b:00.0, 0000:0b:00.1)" in driver.reason
    assert "NVLink subnet manager" in driver.reason
    assert "not needed" not in driver.reason


def test_bare_b200_with_the_infiniband_class_names_each_port_once(tmp_path: Path) -> None:
    raw = probe_bare(tmp_path, "vpd-readable-ib-class")
    assert raw[names.INFINIBAND_VPD] == "mlx5_0 SW_MNG\nmlx5_1 SW_MNG\nmlx5_2 -\n# exit=0\n"
    assert raw[names.PCI_VPD].splitlines()[0] == "0000:0b:00.0 SW_MNG mlx5_0"
    facts, p = plan_of(raw)
    assert facts.nvlink5_ports == ("mlx5_0", "mlx5_1")
    assert "SW_MNG in the VPD of mlx5_0, mlx5_1)" in role(p, "nvidia_driver").reason


def test_bare_b200_without_infiniband_class_or_port_warns_naming_nvlink5(tmp_path: Path) -> None:
    raw = probe_bare(tmp_path, "no-ib-class-no-bridge")
    facts, p = plan_of(raw)
    assert not facts.nvlink5 and facts.nvlink5_unknown == ()
    driver = role(p, "nvidia_driver")
    assert driver.vars["nvidia_driver_fabricmanager"] is False
    assert "not needed" not in driver.reason
    assert "NVLink5 board without a SW_MNG port" in driver.reason
    (warning,) = [w for w in p.warnings if w.startswith("NVLink5:")]
    assert "8x HGX B200 is an NVLink5 board" in warning
    assert "1 Mellanox PCI function(s) was read, none says SW_MNG" in warning
    assert (
        "CUDA error 802" in warning and "fix: on bare metal, enable the management ports" in warning
    )


def test_no_mellanox_function_at_all_is_said(tmp_path: Path) -> None:
    raw = variant({HGX_B200: 8}, os_release=DEBIAN_12)
    raw[names.PCI_VPD] = "# exit=0\n"
    _, p = plan_of(raw)
    assert any("no Mellanox (0x15b3) function is on the PCI bus" in w for w in p.warnings)


@pytest.mark.skipif(
    not CAN_DROP_ROOT, reason="root reads a mode-000 file; no setpriv, or no usable /dev/null"
)
def test_bare_b200_vpd_unreadable_is_a_blocker_naming_root(tmp_path: Path) -> None:
    raw = probe_bare(tmp_path, "vpd-unreadable", as_user=True)
    assert raw[names.PCI_VPD].splitlines() == [
        "0000:0b:00.0 unreadable",
        "0000:0b:00.1 unreadable",
        "0000:c1:00.0 unreadable",
        "# exit=0",
    ]
    facts, p = plan_of(raw)
    assert not facts.nvlink5
    assert facts.nvlink5_unknown == ("0000:0b:00.0", "0000:0b:00.1", "0000:c1:00.0")
    (blocker,) = p.blockers
    assert blocker.startswith("NVLink5: 8x HGX B200 is an NVLink5 board")
    assert "the VPD of 0000:0b:00.0, 0000:0b:00.1, 0000:c1:00.0 was not readable" in blocker
    assert "fix: re-run `provision detect` as root" in blocker
    assert "not needed" not in role(p, "nvidia_driver").reason


def test_a_capture_without_the_pci_vpd_is_not_a_no() -> None:
    # Saved facts of an older probe: the Mellanox functions are on the bus, their VPD unread.
    raw = variant({HGX_B200: 8}, os_release=DEBIAN_12)
    mlx = "0000:0b:00.0 vendor=0x15b3 device=0x1021 class=0x020700 subsystem_vendor=0x15b3 "
    mlx += 'subsystem_device=0x0000 current_link_speed="32.0 GT/s PCIe" current_link_width=16 '
    mlx += 'max_link_speed="32.0 GT/s PCIe" max_link_width=16 numa_node=0 driver=mlx5_core'
    raw[names.SYSFS_PCI] = raw[names.SYSFS_PCI].replace("# exit=0", mlx + "\n# exit=0")
    facts, p = plan_of(raw)
    assert facts.pci_vpd is None and facts.nvlink5_unknown == ("0000:0b:00.0",)
    assert any("did not read the Mellanox PCI functions' VPD" in b for b in p.blockers), p.blockers


def test_fabric_state_completed_without_ports_says_where_the_fabric_is_managed() -> None:
    raw = variant({HGX_B200: 8}, os_release=DEBIAN_12)
    raw[names.PCI_VPD] = "# exit=0\n"
    facts = parse_host("b200", raw)
    completed = tuple(
        dataclasses.replace(g, fabric_state="Completed")
        for g in parse_host("x", real_raw()).smi_gpus
    )
    facts = dataclasses.replace(facts, smi_gpus=completed)
    p = plan_host(facts, load_policy("b200", {}), default_catalog())
    assert not any(w.startswith("NVLink5:") for w in p.warnings)
    assert (
        "fabric state Completed (the fabric is managed outside this host"
        in role(p, "nvidia_driver").reason
    )


@pytest.mark.parametrize(
    ("device", "what"), [(0x2330, "H100 SXM5 80GB (hopper)"), (0x2941, "GB200 (blackwell)")]
)
def test_sw_mng_beside_gpus_on_no_nvlink5_board_is_a_blocker(device: int, what: str) -> None:
    raw = variant({device: 8}, os_release=DEBIAN_12)
    raw[names.INFINIBAND_VPD] = "mlx5_0 SW_MNG\n# exit=0\n"
    p = plan(raw, "h")
    assert any(
        b.startswith("NVLink5 switch management ports (SW_MNG in the VPD of mlx5_0) beside " + what)
        for b in p.blockers
    ), p.blockers
    assert role(p, "nvidia_driver").vars["nvidia_driver_nvlink5"] is False


def test_pci_vpd_parser() -> None:
    text = "0000:0B:00.0 SW_MNG mlx5_0\n0000:0b:00.1 -\n0000:c1:00.0 unreadable\n# exit=0\n"
    got = parse_pci_vpd(text)
    assert [(f.address, f.sw_mng, f.infiniband) for f in got] == [
        ("0000:0b:00.0", True, ("mlx5_0",)),
        ("0000:0b:00.1", False, ()),
        ("0000:c1:00.0", None, ()),
    ]
    with pytest.raises(ParseError):
        parse_pci_vpd("mlx5_0 SW_MNG\n# exit=0\n")  # not a PCI address
    facts = parse_host("h", {**variant({HGX_B200: 8}), names.PCI_VPD: "0000:0b:00.0 maybe\n"})
    assert facts.pci_vpd is None and any(names.PCI_VPD in e for e in facts.errors)
