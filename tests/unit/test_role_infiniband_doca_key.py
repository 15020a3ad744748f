"""The infiniband role's DOCA bootstrap package is chosen per OS release and CPU architecture
(issue 47 item 4): an arm64 host never gets the amd64 package, and the planner names the same
key (orchestrator/planners/fabric.py). Renders the role's vars with real Ansible on local fake
hosts (the ansible tier)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from roleplay import os_facts, result, run_plays, work_dirs
from test_fabric import shaped
from test_plan import real_raw

from orchestrator.catalog import default_catalog
from orchestrator.parsers import names, parse_host
from orchestrator.plan import plan_host
from orchestrator.policy import load_policy

pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]
CASES = {
    "u2404_x86_64": os_facts("Ubuntu", "24.04", "Debian"),
    "u2404_aarch64": os_facts("Ubuntu", "24.04", "Debian", arch="aarch64"),
    "u2204_aarch64": os_facts("Ubuntu", "22.04", "Debian", arch="aarch64"),
}
PLAY = f"""\
- name: Render the DOCA key
  hosts: all
  gather_facts: false
  vars_files: ["{REPO}/roles/infiniband/vars/main.yml"]
  tasks:
    - name: Record the key and the package
      gpuprov_test_record:
        dest: "{{{{ out }}}}/{{{{ inventory_hostname }}}}.json"
        content: "{{{{ {{'key': __infiniband_os_key,
          'package': __infiniband_doca_packages[__infiniband_os_key] | default('')}} | to_json }}}}"
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work, out = work_dirs(tmp_path_factory, "doca-key")
    plays = yaml.safe_load(PLAY)
    plays[0]["vars"] = {"out": str(out), "ansible_facts": "{{ case_facts }}"}
    hostvars = {case: {"case_facts": facts} for case, facts in CASES.items()}
    run_plays(work, CASES, plays, hostvars=hostvars)
    return out


def test_the_role_keys_doca_by_release_and_architecture(rendered: Path) -> None:
    x86 = result(rendered, "u2404_x86_64")
    assert x86["key"] == "ubuntu2404-amd64" and x86["package"].endswith("ubuntu2404_amd64.deb")
    arm = result(rendered, "u2404_aarch64")
    assert arm["key"] == "ubuntu2404-arm64" and arm["package"].endswith("ubuntu2404_arm64.deb")
    assert result(rendered, "u2204_aarch64") == {"key": "ubuntu2204-arm64", "package": ""}


def test_the_planner_refuses_an_architecture_the_role_pins_nothing_for() -> None:
    raw = {**real_raw(), "rdma.txt": shaped("rdma-ib.txt"), names.UNAME_M: "aarch64\n# exit=0\n"}
    doca = {"infiniband_stack": "doca", "infiniband_doca_base_url": "https://doca.example/"}
    plan = plan_host(parse_host("n1", raw), load_policy("n1", doca), default_catalog())
    # Ubuntu 24.04 arm64: a package name, but no sha256 recorded for it
    assert any(
        "doca-host_3.2.2-035000-25.10-ubuntu2404_arm64.deb has no sha256" in b
        for b in (plan.blockers)
    ), plan.blockers
    sha = {**doca, "infiniband_doca_sha256": "b" * 64}
    plan = plan_host(parse_host("n1", raw), load_policy("n1", sha), default_catalog())
    assert not [b for b in plan.blockers if "doca" in b.lower()]
