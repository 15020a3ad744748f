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


def test_a_host_lost_mid_verify_is_one_line_after_the_checks_that_ran() -> None:
    """Issue 48: the suite's results on a lab host paused mid-verify (2026-12-06, diagnoses as
    the report carried them): two real failures, then ten checks failed with SessionLost.
    They were ten failed checks; now the two that ran stay and the loss is one line."""
    from orchestrator.result import CheckResult

    lost = "orchestrator.session.SessionLost: h2: lost the connection during verification: "
    said = [
        ("verify.loaded_module_matches_plan", "fail", "no nvidia kernel module is loaded"),
        ("verify.nouveau_blacklisted", "skip", "kernel 6.1.0-50-amd64 has no nouveau module"),
        ("verify.nvml_matches_loaded_module", "fail", "nvidia-smi is missing or fails"),
        (
            "verify.persistenced_active_and_enabled",
            "fail",
            lost + "the shell ended (exit 255): Timeout, server 127.0.0.1 not responding.",
        ),
        *[
            (f"verify.check_{i}", "fail", lost + "the connection is gone (Broken pipe)")
            for i in range(9)
        ],
    ]
    results = [CheckResult(n, s, None, None, "", d) for n, s, d in said]  # type: ignore[arg-type]
    stage = _lost(results)
    assert stage is not None and stage.state == "error"
    assert stage.note == (
        "unreachable during verification: the shell ended (exit 255): Timeout, server "
        "127.0.0.1 not responding. (after 2 check(s); 10 not finished)"
    )
    assert [c.name for c in stage.checks] == [n for n, _s, _d in said[:3]]
