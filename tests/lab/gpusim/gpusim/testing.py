"""Running the simulator without a container, for unit tests (test code).

A SimHost is a directory used as GPUSIM_ROOT: a profile, a simulated kernel release, and
optionally the files a driver install leaves (a built module with its .modinfo, the
nvidia-smi package file, libnvidia-ml.so.<version>). `raw()` collects the outputs the way
gpuprov's probe does, under the fixture's file names, each ending with "# exit=N".
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpusim import boot, smi_cli, tools
from gpusim.paths import Paths

PROFILES_DIR = Path(__file__).resolve().parents[2] / "profiles"
KERNEL = "6.1.0-57-amd64"
# The fields of the real fixture's nvidia-smi-query-gpu.csv, in its order.
QUERY_FIELDS = (
    "index,name,pci.bus_id,pci.device_id,pci.sub_device_id,uuid,serial,driver_version,"
    "vbios_version,memory.total,mig.mode.current,mig.mode.pending,persistence_mode,"
    "ecc.mode.current,ecc.mode.pending,ecc.errors.uncorrected.volatile.total,compute_cap,"
    "power.limit,clocks.max.sm,clocks.current.sm,pcie.link.gen.current,"
    "pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max,retired_pages.pending,"
    "remapped_rows.pending,remapped_rows.failure,clocks_event_reasons.active,temperature.gpu"
)
# Probe file name -> nvidia-smi arguments.
SMI_CAPTURES = {
    "nvidia-smi.txt": [],
    "nvidia-smi-L.txt": ["-L"],
    "nvidia-smi-version.txt": ["--version"],
    "nvidia-smi-query-gpu.csv": [f"--query-gpu={QUERY_FIELDS}", "--format=csv"],
    "nvidia-smi-q.txt": ["-q"],
    "nvidia-smi-q.xml": ["-q", "-x"],
    "nvidia-smi-topo-m.txt": ["topo", "-m"],
    "nvidia-smi-nvlink-s.txt": ["nvlink", "-s"],
    "nvidia-smi-nvlink-e.txt": ["nvlink", "-e"],
    "nvidia-smi-mig-lgip.txt": ["mig", "-lgip"],
    "nvidia-smi-mig-lgipp.txt": ["mig", "-lgipp"],
    "nvidia-smi-mig-lgi.txt": ["mig", "-lgi"],
    "nvidia-smi-mig-lcip.txt": ["mig", "-lcip"],
    "nvidia-smi-mig-lci.txt": ["mig", "-lci"],
}


def elf_object(sections: dict[bytes, bytes]) -> bytes:
    """A minimal ELF64 relocatable object with the given sections (a stand-in .ko)."""
    names = b"\x00" + b"".join(name + b"\x00" for name in [*sections, b".shstrtab"])
    body = b""
    offsets = []
    for data in [*sections.values(), names]:
        offsets.append(64 + len(body))
        body += data
    shoff = 64 + len(body)
    count = len(sections) + 2  # the null section, the given ones, .shstrtab
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header += struct.pack(
        "<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, count, count - 1
    )
    table = bytes(64)
    for index, (name, data) in enumerate([*sections.items(), (b".shstrtab", names)]):
        name_at = names.index(b"\x00" + name + b"\x00") + 1
        table += struct.pack("<IIQQQQIIQQ", name_at, 1, 0, 0, offsets[index], len(data), 0, 0, 1, 0)
    return header + body + table


@dataclass(frozen=True)
class Run:
    out: str
    err: str
    code: int

    @property
    def captured(self) -> str:
        """As the probe stores it: stdout and stderr, then "# exit=N"."""
        return f"{self.out}{self.err}# exit={self.code}\n"


@contextlib.contextmanager
def _env(root: Path) -> Iterator[None]:
    old = os.environ.get("GPUSIM_ROOT")
    os.environ["GPUSIM_ROOT"] = str(root)
    try:
        yield
    finally:
        if old is None:
            del os.environ["GPUSIM_ROOT"]
        else:
            os.environ["GPUSIM_ROOT"] = old


@dataclass(frozen=True)
class SimHost:
    root: Path

    @classmethod
    def create(cls, root: Path, profile: str | Path, kernel: str = KERNEL) -> SimHost:
        named = isinstance(profile, str) and not profile.endswith((".yaml", ".yml"))
        source = PROFILES_DIR / f"{profile}.yaml" if named else Path(profile)
        (root / "etc/gpusim").mkdir(parents=True, exist_ok=True)
        (root / "etc/gpusim/profile.yaml").write_text(source.read_text())
        (root / "etc/hostname").write_text("simhost\n")
        (root / "var/lib/gpusim").mkdir(parents=True, exist_ok=True)
        (root / "var/lib/gpusim/kernel-release").write_text(kernel + "\n")
        return cls(root)

    @property
    def paths(self) -> Paths:
        return Paths(self.root)

    def install_driver(
        self,
        version: str = "580.159.04",
        flavour: str = "open",
        nvml: str | None = None,
        module_name: str = "nvidia.ko",
    ) -> None:
        """The files a driver install leaves: module (DKMS), nvidia-smi, NVML library."""
        kernel = self.paths.kernel_release_file.read_text().strip()
        module_dir = self.root / f"lib/modules/{kernel}/updates/dkms"
        module_dir.mkdir(parents=True, exist_ok=True)
        for old in module_dir.glob("nvidia*.ko*"):
            old.unlink()
        licence = "Dual MIT/GPL" if flavour == "open" else "NVIDIA"
        (module_dir / module_name).write_bytes(
            elf_object(
                {
                    b".text": b"\x90" * 64,
                    b".modinfo": f"license={licence}\x00version={version}\x00".encode(),
                    b".comment": b"\x00GCC: (Debian 12.2.0-14) 12.2.0\x00",
                }
            )
        )
        smi = self.root / "usr/lib/nvidia/current/nvidia-smi"
        smi.parent.mkdir(parents=True, exist_ok=True)
        smi.write_text("")
        lib_dir = self.root / "usr/lib/x86_64-linux-gnu"
        lib_dir.mkdir(parents=True, exist_ok=True)
        for old in lib_dir.glob("libnvidia-ml.so.*"):
            old.unlink()
        (lib_dir / f"libnvidia-ml.so.{nvml or version}").write_text("")
        with _env(self.root):
            boot.sync_smi(self.paths)

    def boot(self) -> None:
        with _env(self.root), contextlib.redirect_stdout(io.StringIO()):
            boot.boot(self.paths)

    def _call(self, fn: Callable[[Sequence[str]], int], argv: Sequence[str]) -> Run:
        out, err = io.StringIO(), io.StringIO()
        with _env(self.root), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = fn(argv)
            except SystemExit as exc:
                code = int(exc.code or 0)
        return Run(out.getvalue(), err.getvalue(), code)

    def smi(self, *argv: str) -> Run:
        with _env(self.root):
            result = smi_cli.run(argv)
        return Run(result.out, result.err, result.code)

    def gpusim(self, *argv: str) -> Run:
        return self._call(tools.gpusim, argv)

    def modprobe(self, *argv: str) -> Run:
        return self._call(tools.modprobe, argv)

    def dmesg(self) -> Run:
        return self._call(tools.dmesg, [])

    def sysfs_lines(self) -> str:
        """/sys/bus/pci/devices in the probe's one-line-per-device format."""
        lines = []
        base = self.paths.pci_devices
        for d in sorted(p for p in base.iterdir() if p.is_dir()):

            def rd(name: str, d: Path = d) -> str:
                path = d / name
                return path.read_text().splitlines()[0] if path.exists() else ""

            link = d / "driver"
            driver = os.readlink(link).rsplit("/", 1)[-1] if link.is_symlink() else ""
            lines.append(
                f"{d.name} vendor={rd('vendor')} device={rd('device')} class={rd('class')} "
                f"subsystem_vendor={rd('subsystem_vendor')} "
                f"subsystem_device={rd('subsystem_device')} "
                f'current_link_speed="{rd("current_link_speed")}" '
                f"current_link_width={rd('current_link_width')} "
                f'max_link_speed="{rd("max_link_speed")}" max_link_width={rd("max_link_width")} '
                f"numa_node={rd('numa_node')} driver={driver}"
            )
        return "".join(line + "\n" for line in lines)

    def raw(self) -> dict[str, str]:
        """Everything the probe would capture on this host, by fixture file name."""
        raw: dict[str, str] = {"sysfs-pci-devices.txt": self.sysfs_lines() + "# exit=0\n"}
        version = self.root / "proc/driver/nvidia/version"
        if version.exists():
            raw["proc-driver-nvidia-version.txt"] = version.read_text() + "# exit=0\n"
            info = ""
            for f in sorted((self.root / "proc/driver/nvidia/gpus").glob("*/information")):
                info += f"== /proc/driver/nvidia/gpus/{f.parent.name}\n{f.read_text()}"
            raw["proc-driver-nvidia-gpus-information.txt"] = info + "# exit=0\n"
        modules = self.root / "proc/modules"
        if modules.exists():
            raw["lsmod.txt"] = modules.read_text() + "# exit=0\n"
        log = "".join(
            line + "\n"
            for line in self.dmesg().out.splitlines()
            if any(w in line.lower() for w in ("nvidia", "nvrm", "xid", "nvswitch"))
        )
        raw["dmesg-nvidia.txt"] = log + "# exit=0\n"
        if (self.root / "usr/local/bin/nvidia-smi").is_symlink():
            for name, argv in SMI_CAPTURES.items():
                raw[name] = self.smi(*argv).captured
        infiniband = self.root / "sys/class/infiniband"
        if infiniband.is_dir():  # as probe.sh's infiniband_vpd does
            marks = "".join(
                f"{vpd.parent.parent.name} {'SW_MNG' if b'SW_MNG' in vpd.read_bytes() else '-'}\n"
                for vpd in sorted(infiniband.glob("*/device/vpd"))
            )
            raw["infiniband-vpd.txt"] = marks + "# exit=0\n"
        raw["gpusim.txt"] = (self.root / "etc/gpusim/profile.yaml").read_text() + "# exit=0\n"
        return raw
