"""What happens at every boot of a lab host (run by gpusim-boot.service, before sysinit)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from gpusim import driver as drv
from gpusim import efa, ib, kernel, kmod, nvlink5
from gpusim.faults import xid_line
from gpusim.paths import Paths
from gpusim.runtime import Host, host_session, uptime

GPUSIM_DIR = Path(__file__).resolve().parent.parent
SHIM = GPUSIM_DIR / "build" / "uname-shim.so"
# OS-boundary shims: name in the host's PATH -> our executable.
SHIMS = {
    "/usr/local/sbin/modprobe": "bin/modprobe",
    "/usr/local/sbin/rmmod": "bin/rmmod",
    "/usr/local/bin/dmesg": "bin/dmesg",
    "/usr/local/bin/gpusim": "bin/gpusim",
}
SMI_SHIM = "/usr/local/bin/nvidia-smi"
DPKG_HOOK = "/etc/dpkg/dpkg.cfg.d/gpusim"
PERSISTENCED_DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/gpusim.conf"


def reboot_state(host: Host) -> None:
    """A reboot: GPUs reset (pending MIG applies, instances gone), modules unloaded."""
    state = host.state
    state.boot_count += 1
    state.boot_time = time.time()
    state.kernel_log = []
    state.driver_loaded = False
    state.loaded_modules = []
    state.loaded_version = ""
    state.loaded_flavour = ""
    for gpu in state.gpus:
        gpu.persistence = False
        gpu.mig_current = gpu.mig_pending
        gpu.gpu_instances.clear()
        gpu.compute_instances.clear()


def blacklisted(paths: Paths) -> bool:
    directory = paths.at("/etc/modprobe.d")
    if not directory.is_dir():
        return False
    pattern = re.compile(r"^\s*blacklist\s+nvidia(-current)?\s*$", re.M)
    return any(pattern.search(p.read_text(errors="replace")) for p in directory.glob("*.conf"))


def sync_smi(paths: Paths) -> bool:
    """nvidia-smi exists exactly when the driver's userspace package installed one."""
    target = paths.at(SMI_SHIM)
    want = drv.smi_package_installed(paths)
    if want and not target.is_symlink():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(GPUSIM_DIR / "bin" / "nvidia-smi")
    elif not want and target.is_symlink():
        target.unlink()
    return want


def _link(path: Path, target: Path) -> None:
    if path.is_symlink() and path.readlink() == target:
        return
    if path.is_symlink() or path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def install_shims(paths: Paths) -> None:
    for where, ours in SHIMS.items():
        _link(paths.at(where), GPUSIM_DIR / ours)
    hook = paths.at(DPKG_HOOK)
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text(
        "# gpusim (lab test code): show/hide the simulated nvidia-smi with the driver packages\n"
        f"post-invoke={GPUSIM_DIR / 'bin' / 'gpusim'} sync\n"
    )
    dropin = paths.at(PERSISTENCED_DROPIN)
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text(
        "# gpusim (lab test code): the daemon talks to the simulated GPUs\n"
        "[Service]\nType=simple\nPIDFile=\nExecStart=\n"
        f"ExecStart={GPUSIM_DIR / 'bin' / 'nvidia-persistenced'} --foreground\n"
    )
    if SHIM.exists() and not paths.simulated_root:
        preload = paths.at("/etc/ld.so.preload")
        current = preload.read_text() if preload.exists() else ""
        if str(SHIM) not in current.split():
            preload.write_text(current + f"{SHIM}\n")


def _mounted(target: str) -> bool:
    with open("/proc/self/mountinfo") as handle:
        return any(line.split()[4] == target for line in handle)


def mount_proc(paths: Paths) -> None:
    """tmpfs over /proc/driver, and a file we keep over /proc/modules (real host only)."""
    run_dir = paths.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    if not _mounted("/proc/driver"):
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "mode=0555,size=1m", "gpusim", "/proc/driver"],
            check=True,
        )
    if not Path("/proc/modules").exists():
        # A kernel built without module support has no /proc/modules, and nothing can be
        # created in procfs: the simulated modules then show only in /run/gpusim/modules.
        print("gpusim: /proc/modules is absent on this kernel; lsmod shows nothing")
        return
    if not _mounted("/proc/modules"):
        (run_dir / "modules.base").write_text(Path("/proc/modules").read_text())
        (run_dir / "modules").write_text("")
        subprocess.run(["mount", "--bind", str(run_dir / "modules"), "/proc/modules"], check=True)


def boot(paths: Paths | None = None) -> Host:
    paths = paths or Paths.from_env()
    with host_session(paths) as host:
        reboot_state(host)
        if not paths.kernel_release_file.exists():
            release = kernel.choose(paths, host.profile.kernel_release)
            if release:
                kernel.write(paths, release)
        install_shims(paths)
        if not paths.simulated_root:
            mount_proc(paths)
        if host.profile.nvlink5_ports or host.profile.efa_devices or host.profile.ib_hcas:
            if paths.simulated_root:
                paths.at(nvlink5.INFINIBAND).mkdir(parents=True, exist_ok=True)
            else:
                nvlink5.mount_class(paths)
            nvlink5.boot(host)
            efa.boot(host)
            ib.boot(host)
        if drv.installed_module(paths) is not None and not blacklisted(paths):
            kmod.load(host, "nvidia")  # udev loads it for the GPUs' modalias at boot
        for position_text, xid in host.state.xid_codes.items():  # the fault is still there
            bus_id = host.profile.gpu_bus_ids[int(position_text)]
            host.state.log(xid_line(bus_id, xid), uptime(paths))
        sync_smi(paths)
        kmod.render(host)
    return host


def main() -> int:
    host = boot()
    state = host.state
    print(
        f"gpusim: boot {state.boot_count}, profile {host.profile.name}, "
        f"{len(host.profile.gpu_bus_ids)} GPUs, kernel {drv.kernel_release(host.paths)}, "
        f"driver {'loaded ' + state.loaded_version if state.driver_loaded else 'not loaded'}"
        f" (pid {os.getpid()})"
    )
    return 0
