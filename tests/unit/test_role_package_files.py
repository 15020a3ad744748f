"""Every package set the planner can produce puts the tools the roles call on the host.

For every OS the nvidia_driver role has data for x source x branch x flavour x fabric
manager, the packages come from orchestrator/driver_packages.py (which renders the role's own
vars, as the plan does). Each set is installed, simulated, in the test double of its
repository (tests/lab/aptrepo: the debian12/debian13 CUDA doubles, the ubuntu2204/ubuntu2404
CUDA and Canonical replays; tests/lab/rpmrepo: the rhel9 and amzn2023 CUDA doubles), following
Depends/Requires, and the installed packages' files are read from the doubles' Contents-style
file list (tests/recorded/reference/files.yaml, sourced there). The set must provide
`nvidia-smi` and `nvidia-persistenced` (the role's persistence check, the Fabric State gate
and the toolkit's CDI step call them) and, where the fabric manager is planned,
`nv-fabricmanager`.

Debian's own archive (source `distribution` on Debian) has no double: its set is checked on
the packages it names (Depends not followed).

Before the fix of the 590+ Ubuntu set (nvidia-utils added), this test failed with
"ubuntu 24.04 cuda 595 open: no nvidia-smi (installed: nvidia-driver-pinning-595,
nvidia-headless-no-dkms-open, nvidia-dkms-open, libnvidia-compute, nvidia-kernel-common,
nvidia-compute-utils, dkms, nvidia-kernel-source-open)" (and the same on 22.04, with and
without the fabric manager).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.driver_packages import DriverPackages, PackagesUnavailable, driver_packages

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lab"))
from aptrepo import contents  # noqa: E402
from aptrepo.graphs import canonical_replay, cuda_replay  # noqa: E402
from aptrepo.packages import cuda_packages  # noqa: E402
from rpmrepo import model  # noqa: E402

# (os-release ID, VERSION_ID, family) of every OS data file of the role, and its double.
OSES = {
    ("ubuntu", "22.04", "debian"): "ubuntu2204",
    ("ubuntu", "24.04", "debian"): "ubuntu2404",
    ("debian", "12", "debian"): "debian12",
    ("debian", "13", "debian"): "debian13",
    ("rhel", "8.10", "redhat"): "rhel9",  # the rhel9 double: the same names (cuda_rpm)
    ("rhel", "9.4", "redhat"): "rhel9",
    ("rocky", "8.10", "redhat"): "rhel9",
    ("rocky", "9.4", "redhat"): "rhel9",
    ("amzn", "2023", "redhat"): "amzn2023",
}
KERNEL = "6.8.0-1-generic"


def _branches() -> list[int]:
    """The catalog's branches: the ones the planner chooses (and the doubles publish)."""
    catalog = yaml.safe_load((REPO / "orchestrator" / "catalog.yaml").read_text())
    return sorted({int(b["branch"]) for b in catalog["driver_branches"]})


def _cases() -> list[tuple[tuple[str, str, str], str, int, str, bool]]:
    return [
        (os, source, branch, flavour, fm)
        for os in OSES
        for source in ("cuda", "distribution")
        for branch in _branches()
        for flavour in ("open", "proprietary")
        for fm in (False, True)
    ]


@functools.cache
def _nodes(double: str, source: str) -> tuple[list[contents.Node], str]:
    if double.startswith("ubuntu"):
        packages = cuda_replay(double) if source == "cuda" else canonical_replay(double)
        return contents.apt_nodes(packages), "apt"
    if double.startswith("debian"):
        # dkms comes from Debian's own archive (no double of it): counted as there.
        outside = [contents.Node("dkms", (), ())]
        return contents.apt_nodes(cuda_packages(double)) + outside, "apt"
    # NVIDIA's repository of that dist, and EPEL where the role takes dkms from it.
    repos = [
        r
        for r in model.repositories("/srv")
        if r.path.split("/")[3:4] == [double]
        or (model.DKMS_FROM[double] == "epel" and r.path.startswith("epel/"))
    ]
    nodes = [contents.Node(r.name, r.requires, r.provides) for repo in repos for r in repo.rpms]
    return nodes, "rpm"


def _install(double: str, source: str, pkgs: DriverPackages) -> contents.Install:
    requested = [*pkgs.first, *pkgs.driver, *pkgs.fabricmanager, *pkgs.unversioned, *pkgs.dkms]
    if double.startswith("debian") and source == "distribution":
        # Debian's own archive: no double; the named packages only.
        return contents.simulate(requested, [contents.Node(n, (), ()) for n in requested], "apt")
    nodes, fmt = _nodes(double, source)
    return contents.simulate(requested, nodes, fmt)


def _plannable() -> list[tuple[str, str, DriverPackages]]:
    out = []
    for (os_id, version, family), source, branch, flavour, fm in _cases():
        try:
            pkgs = driver_packages(
                os_id=os_id,
                version_id=version,
                family=family,
                kernel=KERNEL,
                source=source,
                branch=branch,
                flavour=flavour,
                fabricmanager=fm,
            )
        except PackagesUnavailable:
            continue  # the planner blocks it: nothing is installed
        name = f"{os_id} {version} {source} {branch} {flavour}{' +FM' if fm else ''}"
        out.append((name, OSES[(os_id, version, family)], pkgs))
    return out


PLANNABLE = _plannable()

# Names the planner can produce that a double does not publish, so they add no file here:
# the rpm doubles carry only branches with a recorded rpm example (rpmrepo/model.py
# driver_versions: 570, 575, 580, 595), not 535/550's NSCQ. The fabric manager itself
# (nvidia-fabric-manager, branch-less) is published, so nv-fabricmanager is still checked.
UNPUBLISHED = {
    double: {"libnvidia-nscq-535", "libnvidia-nscq-550"} for double in ("rhel9", "amzn2023")
}


def test_most_combinations_are_plannable() -> None:
    # Ubuntu, Debian and the dnf OSes, both sources where the role has them.
    assert len(PLANNABLE) >= 150, len(PLANNABLE)
    assert any(n.startswith("ubuntu 24.04 cuda 595 open") for n, _, _ in PLANNABLE)


@pytest.mark.parametrize(("name", "double", "pkgs"), PLANNABLE, ids=[p[0] for p in PLANNABLE])
def test_the_set_provides_the_tools_the_roles_call(
    name: str, double: str, pkgs: DriverPackages
) -> None:
    source = name.split()[2]
    done = _install(double, source, pkgs)
    unpublished = set(done.missing) - UNPUBLISHED.get(double, set())
    assert unpublished == set(), f"{name}: not in the {double} double: {done.missing}"
    tools = ["nvidia-smi", "nvidia-persistenced"]
    if pkgs.fabricmanager:
        tools.append("nv-fabricmanager")
    absent = [tool for tool in tools if not done.provides(tool)]
    assert absent == [], f"{name}: no {', '.join(absent)} (installed: {', '.join(done.installed)})"


def test_the_simulated_install_follows_depends_and_finds_a_missing_tool() -> None:
    nodes = [
        contents.Node("nvidia-headless-no-dkms-open", ("nvidia-compute-utils (= 1)",), ()),
        contents.Node("nvidia-compute-utils", (), ()),
        contents.Node("nvidia-utils", (), ()),
    ]
    without = contents.simulate(["nvidia-headless-no-dkms-open"], nodes, "apt")
    assert without.provides("nvidia-persistenced")
    assert not without.provides("nvidia-smi")
    with_utils = contents.simulate(["nvidia-headless-no-dkms-open", "nvidia-utils"], nodes, "apt")
    assert with_utils.provides("nvidia-smi")
    assert contents.simulate(["nope"], nodes, "apt").missing == ("nope",)


def test_contents_lists_come_from_the_file_reference() -> None:
    assert contents.files_of("nvidia-utils-580-server", "apt") == ("/usr/bin/nvidia-smi",)
    assert contents.files_of("nvidia-utils", "apt") == ("/usr/bin/nvidia-smi",)
    assert contents.files_of("nvidia-compute-utils-595", "apt") == ("/usr/bin/nvidia-persistenced",)
    assert contents.files_of("nvidia-driver-cuda", "rpm") == ("/usr/bin/nvidia-smi",)
    assert contents.files_of("nvidia-persistenced", "rpm") == ("/usr/sbin/nvidia-persistenced",)
    assert contents.files_of("libnvidia-compute", "apt") == ()
    index = contents.contents_index([("nvidia-utils-580", "test-double")])
    assert index.split() == ["usr/bin/nvidia-smi", "test-double/nvidia-utils-580"]


def test_every_deb_double_ships_what_its_contents_line_says() -> None:
    for os_key in ("debian12", "debian13"):
        for package in cuda_packages(os_key):
            shipped = {"/" + f.target for f in package.files}
            listed = set(contents.files_of(package.name, "apt"))
            assert listed <= shipped, f"{package.name}: Contents {listed}, .deb ships {shipped}"


def test_the_rpm_doubles_have_a_contents_list() -> None:
    for repo in model.repositories("/srv"):
        if repo.path.startswith("compute/cuda/repos/"):
            listing = model.contents(repo)
            assert "/usr/bin/nvidia-smi" in listing, repo.path
            assert "/usr/sbin/nvidia-persistenced" in listing, repo.path
            assert "/usr/bin/nv-fabricmanager" in listing, repo.path
