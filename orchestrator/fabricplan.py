"""The fabric part of a host's plan (issue 30): the efa role on hosts with EFA devices, with
GPUDirect RDMA by DMA-BUF where the driver and kernel allow it, else by peermem;
the infiniband role on InfiniBand hosts (the distribution's rdma-core or DOCA-OFED); nothing on
hosts without such NICs.

Each role joins a host's plan wherever its NICs are (as mig joins where mig_layout is set),
whatever gpuprov_roles says. A pure function of the facts, the policy and the planned driver;
plan.py turns each (role, typed plan, reason) into a RolePlan.
"""

from __future__ import annotations

from .errors import PolicyError
from .fabric import (
    FabricCatalog,
    default_fabric,
    efa_devices,
    efa_functions,
    ib_functions,
    ib_hcas,
    kernel_version,
)
from .facts import HostFacts
from .policy import Policy
from .roleplans import DriverPlan, EfaPlan, InfinibandPlan

# Distribution families the efa and infiniband roles have OS data for (their vars/).
FABRIC_ROLE_FAMILIES = ("debian",)


def _no_os_data(facts: HostFacts, role: str, found: str, left: str) -> str | None:
    """The warning for a host whose OS the fabric role `role` has no data for; None if it has."""
    if facts.os and facts.os.family in FABRIC_ROLE_FAMILIES:
        return None
    return (
        f"{found}: the {role} role has OS data for Debian and Ubuntu only, not "
        f"{facts.os.pretty_name if facts.os else 'an unknown OS'}; {left}"
    )


def _dmabuf(facts: HostFacts, driver: DriverPlan | None, cat: FabricCatalog) -> tuple[bool, str]:
    """Whether DMA-BUF GPUDirect is possible (the leads' floors), and why (not)."""
    loaded = facts.loaded_driver.flavour if facts.loaded_driver else ""
    flavour = driver.flavour if driver else loaded
    kernel = kernel_version(facts.kernel)
    floor = ".".join(map(str, cat.dmabuf_min_kernel))
    if flavour == cat.dmabuf_flavour and kernel is not None and kernel >= cat.dmabuf_min_kernel:
        return True, (
            f"{flavour} kernel modules on Linux {kernel[0]}.{kernel[1]} (DMA-BUF floors: Linux "
            f">= {floor} and the open modules, a lead); NVIDIA recommends DMA-BUF over peermem"
        )
    why = (
        f"the {flavour} kernel modules"
        if flavour and flavour != cat.dmabuf_flavour
        else "no known driver flavour"
        if not flavour
        else f"Linux {facts.kernel or 'unknown'} (DMA-BUF wants >= {floor}, a lead)"
    )
    return False, f"{why}: DMA-BUF not available"


def gpudirect(
    facts: HostFacts, policy: Policy, driver: DriverPlan | None, cat: FabricCatalog
) -> tuple[str, str]:
    """EFA: (dmabuf | peermem | none, why)."""
    if policy.efa_gpudirect != "auto":
        return policy.efa_gpudirect, "efa_gpudirect set in the inventory"
    ok, why = _dmabuf(facts, driver, cat)
    return ("dmabuf", why) if ok else ("peermem", f"{why}, so the installer's efa-nv-peermem (-g)")


def ib_gpudirect(
    facts: HostFacts, policy: Policy, driver: DriverPlan | None, cat: FabricCatalog
) -> tuple[str, str, str]:
    """InfiniBand: (dmabuf | peermem, why, a warning or "")."""
    doca = policy.fabric_infiniband_stack == "doca"
    if policy.infiniband_gpudirect == "peermem" and not doca:
        raise PolicyError(
            "infiniband_gpudirect=peermem with gpuprov_fabric_infiniband_stack=distribution: "
            "nvidia_peermem needs MOFED's peer-memory API, which the distribution's rdma-core "
            "lacks",
            host=facts.host,
            fix="set gpuprov_fabric_infiniband_stack=doca, or infiniband_gpudirect to dmabuf",
        )
    if policy.infiniband_gpudirect != "auto":
        return policy.infiniband_gpudirect, "infiniband_gpudirect set in the inventory", ""
    ok, why = _dmabuf(facts, driver, cat)
    if ok:
        return "dmabuf", why, ""
    if doca:
        return "peermem", f"{why}, so nvidia_peermem (DOCA's peer-memory API)", ""
    return (
        "dmabuf",
        why,
        (
            f"no GPUDirect RDMA path on this InfiniBand host: {why}, and nvidia_peermem needs "
            "DOCA-OFED; fix: the open kernel modules on Linux >= 5.12, or "
            "gpuprov_fabric_infiniband_stack=doca"
        ),
    )


def plan_fabric(
    facts: HostFacts,
    policy: Policy,
    driver: DriverPlan | None,
    warnings: list[str],
    cat: FabricCatalog | None = None,
) -> list[tuple[str, EfaPlan | InfinibandPlan, str]]:
    """The fabric roles of one host, each with its typed plan and reason; notes go to
    `warnings`."""
    cat = cat or default_fabric()
    roles: list[tuple[str, EfaPlan | InfinibandPlan, str]] = []
    functions = efa_functions(facts, cat)
    devices = efa_devices(facts, cat)
    if functions or devices:
        ids = sorted({f"{d.vendor_id:04x}:{d.device_id:04x}" for d in functions})
        found = (
            f"{len(functions)} EFA devices on the PCI bus ({', '.join(ids)})"
            if functions
            else f"{len(devices)} EFA RDMA devices"
        )
        unsupported = _no_os_data(facts, "efa", found, "EFA left as it is")
        if unsupported:
            warnings.append(unsupported)
        else:
            mode, why = gpudirect(facts, policy, driver, cat)
            installed = facts.fabric.efa_installer if facts.fabric else None
            action = (
                f"EFA installer {policy.efa_version} present: the role checks it"
                if installed == policy.efa_version
                else f"EFA installer {installed} -> {policy.efa_version}"
                if installed
                else f"install the EFA installer {policy.efa_version} (sha256-verified)"
            )
            gd = "GPUDirect RDMA off" if mode == "none" else f"GPUDirect RDMA by {mode}: {why}"
            roles.append(("efa", EfaPlan(policy.efa_version, mode), f"{found}: {action}; {gd}"))
    hcas = ib_hcas(facts, cat)
    ib_pci = ib_functions(facts, cat)  # a bare host: HCAs on the PCI bus, no RDMA device yet
    if hcas or ib_pci:
        found = (
            f"{len(hcas)} InfiniBand HCAs ({', '.join(d.name for d in hcas)})"
            if hcas
            else f"{len(ib_pci)} InfiniBand HCAs on the PCI bus "
            f"({', '.join(d.address for d in ib_pci[:4])}{', ...' if len(ib_pci) > 4 else ''}), "
            "no RDMA device yet"
        )
        unsupported = _no_os_data(facts, "infiniband", found, "left as it is")
        if unsupported:
            warnings.append(unsupported)
        else:
            mode, why, warning = ib_gpudirect(facts, policy, driver, cat)
            if warning:
                warnings.append(warning)
            stack = (
                "DOCA-OFED (sha256-verified doca-host package)"
                if policy.fabric_infiniband_stack == "doca"
                else "the distribution's rdma-core, ibverbs-utils, infiniband-diags, perftest"
            )
            plan = InfinibandPlan(policy.fabric_infiniband_stack, mode)
            roles.append(("infiniband", plan, f"{found}: {stack}; GPUDirect RDMA by {mode}: {why}"))
    if policy.fabric_gdrcopy and (functions or devices or hcas or ib_pci):
        warnings.append(
            "gpuprov_fabric_gdrcopy=true: GDRCopy is not built by gpuprov yet (every vendor "
            "script builds it from NVIDIA/gdrcopy); nothing installed"
        )
    return roles
