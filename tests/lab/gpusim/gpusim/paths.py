"""Where the simulator reads and writes: real system paths, or under GPUSIM_ROOT for tests."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Paths:
    root: Path  # "/" on a lab host

    @classmethod
    def from_env(cls) -> Paths:
        return cls(Path(os.environ.get("GPUSIM_ROOT", "/")))

    @property
    def simulated_root(self) -> bool:
        """True under a test root: write files instead of mounting over /proc."""
        return self.root != Path("/")

    def at(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    @property
    def profile(self) -> Path:
        override = os.environ.get("GPUSIM_PROFILE")
        return Path(override) if override else self.at("/etc/gpusim/profile.yaml")

    @property
    def state_dir(self) -> Path:
        return self.at("/var/lib/gpusim")

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def kernel_release_file(self) -> Path:
        return self.state_dir / "kernel-release"

    @property
    def pci_devices(self) -> Path:
        return self.at("/sys/bus/pci/devices")

    @property
    def proc_driver(self) -> Path:
        return self.at("/proc/driver")

    @property
    def proc_modules(self) -> Path:
        return self.at("/proc/modules")

    @property
    def run_dir(self) -> Path:
        return self.at("/run/gpusim")

    @property
    def lib_modules(self) -> Path:
        return self.at("/lib/modules")

    @property
    def dkms(self) -> Path:
        return self.at("/var/lib/dkms")
