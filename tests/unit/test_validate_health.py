"""Host health checks on the real 2x H200 outputs and on fault variants derived from them.

Each simulator fault knob (tests/lab/gpusim/README.md, "Fault knobs") has a variant here that
makes the same change to the real outputs; the lab test repeats them on simulated hosts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.catalog import default_catalog
from orchestrator.factsdir import load_host
from orchestrator.parsers import names, parse_host
from orchestrator.result import CheckResult
from orchestrator.validate.health import health_input, run_health

SHARED = Path(__file__).resolve().parents[2] / "tests" / "recorded"
REAL = SHARED / "fixtures" / "real" / "h200x2-ubuntu2404-580"
DERIVED = Path(__file__).resolve().parent / "fixtures_derived"
GPU1 = "0000:00:07.0"

Raw = dict[str, str]


def real() -> Raw:
    return dict(load_host(REAL))


def health(raw: Raw, expected: int | None = 2) -> list[CheckResult]:
    facts = parse_host("h200", raw)
    return run_health(health_input(facts, default_catalog(), expected_gpus=expected))


def only(results: list[CheckResult], name: str) -> list[CheckResult]:
    picked = [r for r in results if r.name == name]
    assert picked, f"no {name} result"
    return picked


def with_exit(body: str, code: int = 0) -> str:
    return body.rstrip("\n") + f"\n# exit={code}\n"


def body(text: str) -> str:
    return re.sub(r"\n# exit=\d+\n?$", "\n", text)


def smi_q_gpu_block(raw: Raw, bus_suffix: str, edit: Callable[[str], str]) -> None:
    """Apply `edit` to the `nvidia-smi -q` block of one GPU ("00:06.0" or "00:07.0")."""
    text = raw[names.SMI_Q]
    parts = re.split(r"(?m)^(?=GPU 00000000:)", text)
    raw[names.SMI_Q] = "".join(
        edit(p) if p.startswith(f"GPU 00000000:{bus_suffix}") else p for p in parts
    )


def csv_field(raw: Raw, index: int, column: str, value: str) -> None:
    lines = raw[names.SMI_QUERY_GPU].splitlines(keepends=True)
    header = [h.strip() for h in lines[0].split(",")]
    col = next(i for i, h in enumerate(header) if h.split(" [")[0] == column)
    for n, line in enumerate(lines[1:], start=1):
        cells = line.split(", ")
        if cells[0] == str(index):
            cells[col] = value
            lines[n] = ", ".join(cells)
    raw[names.SMI_QUERY_GPU] = "".join(lines)


# ---- the real host ---------------------------------------------------------------------------


def test_real_h200_host_is_healthy() -> None:
    results = health(real())
    bad = [(r.label, r.status, r.diagnosis) for r in results if r.status in ("fail", "warn")]
    assert bad == []
    statuses = {r.name: r.status for r in results}
    assert statuses["fabric_state"] == "pass"  # the VM reports Completed
    assert statuses["fabric_manager"] == "skip"  # no NVSwitch on its PCI bus
    assert only(results, "driver_coherence")[0].value == "580.159.04"
    assert [r.value for r in only(results, "pcie_link")] == ["32 GT/s x16"] * 2


def test_every_check_has_value_limit_and_unit_fields() -> None:
    for r in health(real()):
        assert r.status in ("pass", "skip") or r.diagnosis
        if r.status == "pass":
            assert r.limit is not None, r.label


# ---- one variant per simulator fault knob -----------------------------------------------------


def test_gpu_missing_from_the_bus() -> None:
    raw = real()
    raw[names.SYSFS_PCI] = "".join(
        ln for ln in raw[names.SYSFS_PCI].splitlines(keepends=True) if not ln.startswith(GPU1)
    )
    raw[names.SMI_QUERY_GPU] = "".join(
        ln for ln in raw[names.SMI_QUERY_GPU].splitlines(keepends=True) if not ln.startswith("1,")
    )
    r = only(health(raw), "gpu_count")[0]
    assert (r.status, r.value, r.limit) == ("fail", 1, 2)
    assert "1 NVIDIA GPUs on the PCI bus, 2 expected" in r.diagnosis
    assert "Xid 79" in r.diagnosis


def test_gpu_on_the_bus_but_not_in_nvidia_smi() -> None:
    raw = real()
    raw[names.SMI_QUERY_GPU] = "".join(
        ln for ln in raw[names.SMI_QUERY_GPU].splitlines(keepends=True) if not ln.startswith("1,")
    )
    r = only(health(raw, expected=None), "gpu_count")[0]
    assert (r.status, r.value, r.limit) == ("fail", 1, 2)
    assert "driver did not initialise a GPU" in r.diagnosis


def test_nvlink_inactive() -> None:
    raw = real()
    text = raw[names.SMI_NVLINK_S]
    head, gpu1 = text.split("GPU 1:", 1)
    raw[names.SMI_NVLINK_S] = head + "GPU 1:" + re.sub(r"26\.562 GB/s", "<inactive>", gpu1)
    r = only(health(raw), "nvlink_active")[0]
    assert r.status == "fail"
    assert r.value == 18
    assert "GPU 1 link 0" in r.diagnosis
    assert "fabric manager" in r.diagnosis


def test_xid_79_fails() -> None:
    raw = real()
    line = (
        "[  812.345678] NVRM: Xid (PCI:0000:00:07): 79, pid=2144, name=python3, "
        "GPU has fallen off the bus.\n"
    )
    raw[names.KERNEL_LOG] = with_exit(body(raw[names.KERNEL_LOG]) + line)
    r = only(health(raw), "xid_errors")[0]
    assert (r.status, r.value) == ("fail", 1)
    assert "79 on 0000:00:07" in r.diagnosis
    assert "nvidia-bug-report.sh" in r.diagnosis


def test_xid_outside_the_list_or_old_only_warns() -> None:
    raw = real()
    app_fault = "[  812.3] NVRM: Xid (PCI:0000:00:06): 13, pid=1, Graphics Exception\n"
    old_79 = "[  100.0] NVRM: Xid (PCI:0000:00:07): 79, pid=2, GPU has fallen off the bus.\n"
    raw[names.KERNEL_LOG] = with_exit(body(raw[names.KERNEL_LOG]) + app_fault + old_79)
    raw[names.PROC_UPTIME] = with_exit("90000.00 170000.00")  # 25 h after boot
    r = only(health(raw), "xid_errors")[0]
    assert (r.status, r.value) == ("warn", 2)
    assert "older than 2 h" in r.diagnosis


def test_row_remap_pending() -> None:
    raw = real()
    smi_q_gpu_block(
        raw,
        "00:06.0",
        lambda b: b.replace(
            "        Pending                                        : No",
            "        Pending                                        : Yes",
        ),
    )
    csv_field(raw, 0, "remapped_rows.pending", "Yes")
    rows = only(health(raw), "row_remap")
    assert [(r.gpu, r.status) for r in rows] == [(0, "fail"), (1, "pass")]
    assert "nvidia-smi -r -i 0" in rows[0].diagnosis


def test_row_remap_failure_means_rma() -> None:
    raw = real()
    smi_q_gpu_block(
        raw,
        "00:07.0",
        lambda b: b.replace(
            "Remapping Failure Occurred                     : No",
            "Remapping Failure Occurred                     : Yes",
        ),
    )
    r = only(health(raw), "row_remap")[1]
    assert (r.gpu, r.status, r.value) == (1, "fail", "failure")
    assert "RMA" in r.diagnosis


def test_pcie_degraded_to_gen4() -> None:
    raw = real()
    raw[names.SYSFS_PCI] = "".join(
        ln.replace('current_link_speed="32.0 GT/s PCIe"', 'current_link_speed="16.0 GT/s PCIe"')
        if ln.startswith(GPU1)
        else ln
        for ln in raw[names.SYSFS_PCI].splitlines(keepends=True)
    )
    csv_field(raw, 1, "pcie.link.gen.current", "4")
    links = only(health(raw), "pcie_link")
    assert [(r.gpu, r.status) for r in links] == [(0, "pass"), (1, "fail")]
    assert (links[1].value, links[1].limit) == ("16 GT/s x16", "32 GT/s x16")
    assert "reseat" in links[1].diagnosis


def test_pcie_width_from_nvidia_smi_where_sysfs_is_empty() -> None:
    raw = real()
    raw[names.SYSFS_PCI] = re.sub(
        r'current_link_speed="[^"]*" current_link_width=\d* max_link_speed="[^"]*" '
        r"max_link_width=\d*",
        'current_link_speed="" current_link_width= max_link_speed="" max_link_width=',
        raw[names.SYSFS_PCI],
    )
    csv_field(raw, 0, "pcie.link.width.current", "8")
    links = only(health(raw), "pcie_link")
    assert [(r.status, r.value) for r in links] == [("fail", "Gen5 x8"), ("pass", "Gen5 x16")]


def test_fabric_not_completed() -> None:
    raw = real()
    raw[names.SMI_Q] = raw[names.SMI_Q].replace(
        "        State                                          : Completed",
        "        State                                          : Not Started",
    )
    r = only(health(raw), "fabric_state")[0]
    assert (r.status, r.value, r.limit) == ("fail", "Not Started", "Completed")
    assert "nvidia-fabricmanager" in r.diagnosis


# ---- further fault variants of the real outputs ---------------------------------------------


def test_ecc_disabled_and_sram_uncorrectable() -> None:
    raw = real()
    csv_field(raw, 1, "ecc.mode.current", "Disabled")
    smi_q_gpu_block(
        raw,
        "00:06.0",
        lambda b: b.replace(
            "            SRAM Uncorrectable SEC-DED                 : 0",
            "            SRAM Uncorrectable SEC-DED                 : 3",
            1,
        ),
    )
    results = health(raw)
    mode = only(results, "ecc_mode")
    assert [(r.gpu, r.status) for r in mode] == [(0, "pass"), (1, "fail")]
    assert "nvidia-smi -i 1 -e 1" in mode[1].diagnosis
    unc = only(results, "ecc_uncorrectable")
    assert (unc[0].status, unc[0].value, unc[0].unit) == ("fail", 3, "SRAM errors")
    assert unc[1].status == "pass"


def test_persistence_off_and_thermal_slowdown() -> None:
    raw = real()
    csv_field(raw, 0, "persistence_mode", "Disabled")
    csv_field(raw, 1, "clocks_event_reasons.active", "0x0000000000000048")
    results = health(raw)
    pers = only(results, "persistence")
    assert [r.status for r in pers] == ["fail", "pass"]
    assert "nvidia-persistenced" in pers[0].diagnosis
    clocks = only(results, "clock_events")
    assert [r.status for r in clocks] == ["pass", "warn"]
    assert "HW slowdown, HW thermal slowdown" in clocks[1].diagnosis


def test_nvlink_error_counters_warn() -> None:
    raw = real()
    raw[names.SMI_NVLINK_E] = raw[names.SMI_NVLINK_E].replace(
        "Link 3: Replay Errors: 0", "Link 3: Replay Errors: 7", 1
    )
    r = only(health(raw), "nvlink_errors")[0]
    assert (r.status, r.value, r.limit) == ("warn", 7, 5)
    assert "GPU 0 link 3" in r.diagnosis


def test_driver_module_and_library_differ() -> None:
    raw = real()
    raw[names.PROC_DRIVER_VERSION] = raw[names.PROC_DRIVER_VERSION].replace(
        "580.159.04", "580.95.05"
    )
    raw[names.DPKG_QUERY] = with_exit(
        "nvidia-driver-580-open 580.159.04-0ubuntu1 install ok installed hold\n"
    )
    r = only(health(raw), "driver_coherence")[0]
    assert r.status == "fail"
    assert r.value == "580.159.04 / 580.95.05"
    assert "kernel module 580.95.05" in r.diagnosis
    assert "reboot" in r.diagnosis


def test_nvswitch_host_without_fabric_manager() -> None:
    raw = dict(load_host(DERIVED / "h100x8-nvswitch4-ubuntu2204-550"))
    raw[names.SYSTEMCTL] = with_exit("nvidia-fabricmanager.service inactive enabled\n")
    results = health(raw, expected=8)
    fm = only(results, "fabric_manager")[0]
    assert (fm.status, fm.value) == ("fail", "inactive")
    assert "4 NVSwitches" in fm.diagnosis
    assert only(results, "gpu_count")[0].status == "pass"


def test_no_driver_yet_fails_with_the_fix() -> None:
    raw = dict(load_host(DERIVED / "h200x2-nodriver"))
    results = health(raw)
    count = only(results, "gpu_count")[0]
    assert (count.status, count.value, count.limit) == ("fail", 0, 2)
    assert "provision apply" in count.diagnosis
    assert only(results, "persistence")[0].status == "fail"


@pytest.mark.parametrize("fixture", ["h200x2-mig", "l40sx4-debian12-535"])
def test_other_derived_hosts_give_no_false_failure(fixture: str) -> None:
    raw = dict(load_host(DERIVED / fixture))
    facts = parse_host(fixture, raw)
    results = run_health(health_input(facts, default_catalog()))
    assert [r.label for r in results if r.status == "fail"] == []


def test_no_gpu_at_all_is_not_a_pass() -> None:
    raw = real()
    raw[names.SYSFS_PCI] = "".join(
        ln for ln in raw[names.SYSFS_PCI].splitlines(keepends=True) if "0x10de" not in ln
    )
    for name in [n for n in raw if n.startswith("nvidia-smi")]:
        del raw[name]
    r = only(health(raw, expected=None), "gpu_count")[0]
    assert (r.status, r.value) == ("fail", 0)
    assert "no NVIDIA GPU on the PCI bus" in r.diagnosis


def test_nvswitch_host_without_driver_says_install_the_driver() -> None:
    raw = {
        k: v
        for k, v in load_host(DERIVED / "h100x8-nvswitch4-ubuntu2204-550").items()
        if not k.startswith("nvidia-smi")
    }
    r = only(health(raw, expected=8), "fabric_state")[0]
    assert r.status == "fail"
    assert "provision apply" in r.diagnosis


def test_health_reads_the_facts_which_parse_q_and_nvlink_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Validation takes facts, not raw text (issue 26): -q and nvlink -e are parsed by the
    facts model, once per host, however often the checks read them."""
    from orchestrator.parsers import nvlink, smi_q

    calls: list[str] = []
    for module, name in ((smi_q, "parse_smi_q"), (nvlink, "parse_nvlink_errors")):
        real_parse = getattr(module, name)
        monkeypatch.setattr(
            module, name, lambda text, _f=real_parse, _n=name: (calls.append(_n), _f(text))[1]
        )
    facts = parse_host("h200", real())
    first = run_health(health_input(facts, default_catalog(), expected_gpus=2))
    again = run_health(health_input(facts, default_catalog(), expected_gpus=2))
    assert first == again
    assert sorted(calls) == ["parse_nvlink_errors", "parse_smi_q"]
    assert only(first, "ecc_uncorrectable")[0].status == "pass"  # read from the parsed -q
