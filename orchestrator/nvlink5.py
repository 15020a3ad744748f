"""NVLink5 fabrics (HGX B200/B300): what the planner adds to the driver role on such a host.

Detection is NVIDIA's own (its driver container's `_assert_nvlink5_system`): an InfiniBand
device whose VPD contains SW_MNG (`HostFacts.nvlink5`). Such a host needs, besides the fabric
manager at the driver's version, the NVLink subnet manager and its tools, the `ib_umad`
module (loaded now and at boot), then the fabric manager, whose start script launches the
subnet manager; the GPUs are ready at Fabric State Completed. Package names and the branch
floor are those tests/recorded/reference/packages.yaml records as confirmed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .facts import HostFacts

# NVIDIA installs nvlsm and infiniband-diags only for branches >= 570 (packages.yaml
# cuda_apt.branches["570"].nvlink5_extra, source gdc_nvlink570, confirmed).
MIN_BRANCH = 570

# Package names per package format: apt from NVIDIA's Ubuntu install scripts (nvlink5_extra,
# confirmed); rpm from AWS's AL2023 script (cuda_rpm ... ge_580.nvlsm, confirmed). nvlsm comes
# from NVIDIA's CUDA repository, the others from the distribution.
PACKAGES = {"apt": ("nvlsm", "infiniband-diags"), "rpm": ("libibumad", "infiniband-diags", "nvlsm")}

_RPM_OS = frozenset({"rhel", "rocky", "almalinux", "amzn", "centos", "fedora", "ol"})


@dataclass
class Nvlink5Plan:
    packages: tuple[str, ...]
    reason: str
    warnings: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)


def package_format(facts: HostFacts) -> str:
    os_id = facts.os.id if facts.os else ""
    return "rpm" if os_id in _RPM_OS else "apt"


def plan_nvlink5(facts: HostFacts, branch: int, source: str) -> Nvlink5Plan | None:
    """What an NVLink5 host adds to the driver plan; None on any other host."""
    if not facts.nvlink5:
        return None
    packages = PACKAGES[package_format(facts)]
    ports = ", ".join(facts.nvlink5_ports)
    plan = Nvlink5Plan(
        packages=packages,
        reason=(
            f"NVLink5 fabric (SW_MNG in the VPD of {ports}): fabric manager + NVLink subnet "
            f"manager ({', '.join(packages)}), ib_umad loaded, then the fabric manager "
            "started, gated on Fabric State Completed"
        ),
    )
    if branch < MIN_BRANCH:
        plan.blockers.append(
            f"an NVLink5 fabric needs the NVLink subnet manager (nvlsm), which NVIDIA "
            f"publishes for driver branches >= {MIN_BRANCH}, not R{branch}; fix: set "
            f"nvidia_driver_branch to {MIN_BRANCH} or later"
        )
    if source == "distribution" and facts.os is not None and facts.os.id == "ubuntu":
        plan.warnings.append(
            "nvlsm is not in Ubuntu's archive: the NVLink subnet manager comes from NVIDIA's "
            "CUDA repository even with nvidia_driver_source=distribution"
        )
    # An empty module list means /proc/modules was not read (a kernel without modules).
    if facts.loaded_modules and "mlx5_core" in facts.nvlink5_missing_modules:
        plan.warnings.append(
            "mlx5_core (the driver of the NVLink management ports) was not loaded at "
            "detection; the role waits for it and fails if it stays absent"
        )
    return plan
