"""All raw outputs of one host -> HostFacts.

A missing file means the tool is absent (no nvidia-smi before the driver). A file that does
not parse, or a core command that failed, is recorded in `HostFacts.errors` so that the
planner and the report can say so; the other facts are still built.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from typing import TypeVar

from ..facts import (
    FabricFacts,
    HostFacts,
    InfinibandDevice,
    RuntimeInfo,
    ServiceState,
    SmiGpu,
    UpgradeState,
)
from ..parsers import names
from ..parsers._text import ParseError, split_exit
from ..parsers.driver_version import parse_driver_version
from ..parsers.fabric import parse_fi_info, parse_ibstatus, parse_rdma
from ..parsers.infiniband import parse_infiniband_vpd, parse_pci_vpd
from ..parsers.kernel_log import parse_kernel_log
from ..parsers.kernels import parse_kernels
from ..parsers.nvlink import NvLinkGpu, parse_nvlink_status
from ..parsers.os_release import parse_os_release
from ..parsers.packages import Packages, parse_dpkg_query, parse_rpm_query
from ..parsers.proc_modules import parse_proc_modules
from ..parsers.reboot import parse_reboot_pending
from ..parsers.recovery import parse_recovery
from ..parsers.runtime import (
    parse_cdi_specs,
    parse_ctk_version,
    parse_daemon_json,
    parse_docker_info,
)
from .secure_boot import parse_secure_boot
from .services import parse_services
from .smi_q import fabric_states
from .smi_query_gpu import parse_query_gpu
from .smi_version import parse_smi_version
from .sysfs_pci import parse_sysfs_pci

T = TypeVar("T")

# Commands whose failure means a fact is missing (not merely "tool absent"): reported.
_MUST_SUCCEED = (
    names.OS_RELEASE,
    names.UNAME_R,
    names.SYSFS_PCI,
    names.SMI_L,
    names.SMI_VERSION,
    names.SMI_QUERY_GPU,
    names.SMI_Q,
)


class _Collector:
    def __init__(self, host: str, raw: Mapping[str, str]) -> None:
        self.host = host
        self.raw = raw
        self.errors: list[str] = []

    def parse(self, name: str, parser: Callable[[str], T], default: T) -> T:
        text = self.raw.get(name)
        if text is None:
            return default
        try:
            return parser(text)
        except ParseError as exc:
            self.errors.append(exc.message)
            return default

    def check_trailers(self) -> tuple[str, ...]:
        """The probe's captures without their `# exit=N` trailer: probe.sh's emit() writes
        one after every capture, so a capture without it was cut short (a dropped session, a
        saved file truncated) and its content is not complete. Each is named in `errors`."""
        cut = tuple(
            name
            for name, text in sorted(self.raw.items())
            if (name in names.PROBE_FILES or name.startswith(names.CONVERGED_PREFIX))
            and split_exit(text).exit_code is None
        )
        self.errors.extend(
            f"{name}: cut short (no `# exit=` trailer, which the probe writes after every capture)"
            for name in cut
        )
        return cut

    def check_exits(self) -> None:
        for name in _MUST_SUCCEED:
            if name not in self.raw:
                continue
            out = split_exit(self.raw[name])
            if not out.ok:
                first = next((ln.strip() for ln in out.body.splitlines() if ln.strip()), "")
                self.errors.append(f"{name}: exit {out.exit_code}: {first}")


def _upgrade_state(text: str) -> UpgradeState | None:
    body = split_exit(text).body
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise ParseError(names.UPGRADE_STATE, f"not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ParseError(names.UPGRADE_STATE, "not a JSON object")
    done = data.get("done", [])
    history = data.get("history", [])
    drains = [
        str(h.get("at", ""))
        for h in (history if isinstance(history, list) else [])
        if isinstance(h, dict) and h.get("step") == "drain"
    ]
    return UpgradeState(
        target=str(data.get("target", "")),
        status=str(data.get("status", "")),
        failed_step=str(data.get("failed_step", "")),
        done=tuple(str(d) for d in done) if isinstance(done, list) else (),
        since=drains[-1] if drains else "",
    )


def _arch(raw: Mapping[str, str]) -> str:
    """`uname -m`; for captures without it, the architecture the loaded driver was built for
    ("NVIDIA UNIX Open Kernel Module for x86_64  580.159.04 ...")."""
    if names.UNAME_M in raw:
        out = split_exit(raw[names.UNAME_M])
        return out.body.strip() if out.ok else ""
    match = re.search(r"Kernel Module for (\w+)\s", raw.get(names.PROC_DRIVER_VERSION, ""))
    return match.group(1) if match else ""


def _uptime(text: str) -> float | None:
    try:
        return float(split_exit(text).body.split()[0])
    except (IndexError, ValueError):
        return None


def _with_fabric(gpus: tuple[SmiGpu, ...], smi_q_text: str | None) -> tuple[SmiGpu, ...]:
    if smi_q_text is None:
        return gpus
    by_bus = fabric_states(smi_q_text)
    return tuple(
        dataclasses.replace(g, fabric_state=f[0], fabric_status=f[1])
        if (f := by_bus.get(g.bus_id))
        else g
        for g in gpus
    )


def _fabric(c: _Collector) -> FabricFacts | None:
    """rdma.txt with fi_info's and ibstatus's outputs, where the host has those tools."""
    fabric = c.parse(names.RDMA, parse_rdma, None)
    if fabric is None:
        return None
    return dataclasses.replace(
        fabric,
        fi_info=c.parse(names.FI_INFO_EFA, parse_fi_info, None),
        ibstatus=c.parse(names.IBSTATUS, parse_ibstatus, None),
    )


def parse_host(host: str, raw: Mapping[str, str]) -> HostFacts:
    c = _Collector(host, raw)
    truncated = c.check_trailers()
    c.check_exits()
    no_gpus: tuple[SmiGpu, ...] = ()
    smi_gpus = c.parse(names.SMI_QUERY_GPU, parse_query_gpu, no_gpus)
    smi_gpus = c.parse(names.SMI_Q, lambda t: _with_fabric(smi_gpus, t), smi_gpus)
    services: dict[str, ServiceState] = c.parse(names.SYSTEMCTL, parse_services, {})
    packages = (
        c.parse(names.DPKG_QUERY, parse_dpkg_query, Packages())
        if names.DPKG_QUERY in raw
        else c.parse(names.RPM_QUERY, parse_rpm_query, Packages())
    )
    docker = c.parse(names.DOCKER_INFO, parse_docker_info, None)
    docker_service = services.get("docker")
    runtime = RuntimeInfo(
        docker_version=docker.server_version if docker else None,
        docker_active=(
            docker_service.running
            if docker_service and docker_service.enabled != "not-found"
            else (docker.server_version is not None if docker else None)
        ),
        docker_runtimes=docker.runtimes if docker else (),
        toolkit_version=c.parse(names.NVIDIA_CTK_VERSION, parse_ctk_version, None),
        docker_default_runtime=docker.default_runtime if docker else None,
        docker_cgroup_driver=docker.cgroup_driver if docker else None,
        cdi_specs=c.parse(names.CDI_SPECS, parse_cdi_specs, ()),
        daemon_config=c.parse(names.DOCKER_DAEMON_JSON, parse_daemon_json, None),
    )
    no_links: tuple[NvLinkGpu, ...] = ()
    nvlinks = c.parse(names.SMI_NVLINK_S, parse_nvlink_status, no_links)
    kernel_log = c.parse(names.KERNEL_LOG, parse_kernel_log, None)
    upgrade = c.parse(names.UPGRADE_STATE, _upgrade_state, None)  # before errors is read
    no_causes: tuple[str, ...] = ()
    recovery = c.parse(names.RECOVERY, parse_recovery, no_causes)
    reboot_pending = c.parse(names.REBOOT_PENDING, parse_reboot_pending, no_causes)
    no_ports: tuple[InfinibandDevice, ...] = ()
    infiniband = c.parse(names.INFINIBAND_VPD, parse_infiniband_vpd, no_ports)
    pci_vpd = c.parse(names.PCI_VPD, parse_pci_vpd, None)
    kernels = c.parse(names.KERNELS, parse_kernels, None)
    fabric = _fabric(c)
    return HostFacts(
        host=host,
        os=c.parse(names.OS_RELEASE, parse_os_release, None),
        kernel=split_exit(raw.get(names.UNAME_R, "")).body.strip(),
        secure_boot=c.parse(names.SECURE_BOOT, parse_secure_boot, None),
        # a cut PCI capture may have lost GPUs and NVSwitches: none are believed
        pci=() if names.SYSFS_PCI in truncated else c.parse(names.SYSFS_PCI, parse_sysfs_pci, ()),
        loaded_driver=c.parse(names.PROC_DRIVER_VERSION, parse_driver_version, None),
        loaded_modules=c.parse(names.PROC_MODULES, parse_proc_modules, ()),
        smi=c.parse(names.SMI_VERSION, parse_smi_version, None),
        smi_gpus=smi_gpus,
        runtime=runtime,
        simulated=names.GPUSIM in raw,
        nvlink_inactive=tuple((g.index, link) for g in nvlinks for link in g.inactive),
        packages=dict(packages.versions),
        errors=tuple(c.errors),
        held_packages=packages.held,
        services=services,
        infiniband=infiniband,
        pci_vpd=pci_vpd,
        xids=kernel_log.xids if kernel_log else (),
        uptime_s=c.parse(names.PROC_UPTIME, _uptime, None),
        upgrade=upgrade,
        recovery=recovery,
        reboot_pending=reboot_pending,
        arch=_arch(raw),
        kernels=kernels,
        fabric=fabric,
        smi_q_text=raw.get(names.SMI_Q),
        nvlink_errors_text=raw.get(names.SMI_NVLINK_E),
        has_nvlink_output=names.SMI_NVLINK_S in raw,
        truncated=truncated,
    )
