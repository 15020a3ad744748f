"""A Prometheus textfile of a host's validation, for node-exporter's textfile collector.

node-exporter reads every `*.prom` file in its `--collector.textfile.directory` in the text
exposition format, without timestamps, and wants each file replaced atomically: written under
another name in the same directory, then renamed (prometheus/node_exporter README.md,
"Textfile Collector", commit 0361693d7b54d94f0e2b93fb03ed26b8f798f8e7). Names follow
Prometheus' naming practice (https://prometheus.io/docs/practices/naming/): the `gpuprov_`
prefix, base units with their suffix (`_seconds`, `_timestamp_seconds`). A check's value and
limit come in the check's own unit (GB/s, TFLOP/s, GPUs...), so the unit is a label of
`gpuprov_check_value` and `gpuprov_check_limit`: compare series of one `check` only.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..result import STATUSES, CheckResult

if TYPE_CHECKING:
    from .runner import Executor

FILE_NAME = "gpuprov_validation.prom"
KNOB = "gpuprov_validation_textfile_dir"
CHECK = "prometheus_textfile"  # the warn a failed write leaves in the host's results

# name -> HELP (every family is a gauge)
FAMILIES = {
    "gpuprov_check_status": "Validation check outcome: 1 for the check's status, 0 for the others.",
    "gpuprov_check_value": "A validation check's measured value, in the unit of its unit label.",
    "gpuprov_check_limit": "A validation check's limit, in the unit of its unit label.",
    "gpuprov_check_duration_seconds": "Wall-clock time the validation check took.",
    "gpuprov_validation_checks": "Validation checks of the last run, by status.",
    "gpuprov_validation_success": "1 when the last validation failed no check, else 0.",
    "gpuprov_validation_last_run_timestamp_seconds": "When the last validation finished.",
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _number(value: object) -> float | None:
    """A finite number, or None (text values have no sample)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _sample(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def metrics_text(host: str, checks: Sequence[CheckResult], finished: float) -> str:
    """The textfile: every check of the host's last validation; `finished` in Unix seconds."""
    lines: dict[str, list[str]] = {name: [] for name in FAMILIES}

    def add(name: str, pairs: Sequence[tuple[str, str]], value: float) -> None:
        lines[name].append(f"{name}{_labels(pairs)} {_sample(value)}")

    for check in checks:
        who = [("host", host), ("check", check.name)]
        if check.gpu is not None:
            who.append(("gpu", str(check.gpu)))
        for status in STATUSES:
            add("gpuprov_check_status", [*who, ("status", status)], float(check.status == status))
        for name, raw in (
            ("gpuprov_check_value", check.value),
            ("gpuprov_check_limit", check.limit),
        ):
            number = _number(raw)
            if number is not None:
                add(name, [*who, ("unit", check.unit)], number)
        if check.seconds is not None:
            add("gpuprov_check_duration_seconds", who, check.seconds)
    for status in STATUSES:
        count = sum(1 for c in checks if c.status == status)
        add("gpuprov_validation_checks", [("host", host), ("status", status)], float(count))
    ok = not any(c.status == "fail" for c in checks)
    add("gpuprov_validation_success", [("host", host)], float(ok))
    add("gpuprov_validation_last_run_timestamp_seconds", [("host", host)], round(finished, 3))
    out: list[str] = []
    for name, help_text in FAMILIES.items():
        if lines[name]:
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *lines[name]]
    return "\n".join(out) + "\n"


def write_script(directory: str, text: str) -> str:
    """A sh script that replaces `directory`/gpuprov_validation.prom with `text` atomically:
    a temporary file in the same directory (its name does not match `*.prom`, so the collector
    never reads it half-written), readable by the collector's user, then renamed over."""
    d = shlex.quote(directory.rstrip("/") or "/")
    return "\n".join(
        [
            "set -u",
            f"d={d}",
            '[ -d "$d" ] || { echo "$d is not a directory" >&2; exit 3; }',
            f't=$(mktemp "$d/.{FILE_NAME}.XXXXXX") || exit 4',
            "cat > \"$t\" <<'GPUPROV_PROM_EOF'",
            text.rstrip("\n"),
            "GPUPROV_PROM_EOF",
            f'chmod 0644 "$t" && mv -f "$t" "$d/{FILE_NAME}" || {{ rm -f "$t"; exit 5; }}',
            "",
        ]
    )


def directory_of(variables: Mapping[str, object]) -> str:
    """The host's gpuprov_validation_textfile_dir as its knob reads it ("" is off)."""
    from ..knobs import default_table, read

    given = {k: v for k, v in variables.items() if k == KNOB}
    return str(read(default_table(), given)[0][KNOB] or "")


def publish(
    execute: Executor,
    directory: str,
    host: str,
    checks: Sequence[CheckResult],
    finished: float,
) -> list[CheckResult]:
    """Write the host's textfile through `execute`; a failed write is a warn (the checks
    themselves stand), never a failed host."""
    path = f"{directory.rstrip('/')}/{FILE_NAME}"
    out = execute(write_script(directory, metrics_text(host, checks, finished)), timeout=60)
    if out.rc == 0:
        return []
    why = (out.stderr.strip().splitlines() or [f"exit {out.rc}"])[-1]
    return [
        CheckResult(
            CHECK,
            "warn",
            f"exit {out.rc}",
            "written",
            "",
            f"{host}: the Prometheus textfile {path} was not written ({why}); create the "
            "directory node-exporter reads (--collector.textfile.directory), writable by the "
            "validating user, or set gpuprov_validation_textfile_dir to it",
        )
    ]
