"""`/proc/modules` (saved as lsmod.txt) -> names of the loaded kernel modules."""

from __future__ import annotations

from ._text import split_exit


def parse_proc_modules(text: str) -> tuple[str, ...]:
    return tuple(line.split()[0] for line in split_exit(text).body.splitlines() if line.strip())
