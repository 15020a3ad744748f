"""The lab's signed apt repository of test doubles (tests/lab/aptrepo): packages built with
dpkg-deb, indexes apt can resolve, signatures apt's gpgv accepts from the public key alone,
and the versions the roles pin."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lab"))

from aptrepo import AptRepoBuildError, BuiltRepo, build_repo, verify_repo  # noqa: E402
from aptrepo.packages import (  # noqa: E402
    CUDA_REPOS,
    DRIVER_VERSIONS,
    TOOLKIT_VERSIONS,
    all_packages,
)

OPERATIONS = REPO / "tests" / "recorded" / "reference" / "operations.md"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> BuiltRepo:
    return build_repo(tmp_path_factory.mktemp("aptrepo"))


def _index(directory: Path) -> dict[tuple[str, str], dict[str, str]]:
    stanzas: dict[tuple[str, str], dict[str, str]] = {}
    for block in (directory / "Packages").read_text().strip().split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z0-9-]+): (.*)$", block, re.MULTILINE))
        stanzas[(fields["Package"], fields["Version"])] = fields
    return stanzas


def test_every_package_is_in_its_repository_index(built: BuiltRepo) -> None:
    for package in all_packages():
        stanza = _index(built.root / package.repo)[(package.name, package.version)]
        deb = built.root / package.repo / stanza["Filename"]
        assert deb.stat().st_size == int(stanza["Size"])
        assert (
            "TEST DOUBLE"
            in subprocess.run(
                ["dpkg-deb", "--field", str(deb), "Description"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )


def test_fabric_manager_versions_are_those_of_debians_drivers(built: BuiltRepo) -> None:
    # bookworm-security's 535.309.01 too (docs/debian-nvidia-packages.md): the upgrade lab test.
    assert "535.309.01" in DRIVER_VERSIONS["535"]
    # shared/reference/operations.md: "bookworm 535.261.03, trixie 550.163.01".
    debian = dict(re.findall(r"(bookworm|trixie) (\d+\.\d+\.\d+)", OPERATIONS.read_text()))
    for release, repo in (("bookworm", CUDA_REPOS[0]), ("trixie", CUDA_REPOS[1])):
        version = debian[release]
        branch = version.split(".")[0]
        assert version in DRIVER_VERSIONS[branch]
        index = _index(built.root / repo)
        for name in (f"nvidia-fabricmanager-{branch}", f"libnvidia-nscq-{branch}"):
            assert (name, f"{version}-1") in index
        # Every release of the branch the stand-ins carry (upgrades need more than one).
        offered = [k for k in index if k[0] == f"nvidia-fabricmanager-{branch}"]
        assert len(offered) == len(DRIVER_VERSIONS[branch]) >= 2


def test_toolkit_packages_depend_on_their_own_version(built: BuiltRepo) -> None:
    index = _index(built.root / built.toolkit_dir)
    assert len(TOOLKIT_VERSIONS) >= 2
    for version in TOOLKIT_VERSIONS:
        depends = index[("nvidia-container-toolkit", version)]["Depends"]
        assert f"nvidia-container-toolkit-base (= {version})" in depends
        assert f"libnvidia-container-tools (= {version})" in depends


def test_signatures_verify_with_the_public_key_alone(built: BuiltRepo) -> None:
    verify_repo(built)


def test_a_tampered_index_fails_verification(built: BuiltRepo, tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    subprocess.run(["cp", "-a", str(built.root), str(copy)], check=True)
    release = copy / built.toolkit_dir / "Release"
    release.write_text(release.read_text().replace("amd64", "arm64"))
    with pytest.raises(AptRepoBuildError, match="gpgv"):
        verify_repo(BuiltRepo(copy, built.fingerprint, built.toolkit_dir, built.cuda_dirs))


def test_nvidia_ctk_in_the_package_reports_the_package_version(
    built: BuiltRepo, tmp_path: Path
) -> None:
    for version in TOOLKIT_VERSIONS:
        deb = built.root / built.toolkit_dir / f"nvidia-container-toolkit-base_{version}_amd64.deb"
        root = tmp_path / version
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
        done = subprocess.run(
            [sys.executable, str(root / "usr/bin/nvidia-ctk"), "--version"],
            capture_output=True,
            text=True,
            check=True,
        )
        upstream = version.rsplit("-", 1)[0]
        assert done.stdout.splitlines()[0] == f"NVIDIA Container Toolkit CLI version {upstream}"
        units = (root / "lib/systemd/system/nvidia-cdi-refresh.service").exists()
        assert units == (version == "1.18.0-1")  # only >= 1.18 ships the refresh units


def test_a_second_build_reuses_the_first(built: BuiltRepo) -> None:
    packages = built.root / built.toolkit_dir / "Packages"
    before = packages.stat().st_mtime_ns
    again = build_repo(built.root.parent)
    assert again.fingerprint == built.fingerprint
    assert packages.stat().st_mtime_ns == before
