"""What a host should look like, derived from its plan and inventory variables (pure).

With a plan (the host's entry of the plan document the host was applied with), every planned
value comes from the typed plan that entry is read into once (orchestrator/roleplans.py: the
records the planner built, the MIG layouts parsed and checked there). Without one, the
inventory is read as the planner reads it (orchestrator/policy.py: ansible-core's argument
spec validation, then the planner's rules), and what the planner would decide (an unset
version, flavour ``auto``, the fabric manager) is unknown. Every value a variable leaves
unset is the default of the knob table (orchestrator/knobs.py); none is copied here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..catalog import branch_of
from ..knobs import default_table
from ..policy import bad_policy, decide
from ..roleplans import DcgmPlan, MigPlan, TypedPlan

# Docker's own configuration file (dockerd reads it there; the docker role merges into it).
DOCKER_DAEMON_JSON = "/etc/docker/daemon.json"
_DEFAULTS_OF = ("nvidia_driver", "nvidia_container_toolkit")  # fields of roles left unplanned


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
    dcgm: DcgmPlan | None = None  # DCGM (None: not planned; cuda_major 0: not decided)

    def has_role(self, role: str) -> bool:
        return role in self.roles


def expectation_from_vars(
    host: str, variables: Mapping[str, Any], *, planned: bool = False
) -> Expectation:
    """Build the expectation for one host from its merged inventory + plan variables;
    `planned`: they hold the host's plan-document entry, whose typed plan then decides."""
    if planned:
        return expectation_from_plan(TypedPlan.from_vars(host, variables))
    return _from_inventory(host, variables)


def expectation_from_plan(plan: TypedPlan) -> Expectation:
    """Every expected value from the typed plan (a role it leaves out: the role's defaults,
    never checked)."""
    driver, toolkit = plan.driver, plan.toolkit
    if driver is None or toolkit is None:
        unplanned = TypedPlan.from_vars(plan.host, {"gpuprov_roles": list(_DEFAULTS_OF)})
        driver, toolkit = driver or unplanned.driver, toolkit or unplanned.toolkit
    assert driver is not None and toolkit is not None

    return Expectation(
        host=plan.host,
        roles=plan.roles,
        driver_branch=driver.branch,
        driver_version=driver.version,
        driver_flavour=driver.flavour,
        fabricmanager=driver.fabricmanager,
        persistenced=driver.persistenced,
        driver_state_file=driver.state_file,
        toolkit_version=toolkit.version,
        cdi_spec=toolkit.cdi_spec,
        daemon_json=DOCKER_DAEMON_JSON,
        gpu_count=plan.validation.expected_gpus,
        mig_layout=plan.mig.layout if plan.mig else None,
        mig_configs=plan.mig.configs if plan.mig else None,
        mig=plan.mig,
        dcgm=plan.dcgm,
    )


def _from_inventory(host: str, variables: Mapping[str, Any]) -> Expectation:
    values, problems = decide(default_table(), variables)
    if problems:
        raise bad_policy(host, problems)

    def given(name: str) -> Any:
        """The value when the inventory sets it; None: the planner would decide it."""
        return values[name] if variables.get(name) is not None else None

    version, branch = values["nvidia_driver_version"], values["nvidia_driver_branch"]
    layout, configs = values["mig_layout"], values["mig_configs"]
    flavour = given("nvidia_driver_flavour")
    return Expectation(
        host=host,
        roles=values["gpuprov_roles"],
        driver_branch=branch or (branch_of(version) if version else None),
        driver_version=version,
        driver_flavour=None if flavour == "auto" else flavour,
        fabricmanager=given("nvidia_driver_fabricmanager"),
        persistenced=values["nvidia_driver_persistenced"],
        driver_state_file=values["nvidia_driver_state_file"],
        toolkit_version=values["nvidia_container_toolkit_version"],
        cdi_spec=values["nvidia_container_toolkit_cdi_spec"],
        daemon_json=DOCKER_DAEMON_JSON,
        gpu_count=values["gpuprov_validation_expected_gpus"],
        mig_layout=layout,
        mig_configs=configs if layout is not None else None,
        mig=MigPlan.parse(layout, configs, host) if layout is not None else None,
        dcgm=(
            DcgmPlan(
                values["dcgm_version"],
                int(values["dcgm_cuda_major"] or 0),
                values["dcgm_exporter"],
                values["dcgm_exporter_port"],
            )
            if "dcgm" in values["gpuprov_roles"]
            else None
        ),
    )


def upstream_version(package_version: str) -> str:
    """Debian/RPM package version -> upstream part: '1:535.261.03-1~deb12u1' -> '535.261.03'."""
    version = package_version.split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version
