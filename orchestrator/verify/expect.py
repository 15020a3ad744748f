"""What a host should look like, derived from its plan and inventory variables (pure).

With a plan (the host's entry of the plan document the host was applied with, over its
inventory variables), every planned value is read as the roles read it (orchestrator/knobs.py:
ansible-core's argument spec validation of the roles' own specs, then the planner's rules of
orchestrator/policy.py), under the roles' own names; the MIG layouts are parsed and checked
once (orchestrator/planners/mig.py). Without one, the inventory is read as the planner reads
it, and what the planner would decide (an unset version, flavour ``auto``, the fabric
manager) is unknown. Every value a variable leaves unset is the default of the knob table;
none is copied here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..catalog import branch_of
from ..knobs import default_table
from ..planners.mig import MigPlan
from ..policy import bad_policy, decide

# Docker's own configuration file (dockerd reads it there; the docker role merges into it).
DOCKER_DAEMON_JSON = "/etc/docker/daemon.json"


@dataclass(frozen=True)
class DcgmExpectation:
    """The dcgm role's planned inputs, as the DCGM checks read them."""

    version: str | None  # None: the newest DCGM 4, then held
    cuda_major: int  # the -cuda<N> flavour (0: not decided)
    exporter: str  # none | host | container
    exporter_port: int


@dataclass(frozen=True)
class Expectation:
    host: str
    roles: tuple[str, ...]
    driver_branch: int | None  # the planned branch; None: unknown (no plan, none set)
    driver_version: str | None  # exact upstream version, e.g. "535.261.03"; None: not pinned
    driver_flavour: str | None  # "open" | "proprietary" | None (not decided by the plan)
    fabricmanager: bool | None  # None: unknown (no plan), so the test only checks coherence
    persistenced: bool
    driver_state_file: str  # the role's record of what it installed and held
    toolkit_version: str | None
    cdi_spec: str
    daemon_json: str
    gpu_count: int | None  # gpuprov_validation_expected_gpus; None: the count on the PCI bus
    mig_layout: str | None  # name of the selected layout; None when MIG is not planned
    mig_configs: Mapping[str, Any] | None
    mig: MigPlan | None = None  # the layouts, parsed once (None: MIG not planned)
    dcgm: DcgmExpectation | None = None  # DCGM (None: not planned)

    def has_role(self, role: str) -> bool:
        return role in self.roles


def expectation_from_vars(
    host: str, variables: Mapping[str, Any], *, planned: bool = False
) -> Expectation:
    """Build the expectation for one host from its merged inventory + plan variables;
    `planned`: they hold the host's plan-document entry, which then decides every value, read
    as the roles read it (a role the plan leaves out: its inputs are never checked). Without
    one, the inventory is read as the planner reads it, and what the planner would decide is
    unknown (None)."""
    v, problems = decide(default_table(), variables, planner=not planned)
    if planned and "nvidia_driver" in v["gpuprov_roles"] and v["nvidia_driver_branch"] is None:
        problems.append('nvidia_driver_branch="" in the plan is not a branch number')
    if problems:
        raise bad_policy(host, problems)

    def given(name: str) -> Any:
        """The value when planned or set; None: the planner would decide it."""
        return v[name] if planned or variables.get(name) is not None else None

    roles, version = v["gpuprov_roles"], v["nvidia_driver_version"]
    flavour = given("nvidia_driver_flavour")
    layout = v["mig_layout"]
    if planned:
        layout = (layout or "disabled") if "mig" in roles else None
    major = str(v["dcgm_cuda_major"] or "").strip()
    dcgm = (v["dcgm_version"] or None, int(major) if major.isdigit() else 0)
    return Expectation(
        host=host,
        roles=roles,
        driver_branch=v["nvidia_driver_branch"] or (branch_of(version) if version else None),
        driver_version=version,
        driver_flavour=None if flavour == "auto" else flavour,
        fabricmanager=given("nvidia_driver_fabricmanager"),
        persistenced=v["nvidia_driver_persistenced"],
        driver_state_file=v["nvidia_driver_state_file"],
        toolkit_version=v["nvidia_container_toolkit_version"],
        cdi_spec=v["nvidia_container_toolkit_cdi_spec"],
        daemon_json=DOCKER_DAEMON_JSON,
        gpu_count=v["gpuprov_validation_expected_gpus"],
        mig_layout=layout,
        mig_configs=v["mig_configs"] if layout is not None else None,
        mig=MigPlan.parse(layout, v["mig_configs"], host) if layout is not None else None,
        dcgm=DcgmExpectation(*dcgm, v["dcgm_exporter"], v["dcgm_exporter_port"])
        if "dcgm" in roles
        else None,
    )


def upstream_version(package_version: str) -> str:
    """Debian/RPM package version -> upstream part: '1:535.261.03-1~deb12u1' -> '535.261.03'."""
    version = package_version.split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version
