"""The nvidia_driver role's dnf OS data (RHEL/Rocky 8 and 9, Amazon Linux 2023), rendered.

Runs the role's preflight.yml + select.yml on local fake hosts (facts per play, nothing on
this machine changes) and checks every rendered name against
tests/recorded/reference/packages.yaml (cuda_rpm), through the rpm doubles' model (which
reads the reference), not against the role's own vars. The lab test tests/lab/test_role_dnf.py
runs the same data with real dnf.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lab"))
from roleplay import os_facts, result, run_plays, work_dirs  # noqa: E402
from rpmrepo import model  # noqa: E402

pytestmark = pytest.mark.ansible  # role renders through real Ansible (the ansible tier)

REF = model.load_reference()
KERNEL_EL9 = "5.14.0-427.13.1.el9_4.x86_64"  # a RHEL 9.4 `uname -r` from a public transcript


CASES: dict[str, tuple[dict[str, str], dict[str, Any], str]] = {
    "rhel96_open_580": (
        os_facts("RedHat", "9.6", "RedHat"),
        {"nvidia_driver_branch": "580"},
        KERNEL_EL9,
    ),
    "rocky94_open_570": (
        os_facts("Rocky", "9.4", "RedHat"),
        {"nvidia_driver_branch": "570"},
        KERNEL_EL9,
    ),
    "rhel810_proprietary_580": (
        os_facts("RedHat", "8.10", "RedHat"),
        {"nvidia_driver_branch": "580", "nvidia_driver_flavour": "proprietary"},
        KERNEL_EL9,
    ),
    # AL2023 kernel releases: only their 6.1. / 6.12. prefix matters to the role.
    "al2023_open_580": (
        os_facts("Amazon", "2023", "RedHat"),
        {"nvidia_driver_branch": "580"},
        "6.1.0",
    ),
    "al2023_kernel612": (
        os_facts("Amazon", "2023", "RedHat", arch="aarch64"),
        {"nvidia_driver_branch": "570"},
        "6.12.0",
    ),
    "override_os_data": (
        os_facts("Debian", "12.8", "Debian"),
        {"nvidia_driver_branch": "580", "nvidia_driver_os_data": "Amazon-2023"},
        "6.1.0",
    ),
}

_RENDER = """\
- name: Render the dnf data
  gpuprov_test_record:
    dest: "{{ out }}/{{ inventory_hostname }}.json"
    content: "{{ result | to_json }}"
  vars:
    result:
      pkg_mgr: "{{ __nvidia_driver_pkg_mgr }}"
      set: "{{ __nvidia_driver_set }}"
      fabricmanager: "{{ __nvidia_driver_fabricmanager_set }}"
      cuda_repo_url: "{{ __nvidia_driver_cuda_repo_url }}"
      cuda_repo_key: "{{ __nvidia_driver_cuda_repo_key }}"
      key_sha256: "{{ __nvidia_driver_cuda_repo_key_sha256 }}"
      headers: "{{ __nvidia_driver_headers_packages }}"
      module_stream: "{{ __nvidia_driver_dnf_module_stream | trim }}"
      dkms_from: "{{ __nvidia_driver_dnf_dkms_from }}"
      epel_major: "{{ __nvidia_driver_epel_major }}"
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work, out = work_dirs(tmp_path_factory, "nvidia_driver_dnf")
    steps = [
        {
            "name": step,
            "ansible.builtin.include_role": {
                "name": "nvidia_driver",
                "tasks_from": f"{step}.yml",
                "public": True,
            },
        }
        for step in ("preflight", "select")
    ]
    # One play over every case: a case's facts, kernel and role variables are inventory
    # variables.
    hostvars = {
        case: {
            "case_facts": facts,
            "__nvidia_driver_kernel": kernel,
            "nvidia_driver_fabricmanager": True,
            **role_vars,
        }
        for case, (facts, role_vars, kernel) in CASES.items()
    }
    plays = [
        {
            "name": "Render the dnf data",
            "hosts": "all",
            "gather_facts": False,
            "vars": {
                "ansible_facts": "{{ case_facts }}",
                "out": str(out),
            },
            "tasks": [*steps, *yaml.safe_load(_RENDER)],
        }
    ]
    run_plays(work, CASES, plays, hostvars=hostvars)
    return out


def test_fabric_manager_and_nscq_names_follow_the_reference_per_branch(rendered: Path) -> None:
    assert result(rendered, "rhel96_open_580")["fabricmanager"] == list(
        model.fabric_names(REF, 580)
    )
    assert result(rendered, "rocky94_open_570")["fabricmanager"] == list(
        model.fabric_names(REF, 570)
    )
    # and the reference's own words for the two schemes
    assert model.fabric_names(REF, 570) == ("nvidia-fabric-manager", "libnvidia-nscq-570")
    assert model.fabric_names(REF, 580) == ("nvidia-fabricmanager", "libnvidia-nscq")


def test_driver_packages_are_the_references(rendered: Path) -> None:
    pkgs = REF["driver_packages"]
    for case in CASES:
        r = result(rendered, case)
        flavour = "proprietary" if "proprietary" in case else "open"
        anchor = pkgs["open_dkms"] if flavour == "open" else pkgs["proprietary_dkms"]
        assert r["set"]["anchor"] == anchor
        assert set(r["set"]["versioned"]) - {anchor} <= set(pkgs["compute_userspace"])
        assert r["set"]["dkms"] is True


def test_module_streams_are_ones_the_reference_saw(rendered: Path) -> None:
    assert result(rendered, "rhel96_open_580")["module_stream"] == "nvidia-driver:580-open"
    assert result(rendered, "rhel810_proprietary_580")["module_stream"] == "nvidia-driver:580-dkms"
    assert result(rendered, "rocky94_open_570")["module_stream"] == "nvidia-driver:570-open"
    seen = " ".join(REF["module_streams"]["streams_seen"])
    assert "<b>-open" in seen and "<b>-dkms" in seen
    assert REF["module_streams"]["module"] == "nvidia-driver"


def test_repositories_keys_and_dkms_source(rendered: Path) -> None:
    repos = REF["repositories"]
    sha = REF["keys"]["D42D0685"]["sha256_of_file_after_sed_Version"]
    for case, dist, arch in (
        ("rhel96_open_580", "rhel9", "x86_64"),
        ("rhel810_proprietary_580", "rhel8", "x86_64"),
        ("al2023_open_580", "amzn2023", "x86_64"),
        ("al2023_kernel612", "amzn2023", "aarch64"),  # $(uname -m) as the EKS script does
    ):
        r = result(rendered, case)
        assert r["pkg_mgr"] == "dnf"
        base = f"https://developer.download.nvidia.com/compute/cuda/repos/{dist}/{arch}/"
        assert r["cuda_repo_url"] == base
        assert r["cuda_repo_key"] == base + repos[dist]["key"]
        assert r["key_sha256"] == sha
    assert result(rendered, "rhel96_open_580")["dkms_from"] == "epel"
    assert result(rendered, "rhel96_open_580")["epel_major"] == "9"
    assert result(rendered, "rhel810_proprietary_580")["epel_major"] == "8"
    assert result(rendered, "al2023_open_580")["dkms_from"] == "cuda"
    assert "ships its own dkms" in REF["driver_packages"]["dkms_dependency"]


def test_headers_for_the_running_kernel(rendered: Path) -> None:
    assert result(rendered, "rhel96_open_580")["headers"] == [
        f"kernel-devel-{KERNEL_EL9}",
        "kernel-headers",
    ]
    assert result(rendered, "al2023_open_580")["headers"] == ["kernel-devel-6.1.0"]
    assert result(rendered, "al2023_kernel612")["headers"] == ["kernel6.12-devel-6.12.0"]


def test_os_data_override_picks_the_named_file(rendered: Path) -> None:
    r = result(rendered, "override_os_data")
    assert r["pkg_mgr"] == "dnf"
    assert "/amzn2023/" in r["cuda_repo_url"]


def test_every_name_the_role_installs_is_in_the_reference_generated_doubles(
    rendered: Path,
) -> None:
    doubles = model.repositories("/srv/gpuprov-rpmrepo")
    names = model.names(doubles)
    for case in CASES:
        r = result(rendered, case)
        assert set(r["set"]["versioned"] + r["fabricmanager"]) <= names, case
    # The doubles carry every module stream the role can ask for, per recorded branch.
    streams = {s.name for repo in doubles for s in repo.streams}
    for branch in model.driver_versions(REF):
        assert {f"{branch}-open", f"{branch}-dkms"} <= streams
    assert {"open-dkms", "latest-dkms"} <= streams
    assert {repo.default_stream for repo in doubles if repo.streams} == {"open-dkms"}


def test_lockstep_plan_across_a_branch_change_keeps_installed_headers(tmp_path: Path) -> None:
    """The role's own "Work out what to install, remove and unlock" task (read from
    packages-dnf.yml) on what dnf reports for a host moving 570 -> 580.95.05 with headers
    installed: only what differs is installed, the old scheme is removed, stale locks go."""
    tasks = yaml.safe_load((REPO / "roles/nvidia_driver/tasks/packages-dnf.yml").read_text())
    work = next(t for t in tasks if t["name"].startswith("Work out what to install"))
    kernel = f"kernel-devel-{KERNEL_EL9}"
    facts = {
        "__nvidia_driver_set": {
            "versioned": ["kmod-nvidia-open-dkms", "nvidia-driver-cuda"],
            "unversioned": [],
        },
        "__nvidia_driver_fabricmanager_set": list(model.fabric_names(REF, 580)),
        "__nvidia_driver_held": [
            "kmod-nvidia-open-dkms",
            "nvidia-driver-cuda",
            *model.fabric_names(REF, 580),
        ],
        "__nvidia_driver_dnf_headers": [kernel, "kernel-headers"],
        "__nvidia_driver_resolved_version": "580.95.05",
        # repoquery --installed: "<name> <version> <nvra>"
        "__nvidia_driver_dnf_installed": {
            "stdout_lines": [
                "kmod-nvidia-open-dkms 580.95.05 kmod-nvidia-open-dkms-580.95.05-1.el9.x86_64",
                "nvidia-driver-cuda 570.195.03 nvidia-driver-cuda-570.195.03-1.el9.x86_64",
                f"kernel-devel 5.14.0 {KERNEL_EL9.replace('5.14.0-', 'kernel-devel-5.14.0-')}",
                "kernel-headers 5.14.0 kernel-headers-5.14.0-427.13.1.el9_4.x86_64",
            ]
        },
        "__nvidia_driver_dnf_family_installed": {
            "stdout_lines": ["kmod-nvidia-open-dkms", *model.fabric_names(REF, 570)]
        },
        "__nvidia_driver_locks": {
            "stdout_lines": [
                "nvidia-driver-cuda-3:570.195.03-1.el9.*",
                "nvidia-fabric-manager-0:570.195.03-1.*",
                "kmod-nvidia-open-dkms-3:580.95.05-1.el9.*",
            ]
        },
    }
    show = "{{ [__nvidia_driver_dnf_to_install, __nvidia_driver_dnf_retire,"
    show += " __nvidia_driver_dnf_unlock] }}"
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": facts,
            "tasks": [
                work,
                {"gpuprov_test_record": {"dest": str(tmp_path / "out.json"), "content": show}},
            ],
        }
    ]
    run_plays(tmp_path, ["localhost"], play)
    install, retire, unlock = json.loads((tmp_path / "out.json").read_text())
    assert install == [
        "nvidia-driver-cuda-580.95.05",
        "nvidia-fabricmanager-580.95.05",
        "libnvidia-nscq-580.95.05",
    ]
    assert retire == ["nvidia-fabric-manager", "libnvidia-nscq-570"]
    assert unlock == ["nvidia-driver-cuda", "nvidia-fabric-manager"]
