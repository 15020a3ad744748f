"""Floors: every catalog figure says where it comes from (measured here, or a dated public
source); the mission's SKU (H100 SXM) has GEMM, copy, H2D and P2P floors; SKUs without a
source warn ("no floor"), never pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.catalog import default_catalog
from orchestrator.factsdir import load_host
from orchestrator.parsers import names, parse_host
from orchestrator.policy import load_policy
from orchestrator.validate import runner

REAL = Path(__file__).resolve().parents[2] / "tests/recorded/fixtures/real/h200x2-ubuntu2404-580"
CATALOG = default_catalog()
DOCS = Path(__file__).resolve().parents[2] / "docs/validation.md"


def as_sku(device_id: str) -> runner.Target:
    """The real 2x host's outputs with its PCI device id swapped (the planner's view only)."""
    raw = dict(load_host(REAL))
    raw[names.SYSFS_PCI] = raw[names.SYSFS_PCI].replace("device=0x2335", f"device={device_id}")
    return runner.payload_target(parse_host("h", raw), raw, CATALOG, load_policy("h", {}))


def test_every_figure_records_its_origin_and_date() -> None:
    for gpu in CATALOG.gpus:
        for fig in gpu.validation:
            assert fig.origin in ("measured", "sourced"), (gpu.sku, fig.check)
            assert len(fig.date) == 10 and fig.source, (gpu.sku, fig.check)
            if fig.origin == "measured":
                assert "device machine" in fig.source, (gpu.sku, fig.check)


def test_h100_sxm_has_per_gpu_floors() -> None:
    t = as_sku("0x2330")
    assert t.model is not None and t.model.sku == "h100-sxm5-80gb"
    assert t.spec["floors"] == {
        "gemm_bf16_tflops": 715.05,  # 0.9 x 794.5 (MAMF table)
        "gemm_fp8_tflops": 1262.34,  # 0.9 x 1402.6
        "d2d_gbs": 1905.0,  # DCGM's HBM floor (hbm_bandwidth, now read)
        "h2d_gbs": 48.0,  # aznhc
    }
    assert t.p2p_floor is not None and t.p2p_floor.floor == 335.0


def test_h200_keeps_its_measured_floors() -> None:
    t = as_sku("0x2335")
    assert t.spec["floors"]["d2d_gbs"] == 3780.0  # the measured copy figure wins over any HBM floor
    assert t.spec["floors"]["gemm_bf16_tflops"] == 711.0


@pytest.mark.parametrize(
    ("device_id", "missing"), [("0x2331", "gemm_bf16_tflops"), ("0x2321", "d2d_gbs")]
)
def test_skus_without_a_source_have_no_floor_and_the_docs_list_them(
    device_id: str, missing: str
) -> None:
    t = as_sku(device_id)
    assert missing not in t.spec["floors"]
    assert t.model is not None and t.model.model in DOCS.read_text()


def test_no_floor_warns_in_the_payload() -> None:
    from payloadpkg import load_payload

    g = load_payload().results
    assert g.at_least("gemm_bf16", 700.0, None, "TFLOP/s", 0, "x")["status"] == "warn"
    assert g.at_least("gemm_bf16", 700.0, 715.05, "TFLOP/s", 0, "x")["status"] == "fail"
