"""Typed view of models.yaml and a profile: what hardware a simulated host has."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpusim import yamlsubset

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


class ProfileError(ValueError):
    """A profile or models.yaml is missing a field or names an unknown model."""


@dataclass(frozen=True)
class MigProfile:
    name: str  # "1g.18gb"
    id: int  # GPU instance profile id (19)
    mem_slices: int
    compute_slices: int
    placements: tuple[int, ...]  # valid start memory slices
    max: int
    memory_gib: str  # as `mig -lgip` prints it ("16.00")
    sm: int
    ce: int
    dec: int
    enc: int
    jpeg: int
    ofa: int


@dataclass(frozen=True)
class GpuModel:
    key: str
    name: str
    device_id: int
    subsystem_device_id: int
    architecture: str
    compute_cap: str
    memory_mib: int
    reserved_mib: int
    bar1_mib: int
    power_limit_w: int
    power_min_w: int
    idle_power_w: int
    sm_clock_max_mhz: int
    sm_clock_idle_mhz: int
    memory_clock_mhz: int
    video_clock_mhz: int
    video_clock_max_mhz: int
    vbios: str
    board_part_number: str
    gpu_part_number: str
    inforom_image: str
    temperature_c: int
    pcie_gen: int
    pcie_width: int
    nvlinks: int
    nvlink_speed_gbs: float
    ecc: bool
    mig_reset_required: bool
    mig_profiles: tuple[MigProfile, ...]

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    def mig_profile(self, token: str) -> MigProfile | None:
        """Find a GPU instance profile by id ("19") or name ("1g.18gb", "MIG 1g.18gb")."""
        token = token.strip().removeprefix("MIG ").strip()
        for profile in self.mig_profiles:
            if token == profile.name or (token.isdigit() and int(token) == profile.id):
                return profile
        return None


@dataclass(frozen=True)
class SwitchModel:
    key: str
    device_id: int
    subsystem_device_id: int
    pci_class: int


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    gpu: GpuModel
    gpu_bus_ids: tuple[str, ...]
    gpu_numa_nodes: tuple[int, ...]
    numa_cpus: tuple[str, ...]
    numa_affinity: tuple[str, ...]  # "NUMA Affinity" column of topo -m, per GPU
    switch: SwitchModel | None
    switch_bus_ids: tuple[str, ...]
    fabric_managed_by_hypervisor: bool
    kernel_release: str | None
    nvlink5_ports: tuple[str, ...] = ()  # NVLink5 management ports (InfiniBand, SW_MNG)
    efa_devices: int = 0  # simulated AWS EFA interfaces (gpusim/efa.py)
    efa_device_id: int = 0xEFA1  # their PCI device id (vendor 0x1d0f)
    efa_rate_gbps: int = 100  # each port's rate
    ib_hcas: int = 0  # simulated InfiniBand HCAs (gpusim/ib.py)
    ib_rate_gbps: int = 400
    ib_bare: bool = False  # the HCAs' RDMA devices only while mlx5_ib is loaded (gpusim/ib.py)

    @property
    def has_nvswitch(self) -> bool:
        return self.switch is not None and bool(self.switch_bus_ids)


def _get(data: Mapping[str, object], key: str, where: str) -> object:
    if key not in data:
        raise ProfileError(f"{where}: missing field {key!r}")
    return data[key]


def _int(data: Mapping[str, object], key: str, where: str) -> int:
    value = _get(data, key, where)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProfileError(f"{where}: {key} must be an integer, got {value!r}")
    return value


def _str(data: Mapping[str, object], key: str, where: str) -> str:
    value = _get(data, key, where)
    if isinstance(value, bool) or value is None:
        raise ProfileError(f"{where}: {key} must be a string, got {value!r}")
    return str(value)


def _mapping(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise ProfileError(f"{where}: expected a mapping")
    return value


def _list(value: object, where: str) -> list[object]:
    if not isinstance(value, list):
        raise ProfileError(f"{where}: expected a list")
    return value


def _mig(data: Mapping[str, object], where: str) -> MigProfile:
    return MigProfile(
        name=_str(data, "name", where),
        id=_int(data, "id", where),
        mem_slices=_int(data, "mem_slices", where),
        compute_slices=_int(data, "compute_slices", where),
        placements=tuple(int(str(p)) for p in _list(_get(data, "placements", where), where)),
        max=_int(data, "max", where),
        memory_gib=_str(data, "memory_gib", where),
        sm=_int(data, "sm", where),
        ce=_int(data, "ce", where),
        dec=_int(data, "dec", where),
        enc=_int(data, "enc", where),
        jpeg=_int(data, "jpeg", where),
        ofa=_int(data, "ofa", where),
    )


def gpu_model(key: str, data: Mapping[str, object]) -> GpuModel:
    w = f"models.yaml gpus.{key}"
    migs = _list(_get(data, "mig_profiles", w), w)
    return GpuModel(
        key=key,
        name=_str(data, "name", w),
        device_id=_int(data, "device_id", w),
        subsystem_device_id=_int(data, "subsystem_device_id", w),
        architecture=_str(data, "architecture", w),
        compute_cap=_str(data, "compute_cap", w),
        memory_mib=_int(data, "memory_mib", w),
        reserved_mib=_int(data, "reserved_mib", w),
        bar1_mib=_int(data, "bar1_mib", w),
        power_limit_w=_int(data, "power_limit_w", w),
        power_min_w=_int(data, "power_min_w", w),
        idle_power_w=_int(data, "idle_power_w", w),
        sm_clock_max_mhz=_int(data, "sm_clock_max_mhz", w),
        sm_clock_idle_mhz=_int(data, "sm_clock_idle_mhz", w),
        memory_clock_mhz=_int(data, "memory_clock_mhz", w),
        video_clock_mhz=_int(data, "video_clock_mhz", w),
        video_clock_max_mhz=_int(data, "video_clock_max_mhz", w),
        vbios=_str(data, "vbios", w),
        board_part_number=_str(data, "board_part_number", w),
        gpu_part_number=_str(data, "gpu_part_number", w),
        inforom_image=_str(data, "inforom_image", w),
        temperature_c=_int(data, "temperature_c", w),
        pcie_gen=_int(data, "pcie_gen", w),
        pcie_width=_int(data, "pcie_width", w),
        nvlinks=_int(data, "nvlinks", w),
        nvlink_speed_gbs=float(str(_get(data, "nvlink_speed_gbs", w))),
        ecc=bool(_get(data, "ecc", w)),
        mig_reset_required=bool(_get(data, "mig_reset_required", w)),
        mig_profiles=tuple(_mig(_mapping(m, w), w) for m in migs),
    )


def load_models(path: Path | None = None) -> tuple[dict[str, GpuModel], dict[str, SwitchModel]]:
    return _load_models(path or DATA_DIR / "models.yaml")


@functools.lru_cache(maxsize=4)
def _load_models(path: Path) -> tuple[dict[str, GpuModel], dict[str, SwitchModel]]:
    data = _mapping(yamlsubset.load_path(path), "models")
    gpus = {
        key: gpu_model(key, _mapping(value, key))
        for key, value in _mapping(data["gpus"], "gpus").items()
    }
    switches: dict[str, SwitchModel] = {}
    for key, value in _mapping(data["nvswitches"], "nvswitches").items():
        entry = _mapping(value, key)
        where = f"models.yaml nvswitches.{key}"
        switches[key] = SwitchModel(
            key,
            _int(entry, "device_id", where),
            _int(entry, "subsystem_device_id", where),
            _int(entry, "class", where),
        )
    return gpus, switches


def load_profile(path: Path) -> Profile:
    where = str(path)
    try:
        data = _mapping(yamlsubset.load_path(path), where)
    except (OSError, yamlsubset.YamlSubsetError) as exc:
        raise ProfileError(f"{where}: {exc}") from exc
    gpus, switches = load_models()
    model_key = _str(data, "gpu_model", where)
    if model_key not in gpus:
        raise ProfileError(f"{where}: unknown gpu_model {model_key!r}; known: {sorted(gpus)}")
    bus_ids = tuple(str(b) for b in _list(_get(data, "gpu_bus_ids", where), where))
    numa = tuple(int(str(n)) for n in _list(data.get("gpu_numa_nodes", [0] * len(bus_ids)), where))
    if len(numa) != len(bus_ids):
        raise ProfileError(f"{where}: gpu_numa_nodes needs one entry per gpu_bus_ids entry")
    switch_key = data.get("nvswitch_model")
    switch = None
    if switch_key is not None:
        if str(switch_key) not in switches:
            raise ProfileError(f"{where}: unknown nvswitch_model {switch_key!r}")
        switch = switches[str(switch_key)]
    numa_cpus = tuple(str(c) for c in _list(data.get("numa_cpus", ["0"]), where))
    affinity = data.get("numa_affinity")
    kernel = data.get("kernel_release")
    return Profile(
        name=_str(data, "name", where),
        description=str(data.get("description", "")),
        gpu=gpus[model_key],
        gpu_bus_ids=bus_ids,
        gpu_numa_nodes=numa,
        numa_cpus=numa_cpus,
        numa_affinity=(
            tuple(str(a) for a in _list(affinity, where))
            if affinity is not None
            else tuple(str(n) if n >= 0 else "N/A" for n in numa)
        ),
        switch=switch,
        switch_bus_ids=tuple(str(b) for b in _list(data.get("nvswitch_bus_ids", []), where)),
        fabric_managed_by_hypervisor=bool(data.get("fabric_managed_by_hypervisor", False)),
        kernel_release=str(kernel) if kernel is not None else None,
        nvlink5_ports=tuple(str(p) for p in _list(data.get("nvlink5_ports", []), where)),
        efa_devices=int(str(data.get("efa_devices", 0))),
        efa_device_id=int(str(data.get("efa_device_id", "0xefa1")), 16),
        efa_rate_gbps=int(str(data.get("efa_rate_gbps", 100))),
        ib_hcas=int(str(data.get("ib_hcas", 0))),
        ib_rate_gbps=int(str(data.get("ib_rate_gbps", 400))),
        ib_bare=bool(data.get("ib_bare", False)),
    )
