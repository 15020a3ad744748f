"""The detection probe (probe.sh) as data, and the splitting of its output into raw files.

probe.sh prints every capture between `@@gpuprov-probe@@ begin NAME` and `... end NAME`
lines and ends with `@@gpuprov-probe@@ done`; `split_output` turns that stream into the
mapping `file name -> text` that `orchestrator.parsers.parse_host` and `factsdir` use.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from .errors import HostError

MARKER = "@@gpuprov-probe@@"
_BEGIN = f"{MARKER} begin "
_END = f"{MARKER} end "
_DONE = f"{MARKER} done"


@cache
def probe_script() -> str:
    # package data beside this module (pyproject ships *.sh)
    return Path(__file__).with_name("probe.sh").read_text(encoding="utf-8")


def split_output(host: str, stdout: str) -> dict[str, str]:
    """Cut the probe's stdout into files; HostError when the stream was cut short."""
    files: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    done = False
    for line in stdout.split("\n"):
        if name is None:
            if line.startswith(_BEGIN):
                name, lines = line[len(_BEGIN) :].strip(), []
            elif line == _DONE:
                done = True
            continue
        if line == f"{_END}{name}":
            files[name] = "\n".join(lines) + "\n"
            name = None
        else:
            lines.append(line)
    if name is not None or not done:
        where = f"inside {name}" if name else "before its last line"
        tail = stdout.strip().splitlines()[-1:] or ["(no output)"]
        raise HostError(
            f"the detection probe stopped {where}; last output: {tail[0][:200]!r}",
            host=host,
            fix="check that /bin/sh works on the host and that the session was not cut "
            "(run `sh -s < orchestrator/probe.sh` there by hand)",
        )
    return files
