"""The driver role's NVLink5 path (HGX B200/B300), from its own files: mlx5_ib and ib_umad are
loaded (now and at every boot) before the role waits for the SW_MNG ports, and only NVIDIA's
subnet manager is held, not the distribution's RDMA tools (infiniband-diags keeps its
security updates). The simulated modules (tests/lab/gpusim) load as the role asks."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "nvidia_driver"
sys.path.insert(0, str(REPO / "tests" / "lab" / "gpusim"))
from gpusim import nvlink5  # noqa: E402


def _vars() -> dict[str, object]:
    data = yaml.safe_load((ROLE / "vars" / "nvlink5.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_only_the_subnet_manager_is_held() -> None:
    data = _vars()
    held = data["__nvidia_driver_nvlink5_held"]
    installed = data["__nvidia_driver_nvlink5_packages"]
    assert isinstance(held, dict) and isinstance(installed, dict)
    assert held["apt"] == ["nvlsm"]
    assert "infiniband-diags" in installed["apt"]  # installed, as NVIDIA's scripts do
    assert "infiniband-diags" not in held["apt"]


def test_the_rdma_modules_load_before_the_wait_for_the_ports() -> None:
    assert _vars()["__nvidia_driver_nvlink5_load"] == ["mlx5_ib", "ib_umad"]
    tasks = yaml.safe_load((ROLE / "tasks" / "nvlink5.yml").read_text())
    names = [t["name"] for t in tasks]
    load = names.index("Load mlx5_ib and ib_umad now")
    boot = names.index("Load mlx5_ib and ib_umad at every boot")
    wait = names.index("Wait for the NVLink5 prerequisites and the SW_MNG management port")
    assert boot < wait and load < wait
    hold = next(t for t in tasks if t["name"] == "Hold the NVLink subnet manager packages")
    assert hold["loop"] == "{{ __nvidia_driver_nvlink5_held.apt }}"


def test_the_simulator_knows_both_modules() -> None:
    assert nvlink5.canonical("mlx5_ib") == "mlx5_ib"
    assert nvlink5.canonical("ib-umad") == "ib_umad"
    assert nvlink5.PRECHECK == ("mlx5_core", "ib_umad")
