"""With NVIDIA's CUDA repository as the source, the driver role's apt pin file lets no package
of the distribution's archive win for NVIDIA's names, even a same-named newer one at the
driver's upstream version: the plan's "from NVIDIA's CUDA repository" stays true.

The role's template renders on local fake hosts (Ubuntu and Debian, both sources); the
rendered file is then handed to real apt (`apt-cache policy`, private state in a temporary
directory) with two flat file: repositories, one whose Release says `Origin: Ubuntu` (the
distribution's archive: its Origin value is a lead, vars/main.yml) and one standing for
NVIDIA's. The two stanzas are SYNTHETIC, made here to show the hazard: the same name and
upstream (580.95.05, recorded) with the archive's revision higher than NVIDIA's.

The archive also carries the Ubuntu replay's 64K-page NVIDIA kernel (image and headers,
recorded from USN-8016-1: aptrepo/selection.yaml, packages.yaml canonical_archive.nvidia_kernels):
its names contain "nvidia" too, and the origin record must not take its candidate away (GH200
and GB200 run it; DKMS needs its headers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from roleplay import run_plays, work_dirs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "lab"))
from aptrepo.graphs import kernel_stanzas, kernels_without_prebuilt

# runs ansible-playbook (or ansible-doc / the role's modules) on this machine: the ansible tier
pytestmark = pytest.mark.ansible

CASES = {
    "ubuntu_cuda": ("Ubuntu", "24.04", "cuda"),
    "ubuntu_distribution": ("Ubuntu", "24.04", "distribution"),
    "debian_cuda": ("Debian", "12.8", "cuda"),
}
VERSION = "580.95.05"
NVIDIA = f"{VERSION}-1ubuntu1"
ARCHIVE = f"{VERSION}-9ubuntu0.24.04.1"  # synthetic: newer than NVIDIA's at the same upstream
# The replay's Ubuntu NVIDIA kernel (linux-image-/linux-headers-<abi>-nvidia-64k), as recorded.
KERNELS = {
    p.name: p.version
    for p in kernel_stanzas("replay")
    if p.name.endswith(tuple(f"-{flavour}" for flavour in kernels_without_prebuilt()))
}

_TASKS = """\
- name: Render the apt pin file
  gpuprov_test_record:
    dest: "{{ out }}/{{ inventory_hostname }}.pref"
    content: "{{ lookup('ansible.builtin.template', role_dir ~ '/templates/apt-preferences.j2') }}"
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work, out = work_dirs(tmp_path_factory, "origin_pin")
    role = Path(__file__).resolve().parents[2] / "roles" / "nvidia_driver"
    plays = [
        {
            "name": case,
            "hosts": case,
            "gather_facts": False,
            "vars_files": [str(role / "vars" / "main.yml")],
            "vars": {
                "ansible_facts": {"distribution": dist, "distribution_version": ver},
                "nvidia_driver_source": source,
                "nvidia_driver_flavour": "open",
                "__nvidia_driver_resolved_version": VERSION,
                "role_dir": str(role),
                "out": str(out),
            },
            "tasks": yaml.safe_load(_TASKS),
        }
        for case, (dist, ver, source) in CASES.items()
    ]
    run_plays(work, CASES, plays)
    return out


def _repo(root: Path, name: str, origin: str, packages: dict[str, str]) -> str:
    d = root / name
    d.mkdir()
    (d / "Packages").write_text(
        "\n".join(
            f"Package: {package}\nVersion: {version}\nArchitecture: amd64\n"
            f"Filename: ./x.deb\nSize: 1\nDescription: synthetic stanza ({name})\n"
            for package, version in packages.items()
        )
    )
    (d / "Release").write_text(f"Origin: {origin}\nLabel: {name}\nArchitectures: amd64\n")
    return f"deb [trusted=yes] file:{d} ./\n"


def _candidates(tmp: Path, pins: str) -> dict[str, str]:
    for sub in ("lists/partial", "cache/archives/partial", "state", "prefs.d", "sources.d"):
        (tmp / sub).mkdir(parents=True)
    (tmp / "status").write_text("")
    (tmp / "sources.list").write_text(
        _repo(tmp, "nvidia", "gpuprov-lab", {"nvidia-utils-580": NVIDIA})
        + _repo(tmp, "archive", "Ubuntu", {"nvidia-utils-580": ARCHIVE, **KERNELS})
    )
    (tmp / "preferences").write_text(pins)
    opts = [
        f"-oDir::State={tmp}/state", f"-oDir::State::Lists={tmp}/lists",
        f"-oDir::State::status={tmp}/status", f"-oDir::Cache={tmp}/cache",
        f"-oDir::Etc::SourceList={tmp}/sources.list", f"-oDir::Etc::SourceParts={tmp}/sources.d",
        f"-oDir::Etc::Preferences={tmp}/preferences", f"-oDir::Etc::PreferencesParts={tmp}/prefs.d",
        "-oAPT::Architecture=amd64", "-oDebug::NoLocking=1", "-oAPT::Sandbox::User=root",
    ]  # fmt: skip
    subprocess.run(["apt-get", "-q", *opts, "update"], check=True, capture_output=True)
    policy = subprocess.run(
        ["apt-cache", *opts, "policy", "nvidia-utils-580", *KERNELS],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    names = [ln.rstrip(":") for ln in policy.splitlines() if not ln.startswith(" ")]
    found = [ln.split()[1] for ln in policy.splitlines() if "Candidate:" in ln]
    return dict(zip(names, found, strict=True))


def test_cuda_source_demotes_the_distribution_origin_first(rendered: Path) -> None:
    text = (rendered / "ubuntu_cuda.pref").read_text()
    records = [r for r in text.split("\n\n") if "Pin:" in r]
    assert "Pin: release o=Ubuntu" in records[0] and "Pin-Priority: -1" in records[0]
    assert f"Pin: version {VERSION}-*" in records[1] and "Pin-Priority: 1001" in records[1]
    assert "Pin: release o=Debian" in (rendered / "debian_cuda.pref").read_text()
    # Canonical's own archive as the source: no origin record (its packages are the point).
    assert "Pin: release" not in (rendered / "ubuntu_distribution.pref").read_text()


def test_real_apt_takes_nvidias_package_with_the_pin_and_the_archives_without(
    rendered: Path, tmp_path: Path
) -> None:
    pins = (rendered / "ubuntu_cuda.pref").read_text()
    assert _candidates(tmp_path / "with", pins)["nvidia-utils-580"] == NVIDIA
    # Yesterday's pin file (version only, any origin): the archive's newer revision wins.
    version_only = f"Package: *nvidia*\nPin: version {VERSION}-*\nPin-Priority: 1001\n"
    assert _candidates(tmp_path / "without", version_only)["nvidia-utils-580"] == ARCHIVE


def test_real_apt_keeps_ubuntus_nvidia_kernel_a_candidate(rendered: Path, tmp_path: Path) -> None:
    assert len(KERNELS) == 2 and all("-nvidia-64k" in name for name in KERNELS)
    candidates = _candidates(tmp_path, (rendered / "ubuntu_cuda.pref").read_text())
    # The kernel and its headers keep the archive's version (with "*nvidia*" from o=Ubuntu
    # at -1 they had no candidate at all), while the driver's names stay NVIDIA's.
    assert {name: candidates[name] for name in KERNELS} == KERNELS
    assert candidates["nvidia-utils-580"] == NVIDIA
