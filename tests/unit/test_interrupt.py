"""The interrupted report names a host drained mid-upgrade and its step (issue 27, item 2),
from the run's job events (the task paths of roles/driver_upgrade's step files)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.interrupt import interrupted_document, upgrade_steps

ROLE = "/x/roles/driver_upgrade/tasks"


def _events(run_dir: Path, events: list[tuple[str, str, str]]) -> None:
    where = run_dir / "ansible" / "job_events"
    where.mkdir(parents=True)
    for n, (kind, host, path) in enumerate(events, 1):
        event = {"counter": n, "event": kind, "event_data": {"host": host, "task_path": path}}
        (where / f"{n}-x.json").write_text(json.dumps(event))


def test_a_host_past_its_drain_is_drained_at_its_step(tmp_path: Path) -> None:
    _events(
        tmp_path,
        [
            ("runner_on_start", "a", f"{ROLE}/step-preflight.yml:7"),
            ("runner_on_ok", "a", f"{ROLE}/step-drain.yml:2"),
            ("runner_on_start", "a", f"{ROLE}/step-wait-jobs.yml:3"),
            ("runner_on_start", "b", f"{ROLE}/step-drain.yml:2"),  # the hook still running
            ("runner_on_ok", "c", f"{ROLE}/step-undrain.yml:2"),
            ("runner_on_ok", "d", "/x/roles/docker/tasks/main.yml:4"),
        ],
    )
    seen = upgrade_steps(tmp_path)
    assert seen["a"].step == "wait-jobs" and seen["a"].drained
    assert seen["b"].step == "drain" and not seen["b"].drained
    assert not seen["c"].drained and "d" not in seen
    doc = interrupted_document("apply", None, {"a": "running: x"}, ("a", "d"), tmp_path, seen)
    hosts = doc["hosts"]
    assert isinstance(hosts, dict)
    assert hosts["a"] == {
        "status": "interrupted",
        "at": "running: x",
        "upgrade_step": "wait-jobs",
        "drained": True,
    }
    assert hosts["d"] == {"status": "not_touched", "at": None}
    assert doc["exit_code"] == 130 and doc["signal"] == "SIGINT"
