"""recovery.txt (orchestrator/probe.sh `recovery`) -> what a stopped run left to recover.

One fact a line, written only when there is any: `dpkg_journal N` (N files in dpkg's journal,
/var/lib/dpkg/updates/: dpkg was interrupted mid-run, and apt refuses to work until
`dpkg --configure -a` runs) and `restart_pending NAME` (a marker a role writes before a change
that needs a restart and removes after it: `docker-restart-pending`). A line it does not know
is kept as it is, so a newer probe's cause is still shown.
"""

from __future__ import annotations

from ._text import split_exit

# marker file -> what it means (the role that writes it)
_RESTARTS = {
    "docker-restart-pending": "Docker's restart after daemon.json changed (roles/docker)",
}


def parse_recovery(text: str) -> tuple[str, ...]:
    """The causes a host needs recovery for, one line each, in the capture's order."""
    causes = []
    for line in split_exit(text).body.splitlines():
        kind, _sep, value = line.strip().partition(" ")
        if not kind:
            continue
        if kind == "dpkg_journal":
            causes.append(
                f"dpkg was interrupted ({value} file(s) in /var/lib/dpkg/updates/): apt refuses "
                "to install until `dpkg --configure -a` runs"
            )
        elif kind == "restart_pending":
            causes.append(f"a stopped run owes {_RESTARTS.get(value, value)}")
        else:
            causes.append(line.strip())
    return tuple(causes)
