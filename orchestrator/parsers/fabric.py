"""rdma.txt, fi-info-efa.txt and ibstatus.txt -> FabricFacts (issue 30).

rdma.txt is the probe's own listing (orchestrator/probe.sh `rdma`), one fact a line:
`device NAME pci=ADDR vendor=0x1d0f device=0xefa1`, `port NAME N state="4: ACTIVE"
phys_state="5: LinkUp" rate="400 Gb/sec (4X NDR)" link_layer="InfiniBand"`, `uverbs NAME`,
`memlock unlimited|KIB`, `peermem PATH`, `efa_installer VERSION`, `ofi_nccl PATH`. A line
it cannot read (an unknown kind, a line cut short) is kept in `unread` and costs only that
line (issue 48: one line dropped the whole fabric; sanity.py names them). The port
attributes are the kernel's (Documentation/ABI/stable/sysfs-class-infiniband: ports/<port-num>/
state, phys_state, rate, link_layer); their value shapes ("4: ACTIVE", "5: LinkUp",
"400 Gb/sec (4X NDR)") are the ones tests/recorded/reference/fabric.yaml gives for ibstatus.

fi_info prints one block per provider/domain; the reference (fabric.yaml efa.host_checks.
libfabric) says a healthy EFA host shows `provider: efa` blocks with `domain: efa_<n>-rdm`,
and that recent libfabric lists two per device (fabric efa-direct and efa), so the domains are
counted once each.
"""

from __future__ import annotations

import re
import shlex

from ..facts import FabricFacts, FiInfo, RdmaDevice, RdmaPort
from ..parsers import names
from ..parsers._text import ParseError, split_exit

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")
_NUMBERED = re.compile(r"^\s*\d+:\s*(\S.*?)\s*$")  # "4: ACTIVE" -> "ACTIVE"


def _hex(value: str) -> int | None:
    try:
        return int(value, 16) if value not in ("", "-") else None
    except ValueError:
        return None


def rate_gbps(text: str) -> float | None:
    """ "400 Gb/sec (4X NDR)" -> 400.0; None when it is not in that shape."""
    match = _RATE.match(text)
    return float(match.group(1)) if match else None


def _named(text: str) -> str:
    match = _NUMBERED.match(text)
    return match.group(1) if match else text.strip()


def _fields(words: list[str], where: str) -> dict[str, str]:
    out = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep:
            raise ParseError(names.RDMA, f"{where}: {word!r} is not KEY=VALUE")
        out[key] = value
    return out


def parse_rdma(text: str) -> FabricFacts:
    devices: dict[str, RdmaDevice] = {}
    ports: dict[str, list[RdmaPort]] = {}
    uverbs: list[str] = []
    peermem: list[str] = []
    ofi: list[str] = []
    memlock = ""
    installer: str | None = None
    unread: list[str] = []
    for line in split_exit(text).body.splitlines():
        if not line.strip():
            continue
        try:
            words = shlex.split(line)  # ValueError: unbalanced quotes (a line cut short)
            kind, rest = words[0], words[1:]
            if kind == "device" and rest:
                f = _fields(rest[1:], line)
                devices[rest[0]] = RdmaDevice(
                    name=rest[0],
                    pci="" if f.get("pci", "-") == "-" else f["pci"].lower(),
                    vendor_id=_hex(f.get("vendor", "")),
                    device_id=_hex(f.get("device", "")),
                )
            elif kind == "port" and len(rest) >= 2 and rest[1].isdigit():
                f = _fields(rest[2:], line)
                ports.setdefault(rest[0], []).append(
                    RdmaPort(
                        device=rest[0],
                        port=int(rest[1]),
                        state=_named(f.get("state", "")),
                        phys_state=_named(f.get("phys_state", "")),
                        rate_gbps=rate_gbps(f.get("rate", "")),
                        link_layer=f.get("link_layer", "").strip(),
                    )
                )
            elif kind == "uverbs" and len(rest) == 1:
                uverbs.append(rest[0])
            elif kind == "memlock" and len(rest) == 1:
                memlock = rest[0]
            elif kind == "peermem" and len(rest) == 1:
                peermem.append(rest[0])
            elif kind == "efa_installer" and len(rest) == 1:
                installer = rest[0]
            elif kind == "ofi_nccl" and len(rest) == 1:
                ofi.append(rest[0])
            else:  # one line the parser does not know costs that line, not the fabric
                unread.append(line.strip())
        except (ParseError, ValueError):  # one line it cannot read costs that line only
            unread.append(line.strip())
    for name in sorted(set(ports) - set(devices)):  # ports of a device line not read
        unread.extend(f"port {name} {p.port}" for p in ports.pop(name))
    return FabricFacts(
        devices=tuple(
            RdmaDevice(d.name, d.pci, d.vendor_id, d.device_id, tuple(ports.get(d.name, ())))
            for d in devices.values()
        ),
        uverbs=tuple(uverbs),
        memlock=memlock,
        peermem=tuple(peermem),
        efa_installer=installer,
        ofi_nccl=tuple(ofi),
        unread=tuple(unread),
    )


def parse_fi_info(text: str) -> FiInfo:
    out = split_exit(text)
    domains: list[str] = []
    provider = ""
    for line in out.body.splitlines():
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "provider":
            provider = value
        elif key == "domain" and provider == "efa" and value not in domains:
            domains.append(value)
    return FiInfo(exit_code=out.exit_code, domains=tuple(domains))


_IBSTATUS_HEAD = re.compile(r"device '([^']+)' port (\d+)")


def parse_ibstatus(text: str) -> tuple[RdmaPort, ...]:
    """ibstatus: a block per port, headed by a line naming `device '<dev>' port <n>`, with
    `state:`, `phys state:`, `rate:` and `link_layer:` lines (fabric.yaml infiniband.checks)."""
    found: list[RdmaPort] = []
    current: dict[str, str] | None = None
    head: tuple[str, int] | None = None

    def flush() -> None:
        if head is not None and current is not None:
            found.append(
                RdmaPort(
                    device=head[0],
                    port=head[1],
                    state=_named(current.get("state", "")),
                    phys_state=_named(current.get("phys state", "")),
                    rate_gbps=rate_gbps(current.get("rate", "")),
                    link_layer=current.get("link_layer", "").strip(),
                )
            )

    for line in split_exit(text).body.splitlines():
        match = _IBSTATUS_HEAD.search(line)
        if match:
            flush()
            head, current = (match.group(1), int(match.group(2))), {}
            continue
        key, sep, value = line.strip().partition(":")
        if sep and current is not None:
            current[key.strip()] = value.strip()
    flush()
    return tuple(found)
