"""The wheel's bundle (setup.py) carries every file the installed orchestrator reads outside its
package, and there is one version (scripts/wheel-check.sh builds and installs the real wheel)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import yaml

import orchestrator
from orchestrator import paths
from orchestrator.cli import version

ROOT = Path(__file__).resolve().parents[2]


def _bundle() -> tuple[str, ...]:
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "BUNDLE":
            value = ast.literal_eval(node.value)
            assert isinstance(value, tuple)
            return value
    raise AssertionError("setup.py has no BUNDLE")


def test_the_bundle_carries_what_the_orchestrator_reads() -> None:
    bundle = _bundle()
    needed = [paths.ANSIBLE_CFG, paths.ROLES_DIR, paths.PLAYBOOKS_DIR]
    from orchestrator.lab import hosts

    needed += [hosts.APTREPO_DIR, ROOT / "tests" / "lab" / "gpusim", ROOT / "tests/lab/profiles"]
    needed += [ROOT / "inventory" / "group_vars"]
    for path in needed:
        rel = path.resolve().relative_to(ROOT)
        assert any(rel == Path(b) or Path(b) in rel.parents for b in bundle), rel
    for name in bundle:
        assert (ROOT / name).exists(), name
    # the sdist carries them too, for wheels built from it
    manifest = (ROOT / "MANIFEST.in").read_text()
    for name in bundle:
        assert name in manifest, name


def test_one_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert galaxy["version"] == orchestrator.__version__
    assert version() == orchestrator.__version__


def test_a_checkout_reads_itself_and_writes_in_itself() -> None:
    assert not paths.installed()
    assert paths.SOURCE_ROOT == ROOT and paths.state_root() == ROOT
