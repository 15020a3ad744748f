"""`nvidia-smi mig` listings: the real H200 output and variants derived from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.parsers._text import ParseError
from orchestrator.parsers.mig import (
    ComputeInstanceRow,
    GiPlacementRow,
    GiProfileRow,
    GpuInstanceRow,
    parse_lci,
    parse_lgi,
    parse_lgip,
    parse_lgipp,
)

SHARED = Path(__file__).resolve().parents[2] / "tests" / "recorded"
REAL = SHARED / "fixtures" / "real" / "h200x2-ubuntu2404-580"
DERIVED = Path(__file__).resolve().parent / "fixtures_derived" / "h200x2-mig"


def real(name: str) -> str:
    return (REAL / f"nvidia-smi-mig-{name}.txt").read_text()


def test_lgip_reads_every_profile_of_both_gpus() -> None:
    rows = parse_lgip(real("lgip"))
    assert len(rows) == 14
    assert rows[0] == GiProfileRow(0, "1g.18gb", 19, 7, 7, 16.0)
    assert rows[6] == GiProfileRow(0, "7g.141gb", 0, 1, 1, 140.0)
    assert rows[8] == GiProfileRow(1, "1g.18gb+me", 20, 1, 1, 16.0)
    assert {r.gpu for r in rows} == {0, 1}


def test_lgipp_reads_placements_in_both_spellings() -> None:
    rows = parse_lgipp(real("lgipp"))
    assert len(rows) == 14
    assert rows[0] == GiPlacementRow(0, 19, (0, 1, 2, 3, 4, 5, 6), 1)
    assert rows[4] == GiPlacementRow(0, 9, (0, 4), 4)
    # "Placement :" (one placement) as well as "Placements:"
    assert rows[6] == GiPlacementRow(0, 0, (0,), 8)


def test_no_instances_with_mig_disabled() -> None:
    assert parse_lgi(real("lgi")) == ()
    assert parse_lci(real("lgi").replace("lgi", "lci")) == ()


def test_instances_and_compute_instances() -> None:
    gis = parse_lgi((DERIVED / "nvidia-smi-mig-lgi.txt").read_text())
    assert gis[0] == GpuInstanceRow(0, "3g.71gb", 9, 2, 0, 4)
    assert [g.name for g in gis] == ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]
    cis = parse_lci((DERIVED / "nvidia-smi-mig-lci.txt").read_text())
    assert cis[0] == ComputeInstanceRow(0, 2, "3g.71gb", 2, 0, 0, 3)
    assert [c.gpu_instance_id for c in cis] == [g.instance_id for g in gis]


@pytest.mark.parametrize(
    "text",
    [
        "No MIG-supported devices found.\n# exit=6\n",
        "No GPU instances found: Not Found\n# exit=6\n",
        "No compute instances found: Not Found\n# exit=6\n",
    ],
)
def test_nothing_to_list_is_no_rows_whatever_the_status(text: str) -> None:
    assert parse_lgip(text) == () and parse_lgi(text) == () and parse_lci(text) == ()


def test_a_failed_listing_is_an_error_naming_the_command() -> None:
    with pytest.raises(ParseError, match=r"nvidia-smi mig -lgipp: exit 9: Failed to initialize"):
        parse_lgipp(
            "Failed to initialize NVML: Driver/library version mismatch\n# exit=9\n", host="h"
        )
