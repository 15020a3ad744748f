"""The nvidia_driver role's probe on the real H200 host's driver version file.

Runs the role's own probe.yml (read-only) on local hosts whose driver version file is the
real fixture's `/proc/driver/nvidia/version` (580.159.04, open modules), then checks what
the role concludes: a preinstalled driver that matches the plan is "satisfied" and, when the
role did not install it, its packages are left untouched. This is the decision that
playbooks/check_driver.yml relies on for the real device machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
from roleplay import run_plays  # noqa: E402

pytestmark = pytest.mark.ansible  # role renders through real Ansible (the ansible tier)

SHARED = REPO / "tests" / "recorded"
FIXTURE = SHARED / "fixtures" / "real" / "h200x2-ubuntu2404-580"

# case -> (driver version file: "fixture" | "absent", state file present, role variables)
CASES: dict[str, tuple[str, bool, dict[str, str]]] = {
    "branch_580_open": ("fixture", False, {"nvidia_driver_branch": "580"}),
    "exact_580_159_04": (
        "fixture",
        False,
        {"nvidia_driver_branch": "580", "nvidia_driver_version": "580.159.04"},
    ),
    "other_580_release": (
        "fixture",
        False,
        {"nvidia_driver_branch": "580", "nvidia_driver_version": "580.95.05"},
    ),
    "branch_570": ("fixture", False, {"nvidia_driver_branch": "570"}),
    "proprietary_580": (
        "fixture",
        False,
        {"nvidia_driver_branch": "580", "nvidia_driver_flavour": "proprietary"},
    ),
    "owned_580": ("fixture", True, {"nvidia_driver_branch": "580"}),
    "no_driver": ("absent", False, {"nvidia_driver_branch": "580"}),
}


def _fixture_text(name: str) -> str:
    """A fixture file's command output, without the trailing `# exit=N` line."""
    lines = (FIXTURE / name).read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("# exit="))


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    work = tmp_path_factory.mktemp("nvidia_driver_probe")
    version_file = work / "version"
    version_file.write_text(_fixture_text("proc-driver-nvidia-version.txt"), encoding="utf-8")
    state_file = work / "nvidia_driver.json"
    state_file.write_text("{}\n", encoding="utf-8")
    plays = []
    for case, (driver, owned, role_vars) in CASES.items():
        plays.append(
            {
                "name": case,
                "hosts": case,
                "gather_facts": False,
                "vars": {"nvidia_driver_flavour": "open", **role_vars},
                "tasks": [
                    {
                        "name": "Probe",
                        "ansible.builtin.include_role": {
                            "name": "nvidia_driver",
                            "tasks_from": "probe.yml",
                        },
                        "vars": {
                            "__nvidia_driver_version_file": str(
                                version_file if driver == "fixture" else work / "absent"
                            ),
                            "nvidia_driver_state_file": str(
                                state_file if owned else work / "absent.json"
                            ),
                        },
                    },
                    {
                        "name": "Write what the probe found",
                        "gpuprov_test_record": {
                            "dest": f"{work}/{case}.json",
                            "content": "{{ nvidia_driver_found | to_json }}",
                        },
                    },
                ],
            }
        )
    run_plays(work, CASES, plays)
    return {case: json.loads((work / f"{case}.json").read_text()) for case in CASES}


def test_reads_the_real_loaded_driver(found: dict[str, dict[str, Any]]) -> None:
    assert found["branch_580_open"]["loaded_version"] == "580.159.04"
    assert found["branch_580_open"]["loaded_flavour"] == "open"


@pytest.mark.parametrize("case", ["branch_580_open", "exact_580_159_04"])
def test_preinstalled_driver_satisfies_and_is_untouched(
    found: dict[str, dict[str, Any]], case: str
) -> None:
    assert found[case]["satisfied"] is True
    assert found[case]["manage_packages"] is False


@pytest.mark.parametrize("case", ["other_580_release", "branch_570", "proprietary_580"])
def test_a_different_plan_is_not_satisfied(found: dict[str, dict[str, Any]], case: str) -> None:
    assert found[case]["satisfied"] is False
    assert found[case]["manage_packages"] is True


def test_a_driver_the_role_installed_stays_managed(found: dict[str, dict[str, Any]]) -> None:
    assert found["owned_580"]["satisfied"] is True
    assert found["owned_580"]["manage_packages"] is True


def test_no_driver_loaded(found: dict[str, dict[str, Any]]) -> None:
    assert found["no_driver"]["loaded_version"] == ""
    assert found["no_driver"]["satisfied"] is False
