"""Every plugin of the collection has documentation Ansible reads (issue 50): `ansible-doc` on
each one, found by walking plugins/ (a new plugin without docs fails here), and a description
for every entry point of every role's meta/argument_specs.yml."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

# runs ansible-doc on this machine: the ansible tier
pytestmark = pytest.mark.ansible

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
# plugins/<dir> -> the plugin type ansible-doc takes; action plugins are documented by the
# module of the same name (as ansible.builtin.template is)
DOC_TYPES = {
    "modules": "module",
    "action": "module",
    "filter": "filter",
    "test": "test",
    "lookup": "lookup",
    "callback": "callback",
    "inventory": "inventory",
    "connection": "connection",
    "become": "become",
    "cache": "cache",
    "strategy": "strategy",
    "vars": "vars",
}
# code shared by plugins, not plugins
NOT_PLUGINS = {"module_utils", "plugin_utils", "doc_fragments"}


def _jinja2_names(path: Path, cls: str) -> list[str]:
    """The names a filter or test file's FilterModule/TestModule returns (the dict literal of
    its filters()/tests() method), read without importing it."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in ast.walk(node):
                if isinstance(item, ast.Dict):
                    return [k.value for k in item.keys if isinstance(k, ast.Constant)]
    raise AssertionError(f"{path}: no {cls} with a dict of names")


def collection_plugins() -> dict[str, list[str]]:
    """ansible-doc type -> the plugin names found under plugins/."""
    found: dict[str, list[str]] = {}
    for folder in sorted(p for p in PLUGINS.iterdir() if p.is_dir()):
        if folder.name in NOT_PLUGINS or folder.name == "__pycache__":
            continue
        assert folder.name in DOC_TYPES, f"plugins/{folder.name}: a plugin type not known here"
        kind = DOC_TYPES[folder.name]
        for path in sorted(folder.glob("*.py")):
            if path.name == "__init__.py":
                continue
            if folder.name == "filter":
                names = _jinja2_names(path, "FilterModule")
            elif folder.name == "test":
                names = _jinja2_names(path, "TestModule")
            else:
                names = [path.stem]
            found.setdefault(kind, []).extend(f"gpuprov.nvidia.{n}" for n in names)
    return found


def _ansible_doc(kind: str, names: list[str]) -> tuple[int, dict[str, object], str]:
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections")}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-doc"), "--json", "-t", kind, *names],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return out.returncode, (json.loads(out.stdout) if out.stdout.strip() else {}), out.stderr


def test_the_walk_finds_every_kind_of_plugin_the_collection_has() -> None:
    found = collection_plugins()
    assert {"gpuprov.nvidia.plan", "gpuprov.nvidia.gpu_probe"} <= set(found["module"])
    assert "gpuprov.nvidia.dpkg_missing" in found["filter"]


@pytest.mark.parametrize("kind", sorted(collection_plugins()))
def test_ansible_doc_documents_every_plugin(kind: str) -> None:
    names = sorted(set(collection_plugins()[kind]))
    rc, docs, stderr = _ansible_doc(kind, names)
    assert rc == 0, stderr
    for name in names:
        entry = docs.get(name)
        assert isinstance(entry, dict), f"ansible-doc -t {kind} {name}: no documentation ({stderr})"
        doc = entry.get("doc") or {}
        assert doc.get("short_description") and doc.get("description"), name
        assert doc.get("author"), name
        assert entry.get("examples"), f"{name}: no EXAMPLES"
        assert entry.get("return"), f"{name}: no RETURN"


def test_every_role_entry_point_has_a_description() -> None:
    for spec_file in sorted(ROOT.glob("roles/*/meta/argument_specs.yml")):
        role = spec_file.parents[1].name
        specs = yaml.safe_load(spec_file.read_text(encoding="utf-8"))["argument_specs"]
        for entry, spec in specs.items():
            assert spec.get("short_description"), f"{role} {entry}: no short_description"
            assert spec.get("description"), f"{role} {entry}: no description"
