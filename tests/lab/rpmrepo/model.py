"""Which stand-in rpm packages and module streams the doubles carry, read from the reference.

Everything here comes from `cuda_rpm` in tests/recorded/reference/packages.yaml:

- driver versions: the upstream versions of the recorded rpm examples (version_scheme and
  branches.*.examples), grouped by branch;
- driver package names: driver_packages (open_dkms, proprietary_dkms, compute_userspace),
  epoch 3, release `1.<dist>` (version_scheme);
- fabric manager / NSCQ names per branch scheme (branches.lt_580 / ge_580), release `1`,
  no dist tag (version_scheme), no epoch (none recorded for them);
- module streams (module_streams): `<b>-open` carries the open kmod, `<b>-dkms` the
  proprietary one (awslabs/amazon-eks-ami templates/al2023/provisioners/
  install-nvidia-driver.sh@03dc33a62e550df27cfc87456f086ad5b5b6736c: "nvidia-driver:570-open"
  provides kmod-nvidia-open-dkms, "nvidia-driver:570-dkms" kmod-nvidia-latest-dkms), with
  the driver's userspace of that branch; `open-dkms` (the default) and `latest-dkms` the
  newest branch's. Module version and contexts: the ones in that script's comments;
- dkms: required by the DKMS kmods (driver_packages.dkms_dependency); served by the amzn2023
  double itself, and for rhel9 by an EPEL double (with an epel-release package whose repo
  file points at it). The reference records no rpm version of dkms or epel-release: their
  doubles are version 0, release `0.testdouble`, so nobody mistakes them for real ones.

What the reference does not say is left out: no Requires between the driver packages, no
fabric manager inside a module stream (they are non-modular here), no precompiled kmods.

The OS's kernel packages (`os_repositories()`, one double of RHEL 9's BaseOS/AppStream kernel
packages; not in packages.yaml, which records NVIDIA's repositories only), for the driver
role's every-kernel coverage (tasks/kernels-dnf.yml):

- names: kernel-core (the kernel image) and kernel-devel (headers and makefiles to build
  modules), RHEL 9 "Managing, monitoring and updating the kernel", 1.3 "The Linux kernel RPM
  package overview"; kernel-devel-matched, which NVIDIA's Driver Installation Guide installs
  on EL9 ("dnf install kernel-devel-matched kernel-headers", Oracle Linux 9 / AlmaLinux 9
  pages), "Meta package to install matching core and devel packages for a given kernel" (its
  summary, openshift/driver-toolkit 2e139ed): here it Requires kernel-core and kernel-devel
  at its own version-release;
- `Provides: installonlypkg(kernel)` on kernel-core and kernel-devel, as the kernel.spec
  macros kernel_variant_package / kernel_devel_package give them (dnf keeps several installed
  side by side and `dnf upgrade` adds the new one);
- releases: Rocky 9's 5.14.0-162.22.2.el9_1, 5.14.0-284.11.1.el9_2 and 5.14.0-284.30.1.el9_2
  (the /boot/loader/entries listing of a Rocky 9 host in stackhpc/stackhpc-kayobe-config
  PR #878). Empty packages: no kernel, no headers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aptrepo.contents import files_of

REFERENCE = Path(__file__).resolve().parents[2] / "recorded" / "reference" / "packages.yaml"

# The doubles' repositories: NVIDIA's layout (compute/cuda/repos/<dist>/<arch>/) and the
# dist tag its driver packages carry (version_scheme: ".amzn2023", ".el9").
DISTS: Mapping[str, str] = {"rhel9": "el9", "amzn2023": "amzn2023"}
ARCH = "x86_64"
# The dkms source per repository (driver_packages.dkms_dependency).
DKMS_FROM: Mapping[str, str] = {"rhel9": "epel", "amzn2023": "cuda"}
EPEL_MAJOR = "9"
MARKER_RELEASE = "0.testdouble"

# amazon-eks-ami install-nvidia-driver.sh@03dc33a6 comments: "nvidia-driver:570-open:
# 20251009011129:f132e61741:x86_64" and "nvidia-driver:570-dkms:20251009011129:61f77618b4".
MODULE_VERSION = 20251009011129
CONTEXT = {"open": "f132e61741", "proprietary": "61f77618b4"}

# "<name>-[3:]<upstream>-1[.<dist>]"; only the dists of these repositories (not the guide's
# Fedora example "...-3:575.51-1.fc41").
_VERSION = re.compile(
    r"(?<![0-9.])([0-9]{3}\.[0-9]+(?:\.[0-9]+)?)-1(?:\.(?:" + "|".join(DISTS.values()) + r"))?$"
)


@dataclass(frozen=True)
class Rpm:
    name: str
    version: str
    release: str
    epoch: int | None = None
    arch: str = ARCH
    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    files: Mapping[str, str] = field(default_factory=dict)  # path -> content

    @property
    def evr(self) -> str:
        return (
            f"{self.epoch}:{self.version}-{self.release}"
            if self.epoch
            else (f"{self.version}-{self.release}")
        )

    @property
    def nevra(self) -> str:
        return f"{self.name}-{self.evr}.{self.arch}"


@dataclass(frozen=True)
class Stream:
    name: str  # "580-open"
    flavour: str  # open | proprietary
    artifacts: tuple[Rpm, ...]


@dataclass(frozen=True)
class Repo:
    path: str  # under the served root, e.g. compute/cuda/repos/rhel9/x86_64
    rpms: tuple[Rpm, ...]
    streams: tuple[Stream, ...] = ()
    default_stream: str | None = None


def load_reference(path: Path = REFERENCE) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return dict(data["cuda_rpm"])


def driver_versions(cuda_rpm: Mapping[str, Any]) -> dict[int, tuple[str, ...]]:
    """Upstream versions of the recorded rpm examples, per branch, oldest first."""
    examples = list(cuda_rpm["version_scheme"]["examples"])
    for scheme in cuda_rpm["branches"].values():
        examples += scheme["examples"]
    found: dict[int, set[str]] = {}
    for text in examples:
        match = _VERSION.search(text.split(" ")[0])
        if match:
            version = match.group(1)
            found.setdefault(int(version.split(".")[0]), set()).add(version)
    return {
        b: tuple(sorted(v, key=lambda s: tuple(int(p) for p in s.split("."))))
        for b, v in sorted(found.items())
    }


def _name(template: str, branch: int) -> str:
    """ "libnvidia-nscq-<b>-<ver>   (...)" -> "libnvidia-nscq-570"."""
    head = template.split()[0]
    return head.replace("<b>", str(branch)).removesuffix("-<ver>")


def fabric_names(cuda_rpm: Mapping[str, Any], branch: int) -> tuple[str, str]:
    scheme = cuda_rpm["branches"]["ge_580" if branch >= 580 else "lt_580"]
    return _name(scheme["fabricmanager"], branch), _name(scheme["nscq"], branch)


def driver_rpms(cuda_rpm: Mapping[str, Any], version: str, dist_tag: str) -> dict[str, Rpm]:
    pkgs = cuda_rpm["driver_packages"]
    release = f"1.{dist_tag}"
    out: dict[str, Rpm] = {}
    for name in (pkgs["open_dkms"], pkgs["proprietary_dkms"]):
        out[name] = Rpm(name, version, release, epoch=3, requires=("dkms",))
    for name in pkgs["compute_userspace"]:
        out[name] = Rpm(name, version, release, epoch=3)
    return out


def _epel_release(served_root: str) -> Rpm:
    repo_file = (
        "# TEST DOUBLE of EPEL's repository file (gpuprov lab): points at the lab's EPEL double.\n"
        f"[epel]\nname=EPEL {EPEL_MAJOR} (test double)\n"
        f"baseurl=file://{served_root}/epel/{EPEL_MAJOR}/{ARCH}/\n"
        "enabled=1\ngpgcheck=1\n"
        f"gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-{EPEL_MAJOR}\n"
    )
    return Rpm(
        "epel-release",
        EPEL_MAJOR,
        MARKER_RELEASE,
        arch="noarch",
        files={"/etc/yum.repos.d/epel.repo": repo_file},
    )


def repositories(served_root: str, cuda_rpm: Mapping[str, Any] | None = None) -> list[Repo]:
    """Every double: one CUDA repository per dist, plus EPEL for the dists that need it."""
    ref = cuda_rpm if cuda_rpm is not None else load_reference()
    pkgs = ref["driver_packages"]
    streams_seen = " ".join(ref["module_streams"]["streams_seen"])
    assert "<b>-open" in streams_seen and "<b>-dkms" in streams_seen
    default = ref["module_streams"]["default_stream"].split()[0]  # "open-dkms"
    kmod = {"open": pkgs["open_dkms"], "proprietary": pkgs["proprietary_dkms"]}
    suffix = {"open": "open", "proprietary": "dkms"}  # <b>-open, <b>-dkms
    newest_stream = {"open": "open-dkms", "proprietary": "latest-dkms"}
    assert all(n in ref["module_streams"]["streams_seen"] for n in newest_stream.values())
    dkms = Rpm("dkms", "0", MARKER_RELEASE, arch="noarch")
    repos: list[Repo] = []
    for dist, tag in DISTS.items():
        rpms: list[Rpm] = []
        per_branch: dict[int, list[dict[str, Rpm]]] = {}
        for branch, versions in driver_versions(ref).items():
            fm, nscq = fabric_names(ref, branch)
            for version in versions:
                drivers = driver_rpms(ref, version, tag)
                per_branch.setdefault(branch, []).append(drivers)
                rpms += drivers.values()
                rpms += [Rpm(fm, version, "1"), Rpm(nscq, version, "1")]
        streams: list[Stream] = []
        newest = max(per_branch)
        for branch, releases in per_branch.items():
            for flavour in ("open", "proprietary"):
                other = kmod["proprietary" if flavour == "open" else "open"]
                arts = tuple(r for rel in releases for n, r in rel.items() if n != other)
                streams.append(Stream(f"{branch}-{suffix[flavour]}", flavour, arts))
                if branch == newest:
                    streams.append(Stream(newest_stream[flavour], flavour, arts))
        if DKMS_FROM[dist] == "cuda":
            rpms.append(dkms)
        repos.append(
            Repo(f"compute/cuda/repos/{dist}/{ARCH}", tuple(rpms), tuple(streams), default)
        )
    repos.append(Repo(f"epel/{EPEL_MAJOR}/{ARCH}", (dkms, _epel_release(served_root))))
    return repos


# Rocky 9 kernel releases (version, release), oldest first (see the module docstring).
KERNELS_EL9: tuple[tuple[str, str], ...] = (
    ("5.14.0", "162.22.2.el9_1"),
    ("5.14.0", "284.11.1.el9_2"),
    ("5.14.0", "284.30.1.el9_2"),
)
OS_REPO = {"rhel9": f"os/rhel9/{ARCH}"}


def kernel_release(version: str, release: str) -> str:
    """`uname -r` of a RHEL kernel package: <version>-<release>.<arch>."""
    return f"{version}-{release}.{ARCH}"


def os_repositories() -> list[Repo]:
    """The OS kernel packages' double (rhel9 only: the lab installs RHEL 9 kernels)."""
    rpms: list[Rpm] = []
    for version, release in KERNELS_EL9:
        evr = f"{version}-{release}"
        only = ("installonlypkg(kernel)",)
        rpms += [
            Rpm("kernel-core", version, release, provides=only),
            Rpm("kernel-devel", version, release, provides=only),
            Rpm(
                "kernel-devel-matched",
                version,
                release,
                requires=(f"kernel-core = {evr}", f"kernel-devel = {evr}"),
            ),
        ]
    return [Repo(OS_REPO["rhel9"], tuple(rpms))]


def names(repos: Sequence[Repo]) -> set[str]:
    return {r.name for repo in repos for r in repo.rpms}


def contents(repo: Repo) -> dict[str, tuple[str, ...]]:
    """The double's Contents-style file list: path -> the NEVRAs that ship it, from
    tests/recorded/reference/files.yaml (aptrepo/contents.py). The doubles themselves are
    empty packages: this list says which files NVIDIA's package of that name ships."""
    owners: dict[str, list[str]] = {}
    for rpm in repo.rpms:
        for path in files_of(rpm.name, "rpm"):
            owners.setdefault(path, []).append(rpm.nevra)
    return {path: tuple(sorted(n)) for path, n in sorted(owners.items())}
