"""Issue 48, item 1: CLI input that Ansible or the machine would turn into something else
than the user meant is refused or named (exit 2, no traceback): a --limit that reads as no
limit at all, and the paths and outputs gpuprov writes."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import REPO as ROOT
from _helpers import copy_facts, write_inventory

from orchestrator import inputs, terminal
from orchestrator.cli import main
from orchestrator.errors import BadInputError

TWO = "[gpu_nodes]\nnode1 ansible_connection=local\nnode2 ansible_connection=local\n"


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


# --- --limit that Ansible reads as every host -----------------------------------------------


def test_ansible_itself_applies_no_subset_for_an_empty_limit_file(tmp_path: Path) -> None:
    """Why the check exists: ansible-core skips empty patterns, and with none left it takes
    every host (its InventoryManager.subset and get_hosts)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    inv = write_inventory(tmp_path, TWO)
    empty = tmp_path / "empty"
    empty.write_text("")
    manager = InventoryManager(DataLoader(), [str(inv)])
    for limit in (f"@{empty}", ",", ""):
        manager.subset(limit)
        assert [h.name for h in manager.get_hosts("all")] == ["node1", "node2"], limit


@pytest.mark.parametrize("content", ["", "\n\n", "  \n\t\n"])
@pytest.mark.parametrize("stage", ["plan", "detect", "apply", None])
def test_an_empty_limit_file_is_exit_2_before_any_host(
    tmp_path: Path,
    content: str,
    stage: str | None,
    no_hosts: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    limit_file = tmp_path / "hosts.txt"
    limit_file.write_text(content)
    inv = write_inventory(tmp_path, TWO)
    argv = [*([stage] if stage else []), "-i", str(inv), "--limit", f"@{limit_file}"]
    if stage in ("apply", None):
        argv.append("--check")
    _refused(argv, capsys, f"{limit_file} holds no host pattern", "--limit all")
    assert no_hosts == []


@pytest.mark.parametrize("limit", [",", " , ", ",,", ""])
def test_a_limit_of_only_separators_is_exit_2(
    tmp_path: Path, limit: str, no_hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "-i", str(write_inventory(tmp_path, TWO)), "--limit", limit]
    _refused(argv, capsys, f"--limit {limit!r} names no host", "would select every host")
    assert no_hosts == []


def test_an_empty_limit_is_refused_offline_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = copy_facts(tmp_path, ("node1", "node2"))
    _refused(["plan", "--facts", str(facts), "--limit", ","], capsys, "names no host")


@pytest.mark.parametrize("limit", ["all", "node1,", ",node1", "!node1"])
def test_a_limit_that_names_something_passes(limit: str) -> None:
    inputs.check_limit(limit)


def test_a_limit_file_with_one_host_passes_and_mixed_with_an_empty_one(tmp_path: Path) -> None:
    one, empty = tmp_path / "one", tmp_path / "empty"
    one.write_text("node1\n")
    empty.write_text("")
    inputs.check_limit(f"@{one}")
    inputs.check_limit(f"@{empty},node2")
    with pytest.raises(BadInputError, match="names no host"):
        inputs.check_limit(f"@{empty},")


# --- COLUMNS=0 ------------------------------------------------------------------------------


@pytest.mark.parametrize("terminal", [False, True])
def test_columns_0_still_prints_the_plan(tmp_path: Path, terminal: bool) -> None:
    """rich takes COLUMNS=0 as a width of 0 and printed nothing; now the terminal's size
    (else 80) is used. On a pty (script(1)) as on a pipe."""
    facts = copy_facts(tmp_path, ("node1",))
    cmd = [sys.executable, "-m", "orchestrator.cli", "plan", "--facts", str(facts)]
    env = {**os.environ, "COLUMNS": "0"}
    if terminal:
        cmd = ["script", "-qec", shlex.join(cmd), "/dev/null"]
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "node1" in done.stdout and "nvidia_driver" in done.stdout, done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_a_zero_width_is_unknown_and_others_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "0")
    assert terminal.new_console().width >= 1
    monkeypatch.setenv("COLUMNS", "57")
    assert terminal.new_console().width == 57


# --- Ctrl-C in the first moments -------------------------------------------------------------


def _console_script() -> str:
    """The [project.scripts] target of `provision`, as pip's generated wrapper calls it."""
    import tomllib

    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, func = target["provision"].split(":")
    return f"import sys\nfrom {module} import {func}\nsys.exit({func}())\n"


# Ctrl-C delivered while this module is first imported: inside `orchestrator.cli`'s own
# imports, while the options are parsed (argparse's gettext), while ansible-core is loaded to
# read the inventory settings, and while the report's console is made.
_LANDS_IN = ["orchestrator.errors", "gettext", "ansible.constants", "rich.console"]

_INTERRUPT_AT = """
import importlib.abc, os, signal, sys
class _Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == {name!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, _Interrupt())
"""


@pytest.mark.parametrize("lands_in", _LANDS_IN)
def test_ctrl_c_before_the_run_starts_is_exit_130_without_a_traceback(
    tmp_path: Path, lands_in: str
) -> None:
    facts = copy_facts(tmp_path, ("node1",))
    code = _INTERRUPT_AT.format(name=lands_in) + _console_script()
    done = subprocess.run(
        [sys.executable, "-c", code, "plan", "--facts", str(facts)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert "interrupted" in done.stderr
