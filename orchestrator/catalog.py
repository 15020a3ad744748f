"""The GPU catalog: typed, checked view of ``orchestrator/catalog.yaml``.

The data file holds the facts (GPU models by PCI device id, NVSwitch ids, driver branches,
CUDA minimum drivers, driver sources per OS, MIG profiles, validation figures); this module
only checks its shape on load and answers look-ups. A malformed file raises CatalogError
naming the entry and the field.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal, cast

import yaml

from .errors import CatalogError

# libyaml's safe loader where PyYAML was built with it: the catalog is read by every command,
# and the pure-Python loader takes about 0.15 s for it, libyaml's about 0.01 s.
SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

DEFAULT_PATH = Path(__file__).with_name("catalog.yaml")
SCHEMA = 1

OpenModules = Literal["unsupported", "supported", "required"]
# How an OS's os-release names the release its repositories are keyed by (`os_release_keys`):
# VERSION_ID as it is (Ubuntu "22.04", Amazon Linux "2023"), its major ("9.4" -> "9" for the
# RHEL family), or the codename (Debian "bookworm"; its VERSION_ID's major when it has none).
ReleaseKey = Literal["version_id", "major", "codename"]
_RELEASE_KEYS = ("version_id", "major", "codename")
BranchKind = Literal["LTSB", "PB", "unknown"]
_OPEN_MODULES = ("unsupported", "supported", "required")
_BRANCH_KINDS = ("LTSB", "PB", "unknown")
_VERSION_RE = re.compile(r"^\d+(\.\d+){0,2}$")


def parse_version(text: str) -> tuple[int, ...]:
    """Parse "550.90.07" -> (550, 90, 7) and "450" -> (450,); ValueError on anything else."""
    if not _VERSION_RE.match(text):
        raise ValueError(f"not a driver version: {text!r}")
    return tuple(int(part) for part in text.split("."))


def version_at_least(version: str, minimum: str) -> bool:
    """True when `version` is `minimum` or newer; a bare branch minimum ("450") is a floor."""
    return parse_version(version) >= parse_version(minimum)


def branch_of(version: str) -> int:
    return parse_version(version)[0]


@dataclass(frozen=True)
class MigProfile:
    name: str  # "1g.18gb"
    max_count: int
    compute_slices: int
    profile_id: int | None = None  # None: not in the reference for this model
    memory_slices: int | None = None
    placements: tuple[int, ...] | None = None


FIGURE_ORIGINS = ("measured", "sourced")


@dataclass(frozen=True)
class ValidationFigure:
    """An expected figure for one check on one SKU; `limit` is what a check compares to."""

    check: str  # "allreduce_busbw", "bf16_gemm", "h2d_bandwidth", ...
    unit: str
    source: str
    floor: float | None = None  # an explicit floor from a published health check
    healthy: float | None = None  # a healthy figure; the floor is a fraction of it
    gpus: int | None = None  # for collective checks: the GPU count the figure is for
    message_bytes: int | None = None
    origin: str = "sourced"  # "measured" (on the machine `source` names) or "sourced" (public)
    date: str = ""  # YYYY-MM-DD: when measured, or the source's date

    def limit(self, floor_fraction: float) -> float:
        if self.floor is not None:
            return self.floor
        assert self.healthy is not None  # guaranteed by the loader
        return round(self.healthy * floor_fraction, 3)


FABRIC_KINDS = ("nvlink5", "imex")
FabricKind = Literal["nvlink5", "imex"]


@dataclass(frozen=True)
class Fabric:
    """The NVLink fabric a GPU model's boards carry, where the host must run something for it.

    nvlink5: an HGX board of `board_gpus` GPUs whose NVSwitches are managed over InfiniBand
    management ports (SW_MNG in their VPD): fabric manager + NVLink subnet manager on the host.
    imex: a compute tray of a multi-node NVLink rack (GB200/GB300 NVL): the switch trays manage
    the fabric; the tray runs nvidia-imex, and no local fabric manager.
    """

    kind: FabricKind
    source: str
    board_gpus: int | None = None  # nvlink5: GPUs on one board (8)


@dataclass(frozen=True)
class GpuModel:
    sku: str
    model: str
    device_ids: tuple[int, ...]
    arch: str
    compute_capability: str
    memory_gb: int | None
    fp8: bool
    mig: bool
    min_driver: str | None  # None: unverified; the planner warns
    open_modules: OpenModules
    mig_profiles: tuple[MigProfile, ...] = ()
    validation: tuple[ValidationFigure, ...] = ()
    subsystem_ids: tuple[int, ...] = ()
    memory_mib: int | None = None
    memory_type: str | None = None
    fabric: Fabric | None = None  # None: no host-side NVLink fabric service implied
    cpu: str | None = None  # a superchip's own CPU architecture (`uname -m`); None: any host


@dataclass(frozen=True)
class NvSwitchGeneration:
    generation: int
    name: str
    endpoint_ids: frozenset[int]
    other_ids: frozenset[int]  # bridge / NTB functions: known, not counted as switches
    per_board: int


@dataclass(frozen=True)
class DriverBranch:
    branch: int
    kind: BranchKind
    eol: dt.date | None  # first day of the EOL month; None: not in the reference

    def is_eol(self, today: dt.date) -> bool:
        return self.eol is not None and today >= self.eol


@dataclass(frozen=True)
class ArchBranches:
    """The driver branches one GPU architecture can run: `low`..`high` (None: unbounded)."""

    low: int | None
    high: int | None
    source: str


@dataclass(frozen=True)
class DistributionDriver:
    branch: int
    version: str
    flavours: tuple[str, ...]


@dataclass(frozen=True)
class DriverSource:
    os_id: str
    os_version: str
    cuda_repo: str | None  # None: NVIDIA's CUDA repository has no path for this OS
    any_distribution_branch: bool  # the archive has per-branch packages (Ubuntu)
    distribution: tuple[DistributionDriver, ...]
    # The flavour to take from the archive when the policy says auto and the GPUs allow both,
    # with why (e.g. the packaged open modules do not build against the current kernel).
    preferred_flavour: str | None = None
    preferred_why: str = ""
    codename: str | None = None  # Debian: the suite the entry's release is (bookworm)
    name: str = ""  # how users call it: "Ubuntu 22.04", "Amazon Linux 2023"

    @property
    def label(self) -> str:
        return self.name or f"{self.os_id} {self.os_version}"


@dataclass(frozen=True)
class PendingRelease:
    """An OS release NVIDIA has driver repositories for that gpuprov does not plan yet."""

    os_id: str
    os_version: str  # as os_release_keys key it ("26.04", "10")
    name: str
    reason: str


@dataclass(frozen=True)
class Catalog:
    gpus: tuple[GpuModel, ...]
    architectures: Mapping[str, OpenModules]
    nvswitches: tuple[NvSwitchGeneration, ...]
    branches: tuple[DriverBranch, ...]  # sorted by branch
    cuda_min_driver: Mapping[str, str]
    cuda_compat_min_driver: Mapping[str, str]  # CUDA major -> minor-version-compat floor
    driver_sources: tuple[DriverSource, ...]
    validation_floor_fraction: float
    known_branches: frozenset[int] = frozenset()  # every branch NVIDIA released (any kind)
    arch_branches: Mapping[str, ArchBranches] = dataclasses.field(default_factory=dict)

    def branch_problem(self, branch: int, archs: Sequence[str]) -> str | None:
        """Why `branch` cannot drive GPUs of `archs` (it does not exist, or is past the last
        branch of an architecture), else None."""
        if self.known_branches and branch not in self.known_branches:
            near = sorted(self.known_branches, key=lambda b: (abs(b - branch), b))[:3]
            return (
                f"R{branch} is not a driver branch NVIDIA has released (nearest known: "
                f"{', '.join(f'R{b}' for b in sorted(near))}; catalog known_driver_branches)"
            )
        for arch in dict.fromkeys(archs):
            bounds = self.arch_branches.get(arch)
            if bounds is not None and bounds.high is not None and branch > bounds.high:
                return (
                    f"R{branch} does not support {arch} GPUs: R{bounds.high} is the last branch "
                    f"for {arch} ({bounds.source.split(' (')[0]})"
                )
        return None

    os_release_keys: Mapping[str, ReleaseKey] = dataclasses.field(default_factory=dict)
    not_yet_supported: tuple[PendingRelease, ...] = ()

    def pending(self, os_id: str, version_id: str) -> PendingRelease | None:
        """The not-yet-supported entry of this OS release, if the catalog has one."""
        rule = self.os_release_keys.get(os_id, "version_id")
        release = version_id.split(".")[0] if rule == "major" else version_id
        return next(
            (p for p in self.not_yet_supported if p.os_id == os_id and p.os_version == release),
            None,
        )

    def __post_init__(self) -> None:
        index: dict[int, GpuModel] = {}
        for gpu in self.gpus:
            for device_id in gpu.device_ids:
                index[device_id] = gpu
        object.__setattr__(self, "_by_id", index)

    def gpu(self, device_id: int) -> GpuModel | None:
        by_id = cast(dict[int, GpuModel], self.__dict__["_by_id"])
        return by_id.get(device_id)

    def nvswitch(self, device_id: int) -> tuple[NvSwitchGeneration, bool] | None:
        """(generation, is_endpoint) for an NVSwitch PCI function, else None."""
        for gen in self.nvswitches:
            if device_id in gen.endpoint_ids:
                return gen, True
            if device_id in gen.other_ids:
                return gen, False
        return None

    def branch(self, number: int) -> DriverBranch | None:
        return next((b for b in self.branches if b.branch == number), None)

    def ltsb_branches(self) -> tuple[DriverBranch, ...]:
        """LTSB branches, newest first."""
        return tuple(
            sorted(
                (b for b in self.branches if b.kind == "LTSB"), reverse=True, key=lambda b: b.branch
            )
        )

    def driver_source(self, os_id: str, os_version: str) -> DriverSource | None:
        return next(
            (s for s in self.driver_sources if s.os_id == os_id and s.os_version == os_version),
            None,
        )

    def release_of(self, os_id: str, version_id: str, codename: str = "") -> str | None:
        """The release an OS's repositories are keyed by, from its os-release fields: "9" for
        RHEL 9.6, "22.04" for Ubuntu 22.04, "12" for Debian bookworm (12.x). None: the catalog
        has no rule for this OS."""
        rule = self.os_release_keys.get(os_id)
        if rule is None:
            return None
        if rule == "codename" and codename:
            entry = next(
                (s for s in self.driver_sources if s.os_id == os_id and s.codename == codename),
                None,
            )
            return entry.os_version if entry else None
        if rule == "version_id" or not version_id:
            return version_id or None
        return version_id.split(".")[0]

    def source_for(self, os_id: str, version_id: str, codename: str = "") -> DriverSource | None:
        """The catalog entry of the OS release a host runs (None: not supported)."""
        release = self.release_of(os_id, version_id, codename)
        return self.driver_source(os_id, release) if release is not None else None

    def supported_oses(self) -> tuple[str, ...]:
        return tuple(s.label for s in self.driver_sources)


# --- loading and the schema check -------------------------------------------------------


class _Entry:
    """Typed field access on one mapping, with errors that say where in the file."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, Mapping):
            raise CatalogError(
                f"catalog: {where} must be a mapping, got {type(data).__name__}",
                fix="compare the entry with the others in orchestrator/catalog.yaml",
            )
        self.data: Mapping[str, object] = data
        self.where = where

    def _bad(self, key: str, expected: str) -> CatalogError:
        return CatalogError(
            f"catalog: {self.where}: field {key!r} must be {expected}, got {self.data.get(key)!r}",
            fix="correct the field in orchestrator/catalog.yaml",
        )

    def text(self, key: str, *, optional: bool = False) -> str | None:
        value = self.data.get(key)
        if value is None and optional:
            return None
        if isinstance(value, str) and value:
            return value
        raise self._bad(key, "a non-empty string")

    def req_str(self, key: str) -> str:
        value = self.text(key)
        assert value is not None
        return value

    def integer(self, key: str, *, optional: bool = False) -> int | None:
        value = self.data.get(key)
        if value is None and optional:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise self._bad(key, "an integer")

    def req_int(self, key: str) -> int:
        value = self.integer(key)
        assert value is not None
        return value

    def number(self, key: str, *, optional: bool = False) -> float | None:
        value = self.data.get(key)
        if value is None and optional:
            return None
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise self._bad(key, "a number")

    def flag(self, key: str) -> bool:
        value = self.data.get(key)
        if isinstance(value, bool):
            return value
        raise self._bad(key, "true or false")

    def items(self, key: str, *, optional: bool = False) -> Sequence[object]:
        value = self.data.get(key)
        if value is None and optional:
            return ()
        if isinstance(value, list):
            return value
        raise self._bad(key, "a list")

    def version(self, key: str, *, optional: bool = False) -> str | None:
        value = self.data.get(key)
        if value is None and optional:
            return None
        if isinstance(value, str) and _VERSION_RE.match(value):
            return value
        raise self._bad(key, 'a quoted driver version such as "550.90.07"')

    def choice(self, key: str, choices: Sequence[str], default: str | None = None) -> str:
        value = self.data.get(key, default)
        if isinstance(value, str) and value in choices:
            return value
        raise self._bad(key, "one of " + ", ".join(choices))


def _hex_ids(entry: _Entry, key: str, *, optional: bool = False) -> tuple[int, ...]:
    """["0x2330", "0x1af0-0x1aff"] -> ids; ranges are inclusive."""
    ids: list[int] = []
    for item in entry.items(key, optional=optional):
        text = item if isinstance(item, str) else ""
        match = re.fullmatch(r"0x([0-9a-fA-F]{4})(?:-0x([0-9a-fA-F]{4}))?", text)
        if not match:
            raise entry._bad(key, 'a list of "0xNNNN" ids or "0xNNNN-0xNNNN" ranges')
        low = int(match.group(1), 16)
        high = int(match.group(2), 16) if match.group(2) else low
        if high < low:
            raise entry._bad(key, "ranges written low-high")
        ids.extend(range(low, high + 1))
    return tuple(ids)


def _mig_profile(data: object, where: str) -> MigProfile:
    e = _Entry(data, where)
    placements = e.items("placements", optional=True)
    if not all(isinstance(p, int) for p in placements):
        raise e._bad("placements", "a list of integers")
    return MigProfile(
        name=e.req_str("name"),
        max_count=e.req_int("max_count"),
        compute_slices=e.req_int("compute_slices"),
        profile_id=e.integer("id", optional=True),
        memory_slices=e.integer("memory_slices", optional=True),
        placements=tuple(cast(list[int], placements)) if placements else None,
    )


def _validation_figure(data: object, where: str) -> ValidationFigure:
    e = _Entry(data, where)
    figure = ValidationFigure(
        check=e.req_str("check"),
        unit=e.req_str("unit"),
        source=e.req_str("source"),
        floor=e.number("floor", optional=True),
        healthy=e.number("healthy", optional=True),
        gpus=e.integer("gpus", optional=True),
        message_bytes=e.integer("message_bytes", optional=True),
        origin=e.choice("origin", FIGURE_ORIGINS),
        date=e.req_str("date"),
    )
    if figure.floor is None and figure.healthy is None:
        raise e._bad("floor", "set (or `healthy` set)")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", figure.date):
        raise e._bad("date", 'a quoted "YYYY-MM-DD"')
    return figure


def _gpu(data: object, index: int, archs: Mapping[str, OpenModules]) -> GpuModel:
    e = _Entry(data, f"gpus[{index}]")
    sku = e.req_str("sku")
    e.where = f"gpus[{index}] ({sku})"
    arch = e.choice("arch", tuple(archs))
    open_modules = cast(OpenModules, e.choice("open_modules", _OPEN_MODULES, default=archs[arch]))
    cc = e.req_str("compute_capability")
    if not re.fullmatch(r"\d+\.\d+", cc):
        raise e._bad("compute_capability", 'a quoted "major.minor" such as "9.0"')
    device_ids = _hex_ids(e, "device_ids")
    if not device_ids:
        raise e._bad("device_ids", "a non-empty list")
    mig = e.flag("mig")
    profiles = tuple(
        _mig_profile(p, f"{e.where} mig_profiles[{i}]")
        for i, p in enumerate(e.items("mig_profiles", optional=True))
    )
    if profiles and not mig:
        raise e._bad("mig", "true when mig_profiles are listed")
    return GpuModel(
        sku=sku,
        model=e.req_str("model"),
        device_ids=device_ids,
        arch=arch,
        compute_capability=cc,
        memory_gb=e.integer("memory_gb", optional=True),
        fp8=e.flag("fp8"),
        mig=mig,
        min_driver=e.version("min_driver", optional=True),
        open_modules=open_modules,
        mig_profiles=profiles,
        validation=tuple(
            _validation_figure(v, f"{e.where} validation[{i}]")
            for i, v in enumerate(e.items("validation", optional=True))
        ),
        subsystem_ids=_hex_ids(e, "subsystem_ids", optional=True),
        memory_mib=e.integer("memory_mib", optional=True),
        memory_type=e.text("memory_type", optional=True),
        fabric=_fabric(e.data.get("fabric"), f"{e.where} fabric"),
        cpu=e.choice("cpu", ("aarch64",)) if "cpu" in e.data else None,
    )


def _fabric(data: object, where: str) -> Fabric | None:
    if data is None:
        return None
    e = _Entry(data, where)
    kind = cast(FabricKind, e.choice("kind", FABRIC_KINDS))
    board = e.integer("board_gpus", optional=True)
    if kind == "nvlink5" and not board:
        raise e._bad("board_gpus", "the number of GPUs on one NVLink5 board (8)")
    return Fabric(kind=kind, source=e.req_str("source"), board_gpus=board)


def _nvswitch(data: object, index: int) -> NvSwitchGeneration:
    e = _Entry(data, f"nvswitches[{index}]")
    return NvSwitchGeneration(
        generation=e.req_int("generation"),
        name=e.req_str("name"),
        endpoint_ids=frozenset(_hex_ids(e, "endpoint_ids")),
        other_ids=frozenset(_hex_ids(e, "other_ids", optional=True)),
        per_board=e.req_int("per_board"),
    )


def _branch(data: object, index: int) -> DriverBranch:
    e = _Entry(data, f"driver_branches[{index}]")
    eol_text = e.text("eol", optional=True)
    eol: dt.date | None = None
    if eol_text is not None:
        match = re.fullmatch(r"(\d{4})-(\d{2})", eol_text)
        if not match:
            raise e._bad("eol", 'a quoted "YYYY-MM" or null')
        eol = dt.date(int(match.group(1)), int(match.group(2)), 1)
    return DriverBranch(
        branch=e.req_int("branch"),
        kind=cast(BranchKind, e.choice("kind", _BRANCH_KINDS)),
        eol=eol,
    )


def _driver_source(data: object, index: int) -> DriverSource:
    e = _Entry(data, f"driver_sources[{index}]")
    raw = e.data.get("distribution")
    drivers: list[DistributionDriver] = []
    if raw != "any":
        for i, item in enumerate(e.items("distribution")):
            d = _Entry(item, f"{e.where} distribution[{i}]")
            version = d.version("version")
            assert version is not None
            flavours = d.items("flavours")
            if not flavours or not all(f in ("open", "proprietary") for f in flavours):
                raise d._bad("flavours", "a list of open / proprietary")
            if branch_of(version) != d.req_int("branch"):
                raise d._bad("version", "a release of the entry's branch")
            drivers.append(
                DistributionDriver(d.req_int("branch"), version, tuple(cast(list[str], flavours)))
            )
    preferred = e.text("preferred_flavour", optional=True)
    if preferred not in (None, "open", "proprietary"):
        raise e._bad("preferred_flavour", "open or proprietary")
    return DriverSource(
        os_id=e.req_str("os"),
        os_version=e.req_str("version"),
        cuda_repo=e.text("cuda_repo", optional=True),
        any_distribution_branch=raw == "any",
        distribution=tuple(drivers),
        preferred_flavour=preferred,
        preferred_why=e.text("preferred_why", optional=True) or "",
        codename=e.text("codename", optional=True),
        name=e.text("name", optional=True) or "",
    )


def parse_catalog(data: object) -> Catalog:
    """Check the shape of the loaded YAML and build the typed catalog."""
    top = _Entry(data, "top level")
    if top.data.get("schema") != SCHEMA:
        raise CatalogError(
            f"catalog: schema {top.data.get('schema')!r} is not the supported {SCHEMA}",
            fix="use the catalog.yaml that ships with this version of gpuprov",
        )
    arch_entry = _Entry(top.data.get("architectures"), "architectures")
    archs: dict[str, OpenModules] = {}
    for name in arch_entry.data:
        a = _Entry(arch_entry.data[name], f"architectures.{name}")
        archs[name] = cast(OpenModules, a.choice("open_modules", _OPEN_MODULES))
    gpus = tuple(_gpu(g, i, archs) for i, g in enumerate(top.items("gpus")))
    seen: dict[int, str] = {}
    for gpu in gpus:
        for device_id in gpu.device_ids:
            if device_id in seen:
                raise CatalogError(
                    f"catalog: device id {device_id:#06x} is listed by both {seen[device_id]} "
                    f"and {gpu.sku}",
                    fix="keep each PCI device id in one gpus entry",
                )
            seen[device_id] = gpu.sku
    cuda = _Entry(top.data.get("cuda_min_driver"), "cuda_min_driver")
    cuda_min = {str(key): cast(str, cuda.version(key)) for key in cuda.data}
    compat = _Entry(top.data.get("cuda_compat_min_driver"), "cuda_compat_min_driver")
    cuda_compat = {str(key): cast(str, compat.version(key)) for key in compat.data}
    fraction = top.number("validation_floor_fraction")
    assert fraction is not None
    if not 0 < fraction <= 1:
        raise top._bad("validation_floor_fraction", "a fraction in (0, 1]")
    branches = tuple(
        sorted(
            (_branch(b, i) for i, b in enumerate(top.items("driver_branches"))),
            key=lambda b: b.branch,
        )
    )
    known: set[int] = set()
    for i, item in enumerate(top.items("known_driver_branches", optional=True)):
        k = _Entry(item, f"known_driver_branches[{i}]")
        k.req_str("source")
        numbers = k.items("branches")
        if not all(isinstance(b, int) and not isinstance(b, bool) for b in numbers):
            raise k._bad("branches", "a list of branch numbers")
        known |= set(cast(list[int], numbers))
    arch_branches: dict[str, ArchBranches] = {}
    raw_arch_branches = top.data.get("architecture_branches")
    if raw_arch_branches is not None:
        ab = _Entry(raw_arch_branches, "architecture_branches")
        for name in ab.data:
            a = _Entry(ab.data[name], f"architecture_branches.{name}")
            low, high = a.integer("min", optional=True), a.integer("max", optional=True)
            if low is not None and high is not None and low > high:
                raise a._bad("max", "a branch at least `min`")
            arch_branches[str(name)] = ArchBranches(low, high, a.req_str("source"))
    unknown = sorted({b.branch for b in branches} - known) if known else []
    if unknown:
        raise CatalogError(
            f"catalog: driver_branches {unknown} are not in known_driver_branches",
            fix="add each branch to known_driver_branches with its source",
        )
    keys = _Entry(top.data.get("os_release_keys"), "os_release_keys")
    release_keys = {
        str(os_id): cast(ReleaseKey, keys.choice(os_id, _RELEASE_KEYS)) for os_id in keys.data
    }
    sources = tuple(_driver_source(s, i) for i, s in enumerate(top.items("driver_sources")))
    for source in sources:
        if source.os_id not in release_keys:
            raise CatalogError(
                f"catalog: driver_sources has {source.label} but os_release_keys has no "
                f"rule for {source.os_id!r}",
                fix="add the OS to os_release_keys in orchestrator/catalog.yaml",
            )
    return Catalog(
        gpus=gpus,
        architectures=archs,
        nvswitches=tuple(_nvswitch(s, i) for i, s in enumerate(top.items("nvswitches"))),
        branches=branches,
        cuda_min_driver=cuda_min,
        cuda_compat_min_driver=cuda_compat,
        driver_sources=sources,
        validation_floor_fraction=fraction,
        known_branches=frozenset(known),
        arch_branches=arch_branches,
        os_release_keys=release_keys,
        not_yet_supported=tuple(
            _pending(p, i) for i, p in enumerate(top.items("not_yet_supported", optional=True))
        ),
    )


def _pending(data: object, index: int) -> PendingRelease:
    e = _Entry(data, f"not_yet_supported[{index}]")
    return PendingRelease(
        os_id=e.req_str("os"),
        os_version=e.req_str("version"),
        name=e.req_str("name"),
        reason=e.req_str("reason"),
    )


def load_catalog(path: Path | str | None = None) -> Catalog:
    """Load and check a catalog file (the packaged one by default)."""
    file = Path(path) if path is not None else DEFAULT_PATH
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(
            f"catalog: cannot read {file}: {exc.strerror}",
            fix="reinstall gpuprov or pass the path of a readable catalog file",
        ) from exc
    try:
        data = yaml.load(text, Loader=SAFE_LOADER)  # a safe loader: plain data only
    except yaml.YAMLError as exc:
        raise CatalogError(
            f"catalog: {file} is not valid YAML: {exc}", fix="correct the YAML syntax"
        ) from exc
    return parse_catalog(data)


@cache
def default_catalog() -> Catalog:
    """The packaged catalog, loaded once per process."""
    return load_catalog()
