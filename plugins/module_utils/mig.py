"""MIG layouts: mig-parted-style configs, validated against the GPUs they are meant for.

A layout file has the shape NVIDIA's mig-parted reads, so existing configs carry over::

    version: v1
    mig-configs:
      h200-mixed:
        - devices: all            # or a list of GPU indices: [0, 1]
          mig-enabled: true
          mig-devices: {"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2}

`disabled` is always available (MIG off on every GPU), even when the file does not name it.

Validation is pure: `validate_layout` checks one named layout against a host's GPUs, each
described by its MIG profiles (`MigGpu`): profile names, ids, instance counts and placements,
taken from the GPU's own `nvidia-smi mig -lgip` / `-lgipp` (`gpus_from_smi`) or, before a
driver is there, from the catalog. Placements are solved exactly (GPU instances may not share a
memory slice), so an impossible mix is refused with what would fit instead.

For the planner (orchestrator.plan), per host whose policy sets `mig_layout`:

    gpus = gpus_from_smi(parse_lgip(..), parse_lgipp(..), models)   # facts hold -lgip/-lgipp
        # or, before a driver is there: [gpu_from_catalog(i, catalog.gpu(dev), dev) ...]
    layouts = validate_layout(host, MigPlan.parse(layout, configs, host).parsed,
                              policy.mig_layout, gpus)   # orchestrator.planners.mig.MigPlan

before any change; it raises `MigLayoutError` (exit 2) naming host, GPU, profile and what
would fit. The catalog knows placements for the H200 only, so for other models the planner
checks names, counts and compute slices, and the host checks placements against `-lgipp`.
`conflicts(host, layouts, needs_multi_gpu_nccl=...)` returns the conflicts the plan
must report as blockers: MIG on a host whose policy requires the multi-GPU NCCL test (MIG
disables NVLink peer-to-peer). MIG on a GPU without MIG is already a `MigLayoutError`.
On the host the role runs the same checks again against live output before touching a GPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import BadInputError
from .parsers.mig import GiPlacementRow, GiProfileRow


class CatalogGpu(Protocol):
    """What gpu_from_catalog reads of the catalog's GpuModel (orchestrator/catalog.py). Not
    imported: this file runs on GPU hosts too (the mig role's applier), which have no catalog
    (nor PyYAML), and Ansible ships every module a module_utils file imports."""

    @property
    def model(self) -> str: ...
    @property
    def mig(self) -> bool: ...
    @property
    def mig_profiles(self) -> Sequence[Any]: ...


LAYOUT_DISABLED = "disabled"
# Every MIG GPU in the catalog (A100, H100, H200): 8 memory slices, 7 compute slices
# (reference/gpus.md, "Mixed layouts are constrained by these slice placements").
MEMORY_SLICES = 8
COMPUTE_SLICES = 7


class MigLayoutError(BadInputError):
    """A MIG layout is malformed or does not fit the GPUs of the host it is meant for."""


@dataclass(frozen=True)
class DeviceSpec:
    """One entry of a mig-parted layout: which GPUs, MIG on or off, which instances."""

    devices: tuple[int, ...] | None  # None: `all`
    mig_enabled: bool
    mig_devices: tuple[tuple[str, int], ...]  # (profile name, count), in file order
    device_filter: tuple[int, ...] | None = None  # PCI device ids; None: any GPU

    def covers(self, gpu: MigGpu) -> bool:
        return self.device_filter is None or gpu.device_id in self.device_filter


@dataclass(frozen=True)
class MigConfig:
    """A parsed `version: v1` document: layout name -> device specs."""

    layouts: Mapping[str, tuple[DeviceSpec, ...]]

    def names(self) -> tuple[str, ...]:
        return tuple(sorted({*self.layouts, LAYOUT_DISABLED}))

    def get(self, name: str) -> tuple[DeviceSpec, ...] | None:
        if name in self.layouts:
            return self.layouts[name]
        if name == LAYOUT_DISABLED:
            return (DeviceSpec(None, False, ()),)
        return None


@dataclass(frozen=True)
class GiProfile:
    """A GPU instance profile as one GPU offers it (`nvidia-smi mig -lgip` + `-lgipp`)."""

    name: str  # "1g.18gb" (nvidia-smi prints "MIG 1g.18gb")
    profile_id: int | None  # None: the catalog does not know it (only real output does)
    total: int  # instances of this profile alone on an empty GPU
    compute_slices: int  # the "Ng" of the name
    placements: tuple[int, ...] | None = None  # possible start memory slices; None: unknown
    size: int | None = None  # memory slices one instance occupies; None: unknown


@dataclass(frozen=True)
class MigGpu:
    """One GPU of a host, as far as MIG is concerned."""

    index: int
    model: str  # "NVIDIA H200"
    mig_capable: bool
    profiles: tuple[GiProfile, ...] = ()
    device_id: int | None = None  # PCI device id (0x2335), for mig-parted's `device-filter`

    def profile(self, name: str) -> GiProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


@dataclass(frozen=True)
class PlacedInstance:
    profile: str
    profile_id: int | None
    start: int | None  # None: placement not checked (the catalog has no placements)
    size: int | None


@dataclass(frozen=True)
class GpuLayout:
    """What one GPU must look like: MIG mode and the GPU instances, placed."""

    index: int
    model: str
    mig_enabled: bool
    instances: tuple[PlacedInstance, ...] = ()

    def counts(self) -> dict[str, int]:
        return dict(Counter(i.profile for i in self.instances))


# --- parsing the document ---------------------------------------------------------------


def _fail(host: str | None, message: str, fix: str) -> MigLayoutError:
    return MigLayoutError(message, host=host, fix=fix)


def _devices(value: object, where: str, host: str | None) -> tuple[int, ...] | None:
    if value == "all":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return (value,)
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    ):
        return tuple(sorted(set(value)))
    raise _fail(
        host,
        f"{where}: devices is {value!r}",
        "write `devices: all` or a list of GPU indices, e.g. `devices: [0, 1]`",
    )


def _device_filter(value: object, where: str, host: str | None) -> tuple[int, ...] | None:
    """mig-parted's `device-filter`: "0x233510DE" (device id + vendor) or a list of them."""
    if value is None:
        return None
    values = value if isinstance(value, list) else [value]
    out: list[int] = []
    for v in values:
        try:
            number = int(str(v), 16)
        except ValueError:
            number = -1
        if number <= 0:
            raise _fail(
                host,
                f"{where}: device-filter {v!r}",
                'write PCI ids as mig-parted does, e.g. `device-filter: "0x233510DE"`',
            )
        out.append(number >> 16 if number > 0xFFFF else number)
    return tuple(out)


def _mig_devices(value: object, where: str, host: str | None) -> tuple[tuple[str, int], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise _fail(
            host,
            f"{where}: mig-devices is {value!r}",
            'write a mapping of profile name to count, e.g. `mig-devices: {"1g.18gb": 7}`',
        )
    out: list[tuple[str, int]] = []
    for name, count in value.items():
        if not isinstance(name, str) or not isinstance(count, int) or isinstance(count, bool):
            raise _fail(
                host,
                f"{where}: mig-devices entry {name!r}: {count!r}",
                "each entry is PROFILE: COUNT, e.g. `3g.71gb: 2`",
            )
        if count < 0:
            raise _fail(host, f"{where}: {name} count {count}", "counts are 0 or more")
        if count:
            out.append((name.removeprefix("MIG ").strip(), count))
    return tuple(out)


def parse_config(data: object, *, host: str | None = None) -> MigConfig:
    """Parse a mig-parted `version: v1` document (already loaded from YAML/JSON)."""
    fix_doc = "see roles/mig/README.md for the layout format (mig-parted's `version: v1`)"
    if not isinstance(data, Mapping):
        raise _fail(host, f"MIG config is {type(data).__name__}, not a mapping", fix_doc)
    if data.get("version") != "v1":
        raise _fail(host, f"MIG config version is {data.get('version')!r}", "set `version: v1`")
    configs = data.get("mig-configs")
    if not isinstance(configs, Mapping) or not configs:
        raise _fail(host, "MIG config has no `mig-configs` mapping", fix_doc)
    layouts: dict[str, tuple[DeviceSpec, ...]] = {}
    for name, entries in configs.items():
        if not isinstance(name, str) or not isinstance(entries, list) or not entries:
            raise _fail(host, f"layout {name!r} is not a non-empty list of device specs", fix_doc)
        specs: list[DeviceSpec] = []
        for n, entry in enumerate(entries):
            where = f"layout {name!r} entry {n}"
            if not isinstance(entry, Mapping):
                raise _fail(host, f"{where} is {entry!r}", fix_doc)
            unknown = set(entry) - {"devices", "device-filter", "mig-enabled", "mig-devices"}
            if unknown:
                raise _fail(
                    host,
                    f"{where}: unknown keys {sorted(map(str, unknown))}",
                    "keys are devices, device-filter, mig-enabled, mig-devices",
                )
            enabled = entry.get("mig-enabled")
            if not isinstance(enabled, bool):
                raise _fail(host, f"{where}: mig-enabled is {enabled!r}", "write true or false")
            mig_devices = _mig_devices(entry.get("mig-devices"), where, host)
            if mig_devices and not enabled:
                raise _fail(
                    host,
                    f"{where}: mig-devices given with mig-enabled: false",
                    "set mig-enabled: true, or drop mig-devices",
                )
            specs.append(
                DeviceSpec(
                    _devices(entry.get("devices"), where, host),
                    enabled,
                    mig_devices,
                    _device_filter(entry.get("device-filter"), where, host),
                )
            )
        layouts[name] = tuple(specs)
    return MigConfig(layouts)


# --- placement -------------------------------------------------------------------------


def _expand(requested: Sequence[tuple[GiProfile, int]]) -> list[GiProfile]:
    items = [p for p, count in requested for _round in range(count)]
    # Big, constrained instances first: the search then fails fast and places greedily well.
    items.sort(key=lambda p: (-(p.size or 0), len(p.placements or ()), -p.compute_slices))
    return items


def solve_placement(
    requested: Sequence[tuple[GiProfile, int]], slices: int = MEMORY_SLICES
) -> tuple[PlacedInstance, ...] | None:
    """Place every requested instance with no memory slice shared and at most COMPUTE_SLICES
    compute slices in all; None when that is impossible.

    Where a profile's placements are unknown (catalog entries without real `-lgipp` data),
    only the compute-slice budget is checked and `start` stays None.
    """
    items = _expand(requested)
    if sum(p.compute_slices for p in items) > COMPUTE_SLICES:
        return None
    if any(p.placements is None or p.size is None for p in items):
        return tuple(PlacedInstance(p.name, p.profile_id, None, p.size) for p in items)
    chosen: list[PlacedInstance] = []

    def search(k: int, used: int) -> bool:
        if k == len(items):
            return True
        p = items[k]
        size = p.size or 0
        for start in p.placements or ():
            mask = ((1 << size) - 1) << start
            if start + size > slices or used & mask:
                continue
            chosen.append(PlacedInstance(p.name, p.profile_id, start, size))
            if search(k + 1, used | mask):
                return True
            chosen.pop()
        return False

    return tuple(sorted(chosen, key=lambda i: i.start or 0)) if search(0, 0) else None


def what_fits(requested: Sequence[tuple[GiProfile, int]]) -> dict[str, int]:
    """The largest part of a request that fits, keeping big instances first."""
    kept: list[tuple[GiProfile, int]] = []
    for p in _expand(requested):
        trial = [*kept, (p, 1)]
        if solve_placement(trial) is not None:
            kept = trial
    return dict(Counter(p.name for p, _unused in kept))


def _fmt(counts: Mapping[str, int] | Iterable[tuple[str, int]]) -> str:
    items = counts.items() if isinstance(counts, Mapping) else counts
    return ", ".join(f"{name} x{n}" for name, n in items) or "nothing"


# --- validation ------------------------------------------------------------------------


def _gpu_layout(host: str, layout: str, gpu: MigGpu, spec: DeviceSpec) -> GpuLayout:
    label = f"layout {layout!r} on GPU {gpu.index} ({gpu.model})"
    if not spec.mig_enabled:
        return GpuLayout(gpu.index, gpu.model, False)
    if not gpu.mig_capable:
        raise _fail(
            host,
            f"{label}: this GPU has no MIG",
            f"select layout {LAYOUT_DISABLED!r} for this host, or limit `devices` to MIG GPUs",
        )
    requested: list[tuple[GiProfile, int]] = []
    offered = ", ".join(f"{p.name} (max {p.total})" for p in gpu.profiles) or (
        "none known for this model; validate against the GPU's own `nvidia-smi mig -lgip`"
    )
    for name, count in spec.mig_devices:
        profile = gpu.profile(name)
        if profile is None:
            raise _fail(
                host,
                f"{label}: profile {name} is not offered by this GPU",
                f"use this GPU's profiles: {offered}",
            )
        if count > profile.total:
            raise _fail(
                host,
                f"{label}: {count}x {name} asked, at most {profile.total} fit",
                f"ask for {profile.total}x {name} or fewer",
            )
        requested.append((profile, count))
    placed = solve_placement(requested)
    if placed is None:
        compute = sum(p.compute_slices * n for p, n in requested)
        memory = sum((p.size or 0) * n for p, n in requested)
        raise _fail(
            host,
            f"{label}: {_fmt(spec.mig_devices)} does not fit: {compute} of {COMPUTE_SLICES} "
            f"compute slices, {memory} of {MEMORY_SLICES} memory slices, "
            "and no placement without overlap",
            f"what fits together: {_fmt(what_fits(requested))}",
        )
    return GpuLayout(gpu.index, gpu.model, True, placed)


def validate_layout(
    host: str, config: MigConfig, layout: str, gpus: Sequence[MigGpu]
) -> tuple[GpuLayout, ...]:
    """Resolve `layout` for every GPU it covers; raise MigLayoutError if it cannot apply.

    GPUs that no entry of the layout names are left out of the result (left as they are).
    """
    specs = config.get(layout)
    if specs is None:
        raise _fail(
            host,
            f"MIG layout {layout!r} is not defined",
            f"select one of: {', '.join(config.names())}",
        )
    by_index = {g.index: g for g in gpus}
    if not by_index and any(s.mig_enabled for s in specs):
        raise _fail(host, f"layout {layout!r} enables MIG but the host has no GPU", "check detect")
    assigned: dict[int, DeviceSpec] = {}
    for spec in specs:
        indices = sorted(by_index) if spec.devices is None else list(spec.devices)
        for i in indices:
            if i not in by_index:
                raise _fail(
                    host,
                    f"layout {layout!r} names GPU {i}; the host has GPUs {sorted(by_index)}",
                    "fix `devices` in the layout, or select a layout made for this host",
                )
            if not spec.covers(by_index[i]):
                continue
            if i in assigned:
                raise _fail(
                    host,
                    f"layout {layout!r} names GPU {i} in two entries",
                    "name each GPU in one entry only",
                )
            assigned[i] = spec
    return tuple(_gpu_layout(host, layout, by_index[i], assigned[i]) for i in sorted(assigned))


def conflicts(
    host: str, layouts: Sequence[GpuLayout], *, needs_multi_gpu_nccl: bool
) -> tuple[str, ...]:
    """Policy conflicts the planner reports as blockers (no exception: the plan lists them)."""
    enabled = [g.index for g in layouts if g.mig_enabled]
    if not (enabled and needs_multi_gpu_nccl):
        return ()
    return (
        f"{host}: the MIG layout enables MIG on GPUs {enabled} but policy requires the "
        "multi-GPU NCCL test; MIG disables NVLink peer-to-peer, so that test cannot pass. "
        f"Select layout {LAYOUT_DISABLED!r}, or set gpuprov_validation_nccl: false for "
        "this host",
    )


# --- building MigGpu from real output or from the catalog -------------------------------


def _compute_slices(name: str) -> int:
    head = name.split("g.", 1)[0]
    return int(head) if head.isdigit() else COMPUTE_SLICES


def gpus_from_smi(
    lgip: Sequence[GiProfileRow],
    lgipp: Sequence[GiPlacementRow],
    models: Mapping[int, str],
    device_ids: Mapping[int, int] | None = None,
) -> tuple[MigGpu, ...]:
    """MigGpu per GPU from parsed `-lgip` / `-lgipp`; `models` (index -> name, e.g. from
    `--query-gpu`) lists every GPU, so one without profiles is reported as without MIG.

    Counts are the profile's Total (what fits on an empty GPU): applying a layout destroys
    the instances there first.
    """
    places = {(r.gpu, r.profile_id): r for r in lgipp}
    out: list[MigGpu] = []
    for index in sorted({*models, *(r.gpu for r in lgip)}):
        profiles = tuple(
            GiProfile(
                r.name,
                r.profile_id,
                r.total,
                _compute_slices(r.name),
                places[(index, r.profile_id)].starts if (index, r.profile_id) in places else None,
                places[(index, r.profile_id)].size if (index, r.profile_id) in places else None,
            )
            for r in lgip
            if r.gpu == index
        )
        out.append(
            MigGpu(
                index,
                models.get(index, "GPU"),
                bool(profiles),
                profiles,
                (device_ids or {}).get(index),
            )
        )
    return tuple(out)


def gpu_from_catalog(index: int, model: CatalogGpu | None, device_id: int | None) -> MigGpu:
    """MigGpu from the catalog's entry for a GPU (planning before a driver is there)."""
    if model is None:
        return MigGpu(
            index,
            f"unknown GPU {device_id:#06x}" if device_id else "unknown GPU",
            False,
            (),
            device_id,
        )
    profiles = tuple(
        GiProfile(
            p.name, p.profile_id, p.max_count, p.compute_slices, p.placements, p.memory_slices
        )
        for p in model.mig_profiles
    )
    return MigGpu(index, model.model, model.mig, profiles, device_id)
