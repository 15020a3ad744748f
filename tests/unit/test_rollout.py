"""Rolling batches: --serial capped by --max-unavailable, counting hosts left drained."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from orchestrator.errors import BadInputError
from orchestrator.facts import HostFacts
from orchestrator.parsers import parse_host
from orchestrator.rollout import batch_size, count, drained_elsewhere

REAL = Path(__file__).resolve().parents[2] / "tests/recorded/fixtures/real/h200x2-ubuntu2404-580"


def real_raw() -> dict[str, str]:
    return {p.name: p.read_text() for p in REAL.iterdir() if p.is_file()}


def with_upgrade(host: str, status: str, done: list[str]) -> HostFacts:
    raw = real_raw()
    state = {"target": "580.159.04 open", "status": status, "done": done, "failed_step": ""}
    raw["gpuprov-upgrade.txt"] = json.dumps(state) + "\n# exit=0\n"
    return parse_host(host, raw)


def test_upgrade_state_is_detected() -> None:
    facts = with_upgrade("n1", "failed", ["preflight", "drain", "wait-jobs"])
    assert facts.upgrade is not None and facts.upgrade.drained
    assert facts.upgrade.done[-1] == "wait-jobs"
    assert parse_host("n2", real_raw()).upgrade is None


def test_a_broken_state_file_is_a_detection_error_not_a_crash() -> None:
    raw = real_raw()
    raw["gpuprov-upgrade.txt"] = "{not json\n# exit=0\n"
    facts = parse_host("n1", raw)
    assert facts.upgrade is None and any("gpuprov-upgrade.txt" in e for e in facts.errors)


@pytest.mark.parametrize(
    ("value", "total", "expected"), [("3", 10, 3), ("25%", 10, 2), ("10%", 4, 1), ("100%", 7, 7)]
)
def test_count(value: str, total: int, expected: int) -> None:
    assert count(value, total, "--serial") == expected


@pytest.mark.parametrize("value", ["0", "-1", "0%", "150%", "two"])
def test_bad_counts_are_bad_input(value: str) -> None:
    with pytest.raises(BadInputError) as info:
        count(value, 10, "--max-unavailable")
    assert "--max-unavailable" in str(info.value) and value in str(info.value)


def test_without_a_budget_serial_is_unchanged() -> None:
    assert batch_size("2", None, ["a", "b", "c"], {}, 3) == "2"
    assert batch_size(None, None, ["a"], {}, 1) is None


def test_hosts_left_drained_elsewhere_use_up_the_budget() -> None:
    ok = parse_host("ok", real_raw())
    stuck = with_upgrade("stuck", "failed", ["preflight", "drain"])
    finished = with_upgrade("done", "done", ["preflight", "drain", "undrain"])
    facts = {"ok": ok, "stuck": stuck, "done": finished, "d": dataclasses.replace(ok, host="d")}
    targets = ["ok", "done", "d"]
    assert drained_elsewhere(facts, targets) == ["stuck"]
    assert batch_size("2", "2", targets, facts, 4) == "1"
    assert batch_size(None, "50%", targets, facts, 4) == "1"
    with pytest.raises(BadInputError) as info:
        batch_size("2", "1", targets, facts, 4)
    assert "stuck stays drained" in str(info.value)
    # Resuming the drained host itself: it is a target, so it does not count against the rest.
    assert batch_size("2", "1", ["stuck"], facts, 4) == "1"
