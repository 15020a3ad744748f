"""Issue 48: captures that no machine can produce are blockers naming the capture file
(orchestrator/sanity.py): a PCI address twice, more GPUs than one system holds, several GPU
models on one HGX board, an NVLink5 board's GPUs in a count no host shows."""

from __future__ import annotations

from test_plan import pci_line, variant

from orchestrator.catalog import default_catalog
from orchestrator.parsers import names, parse_host
from orchestrator.plan import HostPlan, plan_host
from orchestrator.policy import load_policy

H100, H200, B200, HGX_B200 = 0x2330, 0x2335, 0x2901, 0x2909
LS10 = 0x22A3  # an NVSwitch gen3 endpoint (gpus.md)


def _plan(raw: dict[str, str]) -> HostPlan:
    return plan_host(parse_host("h", raw), load_policy("h", {}), default_catalog())


def _blockers_naming_pci(plan: HostPlan) -> list[str]:
    return [b for b in plan.blockers if b.startswith(names.SYSFS_PCI)]


def test_a_pci_address_listed_twice_blocks_naming_the_capture() -> None:
    raw = variant({H100: 8}, (LS10, 4))
    lines = raw[names.SYSFS_PCI].splitlines(keepends=True)
    gpu = next(ln for ln in lines if "class=0x030200" in ln)
    raw[names.SYSFS_PCI] = "".join([gpu, *lines])  # the same GPU line spliced in again
    found = _blockers_naming_pci(_plan(raw))
    assert "1 PCI address(es) more than once (0000:10:00.0)" in found[0], found


def test_1000_gpus_without_nvswitch_block() -> None:
    raw = variant({})
    lines = raw[names.SYSFS_PCI].splitlines(keepends=True)
    gpus = [
        pci_line(f"{n // 200:04x}:{n % 200 + 1:02x}:00.0", H200, 0x030200) + "\n"
        for n in range(1000)
    ]
    raw[names.SYSFS_PCI] = "".join(lines[:-1] + gpus + lines[-1:])
    found = _blockers_naming_pci(_plan(raw))
    assert any("shows 1000 NVIDIA GPUs: one system holds at most 32" in b for b in found), found


def test_32_gpus_are_not_too_many() -> None:
    assert not any("at most 32" in b for b in _plan(variant({H200: 32})).blockers)


def test_7_b200_block_as_a_board_one_gpu_short() -> None:
    found = _blockers_naming_pci(_plan(variant({B200: 7})))
    assert any("shows 7x B200: an HGX board of that model holds 8 GPUs" in b for b in found), found


def test_b200_counts_a_host_can_show_pass() -> None:
    for count in (1, 2, 4, 8):
        plan = _plan(variant({B200: count}))
        assert not any("an HGX board of that model" in b for b in plan.blockers), count


def test_mixed_models_on_an_hgx_board_block() -> None:
    found = _blockers_naming_pci(_plan(variant({H100: 4, H200: 4}, (LS10, 4))))
    assert any(
        "several GPU models on an HGX board (4x H100 SXM5 80GB, 4x H200 SXM 141GB)" in b
        for b in found
    ), found
    found = _blockers_naming_pci(_plan(variant({B200: 4, HGX_B200: 4})))
    assert any("several GPU models on an HGX board" in b for b in found), found


def test_one_model_on_a_board_and_mixed_pcie_cards_without_a_board_pass() -> None:
    assert not _blockers_naming_pci(_plan(variant({H100: 8}, (LS10, 4))))
    # two PCIe models in one server, no NVSwitch, no NVLink5 board: nothing impossible
    plan = _plan(variant({0x26B9: 2, 0x27B8: 2}))  # L40S and L4
    assert not any("HGX board" in b for b in plan.blockers), plan.blockers
