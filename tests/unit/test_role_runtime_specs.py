"""The docker and nvidia_container_toolkit roles keep their own conventions: every public
variable has a default, an argument spec entry and the role prefix; OS data and internal
variables are `__<role>_`; tasks/main.yml only dispatches; every task file it names exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
RUNTIME_ROLES = ("docker", "nvidia_container_toolkit")
DISPATCH = {
    "ansible.builtin.include_vars",
    "ansible.builtin.import_tasks",
    "ansible.builtin.include_tasks",
    "ansible.builtin.meta",
}


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("role", RUNTIME_ROLES)
def test_defaults_and_argument_specs_name_the_same_variables(role: str) -> None:
    defaults = set(_load(ROLES / role / "defaults" / "main.yml"))
    spec = _load(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]
    assert set(spec["options"]) == defaults
    assert all(name.startswith(f"{role}_") for name in defaults)
    for name, option in spec["options"].items():
        assert option.get("description"), f"{role}: {name} has no description"


@pytest.mark.parametrize("role", RUNTIME_ROLES)
def test_argument_spec_defaults_agree_with_defaults_main(role: str) -> None:
    defaults = _load(ROLES / role / "defaults" / "main.yml")
    spec = _load(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]
    for name, option in spec["options"].items():
        if "default" in option:
            assert option["default"] == defaults[name], f"{role}: {name}"
        if "choices" in option:
            assert defaults[name] in option["choices"], f"{role}: {name}"


@pytest.mark.parametrize("role", RUNTIME_ROLES)
def test_vars_files_hold_only_internal_variables(role: str) -> None:
    for path in (ROLES / role / "vars").glob("*.yml"):
        for name in _load(path):
            assert name.startswith(f"__{role}_"), f"{path}: {name}"


@pytest.mark.parametrize("role", RUNTIME_ROLES)
def test_main_only_dispatches_to_task_files_that_exist(role: str) -> None:
    tasks = _load(ROLES / role / "tasks" / "main.yml")
    for task in tasks:
        module = next(k for k in task if k.startswith(("ansible.builtin.", "gpuprov.nvidia.")))
        if module == "gpuprov.nvidia.converged_record":  # the last task: the role's record
            continue
        assert module in DISPATCH, f"{role}: {task['name']} runs {module}"
        target = task[module]
        if module.endswith("_tasks"):
            if target.startswith("{{ role_path }}/"):  # a shared task file (the record's)
                assert (ROLES / role / target.removeprefix("{{ role_path }}/")).is_file(), target
            elif "{{" in target:  # per-OS installer: every OS data file names an existing one
                for vars_file in (ROLES / role / "vars").glob("*.yml"):
                    setup = {k: v for k, v in _load(vars_file).items() if k.endswith("_setup")}
                    for value in setup.values():
                        rendered = target.split("{{")[0] + value + target.split("}}")[1]
                        assert (ROLES / role / "tasks" / rendered).is_file(), rendered
            else:
                assert (ROLES / role / "tasks" / target).is_file(), target


@pytest.mark.parametrize("role", RUNTIME_ROLES)
def test_notified_handlers_exist(role: str) -> None:
    handlers = {h["name"] for h in _load(ROLES / role / "handlers" / "main.yml")}
    for path in (ROLES / role / "tasks").glob("*.yml"):
        for task in _flatten(_load(path)):
            if "notify" in task:
                assert task["notify"] in handlers, f"{path.name}: {task['notify']}"


def _flatten(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for task in tasks:
        out.append(task)
        out += _flatten(task.get("block", []))
    return out
