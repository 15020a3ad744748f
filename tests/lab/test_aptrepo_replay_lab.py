"""The Ubuntu replays (tests/lab/aptrepo/graphs.py) resolved by REAL apt inside a lab host
(`apt-get install --simulate` with its own apt state: aptrepo.replay.simulate over the lab's
SSH). Ubuntu cannot boot here; the package graphs of NVIDIA's ubuntu2404 CUDA repository and
Canonical's noble archive are replayed from tests/recorded/reference/packages.yaml.

One known-good Canonical combination resolves (userspace, the prebuilt module package of the
running -aws kernel and the multiverse fabric manager, all at one upstream version), and the
combinations the reference's exact couplings forbid are refused by apt itself. Runs in the
session lab, or in a running lab named by GPUPROV_REPLAY_LAB (Debian 12 host). No converge,
no download: about 10-20 s.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from aptrepo.graphs import canonical_version, kernels
from aptrepo.packages import pinning_preferences
from aptrepo.replay import SimResult, lab_runner, simulate

from orchestrator.lab.running import RunningLab

pytestmark = pytest.mark.lab

BRANCH = "580"
NEW, OLD = "580.126.09", "580.95.05"  # selection.yaml replay.canonical.580 (-aws / -generic)


@pytest.fixture(scope="module")
def sim(running_or_session_lab: Callable[[str], RunningLab]) -> Callable[..., SimResult]:
    lab = running_or_session_lab("GPUPROV_REPLAY_LAB")
    runner = lab_runner(lab, lab.host_for("debian12"))

    def run(*install: str, **kwargs: object) -> SimResult:
        return simulate("ubuntu2404", install=list(install), runner=runner, **kwargs)  # type: ignore[arg-type]

    return run


def _userspace(upstream: str) -> list[str]:
    version = canonical_version(upstream, "24.04")
    names = [
        f"nvidia-headless-no-dkms-{BRANCH}-server-open",
        f"nvidia-utils-{BRANCH}-server",
        f"libnvidia-compute-{BRANCH}-server",
    ]
    return [f"{name}={version}" for name in names]


def _modules(flavour: str) -> str:
    return f"linux-modules-nvidia-{BRANCH}-server-open-{kernels()[flavour]['abi']}-{flavour}"


def test_canonical_userspace_prebuilt_module_and_fabric_manager_resolve(
    sim: Callable[..., SimResult],
) -> None:
    version = canonical_version(NEW, "24.04")
    result = sim(
        *_userspace(NEW),
        _modules("aws"),
        f"nvidia-fabricmanager-{BRANCH}={version}",
        repos=["canonical"],
    )
    assert result.ok, result.output
    assert result.installs[f"nvidia-kernel-common-{BRANCH}-server"] == version
    assert result.installs[f"nvidia-fabricmanager-{BRANCH}"] == version
    assert f"linux-signatures-nvidia-{kernels()['aws']['abi']}-aws" in result.installs


def test_a_userspace_newer_than_the_prebuilt_module_is_refused(
    sim: Callable[..., SimResult],
) -> None:
    # The -generic ABI package was built against 580.95.05: '(<= 580.95.05-1), (>= 580.95.05)'.
    result = sim(*_userspace(NEW), _modules("generic"), repos=["canonical"])
    assert not result.ok
    assert f"nvidia-kernel-common-{BRANCH}-server (<= {OLD}-1)" in result.error
    # At the module's release it resolves, with every NVIDIA package pinned to that release as
    # the driver role pins them (apt takes only candidate versions for dependencies).
    pins = f"Package: *nvidia*\nPin: version {OLD}-*\nPin-Priority: 1001\n"
    older = sim(*_userspace(OLD), _modules("generic"), repos=["canonical"], pins=pins)
    assert older.ok, older.output
    assert older.installs[f"nvidia-kernel-common-{BRANCH}-server"].startswith(f"{OLD}-")


def test_canonical_fabric_manager_of_another_release_is_refused(
    sim: Callable[..., SimResult],
) -> None:
    # It depends on the virtual nvidia-kernel-common-580-server-580.95.05, which only the
    # kernel-common of that very release provides (LP#2129682).
    result = sim(
        *_userspace(NEW),
        f"nvidia-fabricmanager-{BRANCH}={canonical_version(OLD, '24.04')}",
        repos=["canonical"],
    )
    assert not result.ok
    assert f"nvidia-kernel-common-{BRANCH}-server-{OLD}" in result.error


def test_cuda_repository_fabric_manager_follows_the_580_rename(
    sim: Callable[..., SimResult],
) -> None:
    cuda = sim(
        f"nvidia-headless-{BRANCH}-open", "nvidia-fabricmanager", "libnvidia-nscq", repos=["cuda"]
    )
    assert cuda.ok, cuda.output
    # Unsuffixed from 580 on, so without a pinning package apt takes the newest branch's.
    assert cuda.installs["nvidia-fabricmanager"].startswith("595.")
    pins = pinning_preferences(["nvidia-fabricmanager", "libnvidia-nscq"], f"{BRANCH}.*")
    pinned = sim(
        f"nvidia-headless-{BRANCH}-open",
        "nvidia-fabricmanager",
        "libnvidia-nscq",
        repos=["cuda"],
        pins=pins,
    )
    assert pinned.ok, pinned.output
    assert pinned.installs["nvidia-fabricmanager"].startswith(f"{BRANCH}.")
    assert pinned.installs["nvidia-fabricmanager"] == pinned.installs["libnvidia-nscq"]
    old_name = sim(f"nvidia-fabricmanager-{BRANCH}", repos=["cuda"])
    assert not old_name.ok  # NVIDIA publishes no nvidia-fabricmanager-580
