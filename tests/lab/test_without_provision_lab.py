"""Plain `ansible-playbook playbooks/site.yml` from a checkout converges lab hosts exactly as
`provision apply` does, with nothing but an inventory (lab hosts, real SSH).

The inventory has no `inventory/group_vars/` (the fleet's all.yml: no `gpuprov_roles`, no
policy) and no plan is passed: site.yml's first pre-task runs the collection's probe module
and planner action plugin (gpuprov.nvidia.gpu_probe, gpuprov.nvidia.plan) on each host, the
roles come by FQCN from the checkout's own collection (its ansible.cfg). It holds only what a
user's inventory would: the hosts, the lab's connection settings (lab.yml), and the policy
tests/lab/test_verify_lab.py converges the session lab with (the test-double repository's
URLs, the Debian 12 host's pinned driver), so that on the session lab, already converged
there by `provision`, the converge is a no-op and only the comparison costs time.

For each of two runs: before it, the plan document `provision apply` would pass for the same
inventory (orchestrator.pipeline: detect over SSH, policy, planners, plan document); after it,
the variables every host holds (dumped by a play after site.yml) must equal that document,
and the roles that ran on each host must be exactly its planned roles. The second run must
report changed=0 on every host. Run alone (a fresh lab), the first run is the whole converge
(the DKMS builds); after test_verify_lab.py in group a, the first run is already a rerun, and
when it changed nothing on any host it is the second run too (no repeat walk).

A third run is the collection installed alone: `ansible-galaxy collection build` of the
checkout, installed into a folder of its own, and `gpuprov.nvidia.site` run from a scratch
directory by an ansible-playbook whose Python has ansible-core and its dependencies only (no
gpuprov package, no checkout, no ansible.cfg). It must give the same plan and roles as the
others and change nothing (the hosts are converged by then).

Runs on the session lab; GPUPROV_TEST_LAB=<name> uses a running lab instead."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from rich.console import Console
from test_verify_lab import DRIVER_REPO_VARS, PINNED_580, SIMULATOR_KERNEL

from orchestrator import pipeline
from orchestrator.catalog import default_catalog
from orchestrator.lab.running import RunningLab

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

DUMP_PLAY = """\
- name: The site playbook, as a user runs it
  ansible.builtin.import_playbook: {site}

- name: Dump the variables each host's roles received
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Planned variables as the hosts hold them
      ansible.builtin.copy:
        content: "{{{{ dict(__keys | zip(__keys | map('extract', hostvars[inventory_hostname])))
                     | to_json }}}}"
        dest: "{{{{ test_dump_dir }}}}/{{{{ inventory_hostname }}}}.json"
        mode: "0644"
      vars:
        __keys: "{{{{ __gpuprov_planned_here.vars.keys() | list }}}}"
      delegate_to: localhost
      become: false
      check_mode: false
      changed_when: false  # the test's own file: not a change of the host's
"""


@dataclass(frozen=True)
class PlainRun:
    seconds: float
    expected: Mapping[str, Mapping[str, object]]  # provision apply's plan document, before
    seen: Mapping[str, Mapping[str, object]]  # what the hosts held after site.yml
    roles: Mapping[str, set[str]]  # roles that ran a task on each host
    changed: Mapping[str, int]  # PLAY RECAP
    output: str


@pytest.fixture(scope="module")
def site_lab(running_or_session_lab: Callable[[str], RunningLab]) -> RunningLab:
    return running_or_session_lab("GPUPROV_TEST_LAB")


@pytest.fixture(scope="module")
def bare_inventory(site_lab: RunningLab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lab's hosts with the lab's own group_vars (lab.yml) and test_verify_lab.py's
    policy; nothing from inventory/group_vars/."""
    root = tmp_path_factory.mktemp("without-provision")
    inventory = root / "inventory.ini"
    shutil.copy(site_lab.inventory, inventory)
    (root / "group_vars").mkdir()
    lab_vars = site_lab.inventory.parent / "group_vars" / "lab.yml"
    (root / "group_vars" / "lab.yml").symlink_to(lab_vars.resolve())
    (root / "group_vars" / "gpu_nodes.yml").write_text(
        "---\n" + yaml.safe_dump(DRIVER_REPO_VARS, default_flow_style=False)
    )
    (root / "host_vars").mkdir()
    (root / "host_vars" / f"{site_lab.host_for('debian12')}.yml").write_text(
        "---\n" + yaml.safe_dump({"nvidia_driver_version": PINNED_580})
    )
    assert not any(p.resolve().parent == REPO / "inventory" for p in root.rglob("*"))
    return inventory


def _provision_plan(inventory: Path) -> dict[str, dict[str, object]]:
    """The plan document `provision apply` passes for `inventory` (its own functions)."""
    fleet = pipeline._load_inventory(str(inventory), None)
    detected = pipeline._detect(fleet, Console(quiet=True))
    assert not detected.errors, detected.errors
    _, plans = pipeline._plan(detected.facts, fleet.hostvars, default_catalog(), fleet.origins)
    assert not any(p.blocked for p in plans.values()), {h: p.blockers for h, p in plans.items()}
    return pipeline._document_vars(list(fleet.hosts), plans)


def _roles_run(output: str, hosts: list[str]) -> dict[str, set[str]]:
    """From the default callback's output: the roles with a task ok/changed on each host."""
    ran: dict[str, set[str]] = {h: set() for h in hosts}
    for block in output.split("\nTASK [")[1:]:
        header = block.split("]", 1)[0]
        match = re.match(r"gpuprov\.nvidia\.(\w+) : ", header)
        if not match or match.group(1) == "driver_upgrade":
            continue  # driver_upgrade runs around the driver role (pre/post tasks)
        for host in hosts:
            if re.search(rf"^(ok|changed): \[{re.escape(host)}\]", block, re.M):
                ran[host].add(match.group(1))
    return ran


def _recap(output: str) -> dict[str, int]:
    recap = output.split("PLAY RECAP", 1)[-1]
    found = re.finditer(r"^(\S+)\s+: .*changed=(\d+)", recap, re.M)
    return {m.group(1): int(m.group(2)) for m in found}


@dataclass(frozen=True)
class Controller:
    """How ansible-playbook is run: the program, the environment, the folder and the site."""

    ansible_playbook: Path
    env: Mapping[str, str]
    cwd: Path
    site: str  # what the dump play imports


def _user_env() -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }


# A checkout: its ansible.cfg, its collections/, this environment (gpuprov installed).
CHECKOUT = Controller(
    BIN / "ansible-playbook", _user_env(), REPO, str(REPO / "playbooks" / "site.yml")
)


def _plain_run(inventory: Path, work: Path, controller: Controller = CHECKOUT) -> PlainRun:
    expected = _provision_plan(inventory)
    work.mkdir()
    playbook = work / "site-and-dump.yml"
    playbook.write_text(DUMP_PLAY.format(site=controller.site))
    argv = [str(controller.ansible_playbook), "-i", str(inventory), str(playbook)]
    start = time.monotonic()
    done = subprocess.run(
        [*argv, "-e", f"test_dump_dir={work}"],
        cwd=controller.cwd,
        env=dict(controller.env),
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    seconds = time.monotonic() - start
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    hosts = sorted(expected)
    seen = {h: json.loads((work / f"{h}.json").read_text()) for h in hosts}
    return PlainRun(seconds, expected, seen, _roles_run(output, hosts), _recap(output), output)


def _ansible_core_only(root: Path, also: tuple[str, ...] = ()) -> Path:
    """A virtual environment whose Python sees ansible-core and its dependencies only (linked
    from this environment, which has the same versions), and the distributions `also` names
    with theirs: no gpuprov, nothing else. Returns its ansible-playbook (ansible-inventory
    beside it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    (site,) = root.glob("lib/python*/site-packages")
    todo, done = ["ansible-core", *also], set()
    while todo:
        dist = metadata.distribution(todo.pop())
        name = dist.metadata["Name"].lower()
        if name in done:
            continue
        done.add(name)
        for top in {f.parts[0] for f in dist.files or () if f.parts[0] != ".."}:
            if not (site / top).exists():
                (site / top).symlink_to(dist.locate_file(top))
        for req in dist.requires or ():
            requirement = Requirement(req)  # its marker for this Python, no extras
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    for cli in ("playbook", "inventory"):
        program = root / "bin" / f"ansible-{cli}"
        program.write_text(f"#!{root}/bin/python\nfrom ansible.cli.{cli} import main\nmain()\n")
        program.chmod(0o755)
    return root / "bin" / "ansible-playbook"


@pytest.fixture(scope="module")
def installed_alone(tmp_path_factory: pytest.TempPathFactory) -> Controller:
    """The collection built from this checkout and installed alone (as AWX or
    `ansible-galaxy collection install` does), run from a folder that is not the checkout by
    an ansible-playbook with ansible-core only."""
    root = tmp_path_factory.mktemp("installed-alone")
    galaxy = BIN / "ansible-galaxy"
    build = [str(galaxy), "collection", "build", "--output-path", str(root / "dist"), str(REPO)]
    subprocess.run(build, check=True, capture_output=True, cwd=root)
    (tarball,) = (root / "dist").glob("gpuprov-nvidia-*.tar.gz")
    collections = root / "collections"
    install = [str(galaxy), "collection", "install", "--force", "-p", str(collections)]
    install.append(str(tarball))
    subprocess.run(install, check=True, capture_output=True, cwd=root, env=_user_env())
    program = _ansible_core_only(root / "venv")
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    probe = (
        "import importlib.metadata as m, importlib.util as u; "
        "print(sorted(d.metadata['Name'].lower() for d in m.distributions()), "
        "u.find_spec('orchestrator'))"
    )
    python = program.parent / "python"
    alone = subprocess.run(
        [python, "-c", probe], capture_output=True, text=True, check=True, cwd=elsewhere
    )
    assert "ansible-core" in alone.stdout and "gpuprov" not in alone.stdout, alone.stdout
    assert alone.stdout.rstrip().endswith("] None"), alone.stdout  # no orchestrator anywhere
    env = {
        **_user_env(),
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
        "ANSIBLE_HOST_KEY_CHECKING": "True",  # as the checkout's ansible.cfg: the lab's keys
        "PATH": f"{program.parent}{os.pathsep}/usr/bin:/bin",
    }
    return Controller(program, env, elsewhere, "gpuprov.nvidia.site")


@pytest.fixture(scope="module")
def runs(
    site_lab: RunningLab, bare_inventory: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[PlainRun, PlainRun]:
    for name in site_lab.hosts:  # the simulator's kernel, as test_verify_lab.py prepares it
        done = site_lab.ssh(name, SIMULATOR_KERNEL, timeout=600)
        assert done.returncode == 0, f"{name}: {done.stderr}"
    work = tmp_path_factory.mktemp("plain-runs")
    first = _plain_run(bare_inventory, work / "first")
    # After test_verify_lab.py (group a) the first run is already the run after a converge:
    # when it changed nothing on every host it is itself the proof, and a second full walk of
    # site.yml would only repeat it (about 2 minutes of both cores); the collection's run
    # below is a further no-op run either way.
    if set(first.changed) == set(first.expected) and not any(first.changed.values()):
        second = first
    else:
        second = _plain_run(bare_inventory, work / "second")
    print(
        f"\nplain site.yml: first run {first.seconds:.0f} s (changed {dict(first.changed)}), "
        f"second {second.seconds:.0f} s (changed {dict(second.changed)})"
    )
    for block in first.output.split("\nTASK [")[1:]:  # what the first run changed, if any
        if re.search(r"^changed: ", block, re.M):
            print("  first run changed: " + block.split("]", 1)[0])
    return first, second


@pytest.mark.parametrize("which", [0, 1], ids=["first", "second"])
def test_the_roles_receive_what_provision_would_pass(
    runs: tuple[PlainRun, PlainRun], which: int
) -> None:
    run = runs[which]
    assert set(run.seen) == set(run.expected)
    for host, document in run.expected.items():
        assert run.seen[host] == document, host
        planned = document["gpuprov_roles"]
        assert isinstance(planned, list) and run.roles[host] == set(planned), run.output[-3000:]
        # what the planner decided for a p5 host: the NVSwitches' fabric manager
        assert document["nvidia_driver_fabricmanager"] is True


def test_the_second_run_changes_nothing(runs: tuple[PlainRun, PlainRun]) -> None:
    second = runs[1]
    assert set(second.changed) == set(second.expected)
    assert all(n == 0 for n in second.changed.values()), (second.changed, second.output[-4000:])


@pytest.fixture(scope="module")
def alone_run(
    runs: tuple[PlainRun, PlainRun],
    bare_inventory: Path,
    installed_alone: Controller,
    tmp_path_factory: pytest.TempPathFactory,
) -> PlainRun:
    work = tmp_path_factory.mktemp("alone-run")
    run = _plain_run(bare_inventory, work / "run", installed_alone)
    print(
        f"\ninstalled alone, ansible-core only: {run.seconds:.0f} s (changed {dict(run.changed)})"
    )
    return run


def test_the_collection_installed_alone_runs_site_as_from_a_checkout(alone_run: PlainRun) -> None:
    assert set(alone_run.seen) == set(alone_run.expected)
    for host, document in alone_run.expected.items():
        assert alone_run.seen[host] == document, host
        planned = document["gpuprov_roles"]
        assert isinstance(planned, list), planned
        assert alone_run.roles[host] == set(planned), alone_run.output[-3000:]
    assert set(alone_run.changed) == set(alone_run.expected)
    assert all(n == 0 for n in alone_run.changed.values()), (
        alone_run.changed,
        alone_run.output[-4000:],
    )
