"""The simulated GPUs' state in /var/lib/gpusim/state.json: survives calls and reboots."""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpusim.model import Profile

TYPE_CHECKING = False  # typing costs every gpusim call its import: for mypy only
if TYPE_CHECKING:
    from typing import Any

STATE_VERSION = 1
FAULTS = (
    "gpu-missing",
    "nvlink-inactive",
    "xid",
    "row-remap-pending",
    "pcie-degraded",
    "fabric-not-completed",
    "dcgm-memory-mismatch",
)


@dataclass
class GpuInstance:
    id: int
    profile_id: int
    start: int  # first memory slice


@dataclass
class ComputeInstance:
    gpu_instance: int
    id: int
    profile_id: int
    start: int  # first compute slice inside the GPU instance


@dataclass
class GpuState:
    bus_id: str  # sysfs form, "0000:00:06.0"
    uuid: str
    serial: str
    pdi: str
    module_id: int
    persistence: bool = False
    mig_current: bool = False
    mig_pending: bool = False
    gpu_instances: list[GpuInstance] = field(default_factory=list)
    compute_instances: list[ComputeInstance] = field(default_factory=list)


@dataclass
class KernelLogLine:
    seconds: float  # since the simulated boot
    text: str

    def dmesg(self) -> str:
        """The line as `dmesg` prints it: `[  uptime.micros] text`."""
        return f"[{self.seconds:12.6f}] {self.text}\n"


@dataclass
class State:
    profile: str
    hostname: str
    gpus: list[GpuState]
    boot_count: int = 0
    boot_time: float = 0.0
    driver_loaded: bool = False
    loaded_modules: list[str] = field(default_factory=list)
    loaded_version: str = ""
    loaded_flavour: str = ""
    faults: dict[str, list[int]] = field(default_factory=dict)  # knob -> GPU positions
    xid_codes: dict[str, int] = field(default_factory=dict)  # position -> Xid
    kernel_log: list[KernelLogLine] = field(default_factory=list)
    efa_faults: dict[str, list[int]] = field(default_factory=dict)  # knob -> EFA positions
    ib_faults: dict[str, list[int]] = field(default_factory=dict)  # knob -> HCA positions
    version: int = STATE_VERSION

    def fault(self, name: str, position: int) -> bool:
        return position in self.faults.get(name, [])

    def log(self, text: str, uptime: float | None = None) -> None:
        """Append a kernel-log line stamped like dmesg: seconds since the kernel booted.

        On a lab host that is the real kernel's uptime (the probe ages Xids against
        /proc/uptime); under a test root, seconds since the simulated boot."""
        if uptime is None:
            uptime = max(0.0, time.time() - self.boot_time) if self.boot_time else 0.0
        self.kernel_log.append(KernelLogLine(round(uptime, 6), text))


def _digest(*parts: str) -> str:
    import hashlib  # here: only a new state digests

    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def new_state(profile: Profile, hostname: str) -> State:
    """First-boot state: identities derived from host name and bus id (stable, distinct)."""
    gpus = []
    for position, bus_id in enumerate(profile.gpu_bus_ids):
        h = _digest(hostname, bus_id)
        uuid = f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
        serial = str(1650000000000 + int(h[32:40], 16) % 10000000000)
        gpus.append(
            GpuState(
                bus_id=bus_id, uuid=uuid, serial=serial, pdi=f"0x{h[40:56]}", module_id=position + 1
            )
        )
    return State(profile=profile.name, hostname=hostname, gpus=gpus)


def _from_json(data: dict[str, Any]) -> State:
    gpus = [
        GpuState(
            **{k: v for k, v in g.items() if k not in ("gpu_instances", "compute_instances")},
            gpu_instances=[GpuInstance(**gi) for gi in g.get("gpu_instances", [])],
            compute_instances=[ComputeInstance(**ci) for ci in g.get("compute_instances", [])],
        )
        for g in data["gpus"]
    ]
    rest = {k: v for k, v in data.items() if k not in ("gpus", "kernel_log")}
    log = [KernelLogLine(**line) for line in data.get("kernel_log", [])]
    return State(gpus=gpus, kernel_log=log, **rest)


def load(path: Path) -> State | None:
    try:
        return _from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return None


def kernel_log_file(state_file: Path) -> Path:
    """The kernel log as `dmesg` prints it, rendered beside the state on every save, so that
    bin/dmesg reads it with `cat` (a real dmesg takes milliseconds; Python, tens)."""
    return state_file.with_name("kernel.log")


def save(path: Path, state: State) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    log = kernel_log_file(path)
    tmp = log.with_suffix(".tmp")
    tmp.write_text("".join(line.dmesg() for line in state.kernel_log))
    os.replace(tmp, log)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Serialise read-modify-write of the state between concurrent nvidia-smi calls."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
