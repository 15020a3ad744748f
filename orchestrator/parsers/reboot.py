"""reboot-pending.txt (orchestrator/probe.sh `reboot_pending`) -> the reboots a role recorded
and the host still owes.

Written only where a record exists: `boot_id ID` (this boot's, /proc/sys/kernel/random/
boot_id), then `record NAME CONTENT` per /var/lib/gpuprov/reboot-required-<role> file with its
first line. A role writes the boot id it ran in (roles/infiniband: DOCA-OFED's ib_core and
the nvidia-peermem rebuilt against it are active only after a reboot, issue 47 item 5), so a
record of this boot is a reboot still owed; one of an earlier boot is stale (the role removes
it on its next run).
"""

from __future__ import annotations

from ._text import split_exit

# record file -> what the reboot brings (the role that writes it)
_RECORDS = {
    "reboot-required-infiniband": (
        "DOCA-OFED was installed on this boot: its ib_core and the nvidia-peermem rebuilt "
        "against it are active only after a reboot (roles/infiniband)"
    ),
}


def parse_reboot_pending(text: str) -> tuple[str, ...]:
    """The reboots the host still owes, one cause each, in the capture's order."""
    boot, records = "", []
    for line in split_exit(text).body.splitlines():
        kind, _sep, rest = line.strip().partition(" ")
        if kind == "boot_id":
            boot = rest.strip()
        elif kind == "record":
            name, _sep, content = rest.strip().partition(" ")
            records.append((name, content.strip()))
    return tuple(
        _RECORDS.get(name, f"{name} (a gpuprov role's record of this boot)")
        for name, content in records
        if boot and content == boot
    )
