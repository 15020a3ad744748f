"""Session fixtures for lab tests: one Debian 12 and one Debian 13 test host.

`lab` brings the hosts up once per session (profile `p5.48xlarge`) and removes them at the
end; it yields an `orchestrator.lab.running.RunningLab` (inventory, hosts, `ssh()`). The
lab is named `pytest`, or `pytest-$GPUPROV_LAB` when GPUPROV_LAB is set, so that test runs
of several people on one machine do not remove each other's hosts. GPUPROV_LAB_KEEP=1
reuses a running lab of that name and leaves it running, for fast local iteration
(`provision lab down --name pytest` cleans up).
The GPUs on these hosts are simulated (tests/lab/gpusim).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from orchestrator.lab import hosts
from orchestrator.lab.running import RunningLab, attach

LAB_PROFILE = "p5.48xlarge"
LAB_OSES = ("debian12", "debian13")


def _session_lab_name() -> str:
    own = os.environ.get("GPUPROV_LAB")
    return hosts.lab_name(f"pytest-{own}" if own else "pytest")


@pytest.fixture(scope="session")
def lab() -> Iterator[RunningLab]:
    name = _session_lab_name()
    keep = os.environ.get("GPUPROV_LAB_KEEP") == "1"
    if not keep:
        hosts.down(name)  # a clean lab: nothing left from an earlier, interrupted run
    for os_name in LAB_OSES:
        hosts.up(name, LAB_PROFILE, 1, os_name, say=lambda _: None)
    yield attach(name, LAB_PROFILE)
    if not keep:
        hosts.down(name)


@pytest.fixture(scope="module")
def running_or_session_lab(request: pytest.FixtureRequest) -> Callable[[str], RunningLab]:
    """`pick(VARIABLE)`: the lab named by $VARIABLE when set (already running: Debian 12 + 13
    hosts, profile p5.48xlarge; for iterating without new hosts or builds), else `lab`."""

    def pick(variable: str) -> RunningLab:
        name = os.environ.get(variable)
        if name:
            return attach(name, LAB_PROFILE)
        session: RunningLab = request.getfixturevalue("lab")
        return session

    return pick


@pytest.fixture(scope="session")
def scratch_lab_name() -> Callable[[str], str]:
    """Names for short-lived extra labs of a test, apart from other people's runs."""
    return lambda suffix: hosts.lab_name(f"{_session_lab_name()}-{suffix}")
