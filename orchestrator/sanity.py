"""Cross-checks of one host's captures: facts that cannot all be true are not planned on.

A capture can lie without failing to parse: cut short (no `# exit=` trailer), or a GPU line
lost so that the PCI bus shows fewer GPUs than nvidia-smi. The planner calls
`check_captures` once per host; it adds warnings and blockers to the plan's lists.

- Captures cut short: a blocker naming them (the PCI capture has its own: the planner's
  "PCI devices unknown", as a cut one is not read at all).
- nvidia-smi lists more GPUs than the PCI bus shows: a blocker (nvidia-smi only sees GPUs on
  the bus, so the PCI capture is incomplete); fewer: a warning (a GPU the driver lost, e.g.
  Xid 79 "fallen off the bus", or one bound to another driver).
- More GPUs than the HGX boards its NVSwitches make room for: a warning. An 8-GPU HGX board
  carries 4 NVSwitch devices (H100/H200) or 6 (A100) (tests/recorded/reference/gpus.md; the
  catalog's `per_board`), so 16 H100 beside 4 NVSwitches is one board's switches for two
  boards' GPUs: a duplicated capture or a misread bus.
"""

from __future__ import annotations

import math
from collections.abc import MutableSequence

from .catalog import Catalog
from .facts import HostFacts
from .parsers import names

GPUS_PER_BOARD = 8  # an HGX 8-GPU board (tests/recorded/reference/gpus.md, NVSwitch section)
_REDETECT = "re-run `provision detect` (a saved facts directory: save it again with --save DIR)"


def check_captures(
    facts: HostFacts,
    catalog: Catalog,
    warnings: MutableSequence[str],
    blockers: MutableSequence[str],
) -> None:
    """Append what the host's captures contradict to the plan's `warnings` / `blockers`."""
    cut = [n for n in facts.truncated if n != names.SYSFS_PCI]
    if cut:
        blockers.append(
            f"{len(cut)} capture(s) cut short (no `# exit=` trailer): {', '.join(cut)}; the "
            f"facts are incomplete; fix: {_REDETECT}"
        )
    _gpu_counts(facts, warnings, blockers)
    _boards(facts, catalog, warnings)


def _gpu_counts(
    facts: HostFacts, warnings: MutableSequence[str], blockers: MutableSequence[str]
) -> None:
    if not facts.smi_gpus or not facts.pci:
        return  # no nvidia-smi (no driver yet), or no PCI capture believed (its own blocker)
    on_bus, listed = len(facts.gpus), len(facts.smi_gpus)
    if listed > on_bus:
        blockers.append(
            f"nvidia-smi lists {listed} GPUs but the PCI capture shows {on_bus}: the PCI "
            f"capture is incomplete (nvidia-smi sees only GPUs on the bus); fix: {_REDETECT}"
        )
    elif listed < on_bus:
        warnings.append(
            f"{on_bus} NVIDIA GPUs on the PCI bus but nvidia-smi lists {listed}: a GPU the "
            "driver lost (Xid 79: fallen off the bus) or bound to another driver; check "
            "`nvidia-smi -L` and the kernel log"
        )


def _boards(facts: HostFacts, catalog: Catalog, warnings: MutableSequence[str]) -> None:
    switches, per_board = facts.nvswitch_board(catalog)
    if not switches or not per_board:
        return
    boards = math.ceil(switches / per_board)
    gpus = len(facts.gpus)
    if gpus > GPUS_PER_BOARD * boards:
        warnings.append(
            f"{gpus} GPUs beside {switches} NVSwitch devices: that is {boards} HGX board(s) "
            f"({per_board} switches each), which hold at most {GPUS_PER_BOARD * boards} GPUs; "
            f"the capture may be duplicated or misread: check `lspci -d 10de:` on the host"
        )
