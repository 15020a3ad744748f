"""The hook that serves the test-double apt repository for the lab (a stand-in package
replaces tests/lab/aptrepo here, so the hook is tested on its own)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.errors import LabError
from orchestrator.lab import doubles

STAND_IN = """
from pathlib import Path

def ensure_served(state_dir: Path, *, network: str):
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "served").write_text(network)
    if (state_dir / "broken").exists():
        raise RuntimeError("port 8089 taken")
    return "http://10.213.7.1:8089"

def lab_policy(repo):
    return {"nvidia_container_toolkit_repo_key_url": repo + "/gpgkey", "docker_source": "distro"}

def stop(state_dir: Path, network: str):
    served = state_dir / "served"
    if served.exists() and served.read_text() == network:
        served.unlink()
        return True
    return False
"""


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    package = tmp_path / "lab" / "aptrepo_standin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(STAND_IN)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "aptrepo_standin", raising=False)
    return package


def test_serves_and_returns_the_repository_variables(stand_in: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    variables = doubles.serve(stand_in, state, "gpuprov-lab-a")
    assert variables == {
        "nvidia_container_toolkit_repo_key_url": "http://10.213.7.1:8089/gpgkey",
        "docker_source": "distro",
    }
    assert (state / "served").read_text() == "gpuprov-lab-a"  # the lab's own network
    assert doubles.stop(stand_in, state, "gpuprov-lab-b") is False
    assert doubles.stop(stand_in, state, "gpuprov-lab-a") is True
    assert doubles.stop(stand_in, state, "gpuprov-lab-a") is False


def test_the_lab_keeps_its_own_policy_over_the_repository(stand_in: Path, tmp_path: Path) -> None:
    variables = doubles.serve(stand_in, tmp_path / "state", "gpuprov-lab-a")
    assert variables is not None
    kept, dropped = doubles.split_owned(variables)
    assert dropped == ["docker_source"]
    assert kept == {"nvidia_container_toolkit_repo_key_url": "http://10.213.7.1:8089/gpgkey"}


def test_a_failing_server_is_a_lab_error_naming_its_log(stand_in: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "broken").touch()
    with pytest.raises(LabError, match="port 8089 taken") as err:
        doubles.serve(stand_in, state, "gpuprov-lab-a")
    assert err.value.fix is not None and str(state / "server-gpuprov-lab-a.log") in err.value.fix


def test_without_the_repository_code_there_is_nothing_to_serve(tmp_path: Path) -> None:
    assert doubles.serve(tmp_path / "absent", tmp_path / "state", "gpuprov-lab-a") is None
    assert doubles.stop(tmp_path / "absent", tmp_path / "state", "gpuprov-lab-a") is False


def test_the_real_repository_code_offers_the_hook_api() -> None:
    # The lab imports tests/lab/aptrepo through this hook: its entry points and the variables
    # the lab inventory needs (labinventory.DRIVER_FROM_DOUBLES) must stay.
    from orchestrator.lab.hosts import APTREPO_DIR

    aptrepo = doubles._module(APTREPO_DIR)
    assert aptrepo is not None
    for name in ("ensure_served", "lab_policy", "stop"):
        assert callable(getattr(aptrepo, name))
    served = aptrepo.ServedRepo(
        "http://10.213.7.1:8089",
        "0" * 40,
        1,
        "libnvidia-container/stable/deb/amd64",
        ("compute/cuda/repos/debian12/x86_64", "compute/cuda/repos/debian13/x86_64"),
    )
    policy = aptrepo.lab_policy(served)
    assert policy["gpuprov_lab_repo_key_url"] == "http://10.213.7.1:8089/gpgkey"
    # NVIDIA's URL layout: https://developer.download.nvidia.com/compute/cuda/repos/<os>/x86_64/
    assert str(policy["gpuprov_lab_cuda_repo_url"]).startswith(
        "http://10.213.7.1:8089/compute/cuda/repos/"
    )
    assert served.cuda_url("debian13").endswith("/compute/cuda/repos/debian13/x86_64")
    assert policy["nvidia_container_toolkit_repo_base_url"] == (
        "http://10.213.7.1:8089/libnvidia-container/stable"
    )


def test_the_toolkit_key_check_expects_the_repository_key(stand_in: Path, tmp_path: Path) -> None:
    """A served repository with a fingerprint (the real aptrepo's ServedRepo): the toolkit
    role's key check is told the throwaway key's fingerprint."""
    code = (stand_in / "__init__.py").read_text()
    code = code.replace(
        'return "http://10.213.7.1:8089"',
        'return type("Repo", (str,), {"fingerprint": "AB" * 20})("http://10.213.7.1:8089")',
    )
    (stand_in / "__init__.py").write_text(code)
    variables = doubles.serve(stand_in, tmp_path / "state", "gpuprov-lab-a")
    assert variables is not None
    assert variables["nvidia_container_toolkit_repo_key_fingerprint"] == "AB" * 20
