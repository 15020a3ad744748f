"""The test doubles: which stand-in packages the lab's apt repository serves, and their files.

These are NOT NVIDIA's packages. They carry NVIDIA's package names and versions so that the
roles' repository set-up, key checking, version pins, holds and `nvidia-ctk` calls run for
real in the lab, where NVIDIA's repositories cannot be reached. What each stand-in does (and
does not do) is written at the top of its file in `payload/` and in README.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Repository directories, laid out like NVIDIA's (flat repositories, suite "/").
TOOLKIT_REPO = "libnvidia-container/stable/deb/amd64"
CUDA_REPOS = ("cuda/repos/debian12/x86_64", "cuda/repos/debian13/x86_64")

# Two toolkit releases, for pinning and upgrade tests; 1.18 ships the nvidia-cdi-refresh
# units, 1.17 does not (so the role's own units are exercised too).
TOOLKIT_VERSIONS = ("1.17.8-1", "1.18.0-1")
TOOLKIT_WITH_CDI_REFRESH_UNITS = "1.18.0-1"

# Fabric manager / NSCQ per driver branch: the versions Debian's drivers carry (bookworm
# 535.261.03, bookworm-security 535.309.01, trixie 550.163.01; docs/debian-nvidia-packages.md)
# and one older release per branch.
DRIVER_VERSIONS = {
    "535": ("535.247.01", "535.261.03", "535.309.01"),
    "550": ("550.144.03", "550.163.01"),
}


@dataclass(frozen=True)
class PayloadFile:
    """One file of a stand-in package: `source` in payload/, installed at `target`."""

    source: str
    target: str
    mode: int = 0o644


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    description: str
    repo: str
    files: tuple[PayloadFile, ...] = ()
    depends: tuple[str, ...] = ()
    conffiles: tuple[str, ...] = ()
    extra_control: dict[str, str] = field(default_factory=dict)

    @property
    def upstream(self) -> str:
        return self.version.rsplit("-", 1)[0]


def _toolkit(version: str) -> list[Package]:
    base_files = [
        PayloadFile("nvidia-ctk", "usr/bin/nvidia-ctk", 0o755),
        PayloadFile("nvidia-container-runtime", "usr/bin/nvidia-container-runtime", 0o755),
    ]
    if version == TOOLKIT_WITH_CDI_REFRESH_UNITS:
        base_files += [
            PayloadFile(
                "nvidia-cdi-refresh.service", "lib/systemd/system/nvidia-cdi-refresh.service"
            ),
            PayloadFile("nvidia-cdi-refresh.path", "lib/systemd/system/nvidia-cdi-refresh.path"),
        ]
    return [
        Package(
            "libnvidia-container1",
            version,
            "test double of libnvidia-container1 (package shape only, no library)",
            TOOLKIT_REPO,
        ),
        Package(
            "libnvidia-container-tools",
            version,
            "test double of libnvidia-container-tools (nvidia-container-cli --version/info)",
            TOOLKIT_REPO,
            files=(PayloadFile("nvidia-container-cli", "usr/bin/nvidia-container-cli", 0o755),),
            depends=(f"libnvidia-container1 (= {version})",),
        ),
        Package(
            "nvidia-container-toolkit-base",
            version,
            "test double of nvidia-container-toolkit-base (nvidia-ctk, nvidia-container-runtime)",
            TOOLKIT_REPO,
            files=tuple(base_files),
            depends=("python3",),
        ),
        Package(
            "nvidia-container-toolkit",
            version,
            "test double of nvidia-container-toolkit (dependency shape of the real package)",
            TOOLKIT_REPO,
            depends=(
                f"nvidia-container-toolkit-base (= {version})",
                f"libnvidia-container-tools (= {version})",
            ),
        ),
    ]


def _fabric(branch: str, upstream: str, repo: str) -> list[Package]:
    version = f"{upstream}-1"
    return [
        Package(
            f"nvidia-fabricmanager-{branch}",
            version,
            "test double of NVIDIA fabric manager (marks the GPU simulator's fabric Completed)",
            repo,
            files=(
                PayloadFile("nv-fabricmanager", "usr/bin/nv-fabricmanager", 0o755),
                PayloadFile(
                    "nvidia-fabricmanager.service",
                    "lib/systemd/system/nvidia-fabricmanager.service",
                ),
            ),
            extra_control={
                "Provides": "nvidia-fabricmanager",
                "Conflicts": "nvidia-fabricmanager",
            },
        ),
        Package(
            f"libnvidia-nscq-{branch}",
            version,
            "test double of NVSwitch configuration and query library (package shape only)",
            repo,
            extra_control={"Provides": "libnvidia-nscq", "Conflicts": "libnvidia-nscq"},
        ),
    ]


def all_packages() -> list[Package]:
    """Every stand-in package, with the repository directory it is published in."""
    packages: list[Package] = []
    for version in TOOLKIT_VERSIONS:
        packages += _toolkit(version)
    for repo in CUDA_REPOS:
        for branch, versions in DRIVER_VERSIONS.items():
            for upstream in versions:
                packages += _fabric(branch, upstream, repo)
    return packages
