"""The fabric planners (issue 30): the efa role on hosts with EFA devices, saying how GPUDirect
RDMA will run there (the bundled aws-ofi-nccl's choice per EFA device id, issue 47 item 8: the
installer's -g has not chosen it since 1.14.0); the infiniband role on
InfiniBand hosts (the distribution's rdma-core or DOCA-OFED); nothing on hosts without such
NICs. Both join a host's plan where their NICs are (roles.yaml: `joins: detected`), unless the
inventory's gpuprov_roles leaves them out. What the roles' preflight refuses (an installer
version without a sha256 to verify, DOCA without its download site or a pinned package for
the OS) blocks the host here, with the fix, before any change."""

from __future__ import annotations

import re

from ..errors import PolicyError
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
from ..facts import HostFacts
from ..policy import Policy
from . import HostContext, RolePlan, role_data

# What the roles' preflight takes for a sha256 (`is match('^[0-9a-f]{64}$')`).
SHA256 = "[0-9a-f]{64}"
# `uname -m` -> the Debian architecture DOCA's package names and the infiniband role's keys use
DEB_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
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


def _dmabuf(facts: HostFacts, planned: str | None, cat: FabricCatalog) -> tuple[bool, str]:
    """Whether DMA-BUF GPUDirect is possible (the leads' floors), and why (not); `planned`:
    the planned driver's flavour (None: no driver planned, the loaded one's counts)."""
    loaded = facts.loaded_driver.flavour if facts.loaded_driver else ""
    flavour = planned or loaded
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


# How each EFA GPUDirect path reads in a plan's reason.
EFA_PATHS = {
    "dmabuf": "GPUDirect RDMA by DMA-BUF",
    "peermem": "GPUDirect RDMA by peer memory, not DMA-BUF",
    "unknown": "GPUDirect RDMA path unknown",
}


def gpudirect(
    facts: HostFacts, policy: Policy, driver: str | None, cat: FabricCatalog
) -> tuple[str, str, str | None]:
    """EFA: (what the plan says of GPUDirect, a blocker or None). What runs is the bundled
    aws-ofi-nccl's choice for the host's EFA device ids, the planned driver's flavour
    (`driver`; None: the loaded one's) and the kernel; gpuprov_fabric_efa_gpudirect (auto |
    dmabuf | peermem) states what the fleet expects, and a host where the plan shows otherwise is
    blocked: nothing gpuprov installs changes it."""
    version = policy["efa_installer_version"]
    loaded = facts.loaded_driver.flavour if facts.loaded_driver else ""
    ids = frozenset(d.device_id for d in efa_functions(facts, cat))
    runs = efa_gpudirect(version, ids, driver or loaded, kernel_version(facts.kernel), cat)
    said = f"{EFA_PATHS[runs.path]}: {runs.why}"
    wanted = policy["gpuprov_fabric_efa_gpudirect"]
    if wanted == "auto" or wanted == runs.path:
        return runs.path, said, None
    return (
        runs.path,
        said,
        f"gpuprov_fabric_efa_gpudirect={wanted}, but {said} (the EFA installer's -g has not "
        f"chosen GPUDirect since {cat.gdr_default_since}; aws-ofi-nccl chooses per EFA "
        "device); fix: gpuprov_fabric_efa_gpudirect=auto, or an efa_installer_version whose "
        "aws-ofi-nccl does that here (DMA-BUF on EFA device ids 0xefa0-0xefa2 from "
        "aws-ofi-nccl 1.19.2; EFA installer 1.50.0 bundles 1.21.1), with its "
        "efa_installer_sha256",
    )


def ib_gpudirect(
    facts: HostFacts, policy: Policy, driver: str | None, cat: FabricCatalog
) -> tuple[str, str, str]:
    """InfiniBand: (dmabuf | peermem, why, a warning or ""); `driver`: the planned driver's
    flavour."""
    doca = policy["infiniband_stack"] == "doca"
    if policy["infiniband_gpudirect"] == "peermem" and not doca:
        raise PolicyError(
            "infiniband_gpudirect=peermem with infiniband_stack=distribution: "
            "nvidia_peermem needs MOFED's peer-memory API, which the distribution's rdma-core "
            "lacks",
            host=facts.host,
            fix="set infiniband_stack=doca, or infiniband_gpudirect to dmabuf",
        )
    if policy["infiniband_gpudirect"] != "auto":
        return policy["infiniband_gpudirect"], "infiniband_gpudirect set in the inventory", ""
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
            "infiniband_stack=doca"
        ),
    )


def plan_efa(ctx: HostContext, cat: FabricCatalog | None = None) -> RolePlan | None:
    """The efa role where EFA devices are on the PCI bus (or EFA RDMA devices are seen)."""
    facts, policy, warnings = ctx.facts, ctx.policy, ctx.notes.warnings
    cat = cat or default_fabric()
    functions = efa_functions(facts, cat)
    devices = efa_devices(facts, cat)
    if not (functions or devices):
        return None
    ids = sorted({f"{d.vendor_id:04x}:{d.device_id:04x}" for d in functions})
    found = (
        f"{len(functions)} EFA devices on the PCI bus ({', '.join(ids)})"
        if functions
        else f"{len(devices)} EFA RDMA devices"
    )
    unsupported = _no_os_data(facts, "efa", found, "EFA left as it is")
    if unsupported:
        warnings.append(unsupported)
        return None
    flavour = ctx.planned_var("nvidia_driver", "nvidia_driver_flavour")
    _mode, gd, blocker = gpudirect(facts, policy, flavour, cat)
    if blocker:
        ctx.notes.blockers.append(blocker)
    version = policy["efa_installer_version"]
    installed = facts.fabric.efa_installer if facts.fabric else None
    action = (
        f"EFA installer {version} present: the role checks it"
        if installed == version
        else f"EFA installer {installed} -> {version}"
        if installed
        else f"install the EFA installer {version} (sha256-verified)"
    )
    pins = role_data("efa", "vars/main.yml").get("__efa_installer_sha256_pins") or {}
    if not re.fullmatch(SHA256, policy["efa_installer_sha256"] or pins.get(version, "")):
        ctx.notes.blockers.append(
            f"EFA installer {version} has no sha256 to verify its tarball against (the efa "
            f"role pins {', '.join(pins)}); fix: set efa_installer_version to one of those, or "
            "efa_installer_sha256 to the tarball's sha256 from a source you trust"
        )
    return RolePlan("efa", {"efa_installer_version": version}, f"{found}: {action}; {gd}")


def plan_infiniband(ctx: HostContext, cat: FabricCatalog | None = None) -> RolePlan | None:
    """The infiniband role where InfiniBand HCAs are (NVLink5 management ports are not)."""
    facts, policy, warnings = ctx.facts, ctx.policy, ctx.notes.warnings
    cat = cat or default_fabric()
    hcas = ib_hcas(facts, cat)
    ib_pci = ib_functions(facts, cat)  # a bare host: HCAs on the PCI bus, no RDMA device yet
    role = None
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
            flavour = ctx.planned_var("nvidia_driver", "nvidia_driver_flavour")
            mode, why, warning = ib_gpudirect(facts, policy, flavour, cat)
            if warning:
                warnings.append(warning)
            doca = policy["infiniband_stack"] == "doca"
            stack = (
                "DOCA-OFED (sha256-verified doca-host package)"
                if doca
                else "the distribution's rdma-core, ibverbs-utils, infiniband-diags, perftest"
            )
            if doca:
                ctx.notes.blockers.extend(_doca_problems(facts, policy))
            plan = {"infiniband_stack": policy["infiniband_stack"], "infiniband_gpudirect": mode}
            role = RolePlan(
                "infiniband", plan, f"{found}: {stack}; GPUDirect RDMA by {mode}: {why}"
            )
    detected = efa_functions(facts, cat) or efa_devices(facts, cat) or hcas or ib_pci
    if policy["gpuprov_fabric_gdrcopy"] and detected:
        warnings.append(
            "gpuprov_fabric_gdrcopy=true: GDRCopy is not built by gpuprov yet (every vendor "
            "script builds it from NVIDIA/gdrcopy); nothing installed"
        )
    return role


def _doca_problems(facts: HostFacts, policy: Policy) -> list[str]:
    """What the infiniband role's preflight refuses for DOCA, as blockers with the fix."""
    data = role_data("infiniband", "vars/main.yml")
    packages, pins = data["__infiniband_doca_packages"], data["__infiniband_doca_sha256_pins"]
    arch = DEB_ARCH.get(facts.arch or "x86_64", facts.arch)  # the role's key: Debian's name
    key = f"{facts.os.id}{facts.os.version_id.replace('.', '')}-{arch}" if facts.os else "unknown"
    package = policy["infiniband_doca_package"] or packages.get(key, "")
    problems = []
    if not policy["infiniband_doca_base_url"]:
        problems.append(
            "infiniband_stack=doca needs infiniband_doca_base_url (the DOCA download site; not "
            "in gpuprov's reference): the infiniband role would stop after the driver role "
            "changed the host; fix: set infiniband_doca_base_url, or infiniband_stack="
            "distribution"
        )
    if not package:
        problems.append(
            f"infiniband_stack=doca: the infiniband role pins no doca-host package for {key} "
            f"(it pins {', '.join(sorted(packages))}); fix: set infiniband_doca_package and "
            "infiniband_doca_sha256, or infiniband_stack=distribution"
        )
    elif not re.fullmatch(SHA256, policy["infiniband_doca_sha256"] or pins.get(package, "")):
        problems.append(
            f"infiniband_stack=doca: {package} has no sha256 to verify it against; fix: set "
            "infiniband_doca_sha256 to its sha256 from a source you trust"
        )
    return problems
