"""parse_host over the derived host variants (tests/unit/fixtures_derived/)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _helpers import load_module

from orchestrator.facts import HostFacts
from orchestrator.factsdir import load_dir
from orchestrator.parsers import names, parse_host
from orchestrator.parsers.mig import parse_lci, parse_lgi, parse_lgip, parse_lgipp
from orchestrator.parsers.nvlink import parse_nvlink_errors, parse_nvlink_status
from orchestrator.parsers.smi_list import parse_smi_list
from orchestrator.parsers.smi_q import fabric_states, parse_smi_q
from orchestrator.parsers.topo import parse_topo

DERIVED = Path(__file__).resolve().parent / "fixtures_derived"


@pytest.fixture(scope="module")
def raw() -> dict[str, dict[str, str]]:
    return load_dir(DERIVED)


@pytest.fixture(scope="module")
def facts(raw: dict[str, dict[str, str]]) -> dict[str, HostFacts]:
    return {host: parse_host(host, files) for host, files in raw.items()}


def test_committed_variants_match_the_generator(raw: dict[str, dict[str, str]]) -> None:
    assert load_module("derive", DERIVED / "derive.py", register=True).render() == raw


def test_every_variant_parses_without_errors(facts: dict[str, HostFacts]) -> None:
    assert len(facts) == 8
    for host, f in facts.items():
        assert f.errors == (), host


def test_h100_hgx_with_four_nvswitches(facts: dict[str, HostFacts]) -> None:
    f = facts["h100x8-nvswitch4-ubuntu2204-550"]
    assert [g.device_id for g in f.gpus] == [0x2330] * 8
    assert [b.device_id for b in f.nvidia_bridges] == [0x22A3] * 4
    assert f.loaded_driver is not None
    assert (f.loaded_driver.version, f.loaded_driver.flavour) == ("550.127.05", "open")
    assert f.os is not None and (f.os.id, f.os.version_id) == ("ubuntu", "22.04")
    assert [g.bus_id for g in f.smi_gpus] == [g.address for g in f.gpus]
    assert {g.memory_total_mib for g in f.smi_gpus} == {81559}
    assert {g.fabric_state for g in f.smi_gpus} == {"Completed"}
    assert f.nvlink_inactive == ()
    assert {g.numa_node for g in f.gpus} == {0, 1}


def test_h100_mig_profiles_are_h100_sized(raw: dict[str, dict[str, str]]) -> None:
    files = raw["h100x8-nvswitch4-ubuntu2204-550"]
    profiles = parse_lgip(files[names.SMI_MIG_LGIP])
    assert len(profiles) == 8 * 7
    gpu7 = {p.name: p.memory_gib for p in profiles if p.gpu == 7}
    assert gpu7["1g.10gb"] == 9.75 and gpu7["7g.80gb"] == 79.25
    assert len(parse_lgipp(files[names.SMI_MIG_LGIPP])) == 8 * 7


def test_a100_hgx_proprietary_with_six_nvswitches(
    facts: dict[str, HostFacts], raw: dict[str, dict[str, str]]
) -> None:
    f = facts["a100x8-nvswitch6-ubuntu2204-535"]
    assert [g.device_id for g in f.gpus] == [0x20B2] * 8
    assert [b.device_id for b in f.nvidia_bridges] == [0x1AF1] * 6
    assert f.loaded_driver is not None
    assert (f.loaded_driver.version, f.loaded_driver.flavour) == ("535.216.01", "proprietary")
    assert {g.compute_cap for g in f.smi_gpus} == {"8.0"}
    assert {(g.link.max_speed_gts, g.link.max_width) for g in f.gpus} == {(16.0, 16)}
    links = parse_nvlink_status(raw["a100x8-nvswitch6-ubuntu2204-535"][names.SMI_NVLINK_S])
    assert {len(g.links) for g in links} == {12}
    topo = parse_topo(raw["a100x8-nvswitch6-ubuntu2204-535"][names.SMI_TOPO])
    assert topo.nvlinks("GPU0", "GPU7") == 12


def test_l40s_no_nvlink_no_mig(facts: dict[str, HostFacts], raw: dict[str, dict[str, str]]) -> None:
    f = facts["l40sx4-debian12-535"]
    assert [g.device_id for g in f.gpus] == [0x26B9] * 4
    assert f.nvidia_bridges == ()
    assert f.os is not None and (f.os.id, f.os.codename, f.os.family) == (
        "debian",
        "bookworm",
        "debian",
    )
    assert {g.mig_mode_current for g in f.smi_gpus} == {None}  # [N/A]
    assert {g.compute_cap for g in f.smi_gpus} == {"8.9"}
    files = raw["l40sx4-debian12-535"]
    assert all(g.links == () for g in parse_nvlink_status(files[names.SMI_NVLINK_S]))
    assert parse_lgip(files[names.SMI_MIG_LGIP]) == ()
    topo = parse_topo(files[names.SMI_TOPO])
    assert topo.links[("GPU0", "GPU1")] == "NODE" and topo.nvlinks("GPU0", "GPU1") == 0


def test_v100_needs_proprietary(facts: dict[str, HostFacts]) -> None:
    f = facts["v100x8-ubuntu2204-535"]
    assert [g.device_id for g in f.gpus] == [0x1DB5] * 8
    assert f.loaded_driver is not None and f.loaded_driver.flavour == "proprietary"
    assert {g.remapped_rows_pending for g in f.smi_gpus} == {None}
    assert {g.retired_pages_pending for g in f.smi_gpus} == {"No"}
    assert {g.pcie_gen_max for g in f.smi_gpus} == {3}


def test_no_driver_yet(facts: dict[str, HostFacts], raw: dict[str, dict[str, str]]) -> None:
    f = facts["h200x2-nodriver"]
    assert not any(name.startswith("nvidia-smi") for name in raw["h200x2-nodriver"])
    assert [g.device_id for g in f.gpus] == [0x2335, 0x2335]
    assert {g.driver for g in f.gpus} == {""}
    assert f.loaded_driver is None and f.smi is None and f.smi_gpus == ()
    assert "nvidia" not in f.loaded_modules


def test_unknown_device_id(facts: dict[str, HostFacts]) -> None:
    f = facts["unknown-id-nodriver"]
    assert [g.device_id for g in f.gpus] == [0x2FFE, 0x2FFE]
    assert f.errors == ()  # an unknown id is the catalog's and the planner's to judge


def test_faults(facts: dict[str, HostFacts], raw: dict[str, dict[str, str]]) -> None:
    f = facts["h200x2-faults"]
    files = raw["h200x2-faults"]
    assert f.nvlink_inactive == ((1, 3), (1, 4))
    degraded = [g.address for g in f.gpus if g.link.degraded]
    assert degraded == ["0000:00:07.0"]
    g0, g1 = f.smi_gpus
    assert g0.ecc_uncorrected_volatile == 2 and g0.remapped_rows_pending == "Yes"
    assert g0.clocks_event_reasons == 0x8
    assert g1.persistence_mode == "Disabled" and g1.remapped_rows_failure == "Yes"
    assert (g1.pcie_gen_current, g1.pcie_width_current) == (4, 8)
    assert (g0.fabric_state, g1.fabric_state) == ("Completed", "In Progress")
    q0, q1 = parse_smi_q(files[names.SMI_Q]).gpus
    assert q0.ecc_volatile.dram_uncorrectable == 2 and q0.ecc_volatile.sram_uncorrectable == 1
    assert q0.row_remap.pending is True and q0.row_remap.uncorrectable == 2
    assert q0.clocks_event_reasons_active == ("HW Slowdown",)
    assert q1.row_remap.failure is True and q1.fabric_status is None
    errors = {(e.gpu, e.link): e.total for e in parse_nvlink_errors(files[names.SMI_NVLINK_E])}
    assert errors[(0, 2)] == 12 and errors[(1, 3)] == 7
    assert sum(errors.values()) == 19
    assert [(x.code, x.pci, x.uptime_s) for x in f.xids] == [
        (79, "0000:00:07", 5120.331842),
        (48, "0000:00:06", 5120.331901),
    ]
    assert f.uptime_s == 6001.52


def test_mig_layout(raw: dict[str, dict[str, str]], facts: dict[str, HostFacts]) -> None:
    files = raw["h200x2-mig"]
    gis = parse_lgi(files[names.SMI_MIG_LGI])
    assert [(g.name, g.profile_id, g.instance_id, g.start, g.size) for g in gis] == [
        ("3g.71gb", 9, 2, 0, 4),
        ("2g.35gb", 14, 3, 4, 2),
        ("1g.18gb", 19, 9, 6, 1),
        ("1g.18gb", 19, 10, 7, 1),
    ]
    cis = parse_lci(files[names.SMI_MIG_LCI])
    assert [(c.gpu_instance_id, c.name) for c in cis] == [(g.instance_id, g.name) for g in gis]
    assert [(c.profile_id, c.start, c.size) for c in cis] == [
        (2, 0, 3),
        (1, 0, 2),
        (0, 0, 1),
        (0, 0, 1),
    ]
    gpu0_free = {p.profile_id: p.free for p in parse_lgip(files[names.SMI_MIG_LGIP]) if p.gpu == 0}
    assert set(gpu0_free.values()) == {0}
    listed = parse_smi_list(files[names.SMI_L])
    assert [d.profile for d in listed[0].mig_devices] == [
        "3g.71gb",
        "2g.35gb",
        "1g.18gb",
        "1g.18gb",
    ]
    assert listed[1].mig_devices == ()
    f = facts["h200x2-mig"]
    assert [g.mig_mode_current for g in f.smi_gpus] == ["Enabled", "Disabled"]


def test_fast_fabric_reader_agrees_with_the_full_tree(raw: dict[str, dict[str, str]]) -> None:
    checked = 0
    for files in raw.values():
        if names.SMI_Q in files:
            full = parse_smi_q(files[names.SMI_Q]).gpus
            assert fabric_states(files[names.SMI_Q]) == {
                g.bus_id: (g.fabric_state, g.fabric_status) for g in full
            }
            checked += len(full)
    assert checked == 8 + 8 + 4 + 8 + 2 + 2
