"""verify's every-installed-kernel check against the real kernels capture of the lent H200 VM.

That guest has no kernel on its disk (no /boot, no /lib/modules): its kernel and driver come
from outside it, so no boot can lose the module; the check skips with that reason instead of
failing the host (it failed there on 2026-12-01 before this test).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.parsers.driver_version import parse_nvrm_line
from orchestrator.verify.expect import expectation_from_vars
from orchestrator.verify.suite import hoststate
from orchestrator.verify.suite import test_kernels as suite_kernels

DEVICE = Path(__file__).resolve().parent / "data" / "device-h200x1-20261201"


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str = ""


class KernelsHost:
    """Answers the kernels probe with a recorded output (its `# exit=N` trailer removed)."""

    def __init__(self, kernels: str) -> None:
        self.kernels = kernels

    def run(self, command: str, *args: Any) -> Result:
        lines = self.kernels.splitlines(True)
        return Result(0, "".join(line for line in lines if not line.startswith("# exit=")))


def _expect() -> Any:
    variables = {"gpuprov_roles": ["nvidia_driver"], "nvidia_driver_version": ""}
    return expectation_from_vars("h200-device", variables)


def test_a_guest_without_installed_kernels_skips_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hoststate, "driver_record", lambda host, path: None)
    nvrm = (DEVICE / "proc-driver-nvidia-version.txt").read_text().splitlines()[0]
    loaded = parse_nvrm_line(nvrm)
    monkeypatch.setattr(hoststate, "loaded_driver", lambda host: loaded)
    host = KernelsHost((DEVICE / "kernels.txt").read_text())
    with pytest.raises(pytest.skip.Exception, match="no kernel is installed on this host's disk"):
        suite_kernels.test_every_installed_kernel_has_the_module(host, _expect())
