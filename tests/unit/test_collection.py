"""The Ansible collection gpuprov.nvidia: `ansible-galaxy collection build` makes it, it
installs, and `gpuprov.nvidia.site` resolves the collection's own roles (no repository
roles path, no ansible.cfg)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from orchestrator.knobs import ROLE_PREFIXES, load_table

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("collection")
    _run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out)], REPO)
    meta = yaml.safe_load((REPO / "galaxy.yml").read_text())
    tarball = out / f"{meta['namespace']}-{meta['name']}-{meta['version']}.tar.gz"
    assert tarball.exists()
    return tarball


@pytest.mark.ansible
def test_the_build_holds_roles_playbooks_and_the_orchestrator_only(built: Path) -> None:
    with tarfile.open(built) as tar:
        names = set(tar.getnames())
    tops = {n.split("/")[0] for n in names}
    assert {"roles", "playbooks", "meta", "orchestrator", "MANIFEST.json"} <= tops
    assert not tops & {".venv", ".lab", "artifacts", "bench", ".git", "ansible.cfg"}
    # of the tests, only ansible-test's sanity ignore files
    assert all(n == "tests" or n.startswith("tests/sanity") for n in names if n.startswith("tests"))
    for role in ROLE_PREFIXES:
        assert f"roles/{role}/meta/argument_specs.yml" in names
    # the site playbook, its plan pre-task, the mig role's applier source, the knob table
    for path in (
        "playbooks/site.yml",
        "playbooks/tasks/plan.yml",
        "playbooks/tasks/plan-here.yml",
        "meta/runtime.yml",
        "plugins/modules/gpu_probe.py",  # the probe on the host
        "plugins/action/plan.py",  # gpuprov's planner on its output
    ):
        assert path in names
    for path in ("orchestrator/mig_apply.py", "orchestrator/knobs.py", "orchestrator/knobs.yaml"):
        assert path in names
    assert not any("__pycache__" in n for n in names)


@pytest.mark.ansible
def test_the_tarball_is_lean(tmp_path: Path) -> None:
    """Built from a copy of the tracked tree with a developer's local state planted in it: the
    tarball ships no Python packaging, logs of device runs, tests or their data, venvs, caches
    or artifacts (galaxy.yml's build_ignore; issue 50)."""
    tree = tmp_path / "tree"
    listed = _run(["git", "ls-files", "-z"], REPO).split("\0")
    for name in filter(None, listed):
        src, dst = REPO / name, tree / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        elif src.is_file():
            dst.write_bytes(src.read_bytes())
    planted = (
        ".venv/bin/python",
        ".venv-peers/x",
        ".cache/gpuprov/x",
        "artifacts/run/x",
        "tests/output/x",
        "orchestrator/_bundle/x",
        "docs/device-run-20990101.txt",
    )
    for name in planted:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text("local state\n")
    out = tmp_path / "out"
    _run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out)], tree)
    (tarball,) = out.glob("*.tar.gz")
    with tarfile.open(tarball) as tar:
        names = [n for n in tar.getnames() if tar.getmember(n).isfile()]
    assert "galaxy.yml" not in names  # ansible-galaxy writes MANIFEST.json in its place
    assert "roles/nvidia_driver/tasks/main.yml" in names and "docs/collection.md" in names
    for name in names:
        top = name.split("/")[0]
        assert top not in {
            "setup.py",
            "MANIFEST.in",
            "pyproject.toml",
            "Makefile",
            ".venv",
            ".cache",
            "artifacts",
            "scripts",
            "bench",
            "constraints",
        }, name
        assert not top.startswith(".venv"), name
        assert not name.startswith("docs/device-run-"), name
        assert not name.startswith("orchestrator/_bundle/"), name
        assert not name.startswith("tests/") or name.startswith("tests/sanity/"), name


@pytest.mark.ansible
def test_installed_it_runs_as_gpuprov_nvidia_site(built: Path, tmp_path: Path) -> None:
    collections = tmp_path / "collections"
    _run(
        [str(BIN / "ansible-galaxy"), "collection", "install", str(built), "-p", str(collections)],
        tmp_path,
    )
    (tmp_path / "empty.cfg").write_text("[defaults]\n")
    (tmp_path / "inv.ini").write_text("[gpu_nodes]\nnode-1 ansible_connection=local\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
        "ANSIBLE_CONFIG": str(tmp_path / "empty.cfg"),  # not the repository's roles_path
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    argv = [str(BIN / "ansible-playbook"), "-i", "inv.ini", "gpuprov.nvidia.site", "--list-tasks"]
    tasks = _run(argv, tmp_path, env)
    installed = collections / "ansible_collections" / "gpuprov" / "nvidia"
    assert f"playbook: {installed}/playbooks/site.yml" in tasks
    assert "Take the planned variables as host facts" in tasks
    assert "Detect the GPUs and plan this host" not in tasks  # included only without a plan
    for role in ("nvidia_driver", "docker", "nvidia_container_toolkit", "mig"):
        assert f"gpuprov.nvidia.{role} : Validating arguments" in tasks
    # the installed collection's knob table is the repository's
    assert load_table(roles_dir=installed / "roles").knobs == load_table().knobs


@pytest.mark.ansible
@pytest.mark.parametrize("playbook", sorted(p.stem for p in (REPO / "playbooks").glob("*.yml")))
def test_every_playbook_runs_by_its_collection_name(playbook: str, tmp_path: Path) -> None:
    """`ansible-playbook gpuprov.nvidia.<name>` finds each of the collection's playbooks (a
    hyphen in the file name makes it unaddressable; issue 50)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_COLLECTIONS_PATH"] = str(REPO / "collections")
    out = _run(
        [str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,",
         f"gpuprov.nvidia.{playbook}"],
        tmp_path, env,
    )  # fmt: skip
    assert f"playbooks/{playbook}.yml" in out


@pytest.mark.ansible
def test_it_installs_from_git(tmp_path: Path) -> None:
    """What AWX's collections/requirements.yml (type: git) does: clone, build, install; the
    committed HEAD of this clone."""
    collections = tmp_path / "collections"
    source = f"git+file://{REPO}"
    _run(
        [str(BIN / "ansible-galaxy"), "collection", "install", source, "-p", str(collections)],
        tmp_path,
    )
    installed = collections / "ansible_collections" / "gpuprov" / "nvidia"
    assert (installed / "playbooks" / "site.yml").is_file()
    assert (installed / "roles" / "nvidia_driver" / "meta" / "argument_specs.yml").is_file()


# --- the checkout is the collection: site.yml by FQCN from a plain ansible-playbook --------


def _checkout_env() -> dict[str, str]:
    """A user's environment: no ANSIBLE_* variables, so the checkout's ansible.cfg decides."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def test_site_yml_names_every_role_by_fqcn() -> None:
    (play,) = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    names = [r["role"] for r in play["roles"]]
    names += [
        t["ansible.builtin.include_role"]["name"]
        for t in play["pre_tasks"] + play["post_tasks"]
        if "ansible.builtin.include_role" in t
    ]
    assert names and all(n.startswith("gpuprov.nvidia.") for n in names), names
    assert {n.removeprefix("gpuprov.nvidia.") for n in names} == set(ROLE_PREFIXES)


@pytest.mark.ansible
def test_a_checkout_resolves_gpuprov_nvidia_to_itself() -> None:
    """The repository's ansible.cfg puts collections/ first; its gpuprov/nvidia links back
    to the checkout (not copied: one source), and ansible-galaxy lists it there."""
    link = REPO / "collections" / "ansible_collections" / "gpuprov" / "nvidia"
    assert link.is_symlink() and link.resolve() == REPO.resolve()
    argv = [str(BIN / "ansible-galaxy"), "collection", "list", "gpuprov.nvidia"]
    listed = _run(argv, REPO, _checkout_env())
    first = listed.split("# ")[1]  # the first collections path that holds it
    assert first.startswith(f"{REPO / 'collections' / 'ansible_collections'}\n"), listed
    version = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    assert f"gpuprov.nvidia {version}" in first


@pytest.mark.ansible
def test_plain_ansible_playbook_in_a_checkout_runs_the_collections_roles(tmp_path: Path) -> None:
    (tmp_path / "inv.ini").write_text("[gpu_nodes]\nnode-1 ansible_connection=local\n")
    argv = [str(BIN / "ansible-playbook"), "-i", str(tmp_path / "inv.ini"), "playbooks/site.yml"]
    tasks = _run([*argv, "--list-tasks"], REPO, _checkout_env())
    for role in ("nvidia_driver", "docker", "nvidia_container_toolkit", "mig"):
        assert f"gpuprov.nvidia.{role} : Validating arguments" in tasks
    assert "Plan this host here (no plan document was passed)" in tasks


@pytest.mark.ansible
def test_without_a_plan_the_playbook_plans_and_blocks_like_provision(tmp_path: Path) -> None:
    """No plan document, no gpuprov_roles, any inventory (this machine, local connection):
    site.yml runs the collection's probe module and planner action plugin; their verdict is
    provision's on the same host (orchestrator.detect's local probe, the same planner). This
    machine has no NVIDIA GPU (CI's has none), so the planner blocks it: the run stops at the
    plan task, before any role, naming the blocker."""
    from orchestrator.catalog import default_catalog
    from orchestrator.parsers import parse_host
    from orchestrator.plan import plan_host
    from orchestrator.policy import load_policy
    from orchestrator.probe import probe_script, split_output

    out = subprocess.run(["sh", "-s"], input=probe_script(), capture_output=True, text=True)
    facts = parse_host("node-1", split_output("node-1", out.stdout))
    expected = plan_host(facts, load_policy("node-1", {}), default_catalog())
    (tmp_path / "inv.ini").write_text(
        "[gpu_nodes]\nnode-1 ansible_connection=local "
        f"ansible_python_interpreter={sys.executable}\n"
    )
    argv = [str(BIN / "ansible-playbook"), "-i", str(tmp_path / "inv.ini")]
    argv.append("playbooks/site.yml")
    done = subprocess.run(
        [*argv, "--check"], cwd=REPO, env=_checkout_env(), capture_output=True, text=True
    )
    if not expected.blocked:
        pytest.skip(f"this machine plans unblocked ({expected.gpu_summary}): nothing to block")
    assert done.returncode == 2, done.stdout[-3000:]
    assert "TASK [Detect the GPUs and plan this host]" in done.stdout
    assert f"node-1: blocked: {expected.blockers[0]}"[:60] in " ".join(done.stdout.split())
    assert "gpuprov.nvidia.nvidia_driver :" not in done.stdout  # no role ran
