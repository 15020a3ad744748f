"""File names of the raw outputs: the probe writes them, `--save` stores them, parsers read them.

The first group matches ../shared/fixtures/real/h200x2-ubuntu2404-580/ (see its README); the
second group are extra probes gpuprov adds. A missing file means the tool is absent on the host.
"""

from __future__ import annotations

OS_RELEASE = "os-release.txt"
UNAME_R = "uname-r.txt"
UNAME_M = "uname-m.txt"  # CPU architecture: x86_64, aarch64 (GH200, GB200)
PROC_DRIVER_VERSION = "proc-driver-nvidia-version.txt"
PROC_GPUS_INFORMATION = "proc-driver-nvidia-gpus-information.txt"
SYSFS_PCI = "sysfs-pci-devices.txt"
PROC_MODULES = "lsmod.txt"
SMI = "nvidia-smi.txt"
SMI_L = "nvidia-smi-L.txt"
SMI_VERSION = "nvidia-smi-version.txt"
SMI_QUERY_GPU = "nvidia-smi-query-gpu.csv"
SMI_Q = "nvidia-smi-q.txt"
SMI_TOPO = "nvidia-smi-topo-m.txt"
SMI_NVLINK_S = "nvidia-smi-nvlink-s.txt"
SMI_NVLINK_E = "nvidia-smi-nvlink-e.txt"
SMI_MIG_LGIP = "nvidia-smi-mig-lgip.txt"
SMI_MIG_LGIPP = "nvidia-smi-mig-lgipp.txt"
SMI_MIG_LGI = "nvidia-smi-mig-lgi.txt"
SMI_MIG_LCIP = "nvidia-smi-mig-lcip.txt"
KERNEL_LOG = "dmesg-nvidia.txt"

# Extra probes (not in the real fixture).
SMI_MIG_LCI = "nvidia-smi-mig-lci.txt"
SECURE_BOOT = "secureboot.txt"
DPKG_QUERY = "dpkg-query.txt"
RPM_QUERY = "rpm-qa.txt"
SYSTEMCTL = "systemctl-is-active.txt"
DOCKER_INFO = "docker-info.txt"
DOCKER_DAEMON_JSON = "docker-daemon-json.txt"
CDI_SPECS = "cdi-specs.txt"
NVIDIA_CTK_VERSION = "nvidia-ctk-version.txt"
GPUSIM = "gpusim.txt"
PROC_UPTIME = "proc-uptime.txt"
UPGRADE_STATE = "gpuprov-upgrade.txt"  # roles/driver_upgrade's state file (JSON)
REBOOT_PENDING = "reboot-pending.txt"  # reboots a role recorded against this boot (issue 47)
RECOVERY = "recovery.txt"  # what a stopped run left: dpkg's journal, restarts a role owes
INFINIBAND_VPD = "infiniband-vpd.txt"  # SW_MNG marks of /sys/class/infiniband/*/device/vpd
PCI_VPD = "pci-vpd.txt"  # SW_MNG marks of the Mellanox PCI functions' vpd (any driver bound)
KERNELS = "kernels.txt"  # installed kernels, their NVIDIA modules, the boot default, MOK state
RDMA = "rdma.txt"  # RDMA devices (EFA, InfiniBand), ports, uverbs, memlock, peermem, EFA install
FI_INFO_EFA = "fi-info-efa.txt"  # fi_info -p efa -t FI_EP_RDM
IBSTATUS = "ibstatus.txt"  # ibstatus (infiniband-diags)
# One pair per convergence record on the host (parsers/converged.py, not in PROBE_FILES):
# converged-ROLE.json (the record) and converged-ROLE-live.txt (its items' state now).
CONVERGED_PREFIX = "converged-"

# Files the probe writes (nccl-tests, torch and measure-* come from validation, not detection).
PROBE_FILES: tuple[str, ...] = (
    OS_RELEASE,
    UNAME_R,
    UNAME_M,
    PROC_UPTIME,
    UPGRADE_STATE,
    RECOVERY,
    REBOOT_PENDING,
    SECURE_BOOT,
    SYSFS_PCI,
    PROC_DRIVER_VERSION,
    PROC_GPUS_INFORMATION,
    PROC_MODULES,
    KERNEL_LOG,
    SMI,
    SMI_L,
    SMI_VERSION,
    SMI_QUERY_GPU,
    SMI_Q,
    SMI_TOPO,
    SMI_NVLINK_S,
    SMI_NVLINK_E,
    SMI_MIG_LGIP,
    SMI_MIG_LGIPP,
    SMI_MIG_LGI,
    SMI_MIG_LCIP,
    SMI_MIG_LCI,
    DPKG_QUERY,
    RPM_QUERY,
    SYSTEMCTL,
    DOCKER_INFO,
    DOCKER_DAEMON_JSON,
    CDI_SPECS,
    NVIDIA_CTK_VERSION,
    INFINIBAND_VPD,
    PCI_VPD,
    KERNELS,
    RDMA,
    FI_INFO_EFA,
    IBSTATUS,
    GPUSIM,
)
