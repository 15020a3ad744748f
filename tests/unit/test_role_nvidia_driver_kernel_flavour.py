"""The kernel line's flavour comes from its installed image metapackage, as ubuntu-drivers takes
it, and the role never installs a kernel of another line (issue 25, item 6).

roles/nvidia_driver/vars/kernels.yml and the role's own "Note any kernel image the simulation
would install" task (read from tasks/kernels.yml, not copied) run on this machine with
ansible-playbook, one local host per case. The dpkg-query rows are the shape of Canonical's
recorded `dpkg -s linux-image-generic` re-addressed to current lines, and apt's simulation
lines are recorded from this project's Debian 12 machine
(tests/recorded/reference/kernel-metapackages.yaml)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from roleplay import REPO, result, run_plays, work_dirs

pytestmark = pytest.mark.ansible

DATA = yaml.safe_load(
    (REPO / "tests/recorded/reference/kernel-metapackages.yaml").read_text("utf-8")
)
CASES: dict[str, dict[str, Any]] = DATA["derived"]
SIMULATION = DATA["simulation_recorded"]
NOTE_TASK = "Note any kernel image the simulation would install"


def _role_task(name: str) -> dict[str, Any]:
    tasks = yaml.safe_load((REPO / "roles/nvidia_driver/tasks/kernels.yml").read_text("utf-8"))
    return next(t for t in tasks if t.get("name") == name)


def _rows(case: dict[str, Any]) -> list[str]:
    return ["\t".join(row) for row in case["installed"]]


def _sim_other_line() -> list[str]:
    """apt's recorded lines, re-addressed: the GA line's 5.15 image on a 6.8 host."""
    return [line.replace("6.1.0-57-cloud-amd64", "5.15.0-91-generic") for line in SIMULATION]


def _sim_same_line() -> list[str]:
    """The same lines, re-addressed to a newer ABI of the running 6.8 line."""
    return [line.replace("6.1.0-57-cloud-amd64", "6.8.0-50-generic") for line in SIMULATION]


SIMULATIONS = {"other_line": _sim_other_line(), "same_line": _sim_same_line(), "none": []}


def _hostvars() -> dict[str, dict[str, Any]]:
    """One local host per case and simulation, its inputs as inventory variables."""
    return {
        f"{name}-{sim}": {
            "__nvidia_driver_kernel": case["kernel"],
            "__nvidia_driver_image_query": {"stdout_lines": _rows(case)},
            "__nvidia_driver_kernel_meta_sim": {"rc": 0, "stdout_lines": lines},
        }
        for name, case in CASES.items()
        for sim, lines in SIMULATIONS.items()
    }


def _play(out: Path) -> list[dict[str, Any]]:
    """One play over every case (a play per case costs Ansible a second or more each)."""
    return [
        {
            "name": "Kernel flavour",
            "hosts": "all",
            "gather_facts": False,
            "vars": {
                "nvidia_driver_branch": 580,
                "nvidia_driver_flavour": "open",
                "ansible_facts": {"distribution": "Ubuntu"},
            },
            "tasks": [
                {
                    "name": "Load the role's kernel data",
                    "ansible.builtin.include_vars": str(
                        REPO / "roles/nvidia_driver/vars/kernels.yml"
                    ),
                },
                _role_task(NOTE_TASK),
                {
                    "name": "Write what was chosen",
                    "gpuprov_test_record": {
                        "dest": f"{out}/{{{{ inventory_hostname }}}}.json",
                        "content": (
                            "{{ {'flavour': __nvidia_driver_kernel_flavour,"
                            " 'meta': __nvidia_driver_image_metapackage,"
                            " 'headers': __nvidia_driver_headers_metapackage,"
                            " 'modules': __nvidia_driver_prebuilt_metapackage,"
                            " 'other_line': __nvidia_driver_kernel_meta_second_line}"
                            " | to_json }}"
                        ),
                    },
                },
            ],
        }
    ]


@pytest.fixture(scope="module")
def chosen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    work, out = work_dirs(tmp_path_factory, "kernel_flavour")
    hostvars = _hostvars()
    run_plays(work, hostvars, _play(out), hostvars=hostvars, forks=10)
    return {c: result(out, c) for c in hostvars}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_flavour_is_the_image_metapackages(
    chosen: dict[str, dict[str, Any]], name: str
) -> None:
    got = chosen[f"{name}-none"]
    flavour = CASES[name]["flavour"]
    assert got["flavour"] == flavour, json.dumps(got)
    assert got["headers"] == f"linux-headers-{flavour}"
    assert got["modules"] == f"linux-modules-nvidia-580-server-open-{flavour}"


def test_an_hwe_host_keeps_its_own_line_not_the_ga_kernels() -> None:
    # the release alone ("6.8.0-45-generic") says "generic", the GA line's metapackages
    assert CASES["jammy_hwe"]["kernel"].endswith("-generic")
    assert CASES["jammy_hwe"]["flavour"] == "generic-hwe-22.04"


def test_a_kernel_of_another_line_in_the_simulation_is_named(
    chosen: dict[str, dict[str, Any]],
) -> None:
    got = chosen["jammy_hwe-other_line"]
    assert got["other_line"] == ["linux-image-5.15.0-91-generic"]


@pytest.mark.parametrize("name", ["jammy_hwe", "noble_virtual", "removed_metapackage"])
def test_a_newer_abi_of_the_running_line_is_what_the_metapackage_is_for(
    chosen: dict[str, dict[str, Any]], name: str
) -> None:
    # 6.8 hosts: the same line's newer ABI is not "another line"; the metapackage itself
    # (linux-image-cloud-amd64 in the recorded lines) has no ABI and is never counted
    assert chosen[f"{name}-same_line"]["other_line"] == []
    assert chosen[f"{name}-none"]["other_line"] == []


def test_on_a_custom_kernel_any_packaged_image_is_another_line(
    chosen: dict[str, dict[str, Any]],
) -> None:
    assert chosen["no_metapackage-same_line"]["other_line"] == ["linux-image-6.8.0-50-generic"]
