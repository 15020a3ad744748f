"""The simulated kernel log's line format, shared by `tools.dmesg` and the rendered
`kernel.log` that bin/dmesg prints (standard library only)."""

from __future__ import annotations


def format_line(seconds: float, text: str) -> str:
    """One line as `dmesg` prints it: `[  uptime.micros] text`."""
    return f"[{seconds:12.6f}] {text}\n"
