"""The console script `provision`: a Ctrl-C that lands at any moment ends the run with one
line and exit 130, never a traceback.

Python raises KeyboardInterrupt wherever the signal lands: while `orchestrator.cli` and
ansible-core are still being imported, or while the options are parsed, before `cli.main`
has a handler for it. This module imports nothing of gpuprov's before its handler is in place.
"""

from __future__ import annotations

import os
import sys

EXIT_INTERRUPTED = 130  # 128 + SIGINT (cli.EXIT_INTERRUPTED, which this module must not import)


def entry() -> None:
    """`orchestrator.cli.entry` (which exits the process itself), with a Ctrl-C that comes
    before its own handler is ready, or during it, turned into exit 130."""
    try:
        from .cli import entry as run

        run()
    except KeyboardInterrupt:
        try:
            sys.stderr.write("provision: interrupted before any host was changed\n")
            sys.stderr.flush()
        finally:
            os._exit(EXIT_INTERRUPTED)


if __name__ == "__main__":  # pragma: no cover
    entry()
