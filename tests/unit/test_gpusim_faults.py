"""Each fault knob changes exactly what the real tools would show, as gpuprov parses it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.facts import HostFacts
from orchestrator.parsers import parse_host
from orchestrator.parsers.smi_q import parse_smi_q
from orchestrator.parsers.topo import parse_topo

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lab" / "gpusim"))
from gpusim.testing import SimHost  # noqa: E402


@pytest.fixture
def sim(tmp_path: Path) -> SimHost:
    host = SimHost.create(tmp_path, "h200x2-fixture")
    host.install_driver()
    host.boot()
    return host


def facts(sim: SimHost) -> HostFacts:
    result = parse_host("sim", sim.raw())
    assert result.errors == ()
    return result


def fault(sim: SimHost, *argv: str) -> None:
    run = sim.gpusim("fault", *argv)
    assert run.code == 0, run.err


def test_healthy_baseline(sim: SimHost) -> None:
    f = facts(sim)
    assert len(f.smi_gpus) == len(f.gpus) == 2
    assert f.nvlink_inactive == () and f.xids == ()
    assert not any(d.link.degraded for d in f.gpus)
    assert {g.fabric_state for g in f.smi_gpus} == {"Completed"}


def test_gpu_missing(sim: SimHost) -> None:
    fault(sim, "gpu-missing", "on")
    f = facts(sim)
    assert [d.address for d in f.gpus] == ["0000:00:06.0"]
    assert [g.bus_id for g in f.smi_gpus] == ["0000:00:06.0"]
    assert sim.smi("-L").out.count("GPU ") == 1
    assert not (sim.root / "proc/driver/nvidia/gpus/0000:00:07.0").exists()
    fault(sim, "gpu-missing", "off")
    assert len(facts(sim).gpus) == 2


def test_nvlink_inactive(sim: SimHost) -> None:
    fault(sim, "nvlink-inactive", "on", "--gpu", "1")
    f = facts(sim)
    assert f.nvlink_inactive == tuple((1, link) for link in range(18))
    topo = parse_topo(sim.smi("topo", "-m").captured)
    assert topo.links[("GPU0", "GPU1")] != "NV18"
    fault(sim, "nvlink-inactive", "off", "--gpu", "1")
    assert facts(sim).nvlink_inactive == ()


def test_xid_in_the_kernel_log(sim: SimHost) -> None:
    fault(sim, "xid", "on", "--xid", "48")
    f = facts(sim)
    assert [x.code for x in f.xids] == [48]
    assert "NVRM: Xid (PCI:0000:00:06): 48" in sim.dmesg().out
    fault(sim, "xid", "off")
    assert facts(sim).xids == ()


def test_xid_survives_a_reboot_while_on(sim: SimHost) -> None:
    fault(sim, "xid", "on")
    sim.boot()
    assert [x.code for x in facts(sim).xids] == [79]


def test_row_remap_pending(sim: SimHost) -> None:
    fault(sim, "row-remap-pending", "on")
    gpus = parse_smi_q(sim.smi("-q", "-d", "ECC,ROW_REMAPPER").captured).gpus
    assert [g.row_remap.pending for g in gpus] == [True, False]
    assert gpus[0].ecc_volatile.dram_uncorrectable == 1
    f = facts(sim)
    assert [g.remapped_rows_pending for g in f.smi_gpus] == ["Yes", "No"]
    fault(sim, "row-remap-pending", "off")
    assert [g.remapped_rows_pending for g in facts(sim).smi_gpus] == ["No", "No"]


def test_ecc_display_filter_keeps_only_ecc_sections(sim: SimHost) -> None:
    text = sim.smi("-q", "-d", "ECC,ROW_REMAPPER").out
    assert "Remapped Rows" in text and "ECC Errors" in text
    assert "Product Name" not in text and "Fabric" not in text


def test_pcie_degraded(sim: SimHost) -> None:
    fault(sim, "pcie-degraded", "on", "--gpu", "1")
    f = facts(sim)
    assert [d.link.degraded for d in f.gpus] == [False, True]
    assert f.gpus[1].link.current_speed_gts == 16.0
    assert [g.pcie_gen_current for g in f.smi_gpus] == [5, 4]
    fault(sim, "pcie-degraded", "off", "--gpu", "1")
    assert not any(d.link.degraded for d in facts(sim).gpus)


def test_fabric_not_completed(sim: SimHost) -> None:
    fault(sim, "fabric-not-completed", "on")
    assert {g.fabric_state for g in facts(sim).smi_gpus} == {"Not Started"}
    fault(sim, "fabric-not-completed", "off")
    assert {g.fabric_state for g in facts(sim).smi_gpus} == {"Completed"}


def test_nvswitch_fabric_needs_the_fabric_manager(tmp_path: Path) -> None:
    p5 = SimHost.create(tmp_path, "p5.48xlarge")
    p5.install_driver()
    p5.boot()
    assert {g.fabric_state for g in facts(p5).smi_gpus} == {"Not Started"}
    flag = tmp_path / "run/gpusim/fabricmanager-active"
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.write_text("")
    f = facts(p5)
    assert {g.fabric_state for g in f.smi_gpus} == {"Completed"}
    assert len(f.gpus) == 8 and len(f.nvidia_bridges) == 4


def test_unknown_knob_is_refused(sim: SimHost) -> None:
    assert sim.gpusim("fault", "gpu-missing", "on", "--gpu", "7").code == 2


def test_bin_dmesg_prints_what_the_tool_does_and_clears(sim: SimHost) -> None:
    """bin/dmesg `cat`s the log rendered at every state save: the same lines as tools.dmesg;
    `-C` clears it through the Python tool, and the rendered log follows."""
    import os
    import subprocess

    def dmesg(*argv: str) -> str:
        env = {**os.environ, "GPUSIM_ROOT": str(sim.root)}
        done = subprocess.run(
            [str(REPO / "tests/lab/gpusim/bin/dmesg"), *argv],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    fault(sim, "xid", "on", "--xid", "48")
    full = sim.dmesg().out
    assert "NVRM: Xid (PCI:0000:00:06): 48" in full and "NVRM: loading" in full
    assert dmesg() == full
    (sim.root / "var/lib/gpusim/kernel.log").unlink()  # state from before the rendered log
    assert dmesg() == full
    dmesg("-C")
    assert dmesg() == "" and sim.dmesg().out == ""
