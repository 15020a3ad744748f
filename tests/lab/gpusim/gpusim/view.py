"""What the tools see now: profile hardware + state + faults + the loaded driver."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from gpusim.model import GpuModel, Profile
from gpusim.paths import Paths
from gpusim.state import GpuState, State


@dataclass(frozen=True)
class GpuView:
    index: int  # nvidia-smi's index: enumeration order over the GPUs present
    position: int  # slot in the profile (stable across faults)
    model: GpuModel
    state: GpuState
    numa_node: int
    pcie_gen: int
    pcie_width: int
    row_remap_pending: bool
    nvlink_inactive: bool

    @property
    def nvml_bus_id(self) -> str:
        """nvidia-smi's form of the PCI address: 8-digit domain, upper case."""
        domain, bus, rest = self.state.bus_id.split(":")
        return f"{int(domain, 16):08X}:{bus.upper()}:{rest.upper()}"

    @property
    def mig_current(self) -> str:
        if not self.model.mig_capable:
            return "[N/A]"
        return "Enabled" if self.state.mig_current else "Disabled"

    @property
    def mig_pending(self) -> str:
        if not self.model.mig_capable:
            return "[N/A]"
        return "Enabled" if self.state.mig_pending else "Disabled"


def pcie_gen_speed(gen: int) -> str:
    """sysfs link speed text for a PCIe generation."""
    return {1: "2.5", 2: "5.0", 3: "8.0", 4: "16.0", 5: "32.0", 6: "64.0"}[gen] + " GT/s PCIe"


def present_positions(profile: Profile, state: State) -> list[int]:
    """Profile slots whose GPU is on the PCI bus (gpu-missing takes one off)."""
    return [p for p in range(len(profile.gpu_bus_ids)) if not state.fault("gpu-missing", p)]


def gpus(profile: Profile, state: State) -> list[GpuView]:
    views = []
    for index, position in enumerate(present_positions(profile, state)):
        degraded = state.fault("pcie-degraded", position)
        views.append(
            GpuView(
                index=index,
                position=position,
                model=profile.gpu,
                state=state.gpus[position],
                numa_node=profile.gpu_numa_nodes[position],
                pcie_gen=profile.gpu.pcie_gen - 1 if degraded else profile.gpu.pcie_gen,
                pcie_width=profile.gpu.pcie_width,
                row_remap_pending=state.fault("row-remap-pending", position),
                nvlink_inactive=state.fault("nvlink-inactive", position),
            )
        )
    return views


def fabricmanager_active(paths: Paths) -> bool:
    """Is nvidia-fabricmanager running? (a flag file under a test root)."""
    if paths.simulated_root:
        return paths.at("/run/gpusim/fabricmanager-active").exists()
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        return False
    result = subprocess.run(
        [systemctl, "is-active", "--quiet", "nvidia-fabricmanager.service"], check=False
    )
    return result.returncode == 0


def fabric_state(profile: Profile, state: State, paths: Paths) -> tuple[str, str]:
    """(State, Status) of `nvidia-smi -q` Fabric: an NVSwitch system needs fabric manager."""
    if profile.gpu.nvlinks == 0:
        return "N/A", "N/A"
    if state.faults.get("fabric-not-completed"):
        return "Not Started", "N/A"
    if profile.has_nvswitch and not fabricmanager_active(paths):
        return "Not Started", "N/A"
    if profile.nvlink5_ports:
        # NVLink5: the fabric manager's start script brings up the NVLink subnet manager, and
        # its precheck wants mlx5_core and ib_umad loaded (gpusim/nvlink5.py).
        ready = all(m in state.loaded_modules for m in ("mlx5_core", "ib_umad"))
        if not (ready and fabricmanager_active(paths)):
            return "Not Started", "N/A"
        return "Completed", "Success"
    if not profile.has_nvswitch and not profile.fabric_managed_by_hypervisor:
        return "N/A", "N/A"
    return "Completed", "Success"
