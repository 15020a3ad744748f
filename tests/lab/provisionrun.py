"""Running `provision` from a lab test: its environment, its command line, and the
ansible-playbook processes a run started on a lab (the fault tests watch them come and go).
Not part of the product."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from orchestrator.lab.running import RunningLab

BIN = Path(sys.executable).parent


def env() -> dict[str, str]:
    """This environment with the venv's bin first (provision runs ansible-playbook from PATH)."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def provision_cmd(lab: RunningLab, report: Path, *args: str) -> list[str]:
    return [
        str(BIN / "provision"), "--inventory", str(lab.inventory), "--report", str(report), *args
    ]  # fmt: skip


def ansible_processes(lab: RunningLab) -> list[str]:
    """ansible-playbook processes of a run on this lab (its inventory on their command line)."""
    done = subprocess.run(
        ["pgrep", "-af", f"ansible-playbook.*{lab.inventory}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return [ln for ln in done.stdout.splitlines() if "pgrep" not in ln]


def start(
    lab: RunningLab, report: Path, *args: str, cwd: Path, output: bool = True
) -> subprocess.Popen[str]:
    """`provision <args>` on the lab in a session of its own (a test can signal its whole
    process group); its output merged into one pipe, or thrown away (output=False)."""
    return subprocess.Popen(
        provision_cmd(lab, report, *args),
        cwd=cwd,
        env=env(),
        stdout=subprocess.PIPE if output else subprocess.DEVNULL,
        stderr=subprocess.STDOUT if output else subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
