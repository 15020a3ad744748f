"""MIG on the simulator: modes (immediate on H200, pending until reset on A100), GPU and
compute instances with the real profile ids and placement rules, state across reboots."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.parsers.mig import parse_lci, parse_lgi, parse_lgip
from orchestrator.parsers.smi_list import parse_smi_list
from orchestrator.parsers.smi_q import parse_smi_q
from orchestrator.parsers.smi_query_gpu import parse_query_gpu

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lab" / "gpusim"))
from gpusim.testing import SMI_CAPTURES, SimHost  # noqa: E402


def booted(tmp_path: Path, profile: str) -> SimHost:
    host = SimHost.create(tmp_path, profile)
    host.install_driver()
    host.boot()
    return host


@pytest.fixture
def h200(tmp_path: Path) -> SimHost:
    return booted(tmp_path, "h200x2-fixture")


def mig_modes(host: SimHost) -> list[tuple[str | None, str | None]]:
    run = host.smi(*SMI_CAPTURES["nvidia-smi-query-gpu.csv"])
    return [(g.mig_mode_current, g.mig_mode_pending) for g in parse_query_gpu(run.captured)]


def test_h200_mig_mode_applies_at_once(h200: SimHost) -> None:
    run = h200.smi("-i", "0", "-mig", "1")
    assert run.code == 0
    assert run.out == "Enabled MIG Mode for GPU 00000000:00:06.0\nAll done.\n"
    assert mig_modes(h200) == [("Enabled", "Enabled"), ("Disabled", "Disabled")]
    gpus = parse_smi_q(h200.smi("-q").captured).gpus
    assert (gpus[0].mig_mode_current, gpus[1].mig_mode_current) == ("Enabled", "Disabled")


def test_mig_listings_before_any_instance(h200: SimHost) -> None:
    assert h200.smi("mig", "-lgi").out == "No MIG-enabled devices found.\n"
    h200.smi("-mig", "1")
    assert h200.smi("mig", "-lgi").err == ""
    assert parse_lgi(h200.smi("mig", "-lgi").captured) == ()


def test_gpu_and_compute_instances_follow_the_placement_rules(h200: SimHost) -> None:
    h200.smi("-i", "0", "-mig", "1")
    run = h200.smi("mig", "-i", "0", "-cgi", "9,3g.71gb", "-C")
    assert run.code == 0, run.err
    assert run.out.splitlines() == [
        "Successfully created GPU instance ID  1 on GPU  0 using profile MIG 3g.71gb (ID  9)",
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  1 using profile"
        " MIG 3g.71gb (ID  2)",
        "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.71gb (ID  9)",
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 using profile"
        " MIG 3g.71gb (ID  2)",
    ]
    gis = parse_lgi(h200.smi("mig", "-lgi").captured)
    assert [(g.gpu, g.profile_id, g.instance_id, g.start, g.size) for g in gis] == [
        (0, 9, 1, 0, 4),
        (0, 9, 2, 4, 4),
    ]
    cis = parse_lci(h200.smi("mig", "-lci").captured)
    assert [(c.gpu_instance_id, c.instance_id, c.profile_id, c.size) for c in cis] == [
        (1, 0, 2, 3),
        (2, 0, 2, 3),
    ]
    # Both halves of the memory are taken: nothing else fits, and -lgip says so.
    full = h200.smi("mig", "-i", "0", "-cgi", "19")
    assert full.code != 0 and "Insufficient Resources" in full.err
    free = {(r.gpu, r.profile_id): r.free for r in parse_lgip(h200.smi("mig", "-lgip").captured)}
    assert free[(0, 9)] == 0 and free[(0, 19)] == 0 and free[(1, 19)] == 7
    assert "Compute instance profiles:" in h200.smi("mig", "-lcip").captured


def test_seven_1g_instances_fill_the_gpu(h200: SimHost) -> None:
    h200.smi("-i", "1", "-mig", "1")
    run = h200.smi("mig", "-i", "1", "-cgi", ",".join(["19"] * 7))
    assert run.code == 0, run.err
    gis = parse_lgi(h200.smi("mig", "-lgi").captured)
    assert sorted(g.start for g in gis) == [0, 1, 2, 3, 4, 5, 6]
    assert sorted(g.instance_id for g in gis) == [7, 8, 9, 10, 11, 12, 13]
    assert h200.smi("mig", "-i", "1", "-cgi", "19").code != 0


def test_destroy_needs_compute_instances_gone_first(h200: SimHost) -> None:
    h200.smi("-mig", "1")
    h200.smi("mig", "-i", "0", "-cgi", "0", "-C")
    busy = h200.smi("mig", "-i", "0", "-dgi")
    assert busy.code != 0 and "In use by another client" in busy.err
    assert h200.smi("mig", "-i", "0", "-dci").code == 0
    assert h200.smi("mig", "-i", "0", "-dgi").out == (
        "Successfully destroyed GPU instance ID  0 from GPU  0\n"
    )
    assert parse_lgi(h200.smi("mig", "-lgi").captured) == ()


def test_instances_do_not_survive_a_reboot_but_the_mode_does(h200: SimHost) -> None:
    h200.smi("-mig", "1")
    h200.smi("mig", "-cgi", "14", "-C")
    assert len(parse_lgi(h200.smi("mig", "-lgi").captured)) == 2
    h200.boot()
    assert mig_modes(h200) == [("Enabled", "Enabled"), ("Enabled", "Enabled")]
    assert parse_lgi(h200.smi("mig", "-lgi").captured) == ()


def test_a100_mode_change_is_pending_until_reset(tmp_path: Path) -> None:
    a100 = booted(tmp_path, "p4d.24xlarge")
    run = a100.smi("-i", "0", "-mig", "1")
    assert run.code == 0 and "pending enable state" in run.out
    assert mig_modes(a100)[0] == ("Disabled", "Enabled")
    assert a100.smi("mig", "-i", "0", "-cgi", "19").code != 0  # not enabled yet
    assert a100.smi("-i", "0", "-r").code == 0
    assert mig_modes(a100)[0] == ("Enabled", "Enabled")
    run = a100.smi("mig", "-i", "0", "-cgi", "1g.5gb", "-C")
    assert run.code == 0 and "MIG 1g.5gb (ID 19)" in run.out


def test_a100_pending_mode_applies_at_reboot(tmp_path: Path) -> None:
    a100 = booted(tmp_path, "p4d.24xlarge")
    a100.smi("-mig", "1")
    assert mig_modes(a100) == [("Disabled", "Enabled")] * 8
    a100.boot()
    assert mig_modes(a100) == [("Enabled", "Enabled")] * 8


def test_gpu_without_mig_refuses(tmp_path: Path) -> None:
    l40s = booted(tmp_path, "l40s")
    run = l40s.smi("-mig", "1")
    assert "Not Supported" in run.out
    assert mig_modes(l40s) == [(None, None)]
    assert l40s.smi("mig", "-lgip").out == "No MIG-supported devices found.\n"


def test_persistence_mode_is_kept_until_reboot(h200: SimHost) -> None:
    def modes() -> list[str | None]:
        run = h200.smi(*SMI_CAPTURES["nvidia-smi-query-gpu.csv"])
        return [g.persistence_mode for g in parse_query_gpu(run.captured)]

    assert modes() == ["Disabled", "Disabled"]
    assert h200.smi("-pm", "1").out.endswith("All done.\n")
    assert modes() == ["Enabled", "Enabled"]
    h200.boot()
    assert modes() == ["Disabled", "Disabled"]


def test_list_shows_mig_devices_under_their_gpu(h200: SimHost) -> None:
    h200.smi("-i", "0", "-mig", "1")
    h200.smi("mig", "-i", "0", "-cgi", "19,19", "-C")
    lines = h200.smi("-L").out.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("GPU 0: NVIDIA H200 (UUID: GPU-")
    assert lines[1].startswith("  MIG 1g.18gb     Device  0: (UUID: MIG-")
    assert lines[2].startswith("  MIG 1g.18gb     Device  1: (UUID: MIG-")
    assert lines[3].startswith("GPU 1: NVIDIA H200")
    assert [g.index for g in parse_smi_list(h200.smi("-L").captured)] == [0, 1]


def test_nvidia_drm_keeps_the_mig_change_pending(h200: SimHost) -> None:
    assert h200.modprobe("nvidia_drm").code == 0
    run = h200.smi("-i", "0", "-mig", "1")
    assert "pending enable state" in run.out
    assert mig_modes(h200)[0] == ("Disabled", "Enabled")
    # Unloading nvidia_drm takes nvidia_modeset and nvidia with it (modprobe -r); loading
    # the driver again resets the GPU, and the pending mode applies.
    assert h200.modprobe("-r", "nvidia_drm").code == 0
    assert h200.smi("-L").code == 9
    assert h200.modprobe("nvidia").code == 0
    assert mig_modes(h200)[0] == ("Enabled", "Enabled")
