"""Broken captures say what is broken, and the blocker names a fix that works."""

from __future__ import annotations

from pathlib import Path

from orchestrator.catalog import default_catalog
from orchestrator.parsers import names, parse_host
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy

REAL = Path(__file__).resolve().parents[1] / "recorded/fixtures/real/h200x2-ubuntu2404-580"


def _raw() -> dict[str, str]:
    return {p.name: p.read_text() for p in REAL.iterdir() if p.is_file()}


def _plan(raw: dict[str, str]) -> object:
    return plan_host(parse_host("h200", raw), load_policy("h200", {}), default_catalog())


def test_a_truncated_pci_line_is_named_with_its_line_number() -> None:
    raw = _raw()
    lines = raw[names.SYSFS_PCI].splitlines(keepends=True)
    lines[2] = lines[2][:40] + "\n"  # cut mid-line, as a dropped connection leaves it
    raw[names.SYSFS_PCI] = "".join(lines)
    facts = parse_host("h200", raw)
    assert any(
        e.startswith("sysfs-pci-devices.txt: line 3: truncated (no class)") for e in facts.errors
    )
    plan = _plan(raw)
    blockers = plan.blockers  # type: ignore[attr-defined]
    assert len(blockers) == 1
    assert "sysfs-pci-devices.txt: line 3: truncated" in blockers[0]
    assert "re-run `provision detect`" in blockers[0]
    assert "passthrough" not in blockers[0]


def test_unreadable_pci_capture_is_not_blamed_on_the_bios() -> None:
    raw = _raw()
    raw[names.SYSFS_PCI] = "\x00\x01\ufffd\ufffd binary\n# exit=0\n"
    blockers = _plan(raw).blockers  # type: ignore[attr-defined]
    assert "does not start with a PCI address" in blockers[0]
    assert "passthrough" not in blockers[0]


def test_a_host_without_gpus_still_gets_the_passthrough_hint() -> None:
    raw = _raw()
    raw[names.SYSFS_PCI] = "".join(
        ln for ln in raw[names.SYSFS_PCI].splitlines(keepends=True) if "0x10de" not in ln
    )
    assert "passthrough" in _plan(raw).blockers[0]  # type: ignore[attr-defined]


def test_an_80_kB_line_is_quoted_short() -> None:
    raw = _raw()
    raw[names.SYSFS_PCI] = "0000:00:01.0 " + "a" * 80_000 + "\n# exit=0\n"
    facts = parse_host("h", raw)
    assert facts.errors and all(len(e) < 400 for e in facts.errors)
    assert "(80015 characters)" in facts.errors[0]
