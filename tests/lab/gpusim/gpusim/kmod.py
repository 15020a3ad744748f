"""The simulated kernel side: loading/unloading the NVIDIA modules and what /proc shows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpusim import driver as drv
from gpusim import efa, ib, nvlink5, sysfs
from gpusim.runtime import Host, uptime
from gpusim.view import gpus

# Loadable modules, in dependency order; sizes as the real 580 host's /proc/modules shows
# for nvidia and nvidia_uvm (the others only shape the simulated listing).
MODULES = {
    "nvidia": 14299136,
    "nvidia_uvm": 1830912,
    "nvidia_modeset": 1552384,
    "nvidia_drm": 77824,
    "nvidia_peermem": 16384,
}
DEPENDS = {
    "nvidia_uvm": "nvidia",
    "nvidia_modeset": "nvidia",
    "nvidia_drm": "nvidia_modeset",
    "nvidia_peermem": "nvidia",
}
ADDRESSES = {
    "nvidia": 0xFFFFFFFFC0400000,
    "nvidia_uvm": 0xFFFFFFFFC080C000,
    "nvidia_modeset": 0xFFFFFFFFC0A00000,
    "nvidia_drm": 0xFFFFFFFFC0B00000,
    "nvidia_peermem": 0xFFFFFFFFC0B40000,
}


class ModuleError(Exception):
    """What modprobe/rmmod would print, with their exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def canonical(name: str) -> str | None:
    """Kernel module name for a modprobe argument, None when it is not ours."""
    name = name.replace("-", "_")
    name = name.replace("nvidia_current", "nvidia").removesuffix(".ko")
    return name if name in MODULES else None


@dataclass(frozen=True)
class ProcView:
    version: str  # /proc/driver/nvidia/version
    informations: dict[str, str]  # bus id -> gpus/<bus>/information
    module_lines: list[str]  # lines for /proc/modules


def proc_view(host: Host) -> ProcView | None:
    state = host.state
    if not state.driver_loaded:
        return None
    module = drv.installed_module(host.paths)
    compiler = module.compiler if module else ""
    loaded = drv.InstalledModule(state.loaded_version, state.loaded_flavour, Path(), compiler)
    version = f"{drv.nvrm_line(loaded)}\n{drv.gcc_line(loaded)}\n"
    infos = {}
    for g in gpus(host.profile, state):
        infos[g.state.bus_id] = (
            f"Model: \t\t {g.model.name}\n"
            f"IRQ:   \t\t {41 + g.position}\n"
            f"GPU UUID: \t {g.state.uuid}\n"
            f"Video BIOS: \t {g.model.vbios.lower()}\n"
            "Bus Type: \t PCIe\n"
            "DMA Size: \t 52 bits\n"
            "DMA Mask: \t 0xfffffffffffff\n"
            f"Bus Location: \t {g.state.bus_id}\n"
            f"Device Minor: \t {g.index}\n"
            f"GPU Firmware: \t {state.loaded_version}\n"
            "GPU Excluded:\t No\n"
        )
    taint = "O" if state.loaded_flavour == "open" else "POE"
    lines = []
    for name in reversed(list(MODULES)):
        if name not in state.loaded_modules:
            continue
        users = [m for m in state.loaded_modules if DEPENDS.get(m) == name]
        deps = "".join(f"{u}," for u in users) or "-"
        lines.append(
            f"{name} {MODULES[name]} {len(users)} {deps} Live 0x{ADDRESSES[name]:016x} ({taint})"
        )
    return ProcView(version, infos, lines)


def render(host: Host) -> None:
    """Write what /proc and sysfs show for the current state (files; boot mounted them)."""
    paths = host.paths
    view = proc_view(host)
    nvidia_dir = paths.proc_driver / "nvidia"
    if nvidia_dir.exists():
        for path in sorted(nvidia_dir.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        nvidia_dir.rmdir()
    if view is not None:
        (nvidia_dir / "gpus").mkdir(parents=True)
        (nvidia_dir / "version").write_text(view.version)
        for bus_id, info in view.informations.items():
            (nvidia_dir / "gpus" / bus_id).mkdir()
            (nvidia_dir / "gpus" / bus_id / "information").write_text(info)
    base_file = paths.run_dir / "modules.base"
    base = base_file.read_text() if base_file.exists() else ""
    modules_file = paths.run_dir / "modules" if not paths.simulated_root else paths.proc_modules
    modules_file.parent.mkdir(parents=True, exist_ok=True)
    lines = (view.module_lines if view else []) + nvlink5.module_lines(host)
    lines += efa.module_lines(host)
    text = "".join(line + "\n" for line in lines) + base
    with open(modules_file, "w") as handle:  # in place: /proc/modules is bind-mounted on it
        handle.write(text)
    sysfs.render(paths.pci_devices, host.profile, host.state)
    nvlink5.render(host)
    efa.render(host)
    ib.render(host)


_LOAD_LOG_OPEN = ("nvidia: loading out-of-tree module taints kernel.",)
_LOAD_LOG_PROPRIETARY = (
    "nvidia: loading out-of-tree module taints kernel.",
    "nvidia: module license 'NVIDIA' taints kernel.",
    "Disabling lock debugging due to kernel taint",
)


def load(host: Host, name: str) -> None:
    state = host.state
    if name in state.loaded_modules:
        return
    dependency = DEPENDS.get(name)
    if dependency is not None:
        load(host, dependency)
        state.loaded_modules.append(name)
        return
    module = drv.installed_module(host.paths)
    if module is None:
        release = drv.kernel_release(host.paths)
        raise ModuleError(
            f"modprobe: FATAL: Module {name} not found in directory /lib/modules/{release}"
        )
    state.driver_loaded = True
    state.loaded_version = module.version
    state.loaded_flavour = module.flavour
    state.loaded_modules.append(name)
    lines = _LOAD_LOG_OPEN if module.flavour == "open" else _LOAD_LOG_PROPRIETARY
    for line in lines:
        state.log(line, uptime(host.paths))
    state.log(
        "nvidia-nvlink: Nvlink Core is being initialized, major device number 240",
        uptime(host.paths),
    )
    state.log(
        "NVRM: loading " + drv.nvrm_line(module).removeprefix("NVRM version: "), uptime(host.paths)
    )


def unload(host: Host, name: str) -> None:
    state = host.state
    if name not in state.loaded_modules:
        return
    users = [m for m in state.loaded_modules if DEPENDS.get(m) == name]
    if users:
        raise ModuleError(f"modprobe: FATAL: Module {name} is in use.")
    state.loaded_modules.remove(name)
    if name == "nvidia":
        state.driver_loaded = False
        state.loaded_version = ""
        state.loaded_flavour = ""
        for gpu in state.gpus:  # the driver going away resets the GPUs
            gpu.persistence = False
            gpu.mig_current = gpu.mig_pending
            gpu.gpu_instances.clear()
            gpu.compute_instances.clear()


def unload_with_dependencies(host: Host, name: str) -> None:
    """`modprobe -r`: the module, then each dependency nothing else uses any more."""
    unload(host, name)
    dependency = DEPENDS.get(name)
    while dependency is not None and dependency in host.state.loaded_modules:
        if any(DEPENDS.get(m) == dependency for m in host.state.loaded_modules):
            break
        unload(host, dependency)
        dependency = DEPENDS.get(dependency)
