"""Ubuntu 22.04 / 24.04: the nvidia_driver role's packages resolve with real apt.

Ubuntu hosts cannot boot in the lab. Their repositories are replayed instead: index-only
copies of the package graphs of NVIDIA's ubuntu2204/ubuntu2404 CUDA repositories and of
Canonical's archive (restricted + multiverse), generated from
tests/recorded/reference/packages.yaml by tests/lab/aptrepo (graphs.py). No .deb exists
behind them: this is RESOLUTION against recorded metadata, not a converge.

For every OS x source x branch x module flavour x kernel flavour (-generic, -aws) the
catalog allows on Ubuntu (orchestrator/catalog.yaml driver_sources and driver_branches, p5:
with the fabric manager), on one fresh lab host of its own (Debian 12, no NVIDIA package):

1. the role's own tasks (preflight.yml, select.yml, resolve-apt.yml) run against the replay
   (APT_CONFIG points apt at it): they pick the exact version, prebuilt module or DKMS, the
   package list, the pin and the holds exactly as on a real host;
2. `apt-get install --simulate` (aptrepo.replay.simulate, real apt) installs that list under
   the role's rendered pin file.

A combination must either resolve in both steps, or be blocked by the planner with the
reason (orchestrator/driver_packages.py reads the same role data). Branches the replay does
not publish are listed as not tested (docs/support-matrix.md).
"""

from __future__ import annotations

import fnmatch
import functools
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.catalog import default_catalog
from orchestrator.driver_packages import PackagesUnavailable, driver_packages
from orchestrator.lab import hosts
from orchestrator.lab.running import RunningLab, attach

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / ".venv" / "bin"
sys.path.insert(0, str(REPO / "tests" / "lab"))

from aptrepo import graphs, reference  # noqa: E402
from aptrepo.build import build_repo, default_state_dir  # noqa: E402
from aptrepo.replay import SimResult, lab_runner, repo_directory, simulate  # noqa: E402

REMOTE = "/tmp/gpuprov-ubuntu-replay"
OSES = {"ubuntu2204": ("22.04", "jammy"), "ubuntu2404": ("24.04", "noble")}
KERNELS = {flavour: f"{k['abi']}-{flavour}" for flavour, k in graphs.kernels().items()}
FLAVOURS = ("open", "proprietary")


def _catalog_combinations() -> list[tuple[str, str, int, str, str]]:
    catalog = default_catalog()
    branches = sorted(b.branch for b in catalog.branches)
    out = []
    for os_key, (version, _) in OSES.items():
        source = catalog.driver_source("ubuntu", version)
        assert source is not None, f"the catalog lost ubuntu {version}"
        sources = ["cuda"] if source.cuda_repo else []
        if source.any_distribution_branch or source.distribution:
            sources.append("distribution")
        for src in sources:
            for branch in branches:
                for flavour in FLAVOURS:
                    for kernel in KERNELS:
                        out.append((os_key, src, branch, flavour, kernel))
    return out


def _replayed_branches(kind: str) -> set[int]:
    return {int(b) for b in reference.selection()["replay"][kind]}


COMBINATIONS = _catalog_combinations()
# Replayed: the branches the replay publishes for that source. The rest is "not tested".
TESTED = [
    c for c in COMBINATIONS if c[2] in _replayed_branches("cuda" if c[1] == "cuda" else "canonical")
]
NOT_TESTED = sorted({(c[1], c[2]) for c in COMBINATIONS if c not in TESTED})


def _name(c: tuple[str, str, int, str, str]) -> str:
    return "-".join(str(x) for x in c)


# The role's own resolution, per combination, on aliases of one lab host.
PLAY = """\
- name: Resolve the nvidia_driver packages against the replay
  hosts: combos
  gather_facts: false
  vars:
    ansible_facts: "{{ combo_facts }}"
  environment:
    APT_CONFIG: "{{ replay_apt_config }}"
  tasks:
    - name: Resolve
      block:
        - name: Preflight
          ansible.builtin.include_role: {name: nvidia_driver, tasks_from: preflight.yml}
        - name: Select
          ansible.builtin.include_role: {name: nvidia_driver, tasks_from: select.yml, public: true}
        - name: Resolve
          ansible.builtin.include_role:
            {name: nvidia_driver, tasks_from: resolve-apt.yml, public: true}
        - name: Render the pin file
          gpuprov_test_record:
            dest: "{{ out }}/{{ inventory_hostname }}.pref"
            content: >-
              {{ lookup('ansible.builtin.template', role_dir ~ '/templates/apt-preferences.j2') }}
        - name: Record
          gpuprov_test_record:
            dest: "{{ out }}/{{ inventory_hostname }}.json"
            content: "{{ result | to_json }}"
          vars:
            result:
              failed: false
              version: "{{ __nvidia_driver_resolved_version }}"
              prebuilt: "{{ __nvidia_driver_prebuilt }}"
              first: "{{ __nvidia_driver_install_first }}"
              install: "{{ __nvidia_driver_install }}"
              held: "{{ __nvidia_driver_held }}"
              use_cuda_repo: "{{ __nvidia_driver_use_cuda_repo }}"
      rescue:
        - name: Record the failure
          gpuprov_test_record:
            dest: "{{ out }}/{{ inventory_hostname }}.json"
            content: "{{ {'failed': true, 'msg': ansible_failed_result.msg} | to_json }}"
"""

APT_CONF = """\
Dir::State "{d}/state";
Dir::State::Lists "{d}/lists";
Dir::State::status "{d}/status";
Dir::Cache "{d}/cache";
Dir::Etc::SourceList "{d}/sources.list";
Dir::Etc::SourceParts "{d}/sources.d";
Dir::Etc::Preferences "{d}/preferences";
Dir::Etc::PreferencesParts "{d}/prefs.d";
APT::Architecture "amd64";
APT::Architectures {{ "amd64"; }};
Debug::NoLocking "1";
APT::Sandbox::User "root";
"""


@dataclass(frozen=True)
class Resolved:
    role: Mapping[str, Any]  # what the role's tasks resolved (or their failure)
    pins: str
    apt: SimResult | None


def _tar(members: Mapping[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _upload_replay(lab: RunningLab, host: str, os_key: str, kinds: tuple[str, ...]) -> str:
    """A private apt configuration on the host that sees only the replay of `kinds`."""
    built = build_repo(default_state_dir())
    d = f"{REMOTE}/{os_key}-{'-'.join(kinds)}"
    members = {"apt.conf": APT_CONF.format(d=d).encode()}
    sources = []
    for kind in kinds:
        directory = built.root / repo_directory(os_key, kind)
        for name in ("Packages", "Packages.gz", "Release"):
            members[f"{kind}/{name}"] = (directory / name).read_bytes()
        sources.append(f"deb [trusted=yes] file:{d}/{kind} ./")
    members["sources.list"] = ("\n".join(sources) + "\n").encode()
    script = (
        f"set -eu; rm -rf {d}; mkdir -p {d}/state {d}/lists/partial {d}/cache/archives/partial "
        f"{d}/sources.d {d}/prefs.d; tar -x -C {d}; : > {d}/preferences; : > {d}/status; "
        f"APT_CONFIG={d}/apt.conf apt-get -q update >{d}/update.log 2>&1 || "
        f"{{ cat {d}/update.log; exit 1; }}"
    )
    done = lab_runner(lab, host)(script, _tar(members))
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    return f"{d}/apt.conf"


def _offered(os_key: str, kinds: tuple[str, ...]) -> dict[str, list[str]]:
    """Package -> versions in the replay's Packages indexes."""
    built = build_repo(default_state_dir())
    out: dict[str, list[str]] = {}
    for kind in kinds:
        text = (built.root / repo_directory(os_key, kind) / "Packages").read_text()
        for stanza in text.split("\n\n"):
            fields = dict(
                line.split(": ", 1)
                for line in stanza.splitlines()
                if ": " in line and line[0] != " "
            )
            if "Package" in fields:
                out.setdefault(fields["Package"], []).append(fields["Version"])
    return out


def _newer(a: str, b: str) -> int:
    done = subprocess.run(["dpkg", "--compare-versions", a, "gt", b], check=False)
    return 1 if done.returncode == 0 else -1


def _exact(item: str, offered: Mapping[str, list[str]]) -> str:
    """`name=<glob>` as Ansible's apt module installs it: the newest version matching the glob
    (aptrepo.replay.simulate passes arguments through the shell, so no glob reaches apt)."""
    name, sep, pattern = item.partition("=")
    if not sep or "*" not in pattern:
        return item
    matches = [v for v in offered.get(name, []) if fnmatch.fnmatch(v, pattern)]
    if not matches:
        return item  # apt names the missing package
    return f"{name}={max(matches, key=functools.cmp_to_key(_newer))}"


def _kinds(source: str) -> tuple[str, ...]:
    # A real Ubuntu host always has Canonical's archive (kernel headers, dkms); the CUDA
    # repository only on the cuda source (the distribution source needs none).
    return ("cuda", "canonical") if source == "cuda" else ("canonical",)


def _inventory(lab: RunningLab, host: str, work: Path, configs: Mapping[str, str]) -> Path:
    text = lab.inventory.read_text()
    port = next(
        part.split("=", 1)[1]
        for line in text.splitlines()
        if line.startswith(f"{host} ")
        for part in line.split()
        if part.startswith("ansible_port=")
    )
    conn = text.split("[lab:vars]", 1)[1]
    hosts = {}
    for c in TESTED:
        os_key, source, branch, flavour, kernel = c
        version, _ = OSES[os_key]
        hosts[_name(c)] = {
            "ansible_host": "127.0.0.1",
            "ansible_port": int(port),
            "ansible_python_interpreter": "/usr/bin/python3",
            "replay_apt_config": configs[f"{os_key}/{source}"],
            "combo_facts": {
                "distribution": "Ubuntu",
                "distribution_version": version,
                "distribution_major_version": version.split(".")[0],
                "os_family": "Debian",
                "architecture": "x86_64",
            },
            "__nvidia_driver_kernel": KERNELS[kernel],
            "__nvidia_driver_secureboot": False,
            "nvidia_driver_source": source,
            "nvidia_driver_branch": str(branch),
            "nvidia_driver_flavour": flavour,
            "nvidia_driver_fabricmanager": True,
            "nvidia_driver_version": "",
        }
    conn_vars = {}
    for line in conn.splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            conn_vars[key.strip()] = value.strip().strip("'")
    inventory = {"combos": {"hosts": hosts, "vars": conn_vars}}
    path = work / "inventory.yml"
    path.write_text(yaml.safe_dump({"all": {"children": inventory}}), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def fresh_host(scratch_lab_name: Callable[[str], str]) -> Iterator[tuple[RunningLab, str]]:
    """A Debian 12 lab host of its own, with no NVIDIA package installed: apt's simulation
    starts from the host's dpkg status, and a converged host's packages would take part."""
    name = scratch_lab_name("ubuntu-replay")
    keep = os.environ.get("GPUPROV_LAB_KEEP") == "1"
    if not keep:
        hosts.down(name)
    hosts.up(name, "p5.48xlarge", 1, "debian12", say=lambda _: None)
    try:
        lab = attach(name, "p5.48xlarge")
        yield lab, lab.host_for("debian12")
    finally:
        if not keep:
            hosts.down(name)


@pytest.fixture(scope="module")
def resolved(
    fresh_host: tuple[RunningLab, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Resolved]]:
    lab, host = fresh_host
    work = tmp_path_factory.mktemp("ubuntu_resolution")
    out = work / "out"
    out.mkdir()
    configs = {
        f"{os_key}/{source}": _upload_replay(lab, host, os_key, _kinds(source))
        for os_key in OSES
        for source in ("cuda", "distribution")
    }
    inventory = _inventory(lab, host, work, configs)
    playbook = work / "resolve.yml"
    playbook.write_text(PLAY, encoding="utf-8")
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        # the results are written on this machine by the unit tier's test-only action (from
        # Ansible's worker), not by copy/template: two module processes per file and combination
        "ANSIBLE_ACTION_PLUGINS": str(REPO / "tests/unit/ansible_plugins/action"),
    }
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), "-f", "8", str(playbook),
         "-e", f"out={out}", "-e", f"role_dir={REPO / 'roles' / 'nvidia_driver'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    results: dict[str, Resolved] = {}
    runner = lab_runner(lab, host)
    for c in TESTED:
        name = _name(c)
        role = json.loads((out / f"{name}.json").read_text())
        pins = (out / f"{name}.pref").read_text() if not role["failed"] else ""
        sim = None
        if not role["failed"]:
            offered = _offered(c[0], _kinds(c[1]))
            sim = simulate(
                c[0],
                install=[_exact(i, offered) for i in [*role["first"], *role["install"]]],
                pins=pins,
                repos=_kinds(c[1]),
                runner=runner,
            )
        results[name] = Resolved(role, pins, sim)
    yield results
    lab.ssh(host, f"rm -rf {REMOTE}")


def _planner_blocks(c: tuple[str, str, int, str, str]) -> str | None:
    os_key, source, branch, flavour, kernel = c
    try:
        driver_packages(
            os_id="ubuntu",
            version_id=OSES[os_key][0],
            family="debian",
            kernel=KERNELS[kernel],
            source=source,
            branch=branch,
            flavour=flavour,
            fabricmanager=True,
        )
    except PackagesUnavailable as exc:
        return str(exc)
    return None


def test_every_catalog_combination_is_covered_or_listed_as_not_tested() -> None:
    assert TESTED, "no combination to test"
    # The replays publish every branch the catalog allows on Ubuntu, for both sources (550
    # included since the doubles' 295e227); a branch added to the catalog without a replay
    # shows here, and docs/support-matrix.md must list it as not tested.
    assert NOT_TESTED == [], NOT_TESTED


@pytest.mark.parametrize("combo", TESTED, ids=_name)
def test_role_package_list_resolves_or_the_planner_blocks_it(
    combo: tuple[str, str, int, str, str], resolved: Mapping[str, Resolved]
) -> None:
    r = resolved[_name(combo)]
    blocked = _planner_blocks(combo)
    if blocked:
        # The planner refuses it, and the role refuses it too, before any change.
        assert r.role["failed"], (blocked, r.role)
        assert "Fix:" in r.role["msg"]
        return
    assert not r.role["failed"], r.role.get("msg")
    assert r.apt is not None
    assert r.apt.ok, f"{r.apt.command}\n{r.apt.error or r.apt.output[-3000:]}"
    version = r.role["version"]
    _, source, branch, flavour, kernel = combo
    assert version.startswith(f"{branch}.")
    # Every package the role names is installed at the resolved release (or, for the
    # prebuilt module and the pinning package, at their own versions), and held.
    names = [i.split("=", 1)[0] for i in [*r.role["first"], *r.role["install"]]]
    for item in r.role["install"]:
        name, _, want = item.partition("=")
        assert name in r.apt.installs, (name, sorted(r.apt.installs))
        if want.endswith("-*"):
            assert r.apt.installs[name].startswith(want[:-1]), (name, r.apt.installs[name])
    assert set(r.role["held"]) <= set(names), "held: exactly what the role installs"
    assert set(r.role["held"]) <= set(r.apt.installs), sorted(r.apt.installs)
    # Never a userspace newer than the module: every NVIDIA userspace package apt installs
    # is at the resolved release.
    for name, got in r.apt.installs.items():
        if name.startswith(("libnvidia-", "nvidia-")) and not name.startswith(
            "nvidia-driver-pinning"
        ):
            assert got.split("-")[0].split(":")[-1] == version, (name, got, version)
    if source == "distribution":
        assert r.role["use_cuda_repo"] is False
        suffix = "-open" if flavour == "open" else ""
        if r.role["prebuilt"]:  # the signed module built for this kernel, never DKMS
            assert f"linux-modules-nvidia-{branch}-server{suffix}-{KERNELS[kernel]}" in names
            assert f"nvidia-dkms-{branch}-server{suffix}" not in r.apt.installs
        else:
            assert f"nvidia-dkms-{branch}-server{suffix}" in names
    if branch >= 590 and source == "cuda":
        assert r.role["first"] == [f"nvidia-driver-pinning-{branch}"]
