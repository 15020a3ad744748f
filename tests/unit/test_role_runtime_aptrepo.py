"""The lab's signed apt repository of test doubles (tests/lab/aptrepo): packages built with
dpkg-deb, indexes apt can resolve, signatures apt's gpgv accepts from the public key alone,
the fabric manager of Debian's own drivers, and the toolkit's per-release behaviour."""

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
    TOOLKIT_PUBLISHED,
    all_packages,
    fabric_names,
)

pytestmark = pytest.mark.ansible  # real apt and dpkg over the generated repositories

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


def test_fabric_manager_of_debians_own_drivers_is_published(built: BuiltRepo) -> None:
    # operations.md: "bookworm 535.261.03, trixie 550.163.01"; bookworm-security's 535.309.01
    # too (the upgrade lab test).
    debian = dict(re.findall(r"(bookworm|trixie) (\d+\.\d+\.\d+)", OPERATIONS.read_text()))
    wanted = [
        ("bookworm", debian["bookworm"]),
        ("bookworm", "535.309.01"),
        ("trixie", debian["trixie"]),
    ]
    for release, version in wanted:
        repo = CUDA_REPOS[0] if release == "bookworm" else CUDA_REPOS[1]
        branch = version.split(".")[0]
        index = _index(built.root / repo)
        names = fabric_names(branch)
        for name in (names["fabricmanager"], names["nscq"]):
            assert name.endswith(f"-{branch}")  # below 580: suffixed
            assert (name, f"{version}-1") in index


def test_toolkit_packages_are_coupled_as_the_reference_says(built: BuiltRepo) -> None:
    index = _index(built.root / built.toolkit_dir)
    assert len(TOOLKIT_PUBLISHED) >= 3
    for version in TOOLKIT_PUBLISHED:
        depends = index[("nvidia-container-toolkit", version)]["Depends"]
        assert f"nvidia-container-toolkit-base (= {version})" in depends
        tools = "=" if version >= "1.18" else ">="  # container_toolkit.debian_control
        assert f"libnvidia-container-tools ({tools} {version})" in depends
        assert "libnvidia-container-tools (<< 2.0.0)" in depends


def test_signatures_verify_with_the_public_key_alone(built: BuiltRepo) -> None:
    verify_repo(built)


def test_a_tampered_index_fails_verification(built: BuiltRepo, tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    subprocess.run(["cp", "-a", str(built.root), str(copy)], check=True)
    release = copy / built.toolkit_dir / "Release"
    release.write_text(release.read_text().replace("amd64", "arm64"))
    with pytest.raises(AptRepoBuildError, match="gpgv"):
        verify_repo(BuiltRepo(copy, built.fingerprint, built.toolkit_dir, built.cuda_dirs))


CONTAINERD_CONFIG = """version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
"""


def _ctk(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / "usr/bin/nvidia-ctk"), *args],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("version", "drop_in"),
    [
        ("1.17.8-1", None),  # edits config.toml in place
        ("1.18.0-1", "/etc/containerd/config.d/99-nvidia.toml"),
        ("1.18.1-1", "/etc/containerd/conf.d/99-nvidia.toml"),  # 'Fix containerd drop-in path'
    ],
)
def test_nvidia_ctk_behaves_as_its_release(
    built: BuiltRepo, tmp_path: Path, version: str, drop_in: str | None
) -> None:
    deb = built.root / built.toolkit_dir / f"nvidia-container-toolkit-base_{version}_amd64.deb"
    root = tmp_path / version
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    done = _ctk(root, "--version")
    upstream = version.rsplit("-", 1)[0]
    assert done.stdout.splitlines()[0] == f"NVIDIA Container Toolkit CLI version {upstream}"
    # The 1.18 units sit in /etc/systemd/system (behaviour_by_version), 1.17.8 has none.
    units = root / "etc/systemd/system"
    assert units.is_dir() == (drop_in is not None)
    config = tmp_path / "config.toml"
    config.write_text(CONTAINERD_CONFIG)
    if drop_in is None:
        done = _ctk(root, "runtime", "configure", "--runtime=containerd", f"--config={config}")
        assert done.returncode == 0, done.stderr
        assert "containerd.runtimes.nvidia]" in config.read_text()
        refused = _ctk(
            root,
            "runtime",
            "configure",
            "--runtime=containerd",
            f"--config={config}",
            f"--drop-in-config={tmp_path / 'd.toml'}",
        )
        assert refused.returncode != 0  # no such flag before 1.18
        return
    service = (units / "nvidia-cdi-refresh.service").read_text()
    assert "Environment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml" in service
    assert "ExecStart=/usr/bin/nvidia-ctk cdi generate" in service
    assert (
        "PathChanged=/lib/modules/%v/modules.dep" in (units / "nvidia-cdi-refresh.path").read_text()
    )
    postinst = subprocess.run(
        ["dpkg-deb", "--ctrl-tarfile", str(deb)], capture_output=True, check=True
    ).stdout
    assert b"enable --now nvidia-cdi-refresh.path nvidia-cdi-refresh.service" in postinst
    assert drop_in in (root / "usr/bin/nvidia-ctk").read_text()  # this release's default
    target = tmp_path / "dropin.toml"
    done = _ctk(
        root,
        "runtime",
        "configure",
        "--runtime=containerd",
        f"--config={config}",
        f"--drop-in-config={target}",
    )
    assert done.returncode == 0, done.stderr
    assert "containerd.runtimes.nvidia]" in target.read_text()
    assert config.read_text().startswith(f'imports = ["{target}"]')
    assert CONTAINERD_CONFIG in config.read_text()  # the rest is kept
    docker = _ctk(
        root,
        "runtime",
        "configure",
        "--runtime=docker",
        f"--config={tmp_path}/d.json",
        f"--drop-in-config={target}",
    )
    assert docker.returncode != 0  # 'error if --drop-in-config is given for docker'


def test_a_second_build_reuses_the_first(built: BuiltRepo) -> None:
    packages = built.root / built.toolkit_dir / "Packages"
    before = packages.stat().st_mtime_ns
    again = build_repo(built.root.parent)
    assert again.fingerprint == built.fingerprint
    assert packages.stat().st_mtime_ns == before
