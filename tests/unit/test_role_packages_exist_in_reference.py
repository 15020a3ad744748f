"""Every package name the nvidia_driver role can install exists in the repositories derived
from the reference (tests/recorded/reference/packages.yaml, via tests/lab/aptrepo): the
debian12/debian13 CUDA doubles, the ubuntu2204/ubuntu2404 CUDA replays and Canonical's
jammy/noble replay.

The role's own pure task files (preflight.yml + select.yml) render its package lists for every
OS x source x branch (orchestrator/catalog.yaml driver_branches) x flavour x kernel flavour,
with the fabric manager on, on fake local hosts (as tests/unit/test_role_nvidia_driver_packages.py
does). A combination the role itself refuses is skipped; every list it renders is checked:

- the driver packages against the source's repository (cuda: NVIDIA's; distribution on
  Ubuntu: Canonical's; distribution on Debian is Debian's own archive, not replayed here);
- the fabric manager / nscq against NVIDIA's CUDA repository (the role takes them from there
  on every source);
- Ubuntu's kernel headers against Canonical's replay.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lab"))
from aptrepo.graphs import canonical_replay, cuda_replay, kernels  # noqa: E402
from aptrepo.packages import cuda_packages  # noqa: E402
from roleplay import os_facts, run_plays, work_dirs  # noqa: E402

pytestmark = pytest.mark.ansible  # role renders through real Ansible (the ansible tier)

KERNEL = "0.0.0-0-kernel"  # a stand-in release, replaced by the replay's kernels
DEBIAN_KERNEL = "6.1.0-50-amd64"
OSES = {
    "ubuntu2204": ("Ubuntu", "22.04"),
    "ubuntu2404": ("Ubuntu", "24.04"),
    "debian12": ("Debian", "12.8"),
    "debian13": ("Debian", "13.1"),
}


def _branches() -> list[str]:
    catalog = yaml.safe_load((REPO / "orchestrator" / "catalog.yaml").read_text())
    return [str(b["branch"]) for b in catalog["driver_branches"]]


def _cases() -> dict[str, dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = {}
    for os_key, (dist, version) in OSES.items():
        ubuntu = dist == "Ubuntu"
        for source in ("cuda", "distribution"):
            for branch in _branches():
                for flavour in ("open", "proprietary"):
                    cases[f"{os_key}_{source}_{branch}_{flavour}"] = {
                        "os_key": os_key,
                        "case_facts": os_facts(dist, version, "Debian"),
                        # Replaced below by each kernel the replay carries (-generic, -aws).
                        "__nvidia_driver_kernel": KERNEL if ubuntu else DEBIAN_KERNEL,
                        "nvidia_driver_source": source,
                        "nvidia_driver_branch": branch,
                        "nvidia_driver_flavour": flavour,
                        "nvidia_driver_fabricmanager": True,
                    }
    return cases


_TASKS = """\
- name: Render
  block:
    - name: Preflight
      ansible.builtin.import_role: {name: nvidia_driver, tasks_from: preflight.yml}
    - name: Select
      ansible.builtin.import_role: {name: nvidia_driver, tasks_from: select.yml}
    - name: Keep the result
      ansible.builtin.set_fact:
        case_result:
          failed: false
          set: "{{ __nvidia_driver_set }}"
          fabricmanager: "{{ __nvidia_driver_fabricmanager_set }}"
          headers: "{{ __nvidia_driver_headers_packages }}"
  rescue:
    - name: Keep the refusal
      ansible.builtin.set_fact:
        case_result: {failed: true, msg: "{{ ansible_failed_result.msg | default('') }}"}
- name: Write every host's result (one file, from the controller)
  gpuprov_test_record:
    dest: "{{ out }}/results.json"
    content: >-
      {{ dict(ansible_play_hosts_all | zip(ansible_play_hosts_all
         | map('extract', hostvars, 'case_result'))) | to_json }}
  run_once: true
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    work, out = work_dirs(tmp_path_factory, "role_names")
    cases = _cases()
    play = [
        {
            "name": "Render the nvidia_driver package lists",
            "hosts": "all",
            "gather_facts": False,
            "vars": {"ansible_facts": "{{ case_facts }}", "out": str(out)},
            "tasks": yaml.safe_load(_TASKS),
        }
    ]
    run_plays(work, cases, play, hostvars=cases, timeout=600, forks=8)
    results: dict[str, dict[str, Any]] = json.loads((out / "results.json").read_text())
    assert sorted(results) == sorted(cases)
    for name, result in results.items():
        result["case"] = cases[name]
    return results


def _names(value: Any) -> set[str]:
    """Package names in a rendered package set (lists of names, and its anchor), once per
    kernel of the replay where a name carries the kernel release."""
    if isinstance(value, str):
        if not re.fullmatch(r"[a-z0-9][a-z0-9.+-]+", value):
            return set()
        if KERNEL in value:
            return {value.replace(KERNEL, f"{k['abi']}-{f}") for f, k in kernels().items()}
        return {value}
    if isinstance(value, list):
        return set().union(*(_names(v) for v in value)) if value else set()
    if isinstance(value, dict):
        return set().union(*(_names(v) for v in value.values())) if value else set()
    return set()


def _published(os_key: str) -> dict[str, set[str]]:
    if os_key.startswith("ubuntu"):
        return {
            "cuda": {p.name for p in cuda_replay(os_key)},
            "distribution": {p.name for p in canonical_replay(os_key)},
        }
    return {"cuda": {p.name for p in cuda_packages(os_key)}}


def test_the_role_renders_most_combinations(rendered: dict[str, dict[str, Any]]) -> None:
    ok = [name for name, r in rendered.items() if not r["failed"]]
    assert len(ok) >= len(rendered) // 2, {n: r.get("msg") for n, r in rendered.items()}


def test_every_package_the_role_installs_is_published(rendered: dict[str, dict[str, Any]]) -> None:
    missing: list[str] = []
    for name, result in sorted(rendered.items()):
        if result["failed"]:
            continue
        case = result["case"]
        published = _published(case["os_key"])
        source = case["nvidia_driver_source"]
        # Canonical's archive carries its own fabric manager (multiverse, fabric-manager-<b>),
        # which the role takes with Canonical's driver; every other source: NVIDIA's repository.
        ubuntu_archive = case["os_key"].startswith("ubuntu") and source == "distribution"
        fm_repo = "distribution" if ubuntu_archive else "cuda"
        groups = [("fabric manager", result["fabricmanager"], fm_repo)]
        if source in published:
            groups.append(("driver", result["set"], source))
        if case["os_key"].startswith("ubuntu"):
            groups.append(("headers", result["headers"], "distribution"))
        for group, value, repo in groups:
            for package in sorted(_names(value) - published[repo]):
                missing.append(f"{name}: {group} package {package} not in the {repo} repository")
    assert missing == [], "\n".join(missing)
