"""The probe's one-line-per-device dump of `/sys/bus/pci/devices` -> PciDevice.

Line format (the fixture's): `ADDR vendor=0x10de device=0x2335 class=0x030200
subsystem_vendor=.. subsystem_device=.. current_link_speed="32.0 GT/s PCIe"
current_link_width=16 max_link_speed=".." max_link_width=16 numa_node=-1 driver=nvidia`.
Works before any driver is installed: this is where GPUs and NVSwitches are found.
"""

from __future__ import annotations

import re

from ..facts import PciDevice, PciLink
from ._text import ParseError, clip, split_exit

_SOURCE = "sysfs-pci-devices.txt"
_REQUIRED = ("vendor", "device", "class")
# The kernel prints these sysfs attributes at a fixed width (drivers/pci/pci-sysfs.c:
# vendor and device "0x%04x", class "0x%06x"): a shorter value was cut
_WIDTHS = {"vendor": 6, "device": 6, "class": 8}
# One token at a time: key=value, key="value with spaces", or any other word (skipped). The
# catch-all keeps the scan linear: a bare `(\w+)=` searched along an 80 kB word without `=`
# retries from every position (quadratic: over 100 s). shlex costs 10x more per line.
_TOKEN = re.compile(r'(\w+)=(?:"([^"]*)"|([^\s"]*))|"[^"]*"|[^\s"]+|"')
_ADDRESS = re.compile(r"^([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s")
# The probe's own line, exactly as its printf writes it: one match instead of a token scan
# (a third of the time for 1,000 saved hosts). Any other line takes the token scan; both
# give the same fields (tests/unit/test_parse_fast_paths.py).
_KEYS = (
    "vendor",
    "device",
    "class",
    "subsystem_vendor",
    "subsystem_device",
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
    "numa_node",
    "driver",
)
_QUOTED = ("current_link_speed", "max_link_speed")
_PROBE_LINE = re.compile(
    r"([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
    + "".join(f' {k}="([^"]*)"' if k in _QUOTED else f' {k}=([^\\s"]*)' for k in _KEYS)
)


def _speed(text: str) -> float | None:
    # "32.0 GT/s PCIe", "8 GT/s", "Unknown" / "" (VM bridges); blank: none
    words = text.split()
    try:
        return float(words[0]) if words else None
    except ValueError:
        return None


def _int(text: str) -> int | None:
    try:
        return int(text, 0) if text else None
    except ValueError:
        return None


def _scan(line: str, where: str) -> tuple[str, dict[str, str]]:
    """Any line: its address and every key=value token (the last of a repeated key)."""
    head = _ADDRESS.match(line + " ")
    if head is None:
        raise ParseError(_SOURCE, f"{where}: does not start with a PCI address: {clip(repr(line))}")
    if line.count('"') % 2:
        raise ParseError(_SOURCE, f"{where}: truncated (unbalanced quotes): {clip(repr(line))}")
    fields = {m[1]: m[2] if m[2] is not None else m[3] for m in _TOKEN.finditer(line) if m[1]}
    return head.group(1), fields


def parse_pci_line(line: str, number: int | None = None) -> PciDevice:
    """One device line; `number` (1-based) names the line in errors."""
    where = f"line {number}" if number is not None else "line"
    fast = _PROBE_LINE.fullmatch(line)
    if fast is not None:
        address = fast.group(1)
        fields = dict(zip(_KEYS, fast.groups()[1:], strict=True))
    else:
        address, fields = _scan(line, where)
    missing = [k for k in _REQUIRED if _int(fields.get(k, "")) is None]
    if missing:
        raise ParseError(
            _SOURCE, f"{where}: truncated (no {', '.join(missing)}): {clip(repr(line))}"
        )
    short = [f"{k}={fields[k]}" for k, width in _WIDTHS.items() if len(fields[k]) < width]
    if short:  # "class=0x03": a GPU (0x0302xx) cut to a class no GPU has
        raise ParseError(_SOURCE, f"{where}: truncated ({', '.join(short)}): {clip(repr(line))}")
    numa = _int(fields.get("numa_node", ""))
    return PciDevice(
        address=address.lower(),
        vendor_id=_int(fields["vendor"]) or 0,
        device_id=_int(fields["device"]) or 0,
        class_code=_int(fields["class"]) or 0,
        subsystem_vendor_id=_int(fields.get("subsystem_vendor", "")) or 0,
        subsystem_device_id=_int(fields.get("subsystem_device", "")) or 0,
        link=PciLink(
            current_speed_gts=_speed(fields.get("current_link_speed", "")),
            current_width=_int(fields.get("current_link_width", "")),
            max_speed_gts=_speed(fields.get("max_link_speed", "")),
            max_width=_int(fields.get("max_link_width", "")),
        ),
        numa_node=-1 if numa is None else numa,
        driver=fields.get("driver", ""),
    )


def parse_sysfs_pci(text: str) -> tuple[PciDevice, ...]:
    """Every device; a broken line fails the whole capture (a partial bus would plan wrong)."""
    return tuple(
        parse_pci_line(line, n)
        for n, line in enumerate(split_exit(text).body.splitlines(), start=1)
        if line.strip()
    )
