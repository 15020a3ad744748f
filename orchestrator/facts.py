"""Typed facts about one host, as detection found them.

Pure data: the parsers in ``orchestrator.parsers`` build these from raw command outputs
(live over SSH, or from a directory saved by ``provision detect --save``). The planner,
the checks and the report read only these types, never raw text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the parsers build these facts: imported where used, not at load
    from .catalog import Catalog
    from .parsers.nvlink import NvLinkErrors
    from .parsers.smi_q import SmiQ


@dataclass(frozen=True)
class OsInfo:
    id: str  # "ubuntu", "debian", "rocky", "rhel"
    version_id: str  # "24.04", "12"
    codename: str  # "noble", "bookworm"; "" when the OS has none
    pretty_name: str
    id_like: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        """ "debian" or "redhat" (Ansible's os_family naming), else the id."""
        ids = (self.id, *self.id_like)
        if any(i in ("debian", "ubuntu") for i in ids):
            return "debian"
        if any(i in ("rhel", "fedora", "centos", "rocky", "almalinux") for i in ids):
            return "redhat"
        return self.id


@dataclass(frozen=True)
class PciLink:
    current_speed_gts: float | None  # 32.0 for Gen5; None where sysfs shows none (VM bridges)
    current_width: int | None
    max_speed_gts: float | None
    max_width: int | None

    @property
    def degraded(self) -> bool:
        if None in (self.current_speed_gts, self.max_speed_gts, self.current_width, self.max_width):
            return False
        return (self.current_speed_gts or 0) < (self.max_speed_gts or 0) or (
            self.current_width or 0
        ) < (self.max_width or 0)


@dataclass(frozen=True)
class PciDevice:
    address: str  # "0000:00:06.0"
    vendor_id: int  # 0x10de
    device_id: int  # 0x2335
    class_code: int  # 0x030200
    subsystem_vendor_id: int
    subsystem_device_id: int
    link: PciLink
    numa_node: int
    driver: str  # bound kernel driver, "" when none


@dataclass(frozen=True)
class LoadedDriver:
    version: str  # "580.159.04"
    flavour: str  # "open" | "proprietary"
    raw: str  # the NVRM line as the kernel wrote it


@dataclass(frozen=True)
class SmiGpu:
    """One GPU as nvidia-smi --query-gpu reports it (present only when the tool exists)."""

    index: int
    name: str
    bus_id: str  # normalised to sysfs form "0000:00:06.0"
    device_id: int
    uuid: str
    driver_version: str
    memory_total_mib: int | None
    mig_mode_current: str | None  # "Enabled" | "Disabled" | None ([N/A])
    mig_mode_pending: str | None
    persistence_mode: str | None
    ecc_mode_current: str | None
    ecc_mode_pending: str | None
    ecc_uncorrected_volatile: int | None
    compute_cap: str | None  # "9.0"
    pcie_gen_current: int | None
    pcie_width_current: int | None
    pcie_gen_max: int | None
    pcie_width_max: int | None
    retired_pages_pending: str | None
    remapped_rows_pending: str | None
    remapped_rows_failure: str | None
    clocks_event_reasons: int | None
    temperature_c: int | None
    fabric_state: str | None = None  # from nvidia-smi -q: "Completed", "In Progress", "N/A"
    fabric_status: str | None = None
    serial: str | None = None
    vbios_version: str | None = None
    subsystem_id: int | None = None  # pci.sub_device_id, e.g. 0x18BF10DE
    power_limit_w: float | None = None
    clocks_max_sm_mhz: int | None = None


@dataclass(frozen=True)
class NvSmiInfo:
    smi_version: str
    nvml_version: str
    driver_version: str
    cuda_version: str


@dataclass(frozen=True)
class RuntimeInfo:
    docker_version: str | None  # None: no docker
    docker_active: bool | None
    docker_runtimes: tuple[str, ...]  # from docker info, e.g. ("nvidia", "runc")
    toolkit_version: str | None  # nvidia-ctk --version
    docker_default_runtime: str | None = None
    docker_cgroup_driver: str | None = None  # "systemd" | "cgroupfs"
    cdi_specs: tuple[str, ...] = ()  # /etc/cdi/*.yaml and /var/run/cdi/*.yaml paths
    daemon_config: dict[str, object] | None = None  # /etc/docker/daemon.json; None: absent


@dataclass(frozen=True)
class ServiceState:
    active: str  # systemctl is-active: "active", "inactive", "failed", "unknown"
    enabled: str  # systemctl is-enabled: "enabled", "disabled", "masked", "not-found"

    @property
    def running(self) -> bool:
        return self.active == "active"


@dataclass(frozen=True)
class XidEvent:
    """An `NVRM: Xid` line of the kernel log."""

    pci: str  # as the driver prints it: "0000:3b:00"
    code: int
    text: str
    uptime_s: float | None  # seconds since boot (dmesg stamp); None when the line had none


@dataclass(frozen=True)
class InfinibandDevice:
    """An entry of /sys/class/infiniband and whether its VPD names it an NVLink5 switch
    management port ("SW_MNG", as NVIDIA's driver container checks)."""

    name: str  # "mlx5_0"
    sw_mng: bool | None  # None: the VPD was not readable


@dataclass(frozen=True)
class VpdFunction:
    """A Mellanox PCI physical function (vendor 0x15b3) and whether its VPD says SW_MNG: the
    same mark as InfinibandDevice's, read where it exists whatever driver is bound."""

    address: str  # "0000:0b:00.0"
    sw_mng: bool | None  # None: the VPD was not readable (no root, or an I/O error)
    infiniband: tuple[str, ...] = ()  # InfiniBand devices registered on it ("mlx5_0")

    @property
    def label(self) -> str:
        return f"{self.address} ({', '.join(self.infiniband)})" if self.infiniband else self.address


MELLANOX_VENDOR = 0x15B3


# Kernel modules NVIDIA's driver container waits for on an NVLink5 system before starting
# the fabric manager (reference packages.yaml `nvlink5.prerequisites`).
NVLINK5_MODULES = ("mlx5_core", "ib_umad")


@dataclass(frozen=True)
class KernelModule:
    """An NVIDIA kernel module file under /lib/modules/<release>/ (nvidia.ko*, or Debian's
    DKMS name nvidia-current.ko*), with modinfo's version and signer."""

    path: str
    version: str  # "" when modinfo printed none
    signer: str  # "" when unsigned (or modinfo unavailable)


@dataclass(frozen=True)
class InstalledKernel:
    release: str  # "6.1.0-57-amd64"
    vmlinuz: bool  # /boot/vmlinuz-<release> exists: a boot loader can boot it
    headers: bool  # /lib/modules/<release>/build/Makefile: DKMS can build for it
    modules: tuple[KernelModule, ...] = ()
    dkms: tuple[tuple[str, str], ...] = ()  # DKMS tree entries: (module name, version)

    def module_versions(self) -> frozenset[str]:
        return frozenset(
            {m.version for m in self.modules if m.version}
            | {v for _unused, v in self.dkms if self.modules}
        )

    def has_module(self, version: str) -> bool:
        """A module for driver `version` ("535.261.03"; a bare branch "535" matches any
        release of it); "" asks for any NVIDIA module."""
        if not self.modules:
            return False
        if not version:
            return True
        if "." in version:
            return version in self.module_versions()
        return any(v.split(".")[0] == version for v in self.module_versions())


@dataclass(frozen=True)
class KernelState:
    """The kernels a host has installed and the one it boots next (issue 16)."""

    running: str
    installed: tuple[InstalledKernel, ...]
    default: str  # the kernel the boot loader starts next; "" when not known
    default_from: str  # "grubby", "grubenv", "grub.cfg", "newest installed" or ""
    mok: tuple[tuple[str, str], ...] = ()  # (certificate path, enrolled|not-enrolled|unknown)
    # rpm hosts: (package, release) of the kernel packages and their -devel packages
    # ("kernel-core", "5.14.0-284.30.1.el9_2.x86_64"); empty elsewhere
    rpm: tuple[tuple[str, str], ...] = ()

    def devel_package(self, release: str) -> str:
        """The -devel package DKMS needs for `release` on an rpm host: kernel-core's and
        kernel's is kernel-devel, kernel6.12's kernel6.12-devel (Amazon Linux 2023)."""
        owner = next(
            (n for n, r in self.rpm if r == release and not n.endswith("-devel")), "kernel"
        )
        return f"{owner.removesuffix('-core')}-devel-{release}"

    def kernel(self, release: str) -> InstalledKernel | None:
        return next((k for k in self.installed if k.release == release), None)

    @property
    def pending(self) -> tuple[InstalledKernel, ...]:
        """Installed, bootable kernels other than the running one."""
        return tuple(k for k in self.installed if k.vmlinuz and k.release != self.running)


@dataclass(frozen=True)
class UpgradeState:
    """roles/driver_upgrade's record on the host (/var/lib/gpuprov/upgrade.json)."""

    target: str  # "535.309.01 proprietary"
    status: str  # in_progress | failed | done
    failed_step: str
    done: tuple[str, ...]
    since: str = ""  # when the drain completed or failed (its history entry), "" when unknown

    @property
    def drained(self) -> bool:
        """An unfinished upgrade drained the host, or its drain hook failed (stopped by its
        timeout: the host may be half drained), and it has not undrained it."""
        unfinished = self.status in ("in_progress", "failed")
        return (unfinished and "drain" in self.done) or self.half_drained

    @property
    def half_drained(self) -> bool:
        """The drain hook failed: part of the host may be drained (issue 48)."""
        return self.status == "failed" and self.failed_step == "drain" and "drain" not in self.done

    @property
    def drained_cause(self) -> str:
        """Why the host is out of service, "" when it is not: detect's and plan's words."""
        since = self.since or "an unknown time"
        if self.half_drained:
            return (
                f"may be half drained: the drain hook of an unfinished upgrade to {self.target} "
                f"failed at {since}"
            )
        if not self.drained:
            return ""
        return f"drained by an unfinished upgrade to {self.target} since {since}"


@dataclass(frozen=True)
class RdmaPort:
    """A port of an RDMA device: /sys/class/infiniband/<device>/ports/<n>/ (or ibstatus)."""

    device: str  # "efa_0", "mlx5_ib0"
    port: int
    state: str  # the name after the number: "ACTIVE" ("4: ACTIVE"); "" when not shown
    phys_state: str  # "LinkUp" ("5: LinkUp"); "" when not shown
    rate_gbps: float | None  # "400 Gb/sec (4X NDR)" -> 400.0; None when not shown
    link_layer: str  # "InfiniBand", "Ethernet"; "" when not shown


@dataclass(frozen=True)
class RdmaDevice:
    """An entry of /sys/class/infiniband with the PCI function it sits on."""

    name: str
    pci: str  # "0000:10:00.0"; "" when the entry has no device link
    vendor_id: int | None
    device_id: int | None
    ports: tuple[RdmaPort, ...] = ()


@dataclass(frozen=True)
class FiInfo:
    """`fi_info -p efa -t FI_EP_RDM`: the efa provider's RDM domains ("efa_0-rdm")."""

    exit_code: int | None
    domains: tuple[str, ...]  # distinct domains of `provider: efa` blocks

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and bool(self.domains)


@dataclass(frozen=True)
class FabricFacts:
    """The multi-node fabric as detection found it (issue 30; probe.sh `rdma`)."""

    devices: tuple[RdmaDevice, ...] = ()
    uverbs: tuple[str, ...] = ()  # /dev/infiniband/uverbsN
    memlock: str = ""  # `ulimit -l`: "unlimited" or KiB as text; "" when not read
    peermem: tuple[str, ...] = ()  # NCCL's peer-memory paths present (GPUDirect by peermem)
    efa_installer: str | None = None  # the installer manifest's version; None: not installed
    ofi_nccl: tuple[str, ...] = ()  # aws-ofi-nccl libraries under /opt/amazon/ofi-nccl/lib
    fi_info: FiInfo | None = None  # None: no fi_info on the host
    ibstatus: tuple[RdmaPort, ...] | None = None  # None: no ibstatus on the host
    unread: tuple[str, ...] = ()  # rdma.txt lines the parser does not know (kept out)

    @property
    def memlock_unlimited(self) -> bool:
        return self.memlock == "unlimited"

    @property
    def memlock_kib(self) -> int | None:
        return int(self.memlock) if self.memlock.isdigit() else None

    def device(self, name: str) -> RdmaDevice | None:
        return next((d for d in self.devices if d.name == name), None)


@dataclass(frozen=True)
class HostFacts:
    host: str
    os: OsInfo | None
    kernel: str
    secure_boot: bool | None  # None: unknown (no EFI vars, legacy boot)
    pci: tuple[PciDevice, ...]
    loaded_driver: LoadedDriver | None  # None: no nvidia module loaded
    loaded_modules: tuple[str, ...]
    smi: NvSmiInfo | None  # None: nvidia-smi absent or failing
    smi_gpus: tuple[SmiGpu, ...]
    runtime: RuntimeInfo
    simulated: bool = False  # True on lab hosts: every GPU fact is simulated
    nvlink_inactive: tuple[tuple[int, int], ...] = ()  # (gpu index, link) reported <inactive>
    packages: dict[str, str] = field(default_factory=dict)  # nvidia/docker package -> version
    errors: tuple[str, ...] = ()  # probe parts that failed (non-fatal)
    held_packages: frozenset[str] = frozenset()  # apt-mark hold / dnf versionlock
    services: dict[str, ServiceState] = field(default_factory=dict)  # "docker" -> state
    infiniband: tuple[InfinibandDevice, ...] = ()  # /sys/class/infiniband, with VPD marks
    # the Mellanox PCI functions' VPD marks; None: not captured (a probe older than this field)
    pci_vpd: tuple[VpdFunction, ...] | None = None
    xids: tuple[XidEvent, ...] = ()
    uptime_s: float | None = None  # /proc/uptime when detected; ages Xid events
    upgrade: UpgradeState | None = None  # a driver upgrade recorded on the host, if any
    # issue 48: what a stopped run left to recover (parsers/recovery.py), one cause a line
    recovery: tuple[str, ...] = ()
    # issue 47: reboots a role recorded against this boot (parsers/reboot.py), one cause a line
    reboot_pending: tuple[str, ...] = ()
    arch: str = ""  # `uname -m`: "x86_64", "aarch64"; "" when unknown
    kernels: KernelState | None = None  # installed kernels and modules; None: not probed
    fabric: FabricFacts | None = None  # RDMA devices and their stack; None: not probed
    # --- what validation's health checks read besides the above (validate/health.py). Kept
    # as detection captured it and parsed once, on first use: the planner never needs the
    # full `nvidia-smi -q` tree, which costs about 12x the fabric fast path parse_host takes
    # (36 ms against 2.9 ms for the real 2x H200 capture).
    smi_q_text: str | None = field(default=None, repr=False, compare=False)  # nvidia-smi -q
    nvlink_errors_text: str | None = field(default=None, repr=False, compare=False)  # nvlink -e
    has_nvlink_output: bool = False  # `nvidia-smi nvlink -s` ran

    @cached_property
    def smi_q(self) -> SmiQ | None:
        """nvidia-smi -q (ECC counters, row remaps, fabric, clock reasons); None when it was
        not captured or does not parse."""
        from .parsers._text import ParseError
        from .parsers.smi_q import parse_smi_q

        try:
            return parse_smi_q(self.smi_q_text) if self.smi_q_text is not None else None
        except ParseError:
            return None

    @cached_property
    def nvlink_errors(self) -> tuple[NvLinkErrors, ...]:
        """nvidia-smi nvlink -e per GPU; () when it was not captured or does not parse."""
        from .parsers._text import ParseError
        from .parsers.nvlink import parse_nvlink_errors

        if self.nvlink_errors_text is None:
            return ()
        try:
            return parse_nvlink_errors(self.nvlink_errors_text)
        except ParseError:
            return ()

    def nvswitches(self, catalog: Catalog) -> int:
        """NVSwitch endpoints on the PCI bus: NVIDIA devices the catalog names NVSwitches."""
        return self.nvswitch_board(catalog)[0]

    def nvswitch_board(self, catalog: Catalog) -> tuple[int, int]:
        """(NVSwitch endpoints on the PCI bus, the switches per board of the last one's
        generation; 0 without any)."""
        found = [catalog.nvswitch(dev.device_id) for dev in self.nvidia_pci]
        endpoints = [f[0] for f in found if f and f[1]]
        return len(endpoints), endpoints[-1].per_board if endpoints else 0

    # --- issue 27 (input helper): captures that lie --------------------------------------
    # probe captures without the `# exit=` trailer probe.sh ends every one with: cut short
    truncated: tuple[str, ...] = ()

    @property
    def nvidia_pci(self) -> tuple[PciDevice, ...]:
        return tuple(d for d in self.pci if d.vendor_id == 0x10DE)

    @property
    def gpus(self) -> tuple[PciDevice, ...]:
        """NVIDIA display/3D controllers (PCI class 0x03xxxx)."""
        return tuple(d for d in self.nvidia_pci if d.class_code >> 16 == 0x03)

    @property
    def nvidia_bridges(self) -> tuple[PciDevice, ...]:
        """NVIDIA bridge-class devices (0x06xxxx): where NVSwitches appear; the catalog
        decides which device ids are NVSwitches."""
        return tuple(d for d in self.nvidia_pci if d.class_code >> 16 == 0x06)

    @property
    def nvlink5(self) -> bool:
        """An NVLink5 fabric (HGX B200/B300): a device's VPD says SW_MNG (an InfiniBand device,
        or a Mellanox PCI function whatever driver is bound)."""
        return bool(self.nvlink5_ports)

    @property
    def nvlink5_ports(self) -> tuple[str, ...]:
        """The SW_MNG devices: InfiniBand names, then PCI functions not already named by one."""
        ports = [d.name for d in self.infiniband if d.sw_mng]
        for f in self.pci_vpd or ():
            if f.sw_mng and not set(f.infiniband) & set(ports):
                ports.append(f.label)
        return tuple(ports)

    @property
    def nvlink5_unknown(self) -> tuple[str, ...]:
        """Devices whose SW_MNG mark detection could not read: an unreadable VPD, or, with no
        pci-vpd capture, every Mellanox function on the PCI bus. Unknown is never "no"."""
        unread = [d.name for d in self.infiniband if d.sw_mng is None]
        if self.pci_vpd is None:
            named = {d.name for d in self.infiniband if d.sw_mng is not None}
            if not named:
                unread += [d.address for d in self.pci if d.vendor_id == MELLANOX_VENDOR]
        else:
            unread += [
                f.label
                for f in self.pci_vpd
                if f.sw_mng is None and not set(f.infiniband) & set(unread)
            ]
        return tuple(unread)

    @property
    def nvlink5_missing_modules(self) -> tuple[str, ...]:
        """NVLINK5_MODULES not loaded at detection."""
        return tuple(m for m in NVLINK5_MODULES if m not in self.loaded_modules)
