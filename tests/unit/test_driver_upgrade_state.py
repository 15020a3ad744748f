"""roles/driver_upgrade/tasks/state.yml on this machine: which recorded upgrades are taken up.

Each case is a state file (upgrade.json as the role writes it) and the plan's target; the play
runs state.yml on a local host (no NVIDIA module is loaded here: the loaded driver reads as
none) and writes what it decided. The case the audit found (issue 27, item 1): an upgrade to
595.91.07 interrupted after the drain, then the pin backed out to 580.159.04. Before the fix
the role did nothing and the host stayed drained, reported ok.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
from roleplay import result, run_plays, work_dirs  # noqa: E402

# runs ansible-playbook (or ansible-doc / the role's modules) on this machine: the ansible tier
pytestmark = pytest.mark.ansible

TASKS = REPO / "roles" / "driver_upgrade" / "tasks" / "state.yml"
AT = "2026-12-01T17:00:00Z"


def _state(target: str, status: str, done: list[str]) -> dict[str, Any]:
    return {
        "target": target,
        "from": "580.159.04 open",
        "done": done,
        "stopped_services": ["nvidia-dcgm"],
        "status": status,
        "failed_step": "",
        "history": [{"step": s, "result": "done", "at": AT} for s in done],
    }


DRAINED = ["preflight", "drain", "wait-jobs", "stop-clients"]
CASES: dict[str, tuple[dict[str, Any] | None, str]] = {
    # state file, the plan's nvidia_driver_version (flavour open)
    "backed_out_after_the_drain": (_state("595.91.07 open", "in_progress", DRAINED), "580.159.04"),
    "failed_after_the_drain_then_backed_out": (
        _state("595.91.07 open", "failed", [*DRAINED, "install"]),
        "580.159.04",
    ),
    "same_target_resumes": (_state("595.91.07 open", "in_progress", DRAINED), "595.91.07"),
    "not_drained_other_target": (
        _state("595.91.07 open", "in_progress", ["preflight"]),
        "580.159.04",
    ),
    "finished": (_state("595.91.07 open", "done", [*DRAINED, "undrain"]), "580.159.04"),
    # the drain hook stopped by its timeout (issue 48): the host may be half drained
    "half_drained_then_backed_out": (
        _state("595.91.07 open", "failed", ["preflight"]) | {"failed_step": "drain"},
        "580.159.04",
    ),
    "half_drained_same_target": (
        _state("595.91.07 open", "failed", ["preflight"]) | {"failed_step": "drain"},
        "595.91.07",
    ),
    "no_state": (None, "580.159.04"),
}


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work, out = work_dirs(tmp_path_factory, "upgrade-state")
    hostvars: dict[str, dict[str, Any]] = {}
    for case, (state, version) in CASES.items():
        path = work / f"{case}.upgrade.json"
        if state is not None:
            path.write_text(json.dumps(state), encoding="utf-8")
        hostvars[case] = {
            "driver_upgrade_state_file": str(path),
            "nvidia_driver_version": version,
            "nvidia_driver_branch": version.split(".")[0],
            "nvidia_driver_flavour": "open",
        }
    plays = [
        {
            "name": "Decide",
            "hosts": "all",
            "gather_facts": False,
            "vars": {"__driver_upgrade_steps": json.loads(json.dumps(_steps()))},
            "tasks": [
                {"name": "State", "ansible.builtin.include_tasks": str(TASKS)},
                {
                    "name": "Write",
                    "gpuprov_test_record": {
                        "dest": f"{out}/{{{{ inventory_hostname }}}}.json",
                        "content": "{{ {'active': driver_upgrade_active, "
                        "'resumed_at': driver_upgrade_resumed_at, "
                        "'state': __driver_upgrade_state} | to_json }}",
                    },
                },
            ],
        }
    ]
    run_plays(work, CASES, plays, hostvars=hostvars)
    return out


def _steps() -> list[str]:
    import yaml

    steps: list[str] = yaml.safe_load(
        (REPO / "roles" / "driver_upgrade" / "vars" / "main.yml").read_text(encoding="utf-8")
    )["__driver_upgrade_steps"]
    return steps


def test_a_backed_out_pin_finishes_toward_the_current_target(decided: Path) -> None:
    got = result(decided, "backed_out_after_the_drain")
    assert got["active"] is True, "the drained host must be taken up, not left drained"
    state = got["state"]
    assert state["target"] == "580.159.04 open" and state["status"] == "in_progress"
    # still drained, jobs ended, clients stopped (kept, to start them again); the rest again
    assert state["done"] == ["drain", "wait-jobs", "stop-clients"]
    assert state["stopped_services"] == ["nvidia-dcgm"]
    assert state["history"][-1]["step"] == "retarget"
    assert state["history"][-1]["result"] == "595.91.07 open -> 580.159.04 open"
    assert got["resumed_at"] == "preflight"


def test_a_failed_install_then_backed_out_installs_again(decided: Path) -> None:
    state = result(decided, "failed_after_the_drain_then_backed_out")["state"]
    assert state["done"] == ["drain", "wait-jobs", "stop-clients"] and state["failed_step"] == ""


def test_the_same_target_resumes_where_it_stopped(decided: Path) -> None:
    got = result(decided, "same_target_resumes")
    assert got["active"] is True and got["state"]["done"] == DRAINED
    assert got["resumed_at"] == "install"


@pytest.mark.parametrize("case", ["not_drained_other_target", "finished", "no_state"])
def test_nothing_to_take_up(decided: Path, case: str) -> None:
    got = result(decided, case)
    assert got["active"] is False
    assert got["state"]["target"] == "580.159.04 open" and got["state"]["done"] == []


def test_a_half_drained_host_whose_pin_was_backed_out_is_undrained(decided: Path) -> None:
    """Its drain hook was stopped by its timeout, then the pin backed out: the driver never
    changed, so only the undrain hook runs; before, the role did nothing and the host stayed
    (half) drained, reported ok (issue 48)."""
    got = result(decided, "half_drained_then_backed_out")
    assert got["active"] is True, "a half-drained host must be put back in service"
    state = got["state"]
    assert state["target"] == "580.159.04 open" and state["status"] == "in_progress"
    assert state["done"] == _steps()[:-1] and state["failed_step"] == ""
    assert got["resumed_at"] == "undrain"
    assert state["history"][-1]["step"] == "abandon"
    assert state["history"][-1]["result"].startswith("595.91.07 open -> 580.159.04 open: ")


def test_a_half_drained_host_with_the_same_target_drains_again(decided: Path) -> None:
    got = result(decided, "half_drained_same_target")
    assert got["active"] is True and got["resumed_at"] == "drain"
    assert got["state"]["done"] == ["preflight"]
