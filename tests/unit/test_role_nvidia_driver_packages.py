"""The nvidia_driver role's package lists and repositories, rendered per OS.

Runs the role's own pure task files (preflight.yml + select.yml) with ansible-playbook on
local fake hosts whose facts are given per play, then renders the sources and the apt pin
file. Nothing on this machine changes: the only writes go to a temporary directory. This is
how the Ubuntu and RHEL paths are covered (there are no Ubuntu/RHEL lab hosts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
from roleplay import failure, os_facts, result, run_plays, work_dirs  # noqa: E402

pytestmark = pytest.mark.ansible  # role renders through real Ansible (the ansible tier)

KERNEL = "6.8.0-1024-aws"


# case -> (facts, role variables)
CASES: dict[str, tuple[dict[str, str], dict[str, Any]]] = {
    "ubuntu2404_distribution_open_580_fm": (
        os_facts("Ubuntu", "24.04", "Debian"),
        {
            "nvidia_driver_source": "distribution",
            "nvidia_driver_flavour": "open",
            "nvidia_driver_branch": "580",
            "nvidia_driver_fabricmanager": True,
        },
    ),
    # issue 47 item 6: an HGX B200 with the distribution's driver: nvlsm is only in NVIDIA's
    # CUDA repository (packages.yaml ubuntu_archive.not_in_ubuntu_archive)
    "ubuntu2404_distribution_open_580_nvlink5": (
        os_facts("Ubuntu", "24.04", "Debian"),
        {
            "nvidia_driver_source": "distribution",
            "nvidia_driver_flavour": "open",
            "nvidia_driver_branch": "580",
            "nvidia_driver_fabricmanager": True,
            "nvidia_driver_nvlink5": True,
        },
    ),
    "ubuntu2204_cuda_proprietary_535": (
        os_facts("Ubuntu", "22.04", "Debian"),
        {
            "nvidia_driver_source": "cuda",
            "nvidia_driver_flavour": "proprietary",
            "nvidia_driver_branch": "535",
        },
    ),
    "ubuntu2404_cuda_open_580_arm": (
        os_facts("Ubuntu", "24.04", "Debian", arch="aarch64"),
        {"nvidia_driver_source": "cuda", "nvidia_driver_branch": "580"},
    ),
    "debian12_distribution_open_535": (
        os_facts("Debian", "12.8", "Debian"),
        {"nvidia_driver_source": "distribution", "nvidia_driver_branch": "535"},
    ),
    "debian13_distribution_proprietary_535": (
        os_facts("Debian", "13.1", "Debian"),
        {
            "nvidia_driver_source": "distribution",
            "nvidia_driver_flavour": "proprietary",
            "nvidia_driver_branch": "535",
        },
    ),
    "debian13_distribution_open_535": (
        os_facts("Debian", "13.1", "Debian"),
        {"nvidia_driver_source": "distribution", "nvidia_driver_branch": "535"},
    ),
    "debian13_distribution_resigned_mirror": (
        os_facts("Debian", "13.1", "Debian"),
        {
            "nvidia_driver_source": "distribution",
            "nvidia_driver_flavour": "proprietary",
            "nvidia_driver_branch": "550",
            "nvidia_driver_debian_mirror": "http://mirror.example.internal/debian",
            "nvidia_driver_debian_mirror_key": "http://mirror.example.internal/key.asc",
        },
    ),
    "rhel9_cuda_open_580_fm": (
        os_facts("RedHat", "9.4", "RedHat"),
        {"nvidia_driver_source": "cuda", "nvidia_driver_fabricmanager": True},
    ),
    "rocky9_cuda_proprietary_570": (
        os_facts("Rocky", "9.5", "RedHat"),
        {"nvidia_driver_flavour": "proprietary", "nvidia_driver_branch": "570"},
    ),
    "rocky9_distribution": (
        os_facts("Rocky", "9.5", "RedHat"),
        {"nvidia_driver_source": "distribution"},
    ),
    # NVIDIA's naming scheme across branches (packages.yaml cuda_apt.branches).
    "ubuntu2404_cuda_open_575_fm": (
        os_facts("Ubuntu", "24.04", "Debian"),
        {"nvidia_driver_branch": "575", "nvidia_driver_fabricmanager": True},
    ),
    "ubuntu2204_cuda_open_580_fm": (
        os_facts("Ubuntu", "22.04", "Debian"),
        {"nvidia_driver_branch": "580", "nvidia_driver_fabricmanager": True},
    ),
    "ubuntu2404_cuda_open_595_fm": (
        os_facts("Ubuntu", "24.04", "Debian"),
        {"nvidia_driver_branch": "595", "nvidia_driver_fabricmanager": True},
    ),
    "ubuntu2204_cuda_proprietary_595": (
        os_facts("Ubuntu", "22.04", "Debian"),
        {"nvidia_driver_branch": "595", "nvidia_driver_flavour": "proprietary"},
    ),
    "ubuntu2204_distribution_open_595_fm": (
        os_facts("Ubuntu", "22.04", "Debian"),
        {
            "nvidia_driver_source": "distribution",
            "nvidia_driver_branch": "595",
            "nvidia_driver_fabricmanager": True,
        },
    ),
    "debian12_cuda_open_575_fm": (
        os_facts("Debian", "12.8", "Debian"),
        {"nvidia_driver_branch": "575", "nvidia_driver_fabricmanager": True},
    ),
    "debian12_cuda_open_580_fm": (
        os_facts("Debian", "12.8", "Debian"),
        {"nvidia_driver_branch": "580", "nvidia_driver_fabricmanager": True},
    ),
    "debian12_cuda_open_595_fm": (
        os_facts("Debian", "12.8", "Debian"),
        {"nvidia_driver_branch": "595", "nvidia_driver_fabricmanager": True},
    ),
    "debian13_cuda_open_580": (
        os_facts("Debian", "13.1", "Debian"),
        {"nvidia_driver_branch": "580"},
    ),
    "ubuntu2004_unsupported": (os_facts("Ubuntu", "20.04", "Debian"), {}),
    "debian12_version_outside_branch": (
        os_facts("Debian", "12.8", "Debian"),
        {"nvidia_driver_branch": "535", "nvidia_driver_version": "550.163.01"},
    ),
}

# What each play writes: the selected sets and the rendered source of the driver packages.
_RENDER = """\
- name: Render the nvidia_driver package data
  gpuprov_test_record:
    dest: "{{ out }}/{{ inventory_hostname }}.json"
    content: "{{ result | to_json }}"
  vars:
    result:
      failed: false
      pkg_mgr: "{{ __nvidia_driver_pkg_mgr }}"
      set: "{{ __nvidia_driver_set }}"
      fabricmanager: "{{ __nvidia_driver_fabricmanager_set }}"
      pinning: "{{ __nvidia_driver_pinning_set }}"
      key_fingerprints: "{{ __nvidia_driver_cuda_repo_key_fingerprints | default([]) }}"
      use_cuda_repo: "{{ __nvidia_driver_use_cuda_repo }}"
      cuda_repo_url: "{{ __nvidia_driver_cuda_repo_url }}"
      cuda_repo_key: "{{ __nvidia_driver_cuda_repo_key }}"
      distribution_sources: "{{ __nvidia_driver_distribution_sources }}"
      headers: "{{ __nvidia_driver_headers_packages }}"
      module_stream: "{{ __nvidia_driver_dnf_module_stream | default('') }}"
- name: Render the apt pin file
  gpuprov_test_record:
    dest: "{{ out }}/{{ inventory_hostname }}.pref"
    content: "{{ lookup('ansible.builtin.template', role_dir ~ '/templates/apt-preferences.j2') }}"
  vars:
    __nvidia_driver_resolved_version: "580.95.05"
"""

_RESCUE = """\
- name: Record the failure
  gpuprov_test_record:
    dest: "{{ out }}/{{ inventory_hostname }}.json"
    content: "{{ {'failed': true, 'msg': ansible_failed_result.msg} | to_json }}"
"""


def _playbook(out: Path) -> list[dict[str, Any]]:
    """One play over every case (a play per case loads the role again for each): a case's
    facts and role variables are its inventory variables."""
    block = [
        {
            "name": "Preflight",
            "ansible.builtin.include_role": {
                "name": "nvidia_driver",
                "tasks_from": "preflight.yml",
            },
        },
        {
            "name": "Select",
            "ansible.builtin.include_role": {
                "name": "nvidia_driver",
                "tasks_from": "select.yml",
                "public": True,
            },
        },
        *yaml.safe_load(_RENDER),
    ]
    return [
        {
            "name": "Render the nvidia_driver package data",
            "hosts": "all",
            "gather_facts": False,
            "vars": {
                "ansible_facts": "{{ case_facts }}",
                "__nvidia_driver_kernel": KERNEL,
                "out": str(out),
                "role_dir": str(REPO / "roles" / "nvidia_driver"),
            },
            "tasks": [{"block": block, "rescue": yaml.safe_load(_RESCUE)}],
        }
    ]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work, out = work_dirs(tmp_path_factory, "nvidia_driver_render")
    hostvars = {
        case: {"case_facts": facts, **role_vars} for case, (facts, role_vars) in CASES.items()
    }
    run_plays(work, CASES, _playbook(out), hostvars=hostvars)
    return out


def test_every_case_rendered(rendered: Path) -> None:
    assert sorted(p.stem for p in rendered.glob("*.json")) == sorted(CASES)


def test_ubuntu_distribution_prefers_signed_prebuilt_modules(rendered: Path) -> None:
    r = result(rendered, "ubuntu2404_distribution_open_580_fm")
    assert not r["failed"]
    assert r["pkg_mgr"] == "apt"
    assert r["set"]["anchor"] == "nvidia-headless-no-dkms-580-server-open"
    assert r["set"]["versioned"] == [
        "nvidia-headless-no-dkms-580-server-open",
        "nvidia-utils-580-server",
        "libnvidia-compute-580-server",
    ]
    assert r["set"]["prebuilt"] == [f"linux-modules-nvidia-580-server-open-{KERNEL}"]
    assert r["set"]["dkms_versioned"] == ["nvidia-dkms-580-server-open"]
    assert r["headers"] == [f"linux-headers-{KERNEL}"]
    assert r["set"]["prebuilt_common"] == "nvidia-kernel-common-580-server"
    # Canonical's own fabric manager (multiverse): it keeps the branch suffix and matches the
    # -server driver exactly; no NVIDIA repository is needed.
    assert r["fabricmanager"] == ["nvidia-fabricmanager-580", "libnvidia-nscq-580"]
    assert r["pinning"] == []
    assert r["use_cuda_repo"] is False
    assert r["distribution_sources"] == []


def test_an_nvlink5_board_gets_the_cuda_repository_with_the_distribution_driver(
    rendered: Path,
) -> None:
    """nvlsm, the NVLink subnet manager, is not in Ubuntu's archive: the role adds NVIDIA's
    repository for it as it does for Debian's fabric manager (it never did: item 6)."""
    assert result(rendered, "ubuntu2404_distribution_open_580_fm")["use_cuda_repo"] is False
    assert result(rendered, "ubuntu2404_distribution_open_580_nvlink5")["use_cuda_repo"] is True


def test_ubuntu_cuda_repository_and_key(rendered: Path) -> None:
    r = result(rendered, "ubuntu2204_cuda_proprietary_535")
    base = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"
    assert r["cuda_repo_url"] == base
    assert r["cuda_repo_key"] == base + "3bf863cc.pub"
    assert r["set"]["versioned"] == [
        "nvidia-headless-535",
        "nvidia-dkms-535",
        "nvidia-utils-535",
        "libnvidia-compute-535",
    ]
    assert r["fabricmanager"] == []


def test_arm_hosts_use_the_sbsa_repository(rendered: Path) -> None:
    r = result(rendered, "ubuntu2404_cuda_open_580_arm")
    assert r["cuda_repo_url"].endswith("/repos/ubuntu2404/sbsa/")
    assert r["set"]["anchor"] == "nvidia-headless-580-open"


def test_debian12_distribution_adds_nonfree_signed(rendered: Path) -> None:
    r = result(rendered, "debian12_distribution_open_535")
    assert r["set"]["anchor"] == "nvidia-open-kernel-dkms"
    assert r["set"]["dkms"] is True
    assert r["use_cuda_repo"] is False
    (src,) = r["distribution_sources"]
    assert src["suites"] == ["bookworm", "bookworm-updates"]
    assert src["components"] == ["contrib", "non-free", "non-free-firmware"]
    assert src["signed_by"] == "/usr/share/keyrings/debian-archive-keyring.gpg"


def test_debian13_535_is_the_tesla_branch(rendered: Path) -> None:
    r = result(rendered, "debian13_distribution_proprietary_535")
    assert r["set"]["anchor"] == "nvidia-tesla-535-kernel-dkms"
    assert "nvidia-tesla-535-smi" in r["set"]["versioned"]
    assert r["distribution_sources"][0]["suites"] == ["trixie", "trixie-updates"]


def test_a_resigned_debian_mirror_is_checked_against_its_own_key(rendered: Path) -> None:
    r = result(rendered, "debian13_distribution_resigned_mirror")
    (src,) = r["distribution_sources"]
    assert src["uris"] == ["http://mirror.example.internal/debian"]
    assert src["signed_by"] == "http://mirror.example.internal/key.asc"
    assert r["set"]["anchor"] == "nvidia-kernel-dkms"


def test_debian13_tesla_branch_has_no_open_modules(rendered: Path) -> None:
    msg = failure(rendered, "debian13_distribution_open_535")
    assert "no open kernel modules for branch 535" in msg
    assert "flavours there: proprietary" in msg


def test_rhel9_cuda_module_stream_and_key(rendered: Path) -> None:
    r = result(rendered, "rhel9_cuda_open_580_fm")
    assert r["pkg_mgr"] == "dnf"
    base = "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/"
    assert r["cuda_repo_url"] == base
    assert r["cuda_repo_key"] == base + "D42D0685.pub"
    assert r["module_stream"] == "nvidia-driver:580-open"
    assert r["set"]["anchor"] == "kmod-nvidia-open-dkms"
    assert r["headers"] == [f"kernel-devel-{KERNEL}", "kernel-headers"]
    # From 580 the rpm names drop the dash and the branch (reference cuda_rpm.branches.ge_580).
    assert r["fabricmanager"] == ["nvidia-fabricmanager", "libnvidia-nscq"]


def test_rocky9_uses_the_rhel_data(rendered: Path) -> None:
    r = result(rendered, "rocky9_cuda_proprietary_570")
    assert r["module_stream"] == "nvidia-driver:570-dkms"
    assert r["set"]["anchor"] == "kmod-nvidia-latest-dkms"


def test_rhel_has_no_distribution_source(rendered: Path) -> None:
    msg = failure(rendered, "rocky9_distribution")
    assert "nvidia_driver_source=distribution is not available" in msg
    assert "available: cuda" in msg


def test_unsupported_os_names_the_supported_ones(rendered: Path) -> None:
    msg = failure(rendered, "ubuntu2004_unsupported")
    assert "Ubuntu 20.04 is not supported" in msg
    assert "Ubuntu 22.04, Ubuntu 24.04, Debian 12, Debian 13, RHEL 8, RHEL 9" in msg


def test_version_must_belong_to_the_branch(rendered: Path) -> None:
    msg = failure(rendered, "debian12_version_outside_branch")
    assert "nvidia_driver_version=550.163.01" in msg


def test_pin_file_pins_every_nvidia_package_to_the_version(rendered: Path) -> None:
    text = (rendered / "debian12_distribution_open_535.pref").read_text(encoding="utf-8")
    stanza = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert stanza == [
        "Package: *nvidia* libcuda* libnvcuvid* libnvoptix*",
        "Pin: version 580.95.05-*",
        "Pin-Priority: 1001",
    ]


def test_fabric_manager_keeps_the_branch_suffix_up_to_575(rendered: Path) -> None:
    r = result(rendered, "ubuntu2404_cuda_open_575_fm")
    assert r["fabricmanager"] == ["nvidia-fabricmanager-575", "libnvidia-nscq-575"]
    assert r["set"]["versioned"][0] == "nvidia-headless-575-open"
    assert r["pinning"] == []
    d = result(rendered, "debian12_cuda_open_575_fm")
    assert d["fabricmanager"] == ["nvidia-fabricmanager-575", "libnvidia-nscq-575"]


def test_fabric_manager_is_unsuffixed_from_580(rendered: Path) -> None:
    r = result(rendered, "ubuntu2204_cuda_open_580_fm")
    assert r["fabricmanager"] == ["nvidia-fabricmanager", "libnvidia-nscq"]
    # The driver packages still carry the branch at 580.
    assert r["set"]["versioned"] == [
        "nvidia-headless-580-open",
        "nvidia-dkms-580-open",
        "nvidia-utils-580",
        "libnvidia-compute-580",
    ]
    assert r["pinning"] == []


def test_from_590_names_lose_the_branch_and_the_pinning_package_comes_first(
    rendered: Path,
) -> None:
    r = result(rendered, "ubuntu2404_cuda_open_595_fm")
    assert not r["failed"], r
    assert r["pinning"] == ["nvidia-driver-pinning-595"]
    assert r["set"]["anchor"] == "nvidia-dkms-open"
    assert r["set"]["versioned"] == [
        "nvidia-headless-no-dkms-open",
        "nvidia-dkms-open",
        "nvidia-utils",
        "libnvidia-compute",
    ]
    assert r["fabricmanager"] == ["nvidia-fabricmanager", "libnvidia-nscq"]


def test_no_proprietary_set_is_recorded_for_590_on_ubuntu(rendered: Path) -> None:
    msg = failure(rendered, "ubuntu2204_cuda_proprietary_595")
    assert "no proprietary kernel modules for branch 595" in msg
    assert "flavours there: open" in msg


def test_canonical_archive_has_no_pinning_package(rendered: Path) -> None:
    r = result(rendered, "ubuntu2204_distribution_open_595_fm")
    assert r["pinning"] == []
    assert r["set"]["anchor"] == "nvidia-headless-no-dkms-595-server-open"
    assert r["fabricmanager"] == ["nvidia-fabricmanager-595", "libnvidia-nscq-595"]


def test_debian_cuda_names_carry_no_branch(rendered: Path) -> None:
    sets = {b: result(rendered, f"debian12_cuda_open_{b}_fm") for b in ("575", "580", "595")}
    for branch, r in sets.items():
        assert not r["failed"], (branch, r)
        assert r["set"]["versioned"] == [
            "nvidia-kernel-open-dkms",
            "nvidia-driver-cuda",
            "nvidia-persistenced",
        ], branch
        assert r["cuda_repo_url"].endswith("/repos/debian12/x86_64/")
    assert sets["580"]["fabricmanager"] == ["nvidia-fabricmanager", "libnvidia-nscq"]
    assert sets["580"]["pinning"] == []
    assert sets["595"]["pinning"] == ["nvidia-driver-pinning-595"]
    assert sets["595"]["fabricmanager"] == ["nvidia-fabricmanager", "libnvidia-nscq"]


def test_expected_key_fingerprints_come_from_the_reference(rendered: Path) -> None:
    reference = yaml.safe_load(
        (REPO / "tests/recorded/reference/packages.yaml").read_text(encoding="utf-8")
    )["cuda_apt"]["repositories"]
    for case, dist in (
        ("debian12_cuda_open_580_fm", "debian12"),
        ("ubuntu2204_cuda_open_580_fm", "ubuntu2204"),
        ("ubuntu2404_cuda_open_595_fm", "ubuntu2404"),
        ("debian13_cuda_open_580", "debian13"),
    ):
        r = result(rendered, case)
        assert r["key_fingerprints"] == [reference[dist]["key_fingerprint"]], case
        assert r["cuda_repo_key"].endswith("/" + reference[dist]["key_file"]), case
