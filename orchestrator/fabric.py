"""The multi-node fabric's data (``fabric.yaml`` beside this module) and what a host's NICs
are: EFA interfaces by their PCI ids, InfiniBand HCAs by their link layer (issue 30) and, before
their RDMA devices exist, by their PCI vendor and class (issue 47).

Pure functions over HostFacts; the planner (planners/fabric.py) and fabric health
(validate/fabric.py) read these, never raw text.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from .catalog import SAFE_LOADER
from .errors import CatalogError
from .facts import HostFacts, PciDevice, RdmaDevice

DATA = Path(__file__).with_name("fabric.yaml")


@dataclass(frozen=True)
class InstanceType:
    name: str
    efa: int  # EFA interfaces (reference per-instance count)
    bandwidth_gbps: int | None  # AWS's published total: a lead
    certainty: str  # of the count


@dataclass(frozen=True)
class PluginDmabuf:
    """From `since` on, aws-ofi-nccl's DMA-BUF default, and the EFA device ids it spares."""

    since: tuple[int, ...]
    dmabuf: bool
    except_ids: frozenset[int]
    why: str


@dataclass(frozen=True)
class FabricCatalog:
    efa_vendor: int
    efa_device_ids: frozenset[int]
    efa_prefix: str
    plugin_dir: str
    plugin_libraries: tuple[str, ...]
    instance_types: Mapping[str, InstanceType]
    memlock_min_kib: int
    ib_vendor: int
    ib_pci_classes: frozenset[int]
    ib_link_layer: str
    ib_state: str
    ib_phys_state: str
    peermem_paths: tuple[str, ...]
    dmabuf_min_kernel: tuple[int, int]
    dmabuf_flavour: str
    bundled_plugin: Mapping[str, str]  # EFA installer -> the aws-ofi-nccl it bundles
    plugin_dmabuf: tuple[PluginDmabuf, ...]  # ordered by `since`
    gdr_default_since: str  # the EFA installer from which -g no longer chooses GPUDirect


def load_fabric(path: Path = DATA) -> FabricCatalog:
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
        efa, ib, gd = doc["efa"], doc["infiniband"], doc["gpudirect"]
        major, minor = str(gd["dmabuf_min_kernel"]).split(".")
        return FabricCatalog(
            efa_vendor=int(efa["pci_vendor"]),
            efa_device_ids=frozenset(int(d) for d in efa["pci_devices"]),
            efa_prefix=str(efa["rdma_prefix"]),
            plugin_dir=str(efa["plugin_dir"]),
            plugin_libraries=tuple(str(x) for x in efa["plugin_libraries"]),
            instance_types={
                str(name): InstanceType(
                    name=str(name),
                    efa=int(body["efa"]),
                    bandwidth_gbps=(
                        int(body["bandwidth_gbps"]) if "bandwidth_gbps" in body else None
                    ),
                    certainty=str(body["certainty"]),
                )
                for name, body in efa["instance_types"].items()
            },
            memlock_min_kib=int(efa["memlock_min_kib"]),
            ib_vendor=int(ib["pci_vendor"]),
            ib_pci_classes=frozenset(int(c) for c in ib["pci_classes"]),
            ib_link_layer=str(ib["link_layer"]),
            ib_state=str(ib["state"]),
            ib_phys_state=str(ib["phys_state"]),
            peermem_paths=tuple(str(p) for p in gd["peermem_paths"]),
            dmabuf_min_kernel=(int(major), int(minor)),
            dmabuf_flavour=str(gd["dmabuf_flavour"]),
            bundled_plugin={str(k): str(v) for k, v in efa["bundled_plugin"].items()},
            plugin_dmabuf=tuple(
                sorted(
                    (
                        PluginDmabuf(
                            since=version_key(str(rule["since"])),
                            dmabuf=bool(rule["dmabuf"]),
                            except_ids=frozenset(int(i) for i in rule.get("except", ())),
                            why=str(rule.get("why", "")),
                        )
                        for rule in efa["plugin_dmabuf"]
                    ),
                    key=lambda rule: rule.since,
                )
            ),
            gdr_default_since=str(efa["gdr_default_since"]),
        )
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as e:
        raise CatalogError(
            f"{path}: not a fabric catalog ({type(e).__name__}: {e}); fix: restore it from git"
        ) from e


@functools.cache
def default_fabric() -> FabricCatalog:
    return load_fabric()


def efa_functions(facts: HostFacts, cat: FabricCatalog | None = None) -> tuple[PciDevice, ...]:
    """EFA PCI functions on the bus (vendor 0x1d0f, an EFA device id): present whatever
    driver is bound."""
    cat = cat or default_fabric()
    return tuple(
        d for d in facts.pci if d.vendor_id == cat.efa_vendor and d.device_id in cat.efa_device_ids
    )


def efa_devices(facts: HostFacts, cat: FabricCatalog | None = None) -> tuple[RdmaDevice, ...]:
    """RDMA devices of the EFA driver (efa_<n>), or on an EFA PCI function."""
    cat = cat or default_fabric()
    if facts.fabric is None:
        return ()
    functions = {d.address for d in efa_functions(facts, cat)}
    return tuple(
        d
        for d in facts.fabric.devices
        if d.name.startswith(cat.efa_prefix) or (d.pci and d.pci in functions)
    )


def ib_hcas(facts: HostFacts, cat: FabricCatalog | None = None) -> tuple[RdmaDevice, ...]:
    """InfiniBand HCAs: RDMA devices with a port on the InfiniBand link layer, other than
    NVLink5 switch management ports (SW_MNG: the NVLink fabric, not the network)."""
    cat = cat or default_fabric()
    if facts.fabric is None:
        return ()
    management = set(facts.nvlink5_ports)
    return tuple(
        d
        for d in facts.fabric.devices
        if d.name not in management and any(p.link_layer == cat.ib_link_layer for p in d.ports)
    )


def ib_functions(facts: HostFacts, cat: FabricCatalog | None = None) -> tuple[PciDevice, ...]:
    """InfiniBand HCAs on the PCI bus (Mellanox, class InfiniBand controller), whatever driver
    is bound: present before mlx5_ib registers their RDMA devices. NVLink5 switch management
    ports (SW_MNG: the NVLink fabric, not the network) are left out."""
    cat = cat or default_fabric()
    management = {f.address for f in facts.pci_vpd or () if f.sw_mng}
    ports = set(facts.nvlink5_ports)
    if facts.fabric is not None:
        management |= {d.pci for d in facts.fabric.devices if d.name in ports and d.pci}
    return tuple(
        d
        for d in facts.pci
        if d.vendor_id == cat.ib_vendor
        and d.class_code >> 8 in cat.ib_pci_classes
        and d.address not in management
    )


def kernel_version(release: str) -> tuple[int, int] | None:
    """ "6.1.0-57-amd64" -> (6, 1)."""
    parts = release.split("-")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def version_key(version: str) -> tuple[int, ...]:
    """ "1.14.2" -> (1, 14, 2); a "v" prefix and a "-aws" suffix are dropped."""
    return tuple(int(p) for p in version.strip().lstrip("v").split("-")[0].split("."))


@dataclass(frozen=True)
class EfaGpudirect:
    """How NCCL's OFI plugin gets GPU memory to the EFA NICs: `path` is "dmabuf", "peermem"
    (registered by address, pinned by the efa kernel module) or "unknown"; `plugin` the
    aws-ofi-nccl version (None: not recorded); `why` says so in a clause."""

    path: str
    plugin: str | None
    why: str


def efa_gpudirect(
    installer: str,
    device_ids: frozenset[int],
    flavour: str | None,
    kernel: tuple[int, int] | None,
    cat: FabricCatalog | None = None,
) -> EfaGpudirect:
    """What really runs for EFA installer `installer` on a host with EFA functions of
    `device_ids`, the driver's module `flavour` and `kernel` (issue 47 item 8): the bundled
    aws-ofi-nccl's DMA-BUF rule for these devices, then its floors (Linux >= 5.12, the open
    modules); else GPU memory by address through the efa module's P2P path."""
    cat = cat or default_fabric()
    plugin = cat.bundled_plugin.get(installer)
    if plugin is None:
        known = ", ".join(f"{i} -> {p}" for i, p in cat.bundled_plugin.items())
        return EfaGpudirect(
            "unknown",
            None,
            f"the aws-ofi-nccl that EFA installer {installer} bundles is not recorded "
            f"(recorded: {known}), so whether it uses DMA-BUF is unknown",
        )
    ids = ", ".join(f"{i:#06x}" for i in sorted(device_ids)) or "no EFA function"
    p2p = (
        "efa_nv_peermem, else nvidia.ko's nvidia_p2p_*"
        if flavour == cat.dmabuf_flavour
        else "nvidia.ko's nvidia_p2p_* (efa_nv_peermem loads with the open modules only)"
    )
    by_address = f"GPU memory registered by address and pinned by the efa module through {p2p}"
    plugin_is = f"aws-ofi-nccl {plugin} (EFA installer {installer})"
    key = version_key(plugin)
    rules = [r for r in cat.plugin_dmabuf if r.since <= key]
    rule = rules[-1] if rules else None
    later = [r for r in cat.plugin_dmabuf if r.since > key and r.dmabuf and not r.except_ids]
    again = f"; DMA-BUF from aws-ofi-nccl {'.'.join(map(str, later[0].since))}" if later else ""
    if rule is None or not rule.dmabuf:
        why = rule.why if rule else "has no DMA-BUF rule"
        return EfaGpudirect("peermem", plugin, f"{plugin_is} {why}{again}: {by_address}")
    spared = device_ids & rule.except_ids
    if spared:
        return EfaGpudirect(
            "peermem", plugin, f"{plugin_is} {rule.why}, here {ids}{again}: {by_address}"
        )
    floor = ".".join(map(str, cat.dmabuf_min_kernel))
    floors = f"the plugin's floors: Linux >= {floor} and the open kernel modules"
    if flavour != cat.dmabuf_flavour or kernel is None or kernel < cat.dmabuf_min_kernel:
        lacking = (
            f"the {flavour} kernel modules"
            if flavour and flavour != cat.dmabuf_flavour
            else "no known driver flavour"
            if not flavour
            else f"Linux {'.'.join(map(str, kernel)) if kernel else 'unknown'}"
        )
        return EfaGpudirect(
            "peermem",
            plugin,
            f"{plugin_is} uses DMA-BUF on {ids}, but not with {lacking} ({floors}): {by_address}",
        )
    return EfaGpudirect(
        "dmabuf",
        plugin,
        f"{plugin_is} on {ids}, the open kernel modules on Linux {kernel[0]}.{kernel[1]} "
        f"({floors})",
    )
