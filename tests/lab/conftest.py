"""Session fixtures for lab tests: one Debian 12 and one Debian 13 test host.

`lab` brings the hosts up once per session (lab name `pytest`, profile `p5.48xlarge`) and
removes them at the end; it yields an `orchestrator.lab.running.RunningLab` (inventory,
hosts, `ssh()`). GPUPROV_LAB_KEEP=1 reuses a running `pytest` lab and leaves it running,
for fast local iteration (`provision lab down --name pytest` cleans up).
The GPUs on these hosts are simulated (tests/lab/gpusim).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from orchestrator.lab import hosts
from orchestrator.lab.running import RunningLab, attach

LAB_NAME = "pytest"
LAB_PROFILE = "p5.48xlarge"
LAB_OSES = ("debian12", "debian13")


@pytest.fixture(scope="session")
def lab() -> Iterator[RunningLab]:
    keep = os.environ.get("GPUPROV_LAB_KEEP") == "1"
    if not keep:
        hosts.down(LAB_NAME)  # a clean lab: nothing left from an earlier, interrupted run
    for os_name in LAB_OSES:
        hosts.up(LAB_NAME, LAB_PROFILE, 1, os_name, say=lambda _: None)
    yield attach(LAB_NAME, LAB_PROFILE)
    if not keep:
        hosts.down(LAB_NAME)
