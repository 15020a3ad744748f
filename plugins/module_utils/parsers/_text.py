"""Helpers shared by the parsers: the `# exit=N` trailer, nvidia-smi's "no value" spellings."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import HostError

_EXIT_RE = re.compile(r"# exit=(-?\d+)\s*$")

# What nvidia-smi prints where a value does not apply or cannot be read.
_NO_VALUE = frozenset(
    {
        "",
        "N/A",
        "[N/A]",
        "Not Supported",
        "[Not Supported]",
        "Unknown Error",
        "[Unknown Error]",
        "Requested functionality has been deprecated",
        "[Requested functionality has been deprecated]",
        "Insufficient Permissions",
        "[Insufficient Permissions]",
    }
)


class ParseError(HostError):
    """A raw output does not have the shape its parser expects."""

    def __init__(self, source: str, message: str, *, host: str | None = None) -> None:
        super().__init__(
            f"{source}: {message}",
            host=host,
            fix=f"re-run `provision detect` or compare {source} with the command's real output",
        )
        self.source = source


@dataclass(frozen=True)
class Output:
    """One command's captured text, without the `# exit=N` trailer the probe appends."""

    body: str
    exit_code: int | None  # None: no trailer (e.g. a file captured by hand)

    @property
    def ok(self) -> bool:
        return self.exit_code in (None, 0)


def split_exit(text: str) -> Output:
    """Split the trailing `# exit=N` line from a raw output (blank lines before it are kept)."""
    stripped = text.rstrip()
    cut = stripped.rfind("\n")
    if m := _EXIT_RE.match(stripped, cut + 1):
        return Output(text[: cut + 1], int(m.group(1)))
    return Output(text, None)


def clip(text: str, limit: int = 120) -> str:
    """A quoted piece of input short enough for a one-line message (an 80 kB line is not)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def value(text: str) -> str | None:
    """A field's text, or None where nvidia-smi says there is none ([N/A] and friends)."""
    stripped = text.strip()
    return None if stripped in _NO_VALUE else stripped


def int_value(text: str, *, base: int = 10) -> int | None:
    """An integer field (an optional unit after a space is dropped: "143771 MiB")."""
    v = value(text)
    if v is None:
        return None
    token = v.split()[0]
    try:
        return int(token, base if not token.lower().startswith("0x") else 16)
    except ValueError:
        return None


def float_value(text: str) -> float | None:
    v = value(text)
    if v is None:
        return None
    try:
        return float(v.split()[0])
    except ValueError:
        return None
