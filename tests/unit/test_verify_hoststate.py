"""The verify suite's own host readers, against real shapes: the PCI bus of the lent H200
machine (2026-12-01: `0000:00:06.0 vendor=0x10de device=0x2335 class=0x030200`, the only
NVIDIA function; docs/device.md). The kernels section the suite cuts from the probe:
tests/unit/test_kernels.py::test_the_probe_section_runs_under_posix_sh."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.verify.suite import hoststate


@dataclass
class _Out:
    stdout: str
    rc: int = 0


class _Host:
    """A testinfra host whose one command is the bus read `sysfs_gpu_count` makes."""

    def __init__(self, stdout: str) -> None:
        self.stdout = stdout

    def run(self, command: str, *args: object) -> _Out:
        assert "grep -H . -- */vendor */class" in command
        return _Out(self.stdout)


# what `cd /sys/bus/pci/devices && grep -H . -- */vendor */class` prints on such a host
H200_BUS = (
    "0000:00:00.0/vendor:0x8086\n"
    "0000:00:06.0/vendor:0x10de\n"
    "0000:00:00.0/class:0x060000\n"
    "0000:00:06.0/class:0x030200\n"
)


def test_the_gpu_on_a_real_bus_is_counted() -> None:
    """Failed on the H200 (verify said "0 are on the PCI bus"): the address's colons."""
    assert hoststate.sysfs_gpu_count(_Host(H200_BUS)) == 1


def test_nvidia_functions_that_are_no_display_controller_are_not_counted() -> None:
    bus = H200_BUS + "0000:07:00.0/vendor:0x10de\n0000:07:00.0/class:0x068000\n"  # NVSwitch
    assert hoststate.sysfs_gpu_count(_Host(bus)) == 1
