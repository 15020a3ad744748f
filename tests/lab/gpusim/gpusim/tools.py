"""Entry points of the small OS-boundary tools: gpusim, modprobe, rmmod, dmesg, persistenced."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence

from gpusim import boot as boot_mod
from gpusim import driver as drv
from gpusim import efa, faults, ib, jobs, kernel, kmod, nvlink5
from gpusim.paths import Paths
from gpusim.runtime import host_session
from gpusim.state import FAULTS

REAL_MODPROBE = ("/usr/sbin/modprobe", "/sbin/modprobe")
REAL_RMMOD = ("/usr/sbin/rmmod", "/sbin/rmmod")


def _exec_real(candidates: Sequence[str], argv: Sequence[str]) -> int:
    for path in candidates:
        if os.path.exists(path):
            os.execv(path, [path, *argv])
    sys.stderr.write(f"{os.path.basename(candidates[0])}: not found\n")
    return 127


def modprobe(argv: Sequence[str]) -> int:
    """modprobe [-r] [-q] NAME...: ours for the NVIDIA modules, the real one otherwise."""
    remove = any(a in ("-r", "--remove") for a in argv)
    quiet = any(a in ("-q", "--quiet") for a in argv)
    names = [a for a in argv if not a.startswith("-") and "=" not in a]
    if names and all(nvlink5.canonical(n) for n in names):
        return _modprobe_nvlink5(names, remove)
    if names and all(efa.canonical(n) for n in names):
        return _modprobe_efa(argv, remove)
    ours = [kmod.canonical(n) for n in names]
    if not names or any(o is None for o in ours):
        return _exec_real(REAL_MODPROBE, argv)
    paths = Paths.from_env()
    if not remove and drv.installed_module(paths) is None:
        return _exec_real(REAL_MODPROBE, argv)  # the real "Module nvidia not found" message
    with host_session(paths) as host:
        try:
            for name in ours:
                assert name is not None
                if remove:
                    kmod.unload_with_dependencies(host, name)
                else:
                    kmod.load(host, name)
        except kmod.ModuleError as exc:
            if not quiet:
                sys.stderr.write(f"{exc}\n")
            kmod.render(host)
            return exc.code
        kmod.render(host)
    return 0


def _modprobe_nvlink5(names: Sequence[str], remove: bool) -> int:
    """mlx5_core / mlx5_ib / ib_umad: simulated on NVLink5 and bare InfiniBand profiles, the
    real modprobe elsewhere."""
    with host_session(Paths.from_env()) as host:
        simulated = nvlink5.enabled(host) or ib.bare(host)
        for name in names if simulated else []:
            module = nvlink5.canonical(name)
            assert module is not None
            (nvlink5.unload if remove else nvlink5.load)(host, module)
        if simulated:
            kmod.render(host)
    return 0 if simulated else _exec_real(REAL_MODPROBE, [*(["-r"] if remove else []), *names])


def _modprobe_efa(argv: Sequence[str], remove: bool) -> int:
    """efa: simulated on EFA profiles once DKMS built the module; the real modprobe elsewhere
    (its own "Module efa not found" when nothing was built)."""
    with host_session(Paths.from_env()) as host:
        simulated = efa.enabled(host) and (remove or efa.module_installed(host))
        if simulated:
            (efa.unload if remove else efa.load)(host)
            kmod.render(host)
    return 0 if simulated else _exec_real(REAL_MODPROBE, argv)


def rmmod(argv: Sequence[str]) -> int:
    names = [a for a in argv if not a.startswith("-")]
    ours = [kmod.canonical(n) for n in names]
    if not names or any(o is None for o in ours):
        return _exec_real(REAL_RMMOD, argv)
    with host_session() as host:
        for name in ours:
            assert name is not None
            if name not in host.state.loaded_modules:
                sys.stderr.write(f"rmmod: ERROR: Module {name} is not currently loaded\n")
                return 1
            try:
                kmod.unload(host, name)
            except kmod.ModuleError:
                sys.stderr.write(f"rmmod: ERROR: Module {name} is in use\n")
                return 1
        kmod.render(host)
    return 0


def dmesg(argv: Sequence[str]) -> int:
    """The simulated host's kernel log (the control machine's own log is never shown)."""
    with host_session() as host:
        for line in host.state.kernel_log:
            sys.stdout.write(line.dmesg())
        if any(a in ("-c", "--read-clear", "-C", "--clear") for a in argv):
            host.state.kernel_log = []
    return 0


def persistenced(argv: Sequence[str]) -> int:
    """Stand-in daemon: persistence on while it runs, off when it stops (like the real one);
    with --no-persistence-mode it runs and leaves persistence off (Ubuntu's packaged unit)."""
    enable = "--no-persistence-mode" not in argv
    with host_session() as host:
        if not host.state.driver_loaded:
            sys.stderr.write(
                "nvidia-persistenced failed to initialize. Check syslog for more details.\n"
            )
            return 1
        for gpu in host.state.gpus:
            gpu.persistence = enable

    def stop(_signum: int, _frame: object) -> None:
        with host_session() as host:
            for gpu in host.state.gpus:
                gpu.persistence = False
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if "--foreground" in argv or "-f" in argv:
        while True:
            signal.pause()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpusim", description="lab GPU simulator (test code)")
    sub = parser.add_subparsers(dest="command", required=True)
    fault = sub.add_parser("fault", help="turn a fault knob on or off")
    fault.add_argument("name", choices=[*FAULTS, "list"])
    fault.add_argument("switch", nargs="?", choices=["on", "off"])
    fault.add_argument(
        "--gpu", type=int, help="GPU slot in the profile (default 0; last for gpu-missing)"
    )
    fault.add_argument("--xid", type=int, default=79, help="Xid code for the xid knob")
    job = sub.add_parser("job", help="run a simulated CUDA process on a GPU for SECONDS")
    job.add_argument("seconds", type=float)
    job.add_argument("--gpu", type=int, default=0, help="GPU slot in the profile")
    job.add_argument("--name", default="python3", help="process name nvidia-smi shows")
    sub.add_parser("status", help="print the simulator state as JSON")
    kern = sub.add_parser("kernel", help="show or set the simulated kernel release")
    kern.add_argument("release", nargs="?")
    kern.add_argument("--from-apt", action="store_true")
    sub.add_parser("sync", help="show/hide nvidia-smi after package changes (dpkg hook)")
    sub.add_parser("boot", help="what boot does")
    sub.add_parser("smi-server", help="answer nvidia-smi calls (gpusim-smi.socket starts it)")
    efa_fault = sub.add_parser("efa", help="turn a simulated EFA fault on or off")
    efa_fault.add_argument("name", choices=efa.FAULTS)
    efa_fault.add_argument("switch", choices=["on", "off"])
    efa_fault.add_argument("--device", type=int, default=0, help="efa_<N> (default 0)")
    ib_fault = sub.add_parser("ib", help="turn a simulated InfiniBand fault on or off")
    ib_fault.add_argument("name", choices=ib.FAULTS)
    ib_fault.add_argument("switch", choices=["on", "off"])
    ib_fault.add_argument("--device", type=int, default=0, help="mlx5_ib<N> (default 0)")
    return parser


def gpusim(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    paths = Paths.from_env()
    if args.command == "boot":
        return boot_mod.main()
    if args.command == "smi-server":
        from gpusim import smiserver

        return smiserver.main()
    if args.command == "sync":
        boot_mod.sync_smi(paths)
        return 0
    if args.command == "kernel":
        if args.release or args.from_apt:
            release = args.release or kernel.choose(paths, None)
            if not release:
                sys.stderr.write(
                    "gpusim: no linux-headers-amd64 in the apt lists; "
                    "run apt-get update or name a release\n"
                )
                return 1
            kernel.write(paths, release)
        print(drv.kernel_release(paths))
        return 0
    if args.command in ("efa", "ib"):
        module = efa if args.command == "efa" else ib
        with host_session(paths) as host:
            try:
                print(module.set_fault(host, args.name, args.switch == "on", args.device))
            except ValueError as exc:
                sys.stderr.write(f"gpusim: {exc}\n")
                return 2
            kmod.render(host)
        return 0
    if args.command == "job":
        return jobs.run_job(paths, args.seconds, args.gpu, args.name)
    if args.command == "status":
        with host_session(paths) as host:
            module = drv.installed_module(paths)
            print(
                json.dumps(
                    {
                        "profile": host.profile.name,
                        "kernel_release": drv.kernel_release(paths),
                        "installed_module": module.version if module else None,
                        "installed_flavour": module.flavour if module else None,
                        "nvml": drv.nvml_version(paths),
                        "driver_loaded": host.state.driver_loaded,
                        "loaded_version": host.state.loaded_version,
                        "faults": host.state.faults,
                        "boot_count": host.state.boot_count,
                    },
                    indent=1,
                    sort_keys=True,
                )
            )
        return 0
    if args.name == "list":
        for name in FAULTS:
            print(f"{name:22} {faults.DESCRIPTIONS[name]}")
        return 0
    if args.switch is None:
        sys.stderr.write("gpusim: fault NAME on|off\n")
        return 2
    with host_session(paths) as host:
        try:
            print(faults.set_fault(host, args.name, args.switch == "on", args.gpu, args.xid))
        except faults.FaultError as exc:
            sys.stderr.write(f"gpusim: {exc}\n")
            return 2
    return 0
