"""Fabric health (issue 30): the network a multi-node job runs over, from the host's facts.

EFA hosts: the EFA device count against the inventory's expectation or the instance type's
(orchestrator/fabric.yaml, the reference's per-instance counts), each port's state and rate,
libfabric's efa provider (`fi_info -p efa -t FI_EP_RDM`), the aws-ofi-nccl plugin, the
uverbs nodes, locked memory and a GPUDirect RDMA path. InfiniBand hosts: the HCA count, each
port ACTIVE/LinkUp at the expected rate, GPUDirect. Each failure is one line naming the host
and the device, with a fix. Pure functions over HostFacts, no host access: the lab's
simulated EFA changes exactly the outputs these read.

A port's expected rate is the inventory's (gpuprov_fabric_link_rate_gbps) or, without one,
the most common rate among the host's ports of that kind: AWS's per-instance bandwidth is a
lead (fabric.yaml gaps), so no rate is taken from it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..fabric import (
    FabricCatalog,
    default_fabric,
    efa_devices,
    efa_functions,
    efa_gpudirect,
    ib_functions,
    ib_hcas,
    kernel_version,
)
from ..facts import HostFacts, RdmaDevice, RdmaPort
from ..result import CheckResult, run_timed, skipped, verdict

# The names fabric health reports under (the JUnit suite "fabric"); a per-device result is
# NAME[device].
CHECK_NAMES = frozenset(
    {
        "efa_devices",
        "efa_uverbs",
        "efa_link",
        "efa_provider",
        "efa_plugin",
        "ib_devices",
        "ib_link",
        "memlock",
        "gpudirect",
        "ib_reboot",
    }
)
_INDEX = re.compile(r"(\d+)$")


def base_name(name: str) -> str:
    """ "efa_link[efa_3]" -> "efa_link"."""
    return name.split("[", 1)[0]


@dataclass(frozen=True)
class FabricInput:
    facts: HostFacts
    expected_devices: int | None  # the inventory's (gpuprov_fabric_expected_devices)
    instance_type: str | None  # gpuprov_fabric_instance_type
    link_rate_gbps: int | None  # gpuprov_fabric_link_rate_gbps
    catalog: FabricCatalog

    @property
    def host(self) -> str:
        return self.facts.host

    @property
    def efa(self) -> tuple[RdmaDevice, ...]:
        return efa_devices(self.facts, self.catalog)

    @property
    def ib(self) -> tuple[RdmaDevice, ...]:
        return ib_hcas(self.facts, self.catalog)

    @property
    def is_efa(self) -> bool:
        instance = self.catalog.instance_types.get(self.instance_type or "")
        return bool(self.efa or efa_functions(self.facts, self.catalog) or instance)


def fabric_input(
    facts: HostFacts,
    *,
    expected_devices: int | None = None,
    instance_type: str | None = None,
    link_rate_gbps: int | None = None,
    catalog: FabricCatalog | None = None,
) -> FabricInput:
    return FabricInput(
        facts, expected_devices, instance_type, link_rate_gbps, catalog or default_fabric()
    )


def _number(name: str) -> int:
    match = _INDEX.search(name)
    return int(match.group(1)) if match else -1


def _rate(value: float | None) -> str:
    return "no rate" if value is None else f"{value:g} Gb/s"


def check_efa_devices(f: FabricInput) -> list[CheckResult]:
    if not f.is_efa:
        return []
    found = sorted(f.efa, key=lambda d: _number(d.name))
    functions = efa_functions(f.facts, f.catalog)
    instance = f.catalog.instance_types.get(f.instance_type or "")
    if f.expected_devices:
        expected, source = f.expected_devices, "gpuprov_fabric_expected_devices"
    elif instance:
        expected, source = instance.efa, f"a {instance.name} has {instance.efa}"
    else:
        expected, source = len(functions), "EFA functions on the PCI bus"
    if len(found) >= expected:
        return [CheckResult("efa_devices", "pass", len(found), expected, "devices")]
    names = {d.name for d in found}
    prefix = f.catalog.efa_prefix
    missing = [f"{prefix}{i}" for i in range(expected) if f"{prefix}{i}" not in names]
    bound = {d.pci for d in found}
    unbound = [d.address for d in functions if d.address not in bound]
    where = f"missing {', '.join(missing[:8])}" if missing else "fewer than expected"
    if unbound:
        where += f"; PCI {', '.join(unbound[:4])} without an efa device (efa module not bound)"
    return [
        CheckResult(
            "efa_devices",
            "fail",
            len(found),
            expected,
            "devices",
            f"{f.host}: {len(found)} of {expected} EFA devices ({source}): {where}; fix: check "
            "the instance's EFA interfaces (lspci -d 1d0f:) and that the efa module is loaded",
        )
    ]


def check_efa_uverbs(f: FabricInput) -> list[CheckResult]:
    if not f.efa or f.facts.fabric is None:
        return []
    nodes, wanted = len(f.facts.fabric.uverbs), len(f.efa) + len(f.ib)
    why = (
        f"{f.host}: {nodes} /dev/infiniband/uverbs nodes for {wanted} RDMA devices; fix: "
        "load ib_uverbs (the EFA installer's rdma-core) and check udev"
    )
    return [verdict("efa_uverbs", nodes >= wanted, nodes, wanted, "nodes", why)]


def _link_results(
    f: FabricInput, devices: Sequence[RdmaDevice], name: str, kind: str
) -> list[CheckResult]:
    ports: list[RdmaPort] = [p for d in devices for p in d.ports]
    if not devices:
        return []
    if not ports:
        return [skipped(name, f"{f.host}: no port attributes under /sys/class/infiniband")]
    rates = Counter(p.rate_gbps for p in ports if p.rate_gbps is not None)
    if f.link_rate_gbps:
        expected, why = float(f.link_rate_gbps), "gpuprov_fabric_link_rate_gbps"
    elif rates:
        expected, count = rates.most_common(1)[0]
        why = f"the rate of {count} of the host's {len(ports)} {kind} ports"
    else:
        expected, why = 0.0, ""
    bad: list[CheckResult] = []
    for p in sorted(ports, key=lambda p: (_number(p.device), p.port)):
        label = f"{name}[{p.device}]"
        if p.state != f.catalog.ib_state or p.phys_state != f.catalog.ib_phys_state:
            bad.append(
                CheckResult(
                    label,
                    "fail",
                    f"{p.state or '-'}/{p.phys_state or '-'}",
                    f"{f.catalog.ib_state}/{f.catalog.ib_phys_state}",
                    "",
                    f"{f.host}: {kind} device {p.device} port {p.port} is {p.state or 'unknown'} "
                    f"({p.phys_state or 'no physical state'}), not {f.catalog.ib_state}/"
                    f"{f.catalog.ib_phys_state}; fix: check its cable or interface, then reload "
                    "its driver",
                )
            )
        elif p.rate_gbps is None or p.rate_gbps < expected:
            bad.append(
                CheckResult(
                    label,
                    "fail",
                    p.rate_gbps,
                    expected,
                    "Gb/s",
                    f"{f.host}: {kind} device {p.device} port {p.port} at {_rate(p.rate_gbps)}, "
                    f"expected {expected:g} Gb/s ({why}); fix: check the link (cable, "
                    "transceiver, switch port) and its negotiated width and speed",
                )
            )
    if bad:
        return bad
    return [
        CheckResult(
            name,
            "pass",
            f"{len(ports)} ports {f.catalog.ib_state}",
            f"{expected:g} Gb/s" if expected else None,
            "",
        )
    ]


def check_efa_link(f: FabricInput) -> list[CheckResult]:
    return _link_results(f, f.efa, "efa_link", "EFA")


def check_efa_provider(f: FabricInput) -> list[CheckResult]:
    if not f.efa:
        return []
    fabric = f.facts.fabric
    info = fabric.fi_info if fabric else None
    if info is None:
        return [
            CheckResult(
                "efa_provider",
                "fail",
                None,
                len(f.efa),
                "domains",
                f"{f.host}: no fi_info (libfabric, /opt/amazon/efa/bin) on the host; fix: run the "
                "efa role (provision apply)",
            )
        ]
    domains = set(info.domains)
    missing = [d.name for d in f.efa if f"{d.name}-rdm" not in domains]
    what = (
        f"lists no efa provider (exit {info.exit_code})"
        if not info.ok
        else f"has no efa RDM domain for {', '.join(missing[:8])}"
    )
    why = (
        f"{f.host}: `fi_info -p efa -t FI_EP_RDM` {what}; fix: check the efa module and "
        "libfabric (/opt/amazon/efa), rerun the efa role"
    )
    ok = info.ok and not missing
    return [verdict("efa_provider", ok, len(domains), len(f.efa), "domains", why)]


def check_efa_plugin(f: FabricInput) -> list[CheckResult]:
    if not f.efa or f.facts.fabric is None:
        return []
    wanted = set(f.catalog.plugin_libraries)
    found = [p for p in f.facts.fabric.ofi_nccl if p.rsplit("/", 1)[-1] in wanted]
    if found:
        return [CheckResult("efa_plugin", "pass", found[0], f.catalog.plugin_dir, "")]
    return [
        CheckResult(
            "efa_plugin",
            "fail",
            None,
            f.catalog.plugin_dir,
            "",
            f"{f.host}: the aws-ofi-nccl plugin is missing (none of "
            f"{', '.join(sorted(wanted))} under {f.catalog.plugin_dir}): NCCL would fall back "
            "to TCP sockets between nodes; fix: rerun the efa role (provision apply --full)",
        )
    ]


def check_ib_devices(f: FabricInput) -> list[CheckResult]:
    """The HCAs' RDMA devices against the inventory's count or, without one, the InfiniBand
    functions on the PCI bus (issue 47: a function without an RDMA device is an HCA the
    network cannot use; mlx5_ib registers them)."""
    functions = ib_functions(f.facts, f.catalog)
    if not (f.ib or functions) or f.is_efa:
        return []
    if f.expected_devices:
        expected, source = f.expected_devices, "gpuprov_fabric_expected_devices"
    elif functions:
        expected, source = len(functions), "InfiniBand functions on the PCI bus"
    else:
        return [CheckResult("ib_devices", "pass", len(f.ib), None, "HCAs")]
    found = len(f.ib)
    bound = {d.pci for d in f.ib}
    unbound = [d.address for d in functions if d.address not in bound]
    where = ", ".join(d.name for d in f.ib) or "none"
    if unbound:
        more = f" and {len(unbound) - 4} more" if len(unbound) > 4 else ""
        where += f"; PCI {', '.join(unbound[:4])}{more} without an RDMA device"
    why = (
        f"{f.host}: {found} of {expected} InfiniBand HCAs ({source}): {where}; fix: run the "
        "infiniband role (provision apply: it loads mlx5_ib), check lspci -d 15b3: and dmesg"
    )
    return [verdict("ib_devices", found >= expected, found, expected, "HCAs", why)]


def check_ib_link(f: FabricInput) -> list[CheckResult]:
    return _link_results(f, f.ib, "ib_link", "InfiniBand")


def check_memlock(f: FabricInput) -> list[CheckResult]:
    fabric = f.facts.fabric
    if fabric is None or not (f.efa or f.ib):
        return []
    floor = f.catalog.memlock_min_kib
    kib = fabric.memlock_kib
    if fabric.memlock_unlimited or (kib is not None and kib >= floor):
        return [CheckResult("memlock", "pass", fabric.memlock, floor, "KiB")]
    return [
        CheckResult(
            "memlock",
            "warn",
            fabric.memlock or None,
            floor,
            "KiB",
            f"{f.host}: locked memory limit {fabric.memlock or 'unknown'} KiB (ulimit -l) is below "
            f"{floor} and not unlimited; fix: the efa role's limits file (efa_memlock_limits)",
        )
    ]


def check_gpudirect(f: FabricInput) -> list[CheckResult]:
    fabric = f.facts.fabric
    if fabric is None or not (f.efa or f.ib):
        return []
    if f.efa and not f.ib:
        return [efa_gpudirect_result(f)]
    if fabric.peermem:
        return [CheckResult("gpudirect", "pass", "peermem", None, "")]
    driver = f.facts.loaded_driver
    if driver is None:
        return [
            skipped(
                "gpudirect",
                f"{f.host}: no NVIDIA driver loaded: GPUDirect RDMA needs it (see gpu_count)",
            )
        ]
    kernel = kernel_version(f.facts.kernel)
    floor_ok = kernel is not None and kernel >= f.catalog.dmabuf_min_kernel
    if driver.flavour == f.catalog.dmabuf_flavour and floor_ok:
        return [CheckResult("gpudirect", "pass", "dmabuf", None, "")]
    floor = ".".join(map(str, f.catalog.dmabuf_min_kernel))
    return [
        CheckResult(
            "gpudirect",
            "fail",
            None,
            None,
            "",
            f"{f.host}: no GPUDirect RDMA path: no peer-memory module (nvidia_peermem or "
            f"efa-nv-peermem) and no DMA-BUF ({driver.flavour} modules, Linux {f.facts.kernel}; "
            f"DMA-BUF wants the open modules and Linux >= {floor}, a lead); fix: "
            "infiniband_stack=doca with infiniband_gpudirect=peermem, or the open kernel modules",
        )
    ]


def efa_gpudirect_result(f: FabricInput) -> CheckResult:
    """EFA (issue 47 item 8): the path the installed aws-ofi-nccl takes on these EFA devices
    with the loaded driver and this kernel, as the value. EFA never needs nvidia_peermem: the
    efa module pins GPU memory itself (efa_nv_peermem or nvidia.ko's P2P API), so there is
    no missing path to fail on; an unrecorded plugin is a skip that says so."""
    fabric, driver = f.facts.fabric, f.facts.loaded_driver
    if driver is None:
        return skipped(
            "gpudirect",
            f"{f.host}: no NVIDIA driver loaded: GPUDirect RDMA needs it (see gpu_count)",
        )
    installer = fabric.efa_installer if fabric else None
    if not installer:
        return skipped(
            "gpudirect", f"{f.host}: no EFA installer manifest, so no aws-ofi-nccl to ask"
        )
    ids = frozenset(d.device_id for d in efa_functions(f.facts, f.catalog))
    runs = efa_gpudirect(installer, ids, driver.flavour, kernel_version(f.facts.kernel), f.catalog)
    if runs.path == "unknown":
        return skipped("gpudirect", f"{f.host}: {runs.why}")
    return CheckResult("gpudirect", "pass", runs.path, None, "")


def check_ib_reboot(f: FabricInput) -> list[CheckResult]:
    """InfiniBand hosts with a reboot a role recorded against this boot (issue 47 item 5:
    DOCA-OFED's ib_core, and nvidia-peermem built against it, are active only after one):
    the stack validated now is not the one the next boot runs. No result without a record."""
    if not (f.ib or ib_functions(f.facts, f.catalog)) or not f.facts.reboot_pending:
        return []
    return [
        CheckResult(
            "ib_reboot",
            "fail",
            None,
            None,
            "",
            f"{f.host}: reboot required: {'; '.join(f.facts.reboot_pending)}; fix: reboot the "
            "host (gpuprov does not), then validate again",
        )
    ]


FabricCheck = Callable[[FabricInput], list[CheckResult]]

CHECKS: tuple[FabricCheck, ...] = (
    check_efa_devices,
    check_efa_uverbs,
    check_efa_link,
    check_efa_provider,
    check_efa_plugin,
    check_ib_devices,
    check_ib_link,
    check_memlock,
    check_gpudirect,
    check_ib_reboot,
)


def run_fabric(f: FabricInput) -> list[CheckResult]:
    """Every fabric check, in a stable order; none on a host without EFA or InfiniBand."""
    return run_timed(CHECKS, f)
