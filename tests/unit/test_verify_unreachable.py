"""Verifying a host the suite cannot reach is one line, not a failed check per test with
testinfra's traceback (issue 27, item 6). The JUnit XML is the suite's real output against a
host whose SSH port refuses (127.0.0.1 port 1), recorded 2026-12-01 (object addresses
zeroed): tests/unit/data/verify-unreachable-junit.xml."""

from __future__ import annotations

from pathlib import Path

from orchestrator.pipeline import _lost
from orchestrator.verify.runner import parse_junit

XML = Path(__file__).parent / "data" / "verify-unreachable-junit.xml"


def test_an_unreachable_host_is_one_line() -> None:
    results = parse_junit(XML.read_text(encoding="utf-8"))["ghost"]
    assert sum(r.status == "fail" for r in results) == 15  # what the report said before
    lost = _lost(results)
    assert lost is not None and lost.state == "error" and lost.checks == ()
    assert lost.note == (
        "unreachable during verification: ssh: connect to host 127.0.0.1 port 1: Connection refused"
    )


def test_a_real_failure_stays_a_check() -> None:
    results = parse_junit(XML.read_text(encoding="utf-8"))["ghost"]
    one = [r for r in results if r.status == "skip"]
    assert _lost(one) is None
