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

Issue 48: facts that no machine can have are blockers naming the capture they come from.

- A PCI address listed twice in sysfs-pci-devices.txt: a doubled or spliced capture.
- More GPUs than one system can hold: NV_MAX_DEVICES, "the maximum number of GPUs
  supported in a single system", is 32 (NVIDIA/open-gpu-kernel-modules@1739a20efc4a,
  src/common/sdk/nvidia/inc/nvlimits.h).
- More than one GPU model among the GPUs of an HGX board (NVSwitch endpoints on the bus, or
  GPUs of an NVLink5 board model): NVIDIA names each HGX baseboard after its one GPU model
  ("NVIDIA HGX H100 8-GPU baseboard", "HGX B200 8-GPU baseboard": NVIDIA AI Enterprise,
  "NVIDIA NVSwitch", platform support,
  https://docs.nvidia.com/ai-enterprise/release-8/8.0/infra-software/vgpu/features/nvswitch.html).
- GPUs of an NVLink5 board model (the catalog's `board_gpus`, 8) in a number no host shows:
  the whole board (a multiple of `board_gpus`), or a passthrough VM's 1, 2 or 4 (the Fabric
  Manager User Guide's full-passthrough VM sizes: 16, 8, 4, 2, 1 GPUs,
  https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide, chapter 6). 7x B200 is
  a GPU lost from the bus or a capture that lost a line. (Hopper and Ampere boards with one
  GPU short are left to validation's `gpu_count`, which names the missing GPU.)
- rdma.txt lines the parser does not know: the rest of the fabric is kept, the lines named
  (a warning: a newer probe may list more).
- What a stopped run left (recovery.txt: dpkg's journal, a restart a role owes): a warning
  `needs_recovery: <cause>` in the plan (text and JSON), saying what the next apply does;
  a host an unfinished driver upgrade left drained: `drained: <since when, toward what>`.
- A reboot a role recorded against this boot (reboot-pending.txt; issue 47: DOCA-OFED): a
  warning `reboot_required: <cause>`; gpuprov does not reboot for it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import MutableSequence

from .catalog import Catalog
from .facts import HostFacts
from .parsers import names

GPUS_PER_BOARD = 8  # an HGX 8-GPU board (tests/recorded/reference/gpus.md, NVSwitch section)
MAX_GPUS = 32  # NV_MAX_DEVICES (open-gpu-kernel-modules nvlimits.h): GPUs in one system
PASSTHROUGH_GPUS = (1, 2, 4)  # smaller full-passthrough VMs of an HGX board (FM user guide)
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
    _duplicate_addresses(facts, blockers)
    _too_many_gpus(facts, blockers)
    _one_model_per_board(facts, catalog, blockers)
    _nvlink5_board_count(facts, catalog, blockers)
    _unread_fabric_lines(facts, warnings)
    _needs_recovery(facts, warnings)
    _reboot_pending(facts, warnings)


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


def _duplicate_addresses(facts: HostFacts, blockers: MutableSequence[str]) -> None:
    counts = Counter(d.address for d in facts.pci)
    twice = sorted(a for a, n in counts.items() if n > 1)
    if twice:
        blockers.append(
            f"{names.SYSFS_PCI} lists {len(twice)} PCI address(es) more than once "
            f"({', '.join(twice[:4])}): a bus has each address once, so the capture is doubled "
            f"or spliced; fix: {_REDETECT}"
        )


def _too_many_gpus(facts: HostFacts, blockers: MutableSequence[str]) -> None:
    if len(facts.gpus) > MAX_GPUS:
        blockers.append(
            f"{names.SYSFS_PCI} shows {len(facts.gpus)} NVIDIA GPUs: one system holds at most "
            f"{MAX_GPUS} (the driver's NV_MAX_DEVICES), so the capture is not this host's bus; "
            f"fix: {_REDETECT}"
        )


def _board_gpus(facts: HostFacts, catalog: Catalog) -> tuple[list[int], int | None]:
    """(device ids of the GPUs that sit on an HGX board, the board's GPU count if the
    catalog gives one): every GPU beside NVSwitch endpoints, else the GPUs of an NVLink5
    board model."""
    switches, _per_board = facts.nvswitch_board(catalog)
    on_board = []
    size = None
    for gpu in facts.gpus:
        model = catalog.gpu(gpu.device_id)
        board = model.fabric.board_gpus if model and model.fabric else None
        if switches or board:
            on_board.append(gpu.device_id)
        size = size or board
    return on_board, size


def _one_model_per_board(
    facts: HostFacts, catalog: Catalog, blockers: MutableSequence[str]
) -> None:
    on_board, _size = _board_gpus(facts, catalog)
    ids = sorted(set(on_board))
    if len(ids) > 1:
        seen = ", ".join(f"{on_board.count(i)}x {_model_name(catalog, i)}" for i in ids)
        blockers.append(
            f"{names.SYSFS_PCI} shows several GPU models on an HGX board ({seen}): a board "
            f"carries one model, so the capture mixes hosts or misread the bus; fix: {_REDETECT}"
        )


def _nvlink5_board_count(
    facts: HostFacts, catalog: Catalog, blockers: MutableSequence[str]
) -> None:
    counted = [
        g
        for g in facts.gpus
        if (m := catalog.gpu(g.device_id)) and m.fabric and m.fabric.board_gpus
    ]
    if not counted:
        return
    model = catalog.gpu(counted[0].device_id)
    size = model.fabric.board_gpus if model and model.fabric else None
    n = len(counted)
    if not size or n in PASSTHROUGH_GPUS or n % size == 0:
        return
    blockers.append(
        f"{names.SYSFS_PCI} shows {n}x {model.model if model else 'GPU'}: an HGX board of that "
        f"model holds {size} GPUs (a passthrough VM gets {', '.join(map(str, PASSTHROUGH_GPUS))} "
        f"or {size}), so a GPU left the bus (check `lspci -d 10de:` and the kernel log for "
        f"Xid 79) or the capture lost a line; fix: {_REDETECT}"
    )


def _unread_fabric_lines(facts: HostFacts, warnings: MutableSequence[str]) -> None:
    unread = facts.fabric.unread if facts.fabric else ()
    if unread:
        shown = "; ".join(repr(line) for line in unread[:3])
        warnings.append(
            f"{names.RDMA}: {len(unread)} line(s) not understood, the rest of the fabric kept: "
            f"{shown} (a newer probe than this provision?)"
        )


def _model_name(catalog: Catalog, device_id: int) -> str:
    model = catalog.gpu(device_id)
    return model.model if model else f"0x{device_id:04x}"


def _needs_recovery(facts: HostFacts, warnings: MutableSequence[str]) -> None:
    """What a stopped run left on the host (parsers/recovery.py): said in the plan (text and
    JSON), with what the next apply does about it (site.yml's recovery pre-tasks, under the
    run lock, before any role)."""
    for cause in facts.recovery:
        warnings.append(
            f"needs_recovery: {cause}; the next `provision apply` recovers it under the run "
            "lock before the roles (dpkg: `dpkg --configure -a`; a pending restart: the role "
            "restarts the service)"
        )
    if facts.upgrade is not None and facts.upgrade.drained:
        warnings.append(
            f"drained: {facts.upgrade.drained_cause}; the next `provision apply` that runs "
            "the driver role takes the upgrade up (resumes it, or finishes it toward this "
            "plan's driver) and undrains the host"
        )


def _reboot_pending(facts: HostFacts, warnings: MutableSequence[str]) -> None:
    """A reboot a role recorded against this boot (parsers/reboot.py): said in the plan, with
    what to do; no role reboots for it."""
    for cause in facts.reboot_pending:
        warnings.append(
            f"reboot_required: {cause}; gpuprov does not reboot for it: reboot the host, then "
            "run again"
        )
