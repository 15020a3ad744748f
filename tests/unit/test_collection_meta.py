"""The collection as its ecosystem reads it (issue 28): `ansible-doc gpuprov.nvidia.plan`
documents the planner action as it is, meta/execution-environment.yml names what the
controller side imports, galaxy.yml names where it lives, the changelog has this release."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from importlib.metadata import packages_distributions, requires
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

# runs ansible-playbook (or ansible-doc / the role's modules) on this machine: the ansible tier
pytestmark = pytest.mark.ansible

ROOT = Path(__file__).resolve().parents[2]
ACTION = ROOT / "plugins" / "action" / "plan.py"
ACTIONS = [ROOT / "plugins" / "action" / f"{name}.py" for name in ("plan", "validate", "verify")]


def _action_returns() -> set[str]:
    """The keys plugins/action/plan.py sets on success (its result.update(...) calls)."""
    keys: set[str] = set()
    for node in ast.walk(ast.parse(ACTION.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "update"
        ):
            keys |= {k.arg for k in node.keywords if k.arg}
    return keys


def test_ansible_doc_documents_the_plan_action_as_it_is() -> None:
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections")}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-doc"), "--json", "gpuprov.nvidia.plan"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    doc = json.loads(out)["gpuprov.nvidia.plan"]
    assert doc["doc"]["has_action"] is True
    # the action takes no arguments (_VALID_ARGS is empty): the docs list none
    assert not doc["doc"].get("options")
    assert "frozenset()" in ACTION.read_text()
    returned = set(doc["return"])
    assert _action_returns() - {"changed", "failed", "msg"} <= returned
    assert {"vars", "roles", "plan_warnings", "gpus", "msg"} <= returned
    assert doc["examples"].count("gpuprov.nvidia.plan:") == 1


@pytest.mark.parametrize("name", ["validate", "verify"])
def test_ansible_doc_documents_the_validate_and_verify_actions_as_they_are(name: str) -> None:
    action = ROOT / "plugins" / "action" / f"{name}.py"
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections")}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-doc"), "--json", f"gpuprov.nvidia.{name}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    doc = json.loads(out)[f"gpuprov.nvidia.{name}"]
    assert doc["doc"]["has_action"] is True
    valid = next(
        n.value
        for n in ast.walk(ast.parse(action.read_text()))
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "_VALID_ARGS"
    )
    assert set(doc["doc"]["options"]) == set(ast.literal_eval(ast.unparse(valid.args[0])))
    keys = {
        k.arg
        for n in ast.walk(ast.parse(action.read_text()))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "update"
        for k in n.keywords
        if k.arg
    }
    assert keys - {"changed", "failed", "msg"} <= set(doc["return"])


def test_the_execution_environment_names_what_the_controller_side_imports() -> None:
    ee = yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())
    listed = {
        Requirement(line).name.lower()
        for line in (ROOT / ee["dependencies"]["python"]).read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    # what the action plugin's imports load, in a fresh interpreter: it imports the planner
    # relatively, under the collection's name (the checkout is the collection through
    # collections/ansible_collections/gpuprov/nvidia)
    # the action plugins' relative imports (orchestrator, plugin_utils), under the
    # collection's name: `...x` is the collection's x, `..x` its plugins' x
    imports = [
        f"from ansible_collections.gpuprov.nvidia.{'plugins.' if n.level == 2 else ''}"
        + ast.unparse(n).removeprefix("from ").lstrip(".")
        for action in ACTIONS
        for n in ast.walk(ast.parse(action.read_text()))
        if isinstance(n, ast.ImportFrom)
        and n.level
        and (n.module or "").startswith(("orchestrator", "plugin_utils"))
    ]
    assert imports

    def tops(code: str) -> set[str]:
        """Top-level modules a fresh interpreter loads for `code` (the checkout as the
        collection on its path), less the standard library."""
        probe = (
            f"import sys; sys.path.insert(0, {str(ROOT / 'collections')!r})\n"
            "before = set(sys.modules)\n" + code + "\n"
            "print('\\n'.join(sorted({m.split('.')[0] for m in set(sys.modules) - before})))"
        )
        out = subprocess.run(
            [sys.executable, "-I", "-c", probe], cwd="/", capture_output=True, text=True, check=True
        ).stdout.split()
        return {m for m in out if m not in sys.stdlib_module_names}

    def dists(names: set[str]) -> set[str]:
        return {d.lower() for top in names for d in packages_distributions().get(top, [])}

    loaded = dists(tops("\n".join(imports)))
    # the action runs inside ansible-playbook: ansible-core and what it loads itself are there
    core = dists(tops("import ansible.plugins.action, ansible.module_utils.common.arg_spec"))
    # a listed package's own requirements come with it (MarkupSafe with Jinja2)
    implied = {
        Requirement(r).name.lower()
        for name in listed
        for r in requires(name) or []
        if "extra ==" not in r
    }
    assert "ansible-core" in core
    assert loaded - core <= listed | implied, loaded - core - listed - implied
    # gpuprov.nvidia.verify runs the suite in a pytest process of its own: not imported
    run_not_imported = {"pytest", "pytest-testinfra"}
    assert run_not_imported <= listed
    # the list names nothing the plugins do not load or run
    assert listed - run_not_imported <= loaded, listed - loaded


def test_galaxy_yml_has_no_placeholder_url_and_names_the_changelog_this_release() -> None:
    """No public address is known: the URL keys are left out (set at publication), never a
    placeholder that generated docs would turn into broken links (issue 50)."""
    text = (ROOT / "galaxy.yml").read_text()
    galaxy = yaml.safe_load(text)
    for key in ("repository", "documentation", "homepage", "issues"):
        value = galaxy.get(key)
        assert value is None or (value.startswith("https://") and "<" not in value), key
    assert "set at publication" in text
    changelog = yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())
    assert galaxy["version"] in changelog["releases"]
    anchor = "v" + galaxy["version"].replace(".", "-")
    assert f'<a id="{anchor}"></a>' in (ROOT / "CHANGELOG.md").read_text()


def test_every_role_has_a_readme_and_driver_upgrades_lists_its_inputs() -> None:
    for role in sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir()):
        assert (ROOT / "roles" / role / "README.md").is_file(), role
    specs = yaml.safe_load((ROOT / "roles/driver_upgrade/meta/argument_specs.yml").read_text())
    readme = (ROOT / "roles/driver_upgrade/README.md").read_text()
    for name, option in specs["argument_specs"]["main"]["options"].items():
        row = next((r for r in readme.splitlines() if r.startswith(f"| `{name}` |")), None)
        assert row is not None, name
        default = option.get("default")
        shown = (
            "[" + ", ".join(default) + "]"
            if isinstance(default, list)
            else str(default).lower()
            if isinstance(default, bool)
            else f'"{default}"'
            if default == ""
            else str(default)
        )
        assert f"`{shown}`" in row, (name, shown)


def test_the_verify_action_writes_its_plan_without_the_cli_s_libraries(tmp_path: Path) -> None:
    """gpuprov.nvidia.verify writes the plan document at run time (not at import): on a
    controller with ansible-core and meta/ee-requirements.txt alone, rich (the CLI's tables)
    is not there. A lazy import of orchestrator.report there failed every host of the lab's
    verify playbook with "No module named 'rich'" (issue 49)."""
    probe = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'collections')!r})\n"
        "sys.modules['rich'] = None  # import rich -> ImportError, as where it is not installed\n"
        "from pathlib import Path\n"
        "from ansible_collections.gpuprov.nvidia.orchestrator.plandoc import write_plan_document\n"
        f"print(write_plan_document(Path({str(tmp_path)!r}), {{'node-1': {{'x': 1}}}}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", probe], cwd="/", capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "plan.json").read_text())
