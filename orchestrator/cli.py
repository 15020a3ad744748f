"""The `provision` command: a thin layer that parses options and calls pure stage functions.

Exit codes (EPILOG below; README.md, beside ansible-playbook's):
  0  every host ok
  1  at least one host failed (unreachable, a role failed, a check failed)
  2  bad input (inventory, policy, options, paths), found before any change to any host;
     or a host the planner blocked (that host is left as it is)
  130  interrupted (Ctrl-C): the hosts mid-change are named, the run's report is left
  141  stdout's reader went away (`| head`): exits quietly

Inventory as ansible-playbook takes it: -i more than once merges the sources; without -i,
ANSIBLE_INVENTORY, else ansible.cfg's `inventory =` (orchestrator/inventory.py's
inventory_sources, through ansible-core's configuration manager). -l/-C: --limit/--check.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime as dt
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import EXIT_BAD_INPUT, BadInputError, GpuprovError

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
# Stages that make a run folder under the artifacts folder (apply's, verify's suite).
ARTIFACT_STAGES = ("all", "apply", "verify")
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of stdout closed it

# Stage name -> "module:function"; each function takes the parsed options and returns an
# exit code. Imported lazily so `provision lab status` does not load Ansible.
STAGES: dict[str, str] = {
    "all": "orchestrator.pipeline:run_all",
    "detect": "orchestrator.pipeline:run_detect",
    "plan": "orchestrator.pipeline:run_plan",
    "apply": "orchestrator.pipeline:run_apply",
    "validate": "orchestrator.pipeline:run_validate",
    "verify": "orchestrator.pipeline:run_verify",
    "lab": "orchestrator.lab.cli:run",
}


def _common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Options every stage takes; `suppress` keeps sub-command defaults from clobbering."""

    def d(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument(
        "-i",
        "--inventory",
        action="append",
        default=d(None),
        metavar="INVENTORY",
        help="Ansible inventory (INI or YAML); more than once: merged, as ansible-playbook "
        "merges them; none: ANSIBLE_INVENTORY, else ansible.cfg's `inventory =`",
    )
    parser.add_argument(
        "-l", "--limit", default=d(None), metavar="SUBSET", help="Ansible host pattern"
    )
    parser.add_argument(
        "-C", "--check", action="store_true", default=d(False), help="apply in check mode with diff"
    )
    parser.add_argument(
        "--full",
        action="store_true",
        default=d(False),
        help="run every role, also those a host has converged (docs/reruns.md)",
    )
    parser.add_argument("--report", default=d(None), metavar="PATH", help="write the JSON report")
    parser.add_argument(
        "--artifacts-dir",
        default=d(None),
        metavar="DIR",
        help="where each run's artifacts go (default $GPUPROV_ARTIFACTS_DIR, else ./artifacts; "
        "the newest $GPUPROV_ARTIFACTS_KEEP runs, 20, are kept)",
    )
    parser.add_argument(
        "--junit", default=d(None), metavar="PATH", help="write JUnit XML: a testcase per check"
    )
    parser.add_argument(
        "--serial", default=d(None), help="rolling batch size: a count or a percentage (25%%)"
    )
    parser.add_argument(
        "--max-fail-percent",
        type=int,
        default=d(None),
        metavar="P",
        help="stop the rollout when more than P%% of a batch failed",
    )
    parser.add_argument(
        "--max-unavailable",
        default=d(None),
        metavar="N|P%",
        help="at most this many hosts out of service at once, counting hosts an unfinished "
        "driver upgrade left drained",
    )
    parser.add_argument("--json", action="store_true", default=d(False), help="print JSON")
    parser.add_argument(
        "-u",
        "--user",
        dest="remote_user",
        default=d(None),
        metavar="REMOTE_USER",
        help="connect as this user, as ansible-playbook -u: for the hosts whose inventory sets "
        "no ansible_user (that wins, as in Ansible)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=d(0),
        help="apply: show Ansible's own output at this verbosity (-vvv as ansible-playbook)",
    )
    _secrets(parser, d)
    _ansible(parser, d)


def _secrets(parser: argparse.ArgumentParser, d: Callable[[object], object]) -> None:
    """Vault and become passwords, as ansible-playbook takes them (every stage reads the
    inventory and becomes on the hosts as Ansible does)."""
    group = parser.add_argument_group("vault and become (as ansible-playbook; every stage)")
    add = group.add_argument
    add("--vault-id", action="append", default=d(None), help="vault identity to use")
    add(
        "--vault-password-file",
        "--vault-pass-file",
        dest="vault_password_file",
        action="append",
        default=d(None),
        metavar="FILE",
        help="vault password file",
    )
    add(
        "-J",
        "--ask-vault-pass",
        "--ask-vault-password",
        dest="ask_vault_pass",
        action="store_true",
        default=d(False),
        help="ask for the vault password",
    )
    add(
        "-K",
        "--ask-become-pass",
        "--ask-become-password",
        dest="ask_become_pass",
        action="store_true",
        default=d(False),
        help="ask for the privilege escalation (sudo) password",
    )


def _ansible(parser: argparse.ArgumentParser, d: Callable[[object], object]) -> None:
    """ansible-playbook's options, passed through to it (apply and the full run)."""
    group = parser.add_argument_group("ansible-playbook options (apply and the full run)")
    add = group.add_argument
    add("-t", "--tags", action="append", default=d(None), help="only tasks with these tags")
    add("--skip-tags", action="append", default=d(None), help="skip tasks with these tags")
    add(
        "-e",
        "--extra-vars",
        action="append",
        default=d(None),
        metavar="VARS",
        help="extra variables, as ansible-playbook takes them (key=value, JSON/YAML, @file)",
    )
    add("-f", "--forks", type=int, default=d(None), help="parallel Ansible processes")
    add("--diff", action="store_true", default=d(False), help="show the changes to files")


DESCRIPTION = """\
Take bare NVIDIA GPU hosts to validated, container-ready nodes.

Without a STAGE, provision runs the full pipeline, which CHANGES the hosts:
detect -> plan -> apply -> detect again -> validate -> verify -> report.
Each STAGE runs one step; only `apply` (and the full run) change hosts:

  detect    read-only: OS, GPUs, driver, runtime of each host (one SSH round-trip)
  plan      read-only: the roles and variables each host needs, and why
  apply     install and configure the planned roles with Ansible (changes hosts)
  validate  read-only: GPU, NCCL and host health checks
  verify    read-only: the host state checked with pytest-testinfra
  lab       simulated GPU hosts in local containers, for trying provision out

Start read-only: `provision -i INVENTORY plan`, then `provision -i INVENTORY apply --check`."""

# Side by side with ansible-playbook's: ansible-core's ExitCode (ansible/errors/__init__.py,
# 2.19-2.22) and its task queue manager's results.
EPILOG = """\
exit codes           provision                          ansible-playbook
  every host ok      0                                  0
  a host failed      1 (a role, a check failed)         2
  host unreachable   1                                  4
  bad input          2 (inventory, policy, options,     5 bad option, 4 parse error,
                       paths: nothing changed)          1 other error
  planner blocked    2 (that host left as it is)        -
  interrupted        130 (Ctrl-C)                       99
  stdout closed      141 (`| head`)                     -"""

STAGE_HELP: dict[str, tuple[str, str]] = {
    "detect": (
        "detect OS, GPUs, driver and runtime on each host",
        "Probe each host in one SSH round-trip (read-only) and show what it has. --save DIR "
        "keeps the raw outputs, to plan offline later with `plan --facts DIR`.",
    ),
    "plan": (
        "plan roles and variables per host",
        "Show the roles and variables each host needs and why, with warnings and blockers. "
        "Read-only: live over SSH, or offline from a saved facts directory (--facts).",
    ),
    "apply": (
        "apply the planned roles with Ansible",
        "Detect, plan, then run the site playbook on every host the plan does not block. "
        "CHANGES the hosts; --check shows the changes without making them. Rolling: --serial, "
        "--max-fail-percent, --max-unavailable.",
    ),
    "validate": (
        "run GPU, NCCL and host health checks",
        "Detect and run the GPU, NCCL and host health checks on each host (read-only).",
    ),
    "verify": (
        "verify host state with pytest-testinfra",
        "Detect and check each host's state against its plan with pytest-testinfra (read-only).",
    ),
}

# Options only some stages use; any other stage refuses them (dest -> the option's name).
ROLLOUT_OPTIONS = {
    "check": "--check",
    "full": "--full",
    "serial": "--serial",
    "max_fail_percent": "--max-fail-percent",
    "max_unavailable": "--max-unavailable",
}
ROLLOUT_STAGES = ("all", "apply")
ANSIBLE_OPTIONS = {
    "tags": "--tags",
    "skip_tags": "--skip-tags",
    "forks": "--forks",
    "diff": "--diff",
}
ROLLOUT_OPTIONS.update(ANSIBLE_OPTIONS)  # the same stages take them
# Options a few stages use and the others refuse: dest -> (the option, the stages using it).
STAGE_OPTIONS = {
    "artifacts_dir": ("--artifacts-dir", ("all", "apply", "verify")),  # their run folders
    "verbose": ("-v", ("all", "apply")),  # Ansible's own output: only they run a playbook
    # -e outranks the inventory, so every stage that plans plans with it (docs/roles.md)
    "extra_vars": ("--extra-vars", ("all", "apply", "plan", "validate", "verify")),
}
SECRET_OPTIONS = {  # every stage but lab takes them
    "vault_id": "--vault-id",
    "vault_password_file": "--vault-password-file",
    "ask_vault_pass": "--ask-vault-pass",
    "ask_become_pass": "--ask-become-pass",
}


def version() -> str:
    """gpuprov's version: its one source, orchestrator/__init__.py (pyproject reads it too).
    Not the package metadata: looking it up scans every installed distribution, 0.5 s and
    more in a large environment (seen on the GPU machine's 7 GB PyTorch venv)."""
    from . import __version__

    return __version__


def _hide_refused(parser: argparse.ArgumentParser, stage: str) -> None:
    """A stage's --help lists only the options it takes; the others stay parsed, to be
    refused by name (exit 2, check_arguments) rather than as unknown."""
    from .inputs import NO_JUNIT_STAGES

    refused = set() if stage in ROLLOUT_STAGES else set(ROLLOUT_OPTIONS)
    if stage in NO_JUNIT_STAGES:
        refused.add("junit")
    refused |= {dest for dest, (_name, stages) in STAGE_OPTIONS.items() if stage not in stages}
    for action in parser._actions:
        if action.dest in refused:
            action.help = argparse.SUPPRESS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="provision",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"provision {version()}")
    _common(parser, suppress=False)
    parser.set_defaults(stage="all")
    sub = parser.add_subparsers(dest="stage", metavar="STAGE")

    def stage(name: str) -> argparse.ArgumentParser:
        short, long = STAGE_HELP[name]
        p = sub.add_parser(
            name,
            help=short,
            description=long,
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _common(p, suppress=True)
        _hide_refused(p, name)
        return p

    p = stage("detect")
    p.add_argument(
        "--save",
        metavar="DIR",
        help="write raw outputs to DIR/<host>/, with the nvidia-smi views no check reads "
        "(plain nvidia-smi, the MIG listings): a whole record of each host",
    )

    p = stage("plan")
    p.add_argument("--facts", metavar="DIR", help="plan offline from a saved facts directory")

    for name in ("apply", "validate", "verify"):
        p = stage(name)
        if name == "validate":
            p.add_argument(
                "--runtime",
                choices=("docker", "host"),
                default=None,
                help="run GPU checks in a container (default where Docker runs) or on the host",
            )
            p.add_argument(
                "--image", default=None, help="container image for --runtime docker (a PyTorch one)"
            )
            p.add_argument(
                "--multinode",
                action="store_true",
                default=None,
                help="also run one all-reduce across all the hosts, a rank on every GPU "
                "(docs/validation.md)",
            )
            p.add_argument(
                "--dcgm-level",
                dest="dcgm_level",
                type=int,
                choices=(1, 2, 3, 4),
                default=None,
                help="also run NVIDIA DCGM's `dcgmi diag -r N` on each host (the dcgm role "
                "installs it; docs/validation.md: what each level runs, how long)",
            )

    p = sub.add_parser(
        "lab",
        help="simulated GPU hosts in local containers",
        description="Simulated GPU hosts (systemd containers with real SSH and a GPU simulator) "
        "to try provision without GPUs. Every GPU fact there is simulated.",
    )
    lab = p.add_subparsers(dest="lab_command", metavar="COMMAND", required=True)
    up = lab.add_parser("up", help="start test hosts and write an inventory")
    up.add_argument("--profile", default="p5.48xlarge", help="profile name or YAML path")
    up.add_argument("--count", type=int, default=2)
    up.add_argument("--os", dest="lab_os", choices=("debian12", "debian13"), default="debian12")
    up.add_argument(
        "--with-torch",
        action="store_true",
        help="mount a CPU PyTorch read-only into the hosts, for validate --multinode (gloo)",
    )
    status = lab.add_parser("status", help="show the lab's hosts")
    down = lab.add_parser("down", help="remove every container, network and volume the lab made")
    for lab_parser in (up, status, down):
        lab_parser.add_argument(
            "--name", default=None, help="lab name (default: $GPUPROV_LAB, else gpuprov)"
        )
    images = lab.add_parser("images", help="build the test-host images (cached by recipe)")
    images.add_argument("--os", dest="lab_os", choices=("debian12", "debian13"), default=None)
    return parser


def _resolve(target: str) -> Callable[..., int]:
    module_name, func_name = target.split(":")
    func: Callable[..., int] = getattr(importlib.import_module(module_name), func_name)
    return func


def _writable_dir(path: Path, option: str) -> None:
    """`path` is, or can be made as, a directory we may write in."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise BadInputError(
            f"{option} {path}: {probe} exists and is not a directory",
            fix=f"pass a directory path for {option} (or remove the file {probe})",
        )
    if not os.access(probe, os.W_OK | os.X_OK):
        raise BadInputError(
            f"{option} {path}: {probe} is not writable",
            fix=f"pass a path you can write for {option}, or fix the permissions of {probe}",
        )


def _writable_file(path: Path, option: str) -> None:
    if path.is_dir():
        raise BadInputError(
            f"{option} {path} is a directory",
            fix=f"pass a file path for {option}, e.g. {path / 'report.json'}",
        )
    parent = path.parent
    if not parent.is_dir():
        raise BadInputError(
            f"{option} {path}: directory {parent} does not exist",
            fix=f"create it first (mkdir -p {parent}) or pass another path",
        )
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise BadInputError(
            f"{option} {path} is not writable",
            fix=f"pass a path you can write for {option}",
        )


def check_arguments(args: argparse.Namespace) -> None:
    """Every user-given path and option, checked before any host is touched (exit 2)."""
    stage = args.stage or "all"
    if stage == "lab":
        given = [
            f"--{dest.replace('_', '-')}"
            for dest in (
                "inventory",
                "limit",
                "report",
                "json",
                "remote_user",
                *STAGE_OPTIONS,
                *ROLLOUT_OPTIONS,
                *SECRET_OPTIONS,
            )
            if getattr(args, dest, None) not in (None, False)
        ]
        if given:
            raise BadInputError(
                f"{', '.join(given)}: `provision lab` does not use "
                f"{'it' if len(given) == 1 else 'them'}",
                fix="drop them; `provision lab up` writes an inventory to pass to the other stages",
            )
        return
    unused = [
        ("-" + "v" * args.verbose if dest == "verbose" else name, stages)
        for dest, (name, stages) in STAGE_OPTIONS.items()
        if stage not in stages and getattr(args, dest, None) not in (None, False)
    ]
    if unused:
        names = [name for name, _stages in unused]
        raise BadInputError(
            f"{', '.join(names)}: `provision {stage}` does not use "
            f"{'it' if len(names) == 1 else 'them'}; "
            + "; ".join(
                f"{name} is for the full run, "
                + " and ".join(f"`provision {s}`" for s in stages if s != "all")
                for name, stages in unused
            ),
            fix=f"drop {' '.join(names)}",
        )
    if stage not in ROLLOUT_STAGES:
        given = [
            name
            for dest, name in ROLLOUT_OPTIONS.items()
            if getattr(args, dest, None) not in (None, False)
        ]
        if given:
            raise BadInputError(
                f"{', '.join(given)}: {'an option' if len(given) == 1 else 'options'} of "
                f"`provision apply` and the full run; `provision {stage}` does not use "
                f"{'it' if len(given) == 1 else 'them'}",
                fix=f"drop {' '.join(given)}, or run `provision apply` (--check for a dry run)",
            )
    else:
        from .apply import check_options
        from .rollout import count

        check_options(args.serial, args.max_fail_percent)
        if args.max_unavailable is not None:
            count(args.max_unavailable, 1, "--max-unavailable")
    from .ansiblecfg import load_constants

    load_constants()  # ansible-core's local temporary folder: a read-only $HOME is named
    if getattr(args, "report", None):
        _writable_file(Path(args.report).expanduser(), "--report")
    if stage in ARTIFACT_STAGES:
        from .apply import ARTIFACTS_ENV, artifacts_root

        chosen = getattr(args, "artifacts_dir", None)
        where = "the artifacts folder (./artifacts)"
        if chosen:
            where = "--artifacts-dir"
        elif os.environ.get(ARTIFACTS_ENV):
            where = f"${ARTIFACTS_ENV}"
        _writable_dir(artifacts_root(chosen), where)
    if getattr(args, "save", None):
        _writable_dir(Path(args.save).expanduser(), "--save")
    facts = getattr(args, "facts", None)
    if facts and not Path(facts).expanduser().is_dir():
        raise BadInputError(
            f"--facts {facts} does not exist or is not a directory",
            fix="pass a directory written by `provision detect --save DIR`",
        )
    from .inventory import inventory_sources

    inventories: list[str] | None = getattr(args, "inventory", None)
    # no -i: ANSIBLE_INVENTORY or ansible.cfg's, as ansible-playbook reads them
    args.inventory = list(inventory_sources(inventories)) or None
    for source in args.inventory or ():
        if not Path(source).expanduser().exists():
            where = "--inventory" if inventories else "the inventory ansible-core's settings name"
            raise BadInputError(
                f"{where} {source} does not exist",
                fix="pass an INI or YAML inventory (e.g. inventory/p5.ini), or `provision lab up` "
                "for a local lab"
                + (
                    ""
                    if inventories
                    else " (set by ANSIBLE_INVENTORY or ansible.cfg's `inventory =`)"
                ),
            )
    from .inputs import check_inputs  # --limit, outputs, -e, tags (issue 27)

    check_inputs(args)


def _interrupted(args: argparse.Namespace, signal_name: str) -> None:
    """Ctrl-C, SIGTERM: say which hosts were mid-change and leave the run's report."""
    from .interrupt import interrupted_report

    for line in interrupted_report(args, signal_name):
        print(f"provision: {line}", file=sys.stderr)


def _sigterm(_signum: int, _frame: object) -> None:
    """SIGTERM outside a playbook run ends the run as Ctrl-C does (apply.py owns both while
    Ansible runs)."""
    raise KeyboardInterrupt("SIGTERM")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.started = dt.datetime.now(dt.UTC)  # the report's start: before detection, not after
    if getattr(args, "remote_user", None) and args.stage != "lab":
        # -u as ansible-playbook takes it: its setting DEFAULT_REMOTE_USER, which detection,
        # validation and verify read too and ansible-playbook inherits; a host's ansible_user
        # still wins (ansible-core's ssh connection: vars over cli over env)
        os.environ["ANSIBLE_REMOTE_USER"] = args.remote_user
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _sigterm)
        # Ctrl-C as KeyboardInterrupt even where SIGINT came ignored (a background job of a
        # non-interactive shell, as CI starts it): apply's own handler took it already, and
        # validate and verify ran on, their Ctrl-C report never written
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        from . import interrupt, timing

        timing.reset()
        interrupt.PARTIAL.clear()  # what a Ctrl-C in validate or verify reports
        check_arguments(args)
        stage = args.stage or "all"
        if stage == "lab":
            return _resolve(STAGES[stage])(args)
        from .pipeline import StageOptions

        return _resolve(STAGES[stage])(StageOptions.of(args))  # the one reading of args
    except GpuprovError as exc:
        print(f"provision: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        # the reader went away (`provision plan --json | head -1`): nothing more to say to it
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt as exc:
        name = str(exc) if str(exc) in ("SIGINT", "SIGTERM") else "SIGINT"
        with contextlib.suppress(Exception):
            _interrupted(args, name)
        return EXIT_INTERRUPTED


def entry() -> None:
    """The console script: `main()`, then exit without the interpreter's teardown.

    A run imports ansible-core, paramiko and rich (about a thousand modules), and tearing them
    down at exit takes about 0.1 s: a sixth of a one-host `provision detect`. Exit handlers
    still run and the standard streams are flushed; only that teardown is skipped.
    """
    code = main()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe, a closed stream
            stream.flush()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()

__all__ = ["EXIT_BAD_INPUT", "build_parser", "entry", "main"]
