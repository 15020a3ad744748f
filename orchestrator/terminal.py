"""The console gpuprov prints to: rich's, with a width the environment cannot make zero.

rich takes `COLUMNS` as the width whenever it is digits, and at width 0 it prints nothing at
all: `COLUMNS=0` (what a terminal of unknown size reports, `stty size` on a pty nobody sized)
left `provision plan` silent. A width below 1 counts as unknown here, as Python's
`shutil.get_terminal_size` counts it: the terminal's own size, else 80 columns.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from rich.console import Console


def unknown_width() -> bool:
    """True when $COLUMNS is a width of zero (rich would take it as given)."""
    text = os.environ.get("COLUMNS", "").strip()
    return text.isdigit() and int(text) < 1


def new_console(**options: Any) -> Console:
    """`rich.console.Console(**options)`, its width from the terminal (else 80) when
    $COLUMNS says 0."""
    if "width" not in options and unknown_width():
        options["width"] = shutil.get_terminal_size().columns
    return Console(**options)
