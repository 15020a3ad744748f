"""The docker role's dnf data (RHEL family, Amazon Linux 2023), rendered on local fake hosts.

Checks the repository, key and fingerprint against tests/recorded/reference/packages.yaml
(docker_ce.rhel): Docker publishes only /linux/rhel, so Rocky and RHEL hosts must use it, not
/linux/rocky or /linux/redhat. On Amazon Linux 2023 only the distribution's docker is
available; docker_source=docker stops the role before anything changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
from roleplay import result, run_plays, work_dirs  # noqa: E402

pytestmark = pytest.mark.ansible  # role renders through real Ansible (the ansible tier)

REF = yaml.safe_load((REPO / "tests/recorded/reference/packages.yaml").read_text("utf-8"))

CASES: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    # case: (distribution, version, vars file the role's first_found picks, role vars)
    "rocky94": ("Rocky", "9.4", "RedHat.yml", {}),
    "rhel96": ("RedHat", "9.6", "RedHat.yml", {}),
    "al2023_docker": ("Amazon", "2023", "Amazon.yml", {"docker_source": "docker"}),
    "al2023_distribution": ("Amazon", "2023", "Amazon.yml", {"docker_source": "distribution"}),
    "rocky94_distribution": ("Rocky", "9.4", "RedHat.yml", {"docker_source": "distribution"}),
}

_TASKS = """\
- name: Load the role's OS data as its main.yml does
  ansible.builtin.include_vars: "{{ lookup('ansible.builtin.first_found', files) }}"
  vars:
    files:
      files:
        - "{{ ansible_facts.distribution }}-{{ ansible_facts.distribution_major_version }}.yml"
        - "{{ ansible_facts['distribution'] }}.yml"
        - "{{ ansible_facts['os_family'] }}.yml"
      paths: ["{{ role_dir }}/vars"]
- name: Run the dnf install tasks (only where the source check fails first)
  block:
    - name: Preflight, with the OS data loaded (as main.yml runs it)
      ansible.builtin.include_role:
        name: docker
        tasks_from: preflight.yml
      when: check_source
    - name: Source check
      ansible.builtin.include_role:
        name: docker
        tasks_from: install-dnf.yml
      when: check_source
  rescue:
    - name: Record the failure
      ansible.builtin.set_fact:
        failure: "{{ ansible_failed_result.msg }}"
- name: Render
  gpuprov_test_record:
    dest: "{{ out }}/{{ inventory_hostname }}.json"
    content: "{{ result | to_json }}"
  vars:
    result:
      failure: "{{ failure | default('') }}"
      repo_url: "{{ docker_ce_repo_url }}"
      key_url: "{{ docker_ce_repo_key_url }}"
      repo_file: "{{ __docker_ce_repo_file_url | default('') }}"
      fingerprint: "{{ __docker_ce_rpm_key_fingerprint | default('') }}"
      packages: "{{ __docker_packages[docker_source] }}"
      sources: "{{ __docker_sources_supported }}"
      versioned: "{{ __docker_versioned_packages }}"
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work, out = work_dirs(tmp_path_factory, "docker_dnf")
    plays = []
    for case, (dist, version, _file, role_vars) in CASES.items():
        plays.append(
            {
                "name": case,
                "hosts": case,
                "gather_facts": False,
                "roles": [],
                "vars": {
                    "ansible_facts": {
                        "distribution": dist,
                        "distribution_version": version,
                        "distribution_major_version": version.split(".")[0],
                        "os_family": "RedHat",
                    },
                    "out": str(out),
                    "role_dir": str(REPO / "roles" / "docker"),
                    # Only Amazon's case runs the tasks: its source check fails first.
                    "check_source": case in ("al2023_docker", "rocky94_distribution"),
                    **role_vars,
                },
                "pre_tasks": [
                    {
                        "name": "Load the role's defaults (its preflight, made public)",
                        "ansible.builtin.include_role": {
                            "name": "docker",
                            "tasks_from": "preflight.yml",
                            "public": True,
                        },
                    }
                ],
                "tasks": yaml.safe_load(_TASKS),
            }
        )
    run_plays(work, CASES, plays)
    return out


@pytest.mark.parametrize("case", ["rocky94", "rhel96"])
def test_rhel_family_uses_the_rhel_directory_docker_publishes(rendered: Path, case: str) -> None:
    rhel = REF["docker_ce"]["rhel"]
    r = result(rendered, case)
    assert r["repo_url"] == rhel["base_url"]
    assert r["repo_file"] == rhel["repo_file"]
    assert r["key_url"] == rhel["repo_content"]["gpgkey"]
    assert r["fingerprint"] == rhel["key_fingerprint"].replace(" ", "")
    assert r["packages"][:3] == REF["docker_ce"]["packages"][:3]


def test_amazon_linux_has_only_the_distribution_docker(rendered: Path) -> None:
    failed = result(rendered, "al2023_docker")
    assert "docker_source=docker is not available on Amazon 2023" in failed["failure"]
    assert "Nothing was changed" in failed["failure"]
    ok = result(rendered, "al2023_distribution")
    assert ok["failure"] == ""
    assert ok["sources"] == ["distribution"]
    assert ok["packages"] == ["docker"]


def test_rhel_family_refuses_the_distribution_source_in_preflight(rendered: Path) -> None:
    # RHEL and Rocky ship no moby-engine: Docker's repository is their only source.
    failed = result(rendered, "rocky94_distribution")
    assert "docker_source=distribution is not available on Rocky 9.4" in failed["failure"]
    assert "no moby-engine" in failed["failure"] and "Nothing was changed" in failed["failure"]
    assert result(rendered, "rocky94")["sources"] == ["docker"]


def test_the_cli_is_pinned_with_the_engine(rendered: Path) -> None:
    # packages.yaml docker_ce.pin_both: docker-ce AND docker-ce-cli at one VERSION_STRING.
    assert result(rendered, "rocky94")["versioned"] == ["docker-ce", "docker-ce-cli"]
    assert result(rendered, "al2023_distribution")["versioned"] == ["docker"]
