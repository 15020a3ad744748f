"""Roles stand alone and code sits where Ansible ships it (issue 26): no role reaches outside
its folder, the orchestrator imports itself relatively (so the collection's action plugins load
it as ansible_collections.gpuprov.nvidia.orchestrator, with no global `orchestrator`), and the
code that runs on GPU hosts is the collection's module_utils, which orchestrator/ links to."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "orchestrator"
HOST_CODE = REPO / "plugins" / "module_utils"


def test_no_role_reaches_outside_its_folder() -> None:
    found = [
        f"{p.relative_to(REPO)}:{n}"
        for p in (REPO / "roles").rglob("*")
        if p.is_file()
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if "role_path }}/.." in line or "role_path ~ '/.." in line
    ]
    assert not found


def test_the_orchestrator_imports_itself_relatively() -> None:
    """verify/suite is exempt: pytest test modules that only `provision verify` runs."""
    absolute = []
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[:2] == ("verify", "suite"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(n == "orchestrator" or n.startswith("orchestrator.") for n in names):
                absolute.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not absolute


def test_the_planner_imports_under_the_collections_name_alone() -> None:
    """What plugins/action/plan.py imports, in a Python without site processing (no editable
    gpuprov install) that has the checkout's collections/ and this environment's packages."""
    probe = """
import importlib, json, sys
sys.path[:0] = sys.argv[1:]
for name in ("catalog", "knobs", "parsers", "plan", "policy", "probe", "converged"):
    importlib.import_module("ansible_collections.gpuprov.nvidia.orchestrator." + name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "orchestrator")))
"""
    site = sysconfig.get_paths()["purelib"]
    done = subprocess.run(
        [sys.executable, "-S", "-I", "-c", probe, str(REPO / "collections"), site],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []  # no global orchestrator came along


def test_the_on_host_code_is_the_collections_module_utils_linked_into_the_orchestrator() -> None:
    linked = {
        p.relative_to(PACKAGE): p.resolve().relative_to(HOST_CODE)
        for p in PACKAGE.rglob("*.py")
        if p.is_symlink()
    }
    host = {
        p.relative_to(HOST_CODE): p.relative_to(HOST_CODE)
        for p in HOST_CODE.rglob("*.py")
        if p.name != "__init__.py"
    }
    assert linked == host
