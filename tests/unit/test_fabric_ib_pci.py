"""InfiniBand HCAs found on the PCI bus before their RDMA devices exist (issue 47): a bare HGX
H100 with 8 ConnectX-7 functions of class 0x0207 and no /sys/class/infiniband yet gets the
infiniband role, and fabric health compares the RDMA devices against those functions.

Facts are the real H200 capture of tests/unit/test_fabric.py with PCI lines added in the
probe's format: vendor 0x15b3 (Mellanox), device 0x1021 (MT2910 Family [ConnectX-7]), class
0x020700 (Infiniband controller) or 0x020000 (Ethernet controller), all from pci.ids
(pciutils/pciids@c1c12547, orchestrator/fabric.yaml); the addresses are the shaped
rdma-ib.txt's, so a converged host's devices sit on these functions."""

from __future__ import annotations

import dataclasses

from test_fabric import REAL, failures, health, host, plan_of, shaped

from orchestrator.facts import HostFacts, VpdFunction

ADDRESSES = [f"0000:{0x18 + n:02x}:00.0" for n in range(8)]


def cx7(klass: int = 0x020700, addresses: list[str] = ADDRESSES) -> list[str]:
    return [
        f"{a} vendor=0x15b3 device=0x1021 class={klass:#08x} subsystem_vendor=0x15b3 "
        'subsystem_device=0x0026 current_link_speed="32.0 GT/s PCIe" current_link_width=16 '
        'max_link_speed="32.0 GT/s PCIe" max_link_width=16 numa_node=0 driver=mlx5_core'
        for a in addresses
    ]


def with_pci(lines: list[str], rdma: str | None = None) -> HostFacts:
    pci = (REAL / "sysfs-pci-devices.txt").read_text().splitlines()
    pci = [ln for ln in pci if not ln.startswith("#")]
    text = "\n".join(pci + lines) + "\n# exit=0\n"
    return host(rdma=rdma, extra={"sysfs-pci-devices.txt": text})


def test_a_bare_hgx_with_hcas_on_the_pci_bus_gets_the_infiniband_role() -> None:
    reasons, _ = plan_of(with_pci(cx7()))
    assert "infiniband" in reasons, reasons
    assert reasons["infiniband"].startswith(
        "8 InfiniBand HCAs on the PCI bus (0000:18:00.0, 0000:19:00.0, 0000:1a:00.0, "
        "0000:1b:00.0, ...), no RDMA device yet: "
    )


def test_ethernet_mode_connectx_and_nvlink5_ports_are_not_hcas() -> None:
    reasons, _ = plan_of(with_pci(cx7(0x020000)))
    assert "infiniband" not in reasons
    facts = with_pci(cx7())
    ports = tuple(VpdFunction(a, True) for a in ADDRESSES)
    reasons, _ = plan_of(dataclasses.replace(facts, pci_vpd=ports))
    assert "infiniband" not in reasons


def test_fabric_health_names_hcas_without_an_rdma_device() -> None:
    results = health(with_pci(cx7()))
    (bad,) = [r for r in results if r.name == "ib_devices"]
    assert (bad.status, bad.value, bad.limit) == ("fail", 0, 8)
    assert failures(results) == [bad.diagnosis]
    assert bad.diagnosis.startswith(
        "n1: 0 of 8 InfiniBand HCAs (InfiniBand functions on the PCI bus): none; PCI "
        "0000:18:00.0, 0000:19:00.0, 0000:1a:00.0, 0000:1b:00.0 and 4 more without an RDMA "
        "device; fix: run the infiniband role"
    )


def test_fabric_health_passes_once_every_function_has_its_device() -> None:
    results = health(with_pci(cx7(), rdma=shaped("rdma-ib.txt")))
    (ok,) = [r for r in results if r.name == "ib_devices"]
    assert (ok.status, ok.value, ok.limit) == ("pass", 8, 8)
    one_short = with_pci(cx7(addresses=[*ADDRESSES, "0000:20:00.0"]), rdma=shaped("rdma-ib.txt"))
    (bad,) = [r for r in health(one_short) if r.name == "ib_devices"]
    assert bad.status == "fail" and "PCI 0000:20:00.0 without an RDMA device" in bad.diagnosis
