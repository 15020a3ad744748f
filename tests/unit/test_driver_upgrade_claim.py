"""roles/driver_upgrade/tasks/claim.yml on this machine: the fleet's drain budget, checked on
the hosts before the drain (issue 48: two runs with different --limit drained past
--max-unavailable together). The peers are local hosts (they read the same files as the host
that claims: its own claim, its state file) and one that cannot be reached (an address of
TEST-NET-3 with a 2 s connect timeout): its state is unknown, so it counts as out of service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
from roleplay import ACTION_PLUGINS, ANSIBLE_PLAYBOOK  # noqa: E402

# runs ansible-playbook on this machine: the ansible tier
pytestmark = pytest.mark.ansible

CLAIM = REPO / "roles" / "driver_upgrade" / "tasks" / "claim.yml"
DRAINED = {"target": "595.91.07 open", "status": "in_progress", "done": ["preflight", "drain"]}
# case -> (the hosts counted, the budget, the state file the peers show, or None)
CASES: dict[str, tuple[list[str], int, dict[str, Any] | None]] = {
    "alone": (["mine"], 1, None),
    "within": (["mine", "peer", "gone"], 3, None),
    "over": (["mine", "peer", "gone"], 2, None),
    # the peer both claimed and drained counts once
    "drained_peer_once": (["mine", "peer"], 2, DRAINED),
    "drained_peer_over": (["mine", "peer"], 1, DRAINED),
}


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("claim")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {
            "hosts": {
                "mine": local,
                "peer": local,
                # its connection named: ansible-core 2.22.0rc1 ran a looped delegation to a
                # host without ansible_connection over the previous item's (here `local`:
                # "gone" read this machine's files; 2.19 reaches for it over ssh). A fleet
                # of ssh hosts is not affected (each item reaches its own address; tried)
                "gone": {
                    "ansible_host": "203.0.113.9",
                    "ansible_ssh_timeout": 2,
                    "ansible_connection": "ssh",
                },
            }
        }
    }
    plays = []
    for case, (fleet, budget, state) in CASES.items():
        state_file = work / f"{case}.upgrade.json"
        if state is not None:
            state_file.write_text(json.dumps(state), encoding="utf-8")
        claim = work / f"{case}.claim.json"
        plays.append(
            {
                "name": case,
                "hosts": "mine",
                "gather_facts": False,
                "vars": {
                    "driver_upgrade_fleet": fleet,
                    "driver_upgrade_max_unavailable": budget,
                    "driver_upgrade_claim_file": str(claim),
                    "driver_upgrade_state_file": str(state_file),
                    "__driver_upgrade_target": "580.159.04 open",
                },
                "tasks": [
                    {
                        "name": "Claim",
                        "block": [{"ansible.builtin.include_tasks": str(CLAIM)}],
                        "rescue": [
                            {
                                "ansible.builtin.copy": {
                                    "dest": str(work / f"{case}.refused"),
                                    "content": "{{ ansible_failed_result.msg }}",
                                    "mode": "0644",
                                }
                            }
                        ],
                    }
                ],
            }
        )
    (work / "inventory.yml").write_text(yaml.safe_dump(inventory), "utf-8")
    (work / "play.yml").write_text(yaml.safe_dump(plays, sort_keys=False), "utf-8")
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_ACTION_PLUGINS": str(ACTION_PLUGINS)}
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "inventory.yml", "play.yml"],
        env=env, cwd=work, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return work


def _outcome(work: Path, case: str) -> tuple[str | None, bool]:
    refused = work / f"{case}.refused"
    message = refused.read_text() if refused.exists() else None
    return message, (work / f"{case}.claim.json").exists()


@pytest.mark.parametrize("case", ["alone", "within", "drained_peer_once"])
def test_within_the_budget_the_claim_stays(decided: Path, case: str) -> None:
    message, claimed = _outcome(decided, case)
    assert message is None and claimed, message
    claim = json.loads((decided / f"{case}.claim.json").read_text())
    assert claim["host"] == "mine" and claim["target"] == "580.159.04 open"


def test_past_the_budget_the_claim_is_given_back_and_the_host_is_not_drained(
    decided: Path,
) -> None:
    message, claimed = _outcome(decided, "over")
    assert message is not None and not claimed
    assert message.startswith("mine: not drained: the fleet's budget of 2 host(s)"), message
    assert "drain claimed on peer" in message, message
    assert "unreachable, their state unknown: gone" in message, message
    assert "Nothing was drained" in message


def test_a_host_an_unfinished_upgrade_drained_uses_the_budget(decided: Path) -> None:
    message, claimed = _outcome(decided, "drained_peer_over")
    assert message is not None and not claimed
    assert "drained by an unfinished upgrade: peer" in message, message
