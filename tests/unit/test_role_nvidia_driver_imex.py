"""The nvidia_driver role's IMEX inputs (GB200/GB300 compute trays): nvidia-imex at the
driver's exact version with the driver-versioned set (pinned and held with it), the names per
branch as packages.yaml records them (cuda_apt.branches.<b>.imex: nvidia-imex-<b> from 550 to
575, nvidia-imex from 580; none for 535), and the preflight refusals. The role's own task
files (preflight.yml + select.yml) run on fake local hosts (tests/unit/roleplay.py); the
planner's view (orchestrator/driver_packages.py) renders the same vars."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from roleplay import run_plays, work_dirs

from orchestrator.driver_packages import PackagesUnavailable, driver_packages

# runs ansible-playbook (or ansible-doc / the role's modules) on this machine: the ansible tier
pytestmark = pytest.mark.ansible

FACTS = {
    "debian12": {"distribution": "Debian", "distribution_version": "12.8",
                 "distribution_major_version": "12", "os_family": "Debian"},
    "ubuntu2404": {"distribution": "Ubuntu", "distribution_version": "24.04",
                   "distribution_major_version": "24", "os_family": "Debian"},
    "rhel9": {"distribution": "RedHat", "distribution_version": "9.4",
              "distribution_major_version": "9", "os_family": "RedHat"},
}  # fmt: skip
NODES = ["10.0.0.1", "10.0.0.2"]
CASES: dict[str, dict[str, Any]] = {
    "debian12_580": {"os": "debian12", "nvidia_driver_branch": "580"},
    "ubuntu2404_595": {"os": "ubuntu2404", "nvidia_driver_branch": "595"},
    "rhel9_570": {"os": "rhel9", "nvidia_driver_branch": "570"},
    "debian12_580_no_nodes": {"os": "debian12", "nvidia_driver_branch": "580", "nodes": []},
    "debian12_535": {"os": "debian12", "nvidia_driver_branch": "535"},
    "ubuntu2404_580_distribution": {
        "os": "ubuntu2404",
        "nvidia_driver_branch": "580",
        "nvidia_driver_source": "distribution",
    },
    "debian12_580_bad_node": {"os": "debian12", "nvidia_driver_branch": "580", "nodes": ["x;y"]},
}

_TASKS = """\
- name: Render
  block:
    - name: Preflight
      ansible.builtin.import_role: {name: nvidia_driver, tasks_from: preflight.yml}
    - name: Select
      ansible.builtin.import_role: {name: nvidia_driver, tasks_from: select.yml}
    - name: Keep the result
      ansible.builtin.set_fact:
        case_result: {failed: false, extras: "{{ __nvidia_driver_fabricmanager_set }}"}
  rescue:
    - name: Keep the refusal
      ansible.builtin.set_fact:
        case_result: {failed: true, msg: "{{ ansible_failed_result.msg | default('') }}"}
- name: Write the result
  gpuprov_test_record:
    dest: "{{ out }}/{{ inventory_hostname }}.json"
    content: "{{ case_result | to_json }}"
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    work, out = work_dirs(tmp_path_factory, "imex")
    hostvars = {
        name: {
            "case_facts": {**FACTS[c["os"]], "architecture": "x86_64"},
            "nvidia_driver_branch": c["nvidia_driver_branch"],
            "nvidia_driver_source": c.get("nvidia_driver_source", "cuda"),
            "nvidia_driver_imex": True,
            "nvidia_driver_imex_nodes": c.get("nodes", NODES),
            "__nvidia_driver_kernel": "6.1.0-50-amd64",
        }
        for name, c in CASES.items()
    }
    play = [
        {
            "name": "Render the IMEX inputs",
            "hosts": "all",
            "gather_facts": False,
            "vars": {"ansible_facts": "{{ case_facts }}", "out": str(out)},
            "tasks": yaml.safe_load(_TASKS),
        }
    ]
    run_plays(work, CASES, play, hostvars=hostvars)
    return {name: json.loads((out / f"{name}.json").read_text()) for name in CASES}


def test_nvidia_imex_joins_the_driver_versioned_set_by_branch(
    rendered: dict[str, dict[str, Any]],
) -> None:
    assert rendered["debian12_580"] == {
        "failed": False,
        "extras": ["nvidia-imex", "nvidia-modprobe"],
    }
    assert rendered["ubuntu2404_595"]["extras"] == ["nvidia-imex", "nvidia-modprobe"]
    assert rendered["rhel9_570"]["extras"] == ["nvidia-imex-570", "nvidia-modprobe"]


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("debian12_580_no_nodes", "nvidia_driver_imex_nodes"),
        ("debian12_535", "branch 550 or later (now 535"),
        ("ubuntu2404_580_distribution", "nvidia_driver_source=cuda; now distribution"),
        ("debian12_580_bad_node", '["x;y"]'),
    ],
)
def test_bad_imex_input_is_refused_in_preflight(
    rendered: dict[str, dict[str, Any]], case: str, says: str
) -> None:
    assert rendered[case]["failed"], rendered[case]
    assert says in rendered[case]["msg"], rendered[case]["msg"]


def test_the_planner_names_the_same_imex_packages() -> None:
    common: dict[str, Any] = {"kernel": "6.1.0-50-amd64", "flavour": "open", "fabricmanager": False}
    deb = driver_packages(
        os_id="debian", version_id="12", family="debian", source="cuda", branch=580, imex=True,
        **common,
    )  # fmt: skip
    assert deb.imex == ("nvidia-imex", "nvidia-modprobe")
    assert deb.fabricmanager == ()  # a compute tray: no local fabric manager
    assert set(deb.imex) <= set(deb.held)
    assert "nvidia-imex" in deb.summary()
    rhel = driver_packages(
        os_id="rhel", version_id="9.4", family="redhat", source="cuda", branch=570, imex=True,
        **common,
    )  # fmt: skip
    assert rhel.imex == ("nvidia-imex-570", "nvidia-modprobe")
    assert (
        driver_packages(
            os_id="debian", version_id="12", family="debian", source="cuda", branch=580, **common
        ).imex
        == ()
    )
    with pytest.raises(PackagesUnavailable, match="only from NVIDIA's CUDA repository"):
        driver_packages(
            os_id="debian", version_id="12", family="debian", source="cuda", branch=535,
            imex=True, **common,
        )  # fmt: skip
