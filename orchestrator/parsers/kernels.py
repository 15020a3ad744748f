"""kernels.txt -> KernelState: the installed kernels, their NVIDIA modules, the next boot.

The probe (orchestrator/probe.sh `kernels`) writes one fact per line:

    running 6.1.0-50-amd64
    kernel 6.1.0-57-amd64 vmlinuz=yes headers=yes
    module 6.1.0-57-amd64 /lib/modules/6.1.0-57-amd64/updates/dkms/nvidia-current.ko \
        version=535.261.03 signer=-       (one line in the capture)
    dkms nvidia-current 535.261.03 6.1.0-57-amd64 x86_64
    grubenv saved_entry=gnulinux-advanced-<uuid>>gnulinux-6.1.0-57-amd64-advanced-<uuid>
    grub default=0
    grub linux /boot/vmlinuz-6.1.0-57-amd64
    grubby /boot/vmlinuz-6.1.0-57-amd64
    rpm kernel-core 5.14.0-284.30.1.el9_2.x86_64      (rpm hosts: kernel packages, -devel too)
    mok /var/lib/dkms/mok.pub not-enrolled

The next boot is, in this order: `grubby --default-kernel` (RHEL family), GRUB's saved entry
(grubenv) when it names an installed release, the first `linux` line of grub.cfg when the
default is entry 0, else the newest installed kernel by version (what GRUB's generated menu
puts first on Debian and Ubuntu, and what the driver role assumed before).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from ..facts import InstalledKernel, KernelModule, KernelState
from . import names
from ._text import ParseError, split_exit

_MOK_STATES = frozenset({"enrolled", "not-enrolled", "unknown"})


def release_key(release: str) -> tuple[tuple[int, str], ...]:
    """Order kernel releases as `sort -V` does for the usual shapes (6.1.0-57-amd64)."""
    return tuple(
        (int(part), "") if part.isdigit() else (-1, part)
        for part in re.findall(r"\d+|[^\d.\-+~]+", release)
    )


def _release_of_path(path: str) -> str:
    base = PurePosixPath(path).name
    return base.removeprefix("vmlinuz-") if base.startswith("vmlinuz-") else ""


def _flag(field: str, name: str, line: str) -> bool:
    key, _sep, value = field.partition("=")
    if key != name or value not in ("yes", "no"):
        raise ParseError(names.KERNELS, f"unexpected {name} field in {line!r}")
    return value == "yes"


def parse_kernels(text: str) -> KernelState:
    out = split_exit(text)
    running = ""
    order: list[str] = []
    flags: dict[str, tuple[bool, bool]] = {}
    modules: dict[str, list[KernelModule]] = {}
    dkms: dict[str, list[tuple[str, str]]] = {}
    saved = grub_default = grub_first = grubby = ""
    mok: list[tuple[str, str]] = []
    rpms: list[tuple[str, str]] = []
    for raw_line in out.body.splitlines():
        line = raw_line.strip()
        if not line:
            continue
        kind, _sep, rest = line.partition(" ")
        fields = rest.split()
        if kind == "running" and len(fields) == 1:
            running = fields[0]
        elif kind == "kernel" and len(fields) == 3:
            order.append(fields[0])
            flags[fields[0]] = (
                _flag(fields[1], "vmlinuz", line),
                _flag(fields[2], "headers", line),
            )
        elif kind == "module" and len(fields) >= 4 and fields[2].startswith("version="):
            version = fields[2].removeprefix("version=")
            signer = rest.split(" signer=", 1)[1].strip() if " signer=" in rest else "-"
            modules.setdefault(fields[0], []).append(
                KernelModule(
                    path=fields[1],
                    version="" if version == "-" else version,
                    signer="" if signer == "-" else signer,
                )
            )
        elif kind == "dkms" and len(fields) == 4:
            dkms.setdefault(fields[2], []).append((fields[0], fields[1]))
        elif kind == "grubenv" and rest.startswith("saved_entry="):
            saved = rest.removeprefix("saved_entry=")
        elif kind == "grub" and rest.startswith("default="):
            grub_default = rest.removeprefix("default=")
        elif kind == "grub" and rest.startswith("linux "):
            grub_first = _release_of_path(rest.removeprefix("linux ").strip())
        elif kind == "grubby":
            grubby = _release_of_path(rest.strip())
        elif kind == "mok" and len(fields) == 2 and fields[1] in _MOK_STATES:
            mok.append((fields[0], fields[1]))
        elif kind == "rpm" and len(fields) == 2:
            rpms.append((fields[0], fields[1]))
        else:
            raise ParseError(names.KERNELS, f"unexpected line {line!r}")
    if not running:
        raise ParseError(names.KERNELS, "no `running` line")
    installed = tuple(
        InstalledKernel(
            release=k,
            vmlinuz=flags[k][0],
            headers=flags[k][1],
            modules=tuple(modules.get(k, ())),
            dkms=tuple(dkms.get(k, ())),
        )
        for k in order
    )
    default, source = _default(running, installed, saved, grub_default, grub_first, grubby)
    return KernelState(
        running=running,
        installed=installed,
        default=default,
        default_from=source,
        mok=tuple(mok),
        rpm=tuple(rpms),
    )


def _default(
    running: str,
    installed: tuple[InstalledKernel, ...],
    saved: str,
    grub_default: str,
    grub_first: str,
    grubby: str,
) -> tuple[str, str]:
    known = {k.release for k in installed if k.vmlinuz}
    if grubby in known:
        return grubby, "grubby"
    if saved and grub_default in ("saved", ""):
        # saved_entry is a menu entry id or title; it names the release inside it
        named = sorted((r for r in known if r in saved), key=len)
        if named:
            return named[-1], "grubenv"
    if grub_first in known and grub_default in ("0", ""):
        return grub_first, "grub.cfg"
    if known:
        return max(known, key=release_key), "newest installed"
    return running, "running (no other bootable kernel)"
