"""The all-reduce judgment on real sweeps: nccl-tests' output and our payload's, 2x H200."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from orchestrator.catalog import ValidationFigure, default_catalog
from orchestrator.parsers.nccl_tests import parse_nccl_tests
from orchestrator.validate import nccl

SHARED = Path(__file__).resolve().parents[2] / "tests" / "recorded"
REAL = SHARED / "fixtures" / "real" / "h200x2-ubuntu2404-580"
DEVICE_RUN = Path(__file__).resolve().parent / "data" / "gpucheck-h200x2-device.json"
H200 = default_catalog().gpu(0x2335)
FRACTION = default_catalog().validation_floor_fraction


def nccl_tests_text() -> str:
    return (REAL / "nccl-tests-all_reduce_perf.txt").read_text()


def payload_points() -> tuple[nccl.SweepPoint, ...]:
    return nccl.points_from_payload(json.loads(DEVICE_RUN.read_text())["sweep"])


def figures(ranks: int = 2, nvls: bool = False) -> tuple[ValidationFigure, ...]:
    return nccl.floor_figures(H200, ranks, nvls)


def test_busbw_definition() -> None:
    assert nccl.busbw(100.0, 2) == pytest.approx(100.0)
    assert nccl.busbw(100.0, 8) == pytest.approx(175.0)


def test_h200_two_gpu_floors_come_from_the_catalog() -> None:
    figs = nccl.floor_figures(H200, 2, nvls=False)
    assert sorted((f.message_bytes, f.limit(FRACTION)) for f in figs) == [
        (1 << 30, pytest.approx(297.36)),
        (4 << 30, pytest.approx(309.51)),
    ]
    assert nccl.sweep_max_bytes(figs) == 4 << 30
    assert nccl.sweep_max_bytes(nccl.floor_figures(H200, 8, nvls=True)) == 16 << 30


def test_real_nccl_tests_output_passes() -> None:
    result = parse_nccl_tests(nccl_tests_text())
    out = nccl.check_nccl_tests(result, 2, nccl.floor_figures(H200, 2, False), FRACTION, host="h")
    assert [(r.name, r.status, r.value) for r in out] == [
        ("nccl_allreduce_values", "pass", 0),
        ("nccl_allreduce_1GiB", "pass", 330.38),
        ("nccl_allreduce_4GiB", "pass", 343.86),
    ]


def test_real_payload_sweep_passes_and_is_within_5_percent_of_nccl_tests() -> None:
    points = payload_points()
    out = nccl.check_allreduce(
        points, 2, nccl.floor_figures(H200, 2, False), FRACTION, host="h", source="torch"
    )
    assert {r.status for r in out} == {"pass"}
    reference = {
        p.bytes: p for p in nccl.points_from_nccl_tests(parse_nccl_tests(nccl_tests_text()))
    }
    for p in points:
        if p.bytes >= nccl.GIB:
            assert p.busbw == pytest.approx(reference[p.bytes].busbw, rel=0.05)


def test_slow_link_fails_with_the_floor_and_a_fix() -> None:
    points = tuple(dataclasses.replace(p, busbw=p.busbw / 2) for p in payload_points())
    out = nccl.check_allreduce(
        points, 2, nccl.floor_figures(H200, 2, False), FRACTION, host="h", source="torch"
    )
    slow = [r for r in out if r.status == "fail"]
    assert [r.name for r in slow] == ["nccl_allreduce_1GiB", "nccl_allreduce_4GiB"]
    assert "below the floor 309.51" in slow[1].diagnosis
    assert "nvlink" in slow[1].diagnosis


def test_wrong_values_fail_even_when_fast() -> None:
    points = list(payload_points())
    points[0] = dataclasses.replace(points[0], wrong=12)
    out = nccl.check_allreduce(
        points, 2, nccl.floor_figures(H200, 2, False), FRACTION, host="h", source="torch"
    )
    assert out[0].name == "nccl_allreduce_values"
    assert (out[0].status, out[0].value) == ("fail", 12)


def test_nccl_tests_cut_short_or_out_of_bounds_fails() -> None:
    text = nccl_tests_text()
    cut = text.split("# Out of bounds")[0]
    out = nccl.check_nccl_tests(parse_nccl_tests(cut), 2, figures(), FRACTION, host="h")
    assert ("nccl_tests_complete", "fail") in [(r.name, r.status) for r in out]
    bad = text.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 4 FAILED")
    out = nccl.check_nccl_tests(parse_nccl_tests(bad), 2, figures(), FRACTION, host="h")
    last = out[-1]
    assert (last.name, last.status, last.value) == ("nccl_tests_complete", "fail", 4)


def test_no_floor_for_this_count_warns_never_passes() -> None:
    out = nccl.check_allreduce(payload_points(), 4, (), FRACTION, host="h", source="torch")
    assert out[-1].status == "warn"
    assert "no all-reduce floor" in out[-1].diagnosis


def test_sweep_below_1_gib_cannot_pass() -> None:
    small = tuple(p for p in payload_points() if p.bytes < nccl.GIB)
    out = nccl.check_allreduce(small, 2, figures(), FRACTION, host="h", source="torch")
    assert out[-1].status == "fail"
    assert "below 1 GiB" in out[-1].diagnosis


def test_nccl_tests_command_keeps_multicast_off() -> None:
    cmd = nccl.nccl_tests_command(8, 16 << 30)
    assert cmd.startswith("env NCCL_NVLS_ENABLE=0 ")
    assert "-g 8" in cmd
    assert "-c 1" in cmd
