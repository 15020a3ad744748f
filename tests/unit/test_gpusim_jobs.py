"""Simulated GPU compute processes: listed by --query-compute-apps while they live."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab" / "gpusim"))

from gpusim.testing import SimHost

GPUSIM_BIN = Path(__file__).resolve().parents[1] / "lab" / "gpusim" / "bin" / "gpusim"


@pytest.fixture
def loaded(tmp_path: Path) -> SimHost:
    host = SimHost.create(tmp_path, "p5.48xlarge")
    host.boot()
    host.install_driver("535.309.01", "proprietary", module_name="nvidia-current.ko")
    assert host.modprobe("nvidia").code == 0
    return host


def test_no_processes_prints_only_the_header(loaded: SimHost) -> None:
    run = loaded.smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv")
    assert run.code == 0
    assert run.out == "pid, process_name, used_gpu_memory [MiB]\n"
    quiet = loaded.smi("--query-compute-apps=pid", "--format=csv,noheader")
    assert (quiet.code, quiet.out) == (0, "")


def test_a_running_job_is_listed_until_it_ends(loaded: SimHost) -> None:
    env = {**os.environ, "GPUSIM_ROOT": str(loaded.root)}
    job = subprocess.Popen(
        [sys.executable, str(GPUSIM_BIN), "job", "30", "--gpu", "3", "--name", "train.py"],
        env=env,
    )
    try:
        for _ in range(50):
            listed = loaded.smi("--query-compute-apps=pid,process_name,gpu_bus_id",
                                "--format=csv,noheader")  # fmt: skip
            if listed.out:
                break
            time.sleep(0.1)
        pid, name, bus = listed.out.strip().split(", ")
        assert (int(pid), name) == (job.pid, "train.py")
        gpu3 = loaded.smi("--query-gpu=pci.bus_id", "--format=csv,noheader", "-i", "3")
        assert bus == gpu3.out.strip()
    finally:
        job.kill()
        job.wait()
    gone = loaded.smi("--query-compute-apps=pid", "--format=csv,noheader")
    assert gone.out == ""


def test_unknown_field_is_refused_like_the_real_tool(loaded: SimHost) -> None:
    run = loaded.smi("--query-compute-apps=pid,bogus", "--format=csv")
    assert run.code == 2 and 'Field "bogus" is not a valid field to query.' in run.err
