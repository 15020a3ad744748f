"""NVLink5 fabrics: what the planner adds to the driver role on an HGX B200/B300 board (fabric
manager + NVLink subnet manager) or a GB200/GB300 compute tray (nvidia-imex, no local fabric
manager), and what it says when detection cannot tell.

Detection is NVIDIA's own (its driver container's `_assert_nvlink5_system`): a device whose VPD
contains SW_MNG, read from the InfiniBand class and from the Mellanox PCI functions (present
whatever driver is bound; root only). The catalog says which GPU models sit on NVLink5 boards
(`fabric: nvlink5`, 8 per board) or on multi-node trays (`fabric: imex`). On a board:

- SW_MNG seen: fabric manager + subnet manager and its tools, `ib_umad` (loaded now and at
  boot), then the fabric manager, gated on Fabric State Completed;
- VPD unreadable (or never read): a blocker. Planning either way would be a guess: without the
  fabric manager the GPUs never reach Fabric State Completed (CUDA error 802), and the fix
  (detection with root, which apply needs anyway) costs one re-run;
- every VPD read, none SW_MNG: a warning naming NVLink5 and the fix, the fabric manager not
  planned (a VM whose hypervisor manages the fabric looks like this; its GPUs report Fabric
  State Completed once a driver runs, and then nothing is said).

SW_MNG beside GPUs that sit on no NVLink5 board (Hopper, a GB200 tray) is inconsistent: a
blocker, never a silent NVLink5 plan. Package names and the branch floor are those
tests/recorded/reference/packages.yaml records as confirmed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .catalog import GpuModel
from .facts import MELLANOX_VENDOR, HostFacts

# NVIDIA installs nvlsm and infiniband-diags only for branches >= 570 (packages.yaml
# cuda_apt.branches["570"].nvlink5_extra, source gdc_nvlink570, confirmed).
MIN_BRANCH = 570

# Package names per package format: apt from NVIDIA's Ubuntu install scripts (nvlink5_extra,
# confirmed); rpm from AWS's AL2023 script (cuda_rpm ... ge_580.nvlsm, confirmed). nvlsm comes
# from NVIDIA's CUDA repository, the others from the distribution.
PACKAGES = {"apt": ("nvlsm", "infiniband-diags"), "rpm": ("libibumad", "infiniband-diags", "nvlsm")}

_RPM_OS = frozenset({"rhel", "rocky", "almalinux", "amzn", "centos", "fedora", "ol"})
# Why the VPD may be unreadable and what to do (Linux drivers/pci/vpd.c: mode 0600).
_ROOT_FIX = (
    "fix: re-run `provision detect` as root (ansible_become=true for this host): the VPD "
    "(/sys/bus/pci/devices/*/vpd, /sys/class/infiniband/*/device/vpd) is readable by root only"
)


@dataclass
class Nvlink5Plan:
    packages: tuple[str, ...]
    reason: str
    warnings: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    planned: bool = True  # False: checks only; the NVLink5 path is not planned (reason: why)


@dataclass
class ImexPlan:
    nodes: tuple[str, ...]
    reason: str
    blockers: list[str] = field(default_factory=list)


def package_format(facts: HostFacts) -> str:
    os_id = facts.os.id if facts.os else ""
    return "rpm" if os_id in _RPM_OS else "apt"


def _board(models: Sequence[GpuModel]) -> str | None:
    """ "8x HGX B200" when the GPUs fill an NVLink5 board (catalog `fabric: nvlink5`)."""
    for model in dict.fromkeys(m for m in models if m.fabric and m.fabric.kind == "nvlink5"):
        count = sum(1 for m in models if m == model)
        if model.fabric is not None and count >= (model.fabric.board_gpus or 0):
            return f"{count}x {model.model}"
    return None


def _not_on_boards(models: Sequence[GpuModel]) -> list[str]:
    return sorted(
        {f"{m.model} ({m.arch})" for m in models if not m.fabric or m.fabric.kind != "nvlink5"}
    )


def plan_nvlink5(
    facts: HostFacts, models: Sequence[GpuModel], branch: int, source: str
) -> Nvlink5Plan | None:
    """What an NVLink5 board adds to the driver plan (or why it is not planned); None on a
    host that neither shows SW_MNG nor carries such a board."""
    board = _board(models)
    if facts.nvlink5:
        return _with_ports(facts, models, branch, source)
    if board is None:
        return None
    unknown = facts.nvlink5_unknown
    if unknown:
        what = (
            "the probe did not read the Mellanox PCI functions' VPD (a capture from an older "
            "gpuprov)"
            if facts.pci_vpd is None
            else f"the VPD of {', '.join(unknown)} was not readable"
        )
        return Nvlink5Plan(
            (),
            reason="fabric manager: not planned: NVLink5 detection incomplete (blocker)",
            blockers=[
                f"NVLink5: {board} is an NVLink5 board (catalog), which needs the fabric manager "
                "and the NVLink subnet manager, found by SW_MNG in the VPD of its NVSwitch "
                f"management ports; {what}, so detection cannot tell; {_ROOT_FIX}"
            ],
            planned=False,
        )
    states = {g.fabric_state for g in facts.smi_gpus if g.fabric_state}
    if states == {"Completed"}:
        return Nvlink5Plan(
            (),
            reason=(
                f"fabric manager: not on this host: {board} is an NVLink5 board, no SW_MNG "
                "management port is visible and the GPUs report fabric state Completed (the "
                "fabric is managed outside this host, e.g. by the hypervisor)"
            ),
            planned=False,
        )
    mellanox = sum(1 for d in facts.pci if d.vendor_id == MELLANOX_VENDOR)
    seen = (
        f"the VPD of {mellanox} Mellanox PCI function(s) was read, none says SW_MNG"
        if mellanox
        else "no Mellanox (0x15b3) function is on the PCI bus"
    )
    return Nvlink5Plan(
        (),
        reason="fabric manager: not planned: NVLink5 board without a SW_MNG port (warning)",
        warnings=[
            f"NVLink5: {board} is an NVLink5 board (catalog) but no NVSwitch management port was "
            f"seen ({seen}): the fabric manager and NVLink subnet manager are not planned, and "
            "unless the fabric is managed outside this host (a VM) the GPUs will not reach "
            "Fabric State Completed (CUDA error 802); fix: on bare metal, enable the "
            "management ports (BMC/BIOS) so they are on the PCI bus, then re-run provision "
            "detect as root"
        ],
        planned=False,
    )


def _with_ports(
    facts: HostFacts, models: Sequence[GpuModel], branch: int, source: str
) -> Nvlink5Plan:
    ports = ", ".join(facts.nvlink5_ports)
    others = _not_on_boards(models)
    if others:
        return Nvlink5Plan(
            (),
            reason=f"fabric: SW_MNG ports ({ports}) beside {', '.join(others)}: inconsistent",
            blockers=[
                f"NVLink5 switch management ports (SW_MNG in the VPD of {ports}) beside "
                f"{', '.join(others)} GPUs, which sit on no NVLink5 board (catalog: HGX "
                "B200/B300): the NVLink5 path is not planned; fix: check the host and its "
                "capture (pci-vpd.txt, infiniband-vpd.txt), re-run provision detect, or leave "
                "this host out (--limit)"
            ],
            planned=False,
        )
    packages = PACKAGES[package_format(facts)]
    plan = Nvlink5Plan(
        packages=packages,
        reason=(
            f"NVLink5 fabric (SW_MNG in the VPD of {ports}): fabric manager + NVLink subnet "
            f"manager ({', '.join(packages)}), ib_umad loaded, then the fabric manager "
            "started, gated on Fabric State Completed"
        ),
    )
    if branch < MIN_BRANCH:
        plan.blockers.append(
            f"an NVLink5 fabric needs the NVLink subnet manager (nvlsm), which NVIDIA "
            f"publishes for driver branches >= {MIN_BRANCH}, not R{branch}; fix: set "
            f"nvidia_driver_branch to {MIN_BRANCH} or later"
        )
    if source == "distribution" and facts.os is not None and facts.os.id == "ubuntu":
        plan.warnings.append(
            "nvlsm is not in Ubuntu's archive: the NVLink subnet manager comes from NVIDIA's "
            "CUDA repository even with nvidia_driver_source=distribution"
        )
    # An empty module list means /proc/modules was not read (a kernel without modules).
    if facts.loaded_modules and "mlx5_core" in facts.nvlink5_missing_modules:
        plan.warnings.append(
            "mlx5_core (the driver of the NVLink management ports) was not loaded at "
            "detection; the role waits for it and fails if it stays absent"
        )
    return plan


def plan_imex(models: Sequence[GpuModel], nodes: Sequence[str]) -> ImexPlan | None:
    """A GB200/GB300 compute tray (catalog `fabric: imex`): nvidia-imex at the driver's
    version, its node list from the inventory, no local fabric manager; None elsewhere."""
    trays = sorted({m.model for m in models if m.fabric and m.fabric.kind == "imex"})
    if not trays:
        return None
    names = ", ".join(trays)
    plan = ImexPlan(
        nodes=tuple(nodes),
        reason=(
            f"{names} compute tray (multi-node NVLink): nvidia-imex at the driver's version "
            f"(IMEX nodes: {', '.join(nodes) or 'none set'}), no local fabric manager (the "
            "NVLink switch trays manage the fabric)"
        ),
    )
    if not nodes:
        plan.blockers.append(
            f"IMEX on a {names} tray needs its node configuration: nvidia_driver_imex_nodes is "
            "empty; fix: set nvidia_driver_imex_nodes to the IP addresses of every compute "
            "tray in this NVLink domain (the same list on each tray, e.g. in the rack's "
            "group_vars)"
        )
    return plan
