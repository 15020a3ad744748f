"""A drain hook stopped by its timeout says the host may be half drained (issue 27, item 6),
not "the host was not drained": roles/driver_upgrade/tasks/step.yml on a local host, the drain
step with a hook that outlives driver_upgrade_hook_timeout (timeout(1) exits 124)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
from roleplay import run_plays  # noqa: E402

# runs ansible-playbook (or ansible-doc / the role's modules) on this machine: the ansible tier
pytestmark = pytest.mark.ansible

STEP = REPO / "roles" / "driver_upgrade" / "tasks" / "step.yml"


def test_a_drain_hook_killed_by_its_timeout_may_have_half_drained(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    steps = yaml.safe_load((REPO / "roles/driver_upgrade/vars/main.yml").read_text())
    play = {
        "name": "Drain with a hook that hangs",
        "hosts": "all",
        "gather_facts": False,
        "vars": {
            **steps,
            "__driver_upgrade_step": "drain",
            "__driver_upgrade_target": "595.91.07 open",
            "__driver_upgrade_state": {
                "target": "595.91.07 open", "done": ["preflight"], "history": [],
                "status": "in_progress", "failed_step": "", "stopped_services": [],
            },
            "driver_upgrade_state_file": str(tmp_path / "state" / "upgrade.json"),
            "driver_upgrade_drain_command": "sleep 30",
            "driver_upgrade_hook_timeout": 1,
        },
        "tasks": [{
            "name": "Step",
            "block": [{"ansible.builtin.include_tasks": str(STEP)}],
            "rescue": [{"gpuprov_test_record": {
                "dest": f"{out}/msg.json",
                "content": "{{ {'msg': ansible_failed_result.msg} | to_json }}",
            }}],
        }],
    }  # fmt: skip
    run_plays(tmp_path, ["node"], [play])
    msg = json.loads((out / "msg.json").read_text())["msg"]
    assert "failed at step 'drain'" in msg, msg
    assert "may be half drained" in msg and "was not drained" not in msg, msg
    state = json.loads((tmp_path / "state" / "upgrade.json").read_text())
    assert state["status"] == "failed" and state["failed_step"] == "drain"
