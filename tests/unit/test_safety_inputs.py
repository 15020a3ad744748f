"""Issue 48, item 1: CLI input that Ansible or the machine would turn into something else
than the user meant is refused or named (exit 2, no traceback): a --limit that reads as no
limit at all, and the paths and outputs gpuprov writes."""

from __future__ import annotations

import errno
import io
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


# --- folders and files gpuprov writes ---------------------------------------------------------


@pytest.mark.parametrize("stage", ["apply", "verify", None])
def test_artifacts_dir_naming_a_file_is_exit_2_before_any_host(
    tmp_path: Path, stage: str | None, no_hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    inv = write_inventory(tmp_path, TWO)
    argv = [*([stage] if stage else []), "-i", str(inv), "--artifacts-dir", str(a_file)]
    if stage != "verify":
        argv.append("--check")
    _refused(argv, capsys, f"--artifacts-dir {a_file}", "is not a directory")
    assert no_hosts == [] and a_file.read_text() == "mine\n"


def test_artifacts_dir_from_the_environment_naming_a_file_is_exit_2(
    tmp_path: Path,
    no_hosts: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("")
    monkeypatch.setenv("GPUPROV_ARTIFACTS_DIR", str(a_file / "runs"))
    argv = ["apply", "--check", "-i", str(write_inventory(tmp_path, TWO))]
    _refused(argv, capsys, "$GPUPROV_ARTIFACTS_DIR", f"{a_file} exists and is not a directory")


def test_a_run_folder_that_cannot_be_made_later_is_named(tmp_path: Path) -> None:
    """Checked before the run, the folder can still go: new_run_dir names it (exit 1)."""
    from orchestrator.apply import new_run_dir
    from orchestrator.errors import OutputError

    a_file = tmp_path / "runs"
    a_file.write_text("")
    with pytest.raises(OutputError, match=f"artifacts folder {a_file}/20") as caught:
        new_run_dir(a_file)
    assert caught.value.exit_code == 1


def _unwritable_home(tmp_path: Path) -> str:
    """A $HOME nobody can write, root included: under a regular file (ENOTDIR)."""
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    return str(blocker / "home")


def test_a_read_only_home_is_exit_2_naming_ansibles_folder(tmp_path: Path) -> None:
    facts = copy_facts(tmp_path, ("node1",))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["HOME"] = _unwritable_home(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "plan", "--facts", str(facts)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{env['HOME']}/.ansible/tmp" in done.stderr and "ANSIBLE_LOCAL_TEMP" in done.stderr


def _installed_under(monkeypatch: pytest.MonkeyPatch, cache: Path | str) -> None:
    """As an installed wheel: state goes to $XDG_CACHE_HOME/gpuprov."""
    from orchestrator import paths

    monkeypatch.setattr(paths, "installed", lambda: True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))


def test_a_read_only_xdg_cache_home_is_bad_input_naming_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator import ansiblecfg

    cache = _unwritable_home(tmp_path)
    _installed_under(monkeypatch, cache)
    with pytest.raises(BadInputError, match=f"{cache}/gpuprov/.cache/facts") as caught:
        ansiblecfg.layered_env({}, None)
    assert "XDG_CACHE_HOME" in str(caught.value)


def test_the_fact_cache_folder_is_0700_new_or_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator import ansiblecfg

    _installed_under(monkeypatch, tmp_path)
    folder = tmp_path / "gpuprov" / ".cache" / "facts"
    env = ansiblecfg.layered_env({}, None)
    assert folder.is_dir() and folder.stat().st_mode & 0o777 == 0o700
    assert str(folder) in env.values()
    folder.chmod(0o755)  # an older run's, made by Ansible's jsonfile plugin under umask 022
    ansiblecfg.layered_env({}, None)
    assert folder.stat().st_mode & 0o777 == 0o700


class _FullFile:
    """A file on a full disk (/dev/full's answer to every write)."""

    def __init__(self, real: object) -> None:
        self.real = real

    def __enter__(self) -> _FullFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.real.close()  # type: ignore[attr-defined]

    def write(self, _text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def _disk_full_under(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Every file opened for writing under `folder` answers ENOSPC."""
    real_fdopen = os.fdopen

    def fdopen(fd: int, *a: object, **kw: object) -> object:
        f = real_fdopen(fd, *a, **kw)  # type: ignore[call-overload]
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder)):
            return _FullFile(f)
        return f

    monkeypatch.setattr(os, "fdopen", fdopen)


def _a_validate_report() -> object:
    from orchestrator import report as rep

    host = rep.HostReport("node1", validation=rep.StageResult("done"))
    return rep.RunReport("validate", (host,))


def test_junit_on_a_full_disk_exits_1_naming_it_and_removes_the_older_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rich.console import Console

    from orchestrator import pipeline

    full = tmp_path / "full"
    full.mkdir()
    junit, report_file = full / "junit.xml", full / "report.json"
    junit.write_text("<testsuites><!-- the last run's --></testsuites>")
    _disk_full_under(monkeypatch, full)
    opts = pipeline.StageOptions(junit=str(junit), report=str(report_file))
    code = pipeline._finish(opts, Console(file=io.StringIO()), _a_validate_report())  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert code == 1
    assert f"the JUnit file could not be written to {junit}: No space left on device" in err
    assert f"the report could not be written to {report_file}" in err
    assert "the older file there was removed" in err and not junit.exists()
    assert "Traceback" not in err and not list(full.iterdir())  # no temporary file left


def test_a_report_on_a_full_disk_is_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = copy_facts(tmp_path, ("node1",))
    full = tmp_path / "full"
    full.mkdir()
    _disk_full_under(monkeypatch, full)
    assert main(["plan", "--facts", str(facts), "--report", str(full / "r.json")]) == 1
    err = capsys.readouterr().err
    assert f"the report could not be written to {full / 'r.json'}: No space left" in err


# --- YAML alias bombs --------------------------------------------------------------------------

# 254 bytes that stand for 9**7 (4.8 million) strings: cost `provision plan` 112 s and 760 MB.
BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
    for prev, name in zip("abcdef", "bcdefg", strict=True)
)
BOMB = 'a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]\n' + BOMB


def _provision(argv: list[str], timeout: int = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_bomb_is_small_and_expands_past_the_budget() -> None:
    from orchestrator import yamlbudget

    assert len(BOMB) < 400
    size = yamlbudget.expanded_nodes(BOMB)
    assert size is not None and size > yamlbudget.NODE_BUDGET


def test_expanded_nodes_counts_each_alias_as_the_node_it_names() -> None:
    from orchestrator import yamlbudget

    # mapping 1 + key a 1 + [1, 2] 3 + key b 1 + [*a, *a] (1 + 3 + 3)
    assert yamlbudget.expanded_nodes("a: &a [1, 2]\nb: [*a, *a]\n") == 13
    assert yamlbudget.expanded_nodes("") == 0
    assert yamlbudget.expanded_nodes("a: [\n") is None  # left to the reader's own error


@pytest.mark.parametrize("where", ["group_vars", "yaml_inventory", "extra_vars"])
def test_an_alias_bomb_is_refused_fast_naming_the_file(tmp_path: Path, where: str) -> None:
    inv = write_inventory(tmp_path, TWO)
    extra: list[str] = []
    bomb = tmp_path / "bomb.yml"
    if where == "group_vars":
        bomb = tmp_path / "group_vars" / "all.yml"
        bomb.parent.mkdir()
        bomb.write_text(BOMB)
    elif where == "yaml_inventory":
        inv = tmp_path / "hosts.yml"
        nested = "".join(f"    {line}\n" for line in BOMB.splitlines())
        inv.write_text(
            f"gpu_nodes:\n  hosts:\n    node1:\n      ansible_connection: local\n  vars:\n{nested}"
        )
        bomb = inv
    else:
        bomb.write_text(BOMB)
        extra = ["-e", f"@{bomb}", "--check"]
    stage = ["apply"] if extra else ["plan"]
    done = _provision([*stage, "-i", str(inv), *extra])
    assert done.returncode == 2, done.stderr
    assert f"{bomb}: its YAML aliases expand to more than 1,000,000 values" in done.stderr
    assert "Traceback" not in done.stderr


def test_ordinary_aliases_still_load(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path, TWO)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text(
        "docker_opts: &opts {log-driver: json-file}\nother_opts: *opts\n"
    )
    from orchestrator.inventory import load_inventory

    loaded = load_inventory(inv, None)
    assert loaded.hosts[0].vars["other_opts"] == {"log-driver": "json-file"}


# --- artifacts rotation ----------------------------------------------------------------------


def test_rotation_removes_only_folders_gpuprov_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 48: `--artifacts-dir DIR` deleted any `YYYYMMDDT...` folder of DIR beyond the
    newest 20, whoever made it. Now only folders holding gpuprov's marker are rotated."""
    import datetime as dt

    from orchestrator.apply import new_run_dir

    marker = ".gpuprov-run"  # apply.RUN_MARKER
    monkeypatch.setenv("GPUPROV_ARTIFACTS_KEEP", "2")
    base = tmp_path / "shared"
    base.mkdir()
    theirs = base / "20200101T000000Z"  # a backup someone keeps there, named like a run
    theirs.mkdir()
    (theirs / "data.bin").write_text("precious")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / marker).write_text("")
    (base / "20200101T000001Z").symlink_to(elsewhere)  # a link to a folder with a marker
    start = dt.datetime(2026, 12, 1, 17, 0, tzinfo=dt.UTC)
    made = [new_run_dir(base, start + dt.timedelta(minutes=i)) for i in range(4)]
    left = sorted(p.name for p in base.iterdir())
    assert (theirs / "data.bin").read_text() == "precious" and elsewhere.is_dir()
    assert left == sorted([theirs.name, "20200101T000001Z", made[2].name, made[3].name])
    assert all((d / marker).is_file() for d in made[2:])


def test_the_plan_document_on_a_full_disk_is_named_and_leaves_no_half_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.errors import OutputError
    from orchestrator.plandoc import FILE_NAME, write_plan_document

    _disk_full_under(monkeypatch, tmp_path)
    with pytest.raises(OutputError, match=f"plan document could not be written to {tmp_path}"):
        write_plan_document(tmp_path, {"node1": {"gpuprov_roles": ["docker"]}})
    assert not (tmp_path / FILE_NAME).exists() and not list(tmp_path.iterdir())
