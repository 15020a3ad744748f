"""reboot-pending.txt (orchestrator/probe.sh `reboot_pending`) -> the reboots a role recorded
and the host still owes.

Written only where a record exists: `boot_id ID` (this boot's, /proc/sys/kernel/random/
boot_id), `boot_time EPOCH` (/proc/stat's btime), then `record NAME CONTENT` per
/var/lib/gpuprov/reboot-required-<role> file with its first line. A role writes the boot id it
ran in (roles/infiniband: DOCA-OFED's ib_core and the nvidia-peermem rebuilt against it are
active only after a reboot, issue 47 item 5), so a record of this boot is a reboot still owed;
one of an earlier boot is stale (the role removes it on its next run).

roles/nvidia_driver's record, /var/lib/gpuprov/reboot-required (its default
`nvidia_driver_reboot_required_file`; a path the inventory moves is not read), holds its
reasons, not a boot id: `since NAME MTIME FIRST-REASON`, owed when it was written on this boot
(its modification time at or after the boot's).
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
_SINCE = {
    "reboot-required": (
        "the NVIDIA driver was installed on this boot and not loaded (nvidia_driver_reboot "
        "is forbid; roles/nvidia_driver)"
    ),
}


def parse_reboot_pending(text: str) -> tuple[str, ...]:
    """The reboots the host still owes, one cause each, in the capture's order."""
    boot, boot_time = "", None
    causes: list[tuple[str, str]] = []  # (record file, its line's content)
    owed: list[str] = []
    for line in split_exit(text).body.splitlines():
        kind, _sep, rest = line.strip().partition(" ")
        if kind == "boot_id":
            boot = rest.strip()
        elif kind == "boot_time":
            boot_time = _epoch(rest)
        elif kind in ("record", "since"):  # record NAME BOOT-ID; since NAME MTIME REASON
            name, _sep, content = rest.strip().partition(" ")
            causes.append((name, content.strip()))
    for name, content in causes:
        if name in _SINCE:
            mtime, _sep, reason = content.partition(" ")
            reason = reason.strip()
            written = _epoch(mtime)
            if written is not None and boot_time is not None and written >= boot_time:
                owed.append(_SINCE[name] + (f": {reason}" if reason else ""))
        elif boot and content == boot:
            owed.append(_RECORDS.get(name, f"{name} (a gpuprov role's record of this boot)"))
    return tuple(owed)


def _epoch(text: str) -> int | None:
    """Seconds since the epoch, None where the field is not a whole number."""
    text = text.strip()
    return int(text) if text.isdigit() else None
