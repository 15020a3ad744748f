"""Every parser against the raw outputs of the real 2x H200 host (tests/recorded/fixtures/real/)."""

from __future__ import annotations

import pytest
from _helpers import H200 as REAL

from orchestrator.factsdir import load_host
from orchestrator.parsers import names, parse_host
from orchestrator.parsers.driver_version import parse_driver_version, parse_nvrm_line
from orchestrator.parsers.kernel_log import parse_kernel_log
from orchestrator.parsers.mig import parse_lci, parse_lgi, parse_lgip, parse_lgipp
from orchestrator.parsers.nccl_tests import parse_nccl_tests
from orchestrator.parsers.nvlink import parse_nvlink_errors, parse_nvlink_status
from orchestrator.parsers.os_release import parse_os_release
from orchestrator.parsers.proc_modules import parse_proc_modules
from orchestrator.parsers.smi_list import parse_smi_list
from orchestrator.parsers.smi_q import parse_smi_q
from orchestrator.parsers.smi_query_gpu import QUERY_FIELDS, parse_query_gpu
from orchestrator.parsers.smi_version import parse_smi_version
from orchestrator.parsers.sysfs_pci import parse_sysfs_pci
from orchestrator.parsers.topo import parse_topo

BUSES = ("0000:00:06.0", "0000:00:07.0")
UUIDS = ("GPU-404dd017-98bf-f070-ceff-12f79a8cb0a0", "GPU-e11afe21-b50a-0dfa-6d85-b891d5fb40e6")


@pytest.fixture(scope="module")
def raw() -> dict[str, str]:
    return load_host(REAL)


def test_os_release(raw: dict[str, str]) -> None:
    os_info = parse_os_release(raw[names.OS_RELEASE])
    assert (os_info.id, os_info.version_id, os_info.codename) == ("ubuntu", "24.04", "noble")
    assert os_info.pretty_name == "Ubuntu 24.04.3 LTS"
    assert os_info.id_like == ("debian",)
    assert os_info.family == "debian"


def test_sysfs_pci(raw: dict[str, str]) -> None:
    devices = parse_sysfs_pci(raw[names.SYSFS_PCI])
    assert len(devices) == 8
    gpus = [d for d in devices if d.vendor_id == 0x10DE]
    assert [g.address for g in gpus] == list(BUSES)
    for g in gpus:
        assert (g.device_id, g.class_code) == (0x2335, 0x030200)
        assert (g.subsystem_vendor_id, g.subsystem_device_id) == (0x10DE, 0x18BF)
        assert (g.link.current_speed_gts, g.link.current_width) == (32.0, 16)
        assert (g.link.max_speed_gts, g.link.max_width) == (32.0, 16)
        assert not g.link.degraded
        assert (g.numa_node, g.driver) == (-1, "nvidia")
    bridge = devices[0]
    assert bridge.vendor_id == 0x8086 and bridge.driver == ""
    assert bridge.link.current_speed_gts is None and bridge.link.current_width is None
    assert devices[1].driver == "virtio-pci"


def test_driver_version_open_flavour(raw: dict[str, str]) -> None:
    driver = parse_driver_version(raw[names.PROC_DRIVER_VERSION])
    assert driver is not None
    assert (driver.version, driver.flavour) == ("580.159.04", "open")
    assert driver.raw.startswith("NVRM version: NVIDIA UNIX Open Kernel Module")


def test_proc_modules(raw: dict[str, str]) -> None:
    assert parse_proc_modules(raw[names.PROC_MODULES]) == ("nvidia_uvm", "nvidia")


def test_smi_version(raw: dict[str, str]) -> None:
    info = parse_smi_version(raw[names.SMI_VERSION])
    assert info is not None
    assert (info.smi_version, info.nvml_version) == ("580.159.04", "580.159")
    assert (info.driver_version, info.cuda_version) == ("580.159.04", "13.0")


def test_smi_list(raw: dict[str, str]) -> None:
    gpus = parse_smi_list(raw[names.SMI_L])
    assert [(g.index, g.name, g.uuid) for g in gpus] == [
        (0, "NVIDIA H200", UUIDS[0]),
        (1, "NVIDIA H200", UUIDS[1]),
    ]
    assert all(g.mig_devices == () for g in gpus)


def test_query_gpu_exact(raw: dict[str, str]) -> None:
    gpus = parse_query_gpu(raw[names.SMI_QUERY_GPU])
    assert len(gpus) == 2
    g = gpus[0]
    assert g.bus_id == "0000:00:06.0"  # 00000000:00:06.0 normalised to sysfs form
    assert g.device_id == 0x2335  # from 0x233510DE
    assert g.subsystem_id == 0x18BF10DE
    assert (g.index, g.name, g.uuid, g.serial) == (0, "NVIDIA H200", UUIDS[0], "1653724055839")
    assert (g.driver_version, g.vbios_version) == ("580.159.04", "96.00.A5.00.1A")
    assert g.memory_total_mib == 143771
    assert (g.mig_mode_current, g.mig_mode_pending) == ("Disabled", "Disabled")
    assert g.persistence_mode == "Enabled"
    assert (g.ecc_mode_current, g.ecc_mode_pending, g.ecc_uncorrected_volatile) == (
        "Enabled",
        "Enabled",
        0,
    )
    assert g.compute_cap == "9.0"
    assert (g.power_limit_w, g.clocks_max_sm_mhz) == (700.0, 1980)
    assert (g.pcie_gen_current, g.pcie_width_current, g.pcie_gen_max, g.pcie_width_max) == (
        5,
        16,
        5,
        16,
    )
    assert g.retired_pages_pending is None  # [N/A]
    assert (g.remapped_rows_pending, g.remapped_rows_failure) == ("No", "No")
    assert g.clocks_event_reasons == 1  # 0x...01: GPU idle
    assert g.temperature_c == 34
    assert gpus[1].bus_id == "0000:00:07.0"


def test_query_fields_match_the_fixture_header(raw: dict[str, str]) -> None:
    header = raw[names.SMI_QUERY_GPU].splitlines()[0].split(", ")
    assert [h.split(" [")[0] for h in header] == list(QUERY_FIELDS)
    assert len(QUERY_FIELDS) == 29


def test_smi_q(raw: dict[str, str]) -> None:
    q = parse_smi_q(raw[names.SMI_Q])
    assert (q.driver_version, q.cuda_version, q.attached_gpus) == ("580.159.04", "13.0", 2)
    assert [g.bus_id for g in q.gpus] == list(BUSES)
    for g in q.gpus:
        assert (g.product_name, g.architecture) == ("NVIDIA H200", "Hopper")
        assert (g.fabric_state, g.fabric_status) == ("Completed", "Success")
        assert (g.ecc_mode_current, g.persistence_mode) == ("Enabled", "Enabled")
        assert (g.mig_mode_current, g.mig_mode_pending) == ("Disabled", "Disabled")
        assert g.ecc_volatile.dram_uncorrectable == 0
        assert g.ecc_volatile.sram_uncorrectable == 0
        assert g.ecc_aggregate.sram_correctable == 0
        assert (g.row_remap.pending, g.row_remap.failure) == (False, False)
        assert (g.row_remap.correctable, g.row_remap.uncorrectable) == (0, 0)
        assert g.retired_pages_pending is None
        assert g.recovery_action == "None"
        assert g.clocks_event_reasons_active == ("Idle",)
        assert g.temperature_c == 34
        assert g.virtualization_mode == "Pass-Through"


def test_nvlink_status(raw: dict[str, str]) -> None:
    gpus = parse_nvlink_status(raw[names.SMI_NVLINK_S])
    assert [g.uuid for g in gpus] == list(UUIDS)
    for g in gpus:
        assert len(g.links) == 18
        assert {link.speed_gbps for link in g.links} == {26.562}
        assert g.inactive == ()


def test_nvlink_errors(raw: dict[str, str]) -> None:
    errors = parse_nvlink_errors(raw[names.SMI_NVLINK_E])
    assert len(errors) == 2 * 18
    assert set(errors[0].counters) == {"Replay Errors", "Recovery Errors", "CRC Errors"}
    assert sum(e.total for e in errors) == 0


def test_mig_lgip(raw: dict[str, str]) -> None:
    profiles = parse_lgip(raw[names.SMI_MIG_LGIP])
    assert len(profiles) == 14
    gpu0 = {p.name: p for p in profiles if p.gpu == 0}
    assert {n: (p.profile_id, p.total) for n, p in gpu0.items()} == {
        "1g.18gb": (19, 7),
        "1g.18gb+me": (20, 1),
        "1g.35gb": (15, 4),
        "2g.35gb": (14, 3),
        "3g.71gb": (9, 2),
        "4g.71gb": (5, 1),
        "7g.141gb": (0, 1),
    }
    assert gpu0["7g.141gb"].memory_gib == 140.0
    assert gpu0["1g.35gb"].memory_gib == 32.5
    assert gpu0["1g.18gb"].free == 7


def test_mig_lgipp(raw: dict[str, str]) -> None:
    placements = {(p.gpu, p.profile_id): p for p in parse_lgipp(raw[names.SMI_MIG_LGIPP])}
    assert len(placements) == 14
    assert placements[(0, 19)].starts == (0, 1, 2, 3, 4, 5, 6)
    assert placements[(0, 15)].starts == (0, 2, 4, 6) and placements[(0, 15)].size == 2
    assert placements[(1, 9)].starts == (0, 4) and placements[(1, 9)].size == 4
    assert placements[(1, 5)].starts == (0,) and placements[(1, 5)].size == 4  # "Placement :"
    assert placements[(0, 0)].size == 8


def test_mig_listings_when_disabled(raw: dict[str, str]) -> None:
    assert parse_lgi(raw[names.SMI_MIG_LGI]) == ()
    assert parse_lci(raw[names.SMI_MIG_LCIP]) == ()


def test_topology(raw: dict[str, str]) -> None:
    topo = parse_topo(raw[names.SMI_TOPO])
    assert topo.devices == ("GPU0", "GPU1") == topo.gpus
    assert topo.links[("GPU0", "GPU0")] == "X"
    assert topo.nvlinks("GPU0", "GPU1") == 18 == topo.nvlinks("GPU1", "GPU0")
    assert topo.cpu_affinity["GPU0"] == "0-31"
    assert topo.numa_affinity["GPU1"] == "0"


def test_kernel_log(raw: dict[str, str]) -> None:
    log = parse_kernel_log(raw[names.KERNEL_LOG])
    assert len(log.lines) == 6
    assert log.xids == ()
    assert not log.unsigned_module_rejected
    loading = next(line for line in log.lines if "NVRM: loading" in line)
    driver = parse_nvrm_line(loading)
    assert driver is not None and (driver.version, driver.flavour) == ("580.159.04", "open")


def test_nccl_tests_all_reduce() -> None:
    result = parse_nccl_tests((REAL / "nccl-tests-all_reduce_perf.txt").read_text())
    assert result.collective == "all_reduce_perf"
    assert (result.version, result.nccl_library, result.gpus_per_thread) == ("2.19.6", 22803, 2)
    assert [(r.rank, r.device, r.bus) for r in result.ranks] == [
        (0, 0, "0000:00:06"),
        (1, 1, "0000:00:07"),
    ]
    assert len(result.rows) == 7
    assert result.rows[0].size_bytes == 1048576 and result.rows[0].dtype == "float"
    largest = result.largest()
    assert largest is not None and largest.size_bytes == 4294967296
    assert largest.out_of_place.busbw_gbs == 343.86 and largest.in_place.busbw_gbs == 345.29
    gib = result.row_at(1 << 30)
    assert gib is not None and gib.out_of_place.busbw_gbs == 330.38
    assert (result.out_of_bounds, result.bounds_ok, result.avg_busbw_gbs) == (0, True, 233.315)
    assert result.wrong == 0 and result.complete


def test_parse_host(raw: dict[str, str]) -> None:
    facts = parse_host("h200-vm", raw)
    assert facts.host == "h200-vm" and facts.errors == ()
    assert facts.kernel == "6.18.44-fc-v657-gpu"
    assert facts.os is not None and facts.os.codename == "noble"
    assert [g.address for g in facts.gpus] == list(BUSES)
    assert facts.nvidia_bridges == ()  # no NVSwitch visible in the VM
    assert facts.loaded_driver is not None and facts.loaded_driver.flavour == "open"
    assert facts.smi is not None and facts.smi.cuda_version == "13.0"
    assert [g.fabric_state for g in facts.smi_gpus] == ["Completed", "Completed"]
    assert [g.fabric_status for g in facts.smi_gpus] == ["Success", "Success"]
    assert facts.nvlink_inactive == ()
    assert facts.secure_boot is None  # not captured on that host
    assert facts.runtime.docker_version is None and facts.runtime.toolkit_version is None
    assert not facts.simulated
    assert facts.packages == {} and facts.services == {} and facts.xids == ()
