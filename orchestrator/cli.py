"""The `provision` command: a thin layer that parses options and calls pure stage functions.

Exit codes (documented in README.md):
  0  every host ok
  1  at least one host failed (unreachable, a role failed, a check failed)
  2  bad input (inventory, policy, options), found before any change to any host
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

from orchestrator.errors import EXIT_BAD_INPUT, EXIT_HOST_FAILED, GpuprovError

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
        "-i", "--inventory", default=d(None), help="Ansible inventory (INI or YAML)"
    )
    parser.add_argument("--limit", default=d(None), help="Ansible host pattern")
    parser.add_argument(
        "--check", action="store_true", default=d(False), help="apply in check mode with diff"
    )
    parser.add_argument("--report", default=d(None), metavar="PATH", help="write the JSON report")
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
    parser.add_argument("-v", "--verbose", action="count", default=d(0))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="provision",
        description="Take bare NVIDIA GPU hosts to validated, container-ready nodes.",
        epilog="Exit codes: 0 every host ok; 1 some host failed; 2 bad input, nothing changed.",
    )
    _common(parser, suppress=False)
    parser.set_defaults(stage="all")
    sub = parser.add_subparsers(dest="stage", metavar="STAGE")

    p = sub.add_parser("detect", help="detect OS, GPUs, driver and runtime on each host")
    _common(p, suppress=True)
    p.add_argument("--save", metavar="DIR", help="write raw outputs to DIR/<host>/")

    p = sub.add_parser("plan", help="plan roles and variables per host")
    _common(p, suppress=True)
    p.add_argument("--facts", metavar="DIR", help="plan offline from a saved facts directory")

    for name, text in (
        ("apply", "apply the planned roles with Ansible"),
        ("validate", "run GPU, NCCL and host health checks"),
        ("verify", "verify host state with pytest-testinfra"),
    ):
        p = sub.add_parser(name, help=text)
        _common(p, suppress=True)
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

    p = sub.add_parser("lab", help="simulated GPU hosts in local containers")
    lab = p.add_subparsers(dest="lab_command", metavar="COMMAND", required=True)
    up = lab.add_parser("up", help="start test hosts and write an inventory")
    up.add_argument("--profile", default="p5.48xlarge", help="profile name or YAML path")
    up.add_argument("--count", type=int, default=2)
    up.add_argument("--os", dest="lab_os", choices=("debian12", "debian13"), default="debian12")
    status = lab.add_parser("status", help="show the lab's hosts")
    down = lab.add_parser("down", help="remove every container, network and volume the lab made")
    for lab_parser in (up, status, down):
        lab_parser.add_argument(
            "--name", default=None, help="lab name (default: $GPUPROV_LAB, else gpuprov)"
        )
    images = lab.add_parser("images", help="build the test-host images (cached by recipe)")
    images.add_argument("--os", dest="lab_os", choices=("debian12", "debian13"), default=None)
    return parser


def _resolve(target: str) -> Callable[[argparse.Namespace], int]:
    module_name, func_name = target.split(":")
    func: Callable[[argparse.Namespace], int] = getattr(
        importlib.import_module(module_name), func_name
    )
    return func


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.started = dt.datetime.now(dt.UTC)  # the report's start: before detection, not after
    try:
        return _resolve(STAGES[args.stage or "all"])(args)
    except GpuprovError as exc:
        print(f"provision: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(
            "provision: interrupted; hosts may be half-applied (see the run's artifacts)",
            file=sys.stderr,
        )
        return EXIT_HOST_FAILED


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
