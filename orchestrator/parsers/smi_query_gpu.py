"""`nvidia-smi --query-gpu=<fields> --format=csv` -> SmiGpu, one per GPU.

Columns are found by header name, so the order of the probe's field list does not matter.
"""

from __future__ import annotations

import csv
import io

from ..facts import SmiGpu
from ._text import (
    ParseError,
    clip,
    float_value,
    int_value,
    split_exit,
    value,
)

_SOURCE = "nvidia-smi-query-gpu.csv"

# The probe's field list (the real fixture's header, in its order).
QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "pci.bus_id",
    "pci.device_id",
    "pci.sub_device_id",
    "uuid",
    "serial",
    "driver_version",
    "vbios_version",
    "memory.total",
    "mig.mode.current",
    "mig.mode.pending",
    "persistence_mode",
    "ecc.mode.current",
    "ecc.mode.pending",
    "ecc.errors.uncorrected.volatile.total",
    "compute_cap",
    "power.limit",
    "clocks.max.sm",
    "clocks.current.sm",
    "pcie.link.gen.current",
    "pcie.link.width.current",
    "pcie.link.gen.max",
    "pcie.link.width.max",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "clocks_event_reasons.active",
    "temperature.gpu",
)


def normalise_bus_id(bus_id: str) -> str:
    """nvidia-smi's "00000000:00:06.0" -> sysfs's "0000:00:06.0"."""
    parts = bus_id.strip().lower().split(":")
    if len(parts) != 3:
        raise ParseError(_SOURCE, f"bus id {bus_id!r} is not DOMAIN:BUS:DEVICE.FUNCTION")
    domain = parts[0][-4:].rjust(4, "0")
    return f"{domain}:{parts[1]}:{parts[2]}"


def _row(fields: dict[str, str]) -> SmiGpu:
    def get(name: str) -> str:
        return fields.get(name, "")

    pci_id = int_value(get("pci.device_id"))  # 0x233510DE: device in the high 16 bits
    if pci_id is None or int_value(get("index")) is None:
        raise ParseError(_SOURCE, f"row without index or pci.device_id: {fields}")
    reasons = get("clocks_event_reasons.active") or get("clocks_throttle_reasons.active")
    return SmiGpu(
        index=int_value(get("index")) or 0,
        name=get("name"),
        bus_id=normalise_bus_id(get("pci.bus_id")),
        device_id=pci_id >> 16,
        uuid=get("uuid"),
        driver_version=get("driver_version"),
        memory_total_mib=int_value(get("memory.total")),
        mig_mode_current=value(get("mig.mode.current")),
        mig_mode_pending=value(get("mig.mode.pending")),
        persistence_mode=value(get("persistence_mode")),
        ecc_mode_current=value(get("ecc.mode.current")),
        ecc_mode_pending=value(get("ecc.mode.pending")),
        ecc_uncorrected_volatile=int_value(get("ecc.errors.uncorrected.volatile.total")),
        compute_cap=value(get("compute_cap")),
        pcie_gen_current=int_value(get("pcie.link.gen.current")),
        pcie_width_current=int_value(get("pcie.link.width.current")),
        pcie_gen_max=int_value(get("pcie.link.gen.max")),
        pcie_width_max=int_value(get("pcie.link.width.max")),
        retired_pages_pending=value(get("retired_pages.pending")),
        remapped_rows_pending=value(get("remapped_rows.pending")),
        remapped_rows_failure=value(get("remapped_rows.failure")),
        clocks_event_reasons=int_value(reasons),
        temperature_c=int_value(get("temperature.gpu")),
        serial=value(get("serial")),
        vbios_version=value(get("vbios_version")),
        subsystem_id=int_value(get("pci.sub_device_id")),
        power_limit_w=float_value(get("power.limit")),
        clocks_max_sm_mhz=int_value(get("clocks.max.sm")),
    )


def parse_query_gpu(text: str) -> tuple[SmiGpu, ...]:
    out = split_exit(text)
    if not out.ok:
        return ()
    try:
        rows = list(csv.reader(io.StringIO(out.body, newline=""), skipinitialspace=True))
    except csv.Error as exc:  # a stray carriage return, a NUL byte
        raise ParseError(_SOURCE, f"not CSV: {exc}") from exc
    rows = [r for r in rows if r]
    if not rows:
        return ()
    # "memory.total [MiB]" -> "memory.total"
    header = [h.split(" [")[0].strip() for h in rows[0]]
    if "index" not in header or "pci.bus_id" not in header:
        raise ParseError(
            _SOURCE, f"header {clip(repr(rows[0]))} lacks index/pci.bus_id (needs csv header)"
        )
    gpus = []
    for row in rows[1:]:
        if len(row) != len(header):
            raise ParseError(
                _SOURCE, f"row has {len(row)} fields, header {len(header)}: {clip(repr(row))}"
            )
        gpus.append(_row(dict(zip(header, (c.strip() for c in row), strict=True))))
    return tuple(gpus)
