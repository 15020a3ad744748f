"""The gpuprov-mig command.

`python3 -m orchestrator.mig_cli` in a checkout; on hosts the same text is
gpuprov_mig/__main__.py, written by gpuprov.nvidia.mig_applier (`python3 -m gpuprov_mig`).
The work is mig_apply.cli, in the collection's module_utils, which neither prints nor exits."""

from __future__ import annotations

import sys

from .mig_apply import cli


def main() -> int:
    outcome = cli(sys.argv[1:])
    sys.stdout.write(outcome.stdout)
    sys.stderr.write(outcome.stderr)
    return outcome.code


if __name__ == "__main__":
    raise SystemExit(main())
