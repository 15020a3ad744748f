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


# --- issue 27: an unfinished upgrade is never left in silence ----------------------------


def _result(stats: dict[str, object], check: bool = False) -> object:
    from orchestrator.apply import ApplyResult

    return ApplyResult(
        hosts=stats,  # type: ignore[arg-type]
        status="successful",
        rc=0,
        artifact_dir=Path("/nonexistent"),
        check_mode=check,
    )


def _drained_at(host: str) -> HostFacts:
    raw = real_raw()
    state = {
        "target": "595.91.07 open",
        "status": "in_progress",
        "done": ["preflight", "drain"],
        "failed_step": "",
        "history": [{"step": "drain", "result": "done", "at": "2026-12-01T17:00:05Z"}],
    }
    raw["gpuprov-upgrade.txt"] = json.dumps(state) + "\n# exit=0\n"
    return parse_host(host, raw)


def test_a_drained_host_the_run_did_not_take_up_fails_loudly() -> None:
    from orchestrator.apply import HostApplyStats
    from orchestrator.rollout import still_drained

    facts = {"n1": _drained_at("n1"), "n2": _drained_at("n2"), "n3": parse_host("n3", real_raw())}
    assert facts["n1"].upgrade is not None and facts["n1"].upgrade.since == "2026-12-01T17:00:05Z"
    ran = HostApplyStats(ok=10, roles=("nvidia_driver", "driver_upgrade", "docker"))
    tags_only = HostApplyStats(ok=3, roles=("docker",))  # e.g. --tags docker
    result = still_drained(
        _result({"n1": ran, "n2": tags_only, "n3": tags_only}),  # type: ignore[arg-type]
        facts,
    )
    assert result.hosts["n1"].succeeded  # the role took it up: finished, or failed by itself
    assert result.hosts["n3"].succeeded  # never drained
    n2 = result.hosts["n2"]
    assert not n2.succeeded
    assert n2.failed_tasks[-1].startswith(
        "drained by an unfinished upgrade to 595.91.07 open since 2026-12-01T17:00:05Z"
    ), n2.failed_tasks


def test_the_budget_counts_a_drained_host_outside_the_targets() -> None:
    facts = {"n1": parse_host("n1", real_raw()), "n2": _drained_at("n2")}
    with pytest.raises(BadInputError, match="used up: n2 stays drained"):
        batch_size(None, "1", ["n1"], facts, 2)


def test_a_host_this_run_drained_then_lost_says_drained_mid_upgrade(tmp_path: Path) -> None:
    """Issue 27, item 6: a host the run drained and then lost (a reboot: unreachable) is not
    only "unreachable": the report says this run left it drained at its step, and how to
    resume. The run's job events as ansible-runner writes them (task paths of the role's step
    files)."""
    from orchestrator.apply import ApplyResult, HostApplyStats
    from orchestrator.rollout import still_drained

    events = tmp_path / "ansible" / "job_events"
    events.mkdir(parents=True)
    role = "/x/roles/driver_upgrade/tasks"
    for n, (kind, path) in enumerate(
        [
            ("runner_on_ok", f"{role}/step-drain.yml:2"),
            ("runner_on_start", f"{role}/step-install.yml:5"),
        ],
        1,
    ):
        event = {"counter": n, "event": kind, "event_data": {"host": "n1", "task_path": path}}
        (events / f"{n}-x.json").write_text(json.dumps(event))
    lost = HostApplyStats(
        ok=12,
        unreachable=1,
        roles=("driver_upgrade",),
        failed_tasks=("Install: unreachable: Connection reset (the host went away mid-run: "
                      "rebooting, down, or hung)",),
    )  # fmt: skip
    result = ApplyResult(
        hosts={"n1": lost}, status="failed", rc=4, artifact_dir=tmp_path, check_mode=False
    )
    n1 = still_drained(result, {"n1": parse_host("n1", real_raw())}).hosts["n1"]
    assert not n1.succeeded
    assert n1.failed_tasks[0].startswith("Install: unreachable: ")
    assert n1.failed_tasks[-1] == (
        "drained mid-upgrade by this run (step install); `provision apply --limit n1` resumes it"
    )


def test_a_half_drained_host_counts_as_drained_and_says_so() -> None:
    """A drain hook stopped by its timeout (status failed at the drain step, the drain not
    done) may have drained part of the host: it uses the budget, detect and plan name it, and
    a run that does not take it up fails it (issue 48; it was read as in service)."""
    raw = real_raw()
    state = {
        "target": "595.91.07 open",
        "status": "failed",
        "done": ["preflight"],
        "failed_step": "drain",
        "history": [{"step": "drain", "result": "failed", "at": "2026-12-05T10:00:00Z"}],
    }
    raw["gpuprov-upgrade.txt"] = json.dumps(state) + "\n# exit=0\n"
    upgrade = parse_host("n1", raw).upgrade
    assert upgrade is not None and upgrade.drained and upgrade.half_drained
    assert upgrade.drained_cause == (
        "may be half drained: the drain hook of an unfinished upgrade to 595.91.07 open "
        "failed at 2026-12-05T10:00:00Z"
    )
    facts = {"n1": parse_host("n1", raw), "n2": parse_host("n2", real_raw())}
    assert drained_elsewhere(facts, ["n2"]) == ["n1"]
    before_drain = with_upgrade("n3", "failed", ["preflight"])  # failed at the preflight
    assert before_drain.upgrade is not None and not before_drain.upgrade.drained


def test_a_host_detection_cannot_reach_counts_as_out_of_service() -> None:
    """Issue 48: an unreachable host outside --limit (its upgrade state unknown) was only a
    warning, and another host was drained; now it uses the budget like a drained one."""
    ok = parse_host("ok", real_raw())
    facts = {"ok": ok}
    assert batch_size("2", "2", ["ok"], facts, 3, unknown=["lost"]) == "1"
    with pytest.raises(BadInputError) as info:
        batch_size(None, "1", ["ok"], facts, 3, unknown=["lost"])
    said = str(info.value)
    assert "--max-unavailable 1 is used up: lost cannot be reached (state unknown" in said, said
    # a target that cannot be reached is this run's own failure, not another's drain
    assert batch_size(None, "1", ["ok", "lost"], facts, 3, unknown=["lost"]) == "1"
