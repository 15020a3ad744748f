"""A reboot the infiniband role recorded against this boot (issue 47 item 5: DOCA-OFED's ib_core
and the nvidia-peermem rebuilt against it are active only after one) reaches the plan as a
warning and fails InfiniBand fabric health until the host rebooted: the real probe section on
this machine's boot id, the parser, the planner and fabric health."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from orchestrator.catalog import default_catalog
from orchestrator.facts import HostFacts
from orchestrator.parsers import names, parse_host
from orchestrator.parsers.reboot import parse_reboot_pending
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy
from orchestrator.probe import probe_script, split_output
from orchestrator.validate.fabric import fabric_input, run_fabric

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "recorded" / "fixtures" / "real" / "h200x2-ubuntu2404-580"
SHAPED = Path(__file__).resolve().parent / "data" / "fabric-shaped"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
DOCA = "DOCA-OFED was installed on this boot"


def probed(state: Path) -> dict[str, str]:
    """The probe's captures with its gpuprov state directory at `state`."""
    script = probe_script().replace("/var/lib/gpuprov/reboot-required", f"{state}/reboot-required")
    out = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, check=True)
    return split_output("n1", out.stdout)


def test_the_probe_captures_a_record_and_this_boot(tmp_path: Path) -> None:
    assert names.REBOOT_PENDING not in probed(tmp_path)  # no record: no capture
    (tmp_path / "reboot-required-infiniband").write_text(BOOT_ID + "\n")
    text = probed(tmp_path)[names.REBOOT_PENDING]
    assert f"boot_id {BOOT_ID}\n" in text
    assert f"\nrecord reboot-required-infiniband {BOOT_ID}\n" in text
    (cause,) = parse_reboot_pending(text)
    assert cause.startswith(DOCA) and "roles/infiniband" in cause


def test_a_record_of_an_earlier_boot_is_no_reboot_owed(tmp_path: Path) -> None:
    (tmp_path / "reboot-required-infiniband").write_text("a-boot-before-this-one\n")
    assert parse_reboot_pending(probed(tmp_path)[names.REBOOT_PENDING]) == ()


DRIVER = "the NVIDIA driver was installed on this boot and not loaded"
BOOT_TIME = int(
    next(
        ln.split()[1]
        for ln in Path("/proc/stat").read_text().splitlines()
        if ln.startswith("btime ")
    )
)


def test_the_driver_roles_record_of_this_boot_is_a_reboot_owed(tmp_path: Path) -> None:
    """roles/nvidia_driver's /var/lib/gpuprov/reboot-required (its reasons, no boot id; read
    by nothing before): owed when written on this boot, by its modification time."""
    record = tmp_path / "reboot-required"
    record.write_text("the running kernel module is 570.172.08, 580.95.05 installed\nsecond\n")
    text = probed(tmp_path)[names.REBOOT_PENDING]
    assert f"boot_time {BOOT_TIME}\n" in text
    (cause,) = parse_reboot_pending(text)
    assert cause == f"{DRIVER} (nvidia_driver_reboot is forbid; roles/nvidia_driver): " + (
        "the running kernel module is 570.172.08, 580.95.05 installed"
    )
    (tmp_path / "reboot-required-infiniband").write_text(BOOT_ID + "\n")
    causes = parse_reboot_pending(probed(tmp_path)[names.REBOOT_PENDING])
    assert [c[:20] for c in causes] == [DOCA[:20], DRIVER[:20]]  # both, the probe's order


def test_the_driver_roles_record_of_an_earlier_boot_is_stale(tmp_path: Path) -> None:
    record = tmp_path / "reboot-required"
    record.write_text("a reason\n")
    os.utime(record, (BOOT_TIME - 3600, BOOT_TIME - 3600))  # written an hour before this boot
    assert parse_reboot_pending(probed(tmp_path)[names.REBOOT_PENDING]) == ()


def test_a_driver_record_without_times_is_no_reboot_owed() -> None:
    """Fields that are not whole numbers (a probe of another shape) decide nothing."""
    assert parse_reboot_pending("boot_id x\nsince reboot-required soon reason\n# exit=0\n") == ()
    assert parse_reboot_pending("boot_id x\nsince reboot-required 5 reason\n# exit=0\n") == ()


def test_the_plan_says_the_driver_reboot_is_owed() -> None:
    raw = {p.name: p.read_text() for p in REAL.iterdir() if p.is_file()}
    raw[names.REBOOT_PENDING] = (
        f"boot_id {BOOT_ID}\nboot_time 100\nsince reboot-required 200 a reason\n# exit=0\n"
    )
    plan = plan_host(parse_host("n1", raw), load_policy("n1", {}), default_catalog())
    (warning,) = [w for w in plan.warnings if w.startswith("reboot_required:")]
    assert warning.startswith(f"reboot_required: {DRIVER}") and ": a reason;" in warning


def host(*, pending: bool) -> HostFacts:
    raw = {p.name: p.read_text() for p in REAL.iterdir() if p.is_file()}
    raw[names.RDMA] = (SHAPED / "rdma-ib.txt").read_text()  # 8 InfiniBand HCAs
    if pending:
        raw[names.REBOOT_PENDING] = (
            f"boot_id {BOOT_ID}\nrecord reboot-required-infiniband {BOOT_ID}\n# exit=0\n"
        )
    return parse_host("n1", raw)


def test_the_plan_says_the_reboot_is_owed() -> None:
    facts = host(pending=True)
    plan = plan_host(facts, load_policy("n1", {}), default_catalog())
    (warning,) = [w for w in plan.warnings if w.startswith("reboot_required:")]
    assert DOCA in warning and "gpuprov does not reboot for it" in warning
    clean = plan_host(host(pending=False), load_policy("n1", {}), default_catalog())
    assert not [w for w in clean.warnings if w.startswith("reboot_required:")]


def test_infiniband_fabric_health_fails_until_the_reboot() -> None:
    results = run_fabric(fabric_input(host(pending=True), expected_devices=8))
    (reboot,) = [r for r in results if r.name == "ib_reboot"]
    assert reboot.status == "fail"
    assert reboot.diagnosis.startswith(f"n1: reboot required: {DOCA}")
    assert "fix: reboot the host (gpuprov does not)" in reboot.diagnosis
    results = run_fabric(fabric_input(host(pending=False), expected_devices=8))
    assert not [r for r in results if r.name == "ib_reboot"]
