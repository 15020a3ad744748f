"""Fabric status and ECC/row-remap limits as strict as Azure's aznhc, on variants of the real
2x H200 `nvidia-smi -q` (one GPU's block edited)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.catalog import default_catalog
from orchestrator.factsdir import load_host
from orchestrator.parsers import names, parse_host
from orchestrator.result import CheckResult
from orchestrator.validate.health import health_input, load_limits, run_health

REAL = Path(__file__).resolve().parents[2] / "tests/recorded/fixtures/real/h200x2-ubuntu2404-580"


def edited(edit: Callable[[str], str], gpu: str = "00:07.0") -> dict[str, str]:
    raw = dict(load_host(REAL))
    parts = re.split(r"(?m)^(?=GPU 00000000:)", raw[names.SMI_Q])
    raw[names.SMI_Q] = "".join(edit(p) if p.startswith(f"GPU 00000000:{gpu}") else p for p in parts)
    return raw


def results(raw: dict[str, str], name: str) -> list[CheckResult]:
    facts = parse_host("h200", raw)
    out = run_health(health_input(facts, default_catalog(), expected_gpus=2))
    return [r for r in out if r.name == name]


def counter(section: str, key: str, value: int) -> Callable[[str], str]:
    """Set `key` in the Volatile or Aggregate part of ECC Errors."""

    def edit(block: str) -> str:
        head, sep, rest = block.partition(f"        {section}\n")
        assert sep, section
        return head + sep + re.sub(rf"({re.escape(key)}\s+: )\d+", rf"\g<1>{value}", rest, count=1)

    return edit


def test_the_real_host_passes_the_strict_limits() -> None:
    raw = dict(load_host(REAL))
    assert {r.status for r in results(raw, "ecc_uncorrectable")} == {"pass"}
    assert {r.status for r in results(raw, "row_remap")} == {"pass"}
    assert [r.status for r in results(raw, "fabric_state")] == ["pass"]


def test_the_limits_are_azures() -> None:
    lim = load_limits()
    assert (lim.ecc_sram_correctable_max, lim.ecc_dram_max, lim.row_remap_uncorrectable_max) == (
        10000,
        20000000,
        512,
    )
    assert lim.payload_deadline_margin_s < lim.payload_timeout_s


def test_fabric_completed_with_an_error_status_fails() -> None:
    raw = edited(
        lambda b: b.replace(
            "Status                                         : Success",
            "Status                                         : Failure",
        )
    )
    (r,) = results(raw, "fabric_state")
    assert r.status == "fail" and r.value == "Completed, Failure"
    assert "GPU 1 (0000:00:07.0): Failure" in r.diagnosis


def test_aggregate_sram_uncorrectable_fails_even_when_volatile_is_clean() -> None:
    raw = edited(counter("Aggregate", "SRAM Uncorrectable SEC-DED", 1))
    r = next(x for x in results(raw, "ecc_uncorrectable") if x.gpu == 1)
    assert r.status == "fail" and r.unit == "SRAM errors" and "aggregate" in r.diagnosis


@pytest.mark.parametrize(("count", "status"), [(10000, "pass"), (10001, "fail")])
def test_sram_correctable_above_10000_fails(count: int, status: str) -> None:
    raw = edited(counter("Aggregate", "SRAM Correctable", count))
    r = next(x for x in results(raw, "ecc_uncorrectable") if x.gpu == 1)
    assert r.status == status
    if status == "fail":
        assert r.limit == 10000 and "RMA" in r.diagnosis


@pytest.mark.parametrize(("count", "status"), [(20000000, "pass"), (20000001, "fail")])
def test_dram_correctable_above_20_million_fails(count: int, status: str) -> None:
    raw = edited(counter("Volatile", "DRAM Correctable", count))
    r = next(x for x in results(raw, "ecc_uncorrectable") if x.gpu == 1)
    assert r.status == status


def test_a_few_dram_uncorrectable_warn() -> None:
    raw = edited(counter("Volatile", "DRAM Uncorrectable", 3))
    r = next(x for x in results(raw, "ecc_uncorrectable") if x.gpu == 1)
    assert r.status == "warn" and r.value == 3


@pytest.mark.parametrize(("rows", "status"), [(512, "pass"), (513, "fail")])
def test_rows_remapped_for_uncorrectable_errors_above_512_fail(rows: int, status: str) -> None:
    def edit(block: str) -> str:
        head, sep, rest = block.partition("    Remapped Rows\n")
        return (
            head
            + sep
            + re.sub(r"(        Uncorrectable Error\s+: )\d+", rf"\g<1>{rows}", rest, count=1)
        )

    r = next(x for x in results(edited(edit), "row_remap") if x.gpu == 1)
    assert r.status == status
