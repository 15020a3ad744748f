"""What a host should look like, derived from its plan and inventory variables (pure).

With a plan (the host's entry of the plan document the host was applied with), every planned
value comes from the typed plan that entry is read into once (orchestrator/roleplans.py: the
records the planner built, the MIG layouts parsed and checked there); without one, from the
inventory. Every value a variable leaves unset is the default of the knob table
(orchestrator/knobs.py: the role's own defaults/main.yml, gpuprov's knobs.yaml); none is
copied here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import PolicyError
from ..knobs import default_table
from ..roleplans import MigPlan, TypedPlan

# Docker's own configuration file (dockerd reads it there; the docker role merges into it).
DOCKER_DAEMON_JSON = "/etc/docker/daemon.json"


@dataclass(frozen=True)
class Expectation:
    host: str
    roles: tuple[str, ...]
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

    def has_role(self, role: str) -> bool:
        return role in self.roles


def _str_or_none(host: str, name: str, value: object) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, (str, int, float)):
        return str(value)
    raise PolicyError(
        f"{name} must be a string, got {type(value).__name__} {value!r}",
        host=host,
        fix=f"set {name} to a quoted string in the inventory",
    )


def _bool_or_none(host: str, name: str, value: object) -> bool | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    raise PolicyError(
        f"{name} must be true or false, got {value!r}",
        host=host,
        fix=f"set {name}: true or {name}: false",
    )


def expectation_from_vars(
    host: str, variables: Mapping[str, Any], *, planned: bool = False
) -> Expectation:
    """Build the expectation for one host from its merged inventory + plan variables;
    `planned`: they hold the host's plan-document entry, whose typed plan then decides."""
    if planned:
        return expectation_from_plan(
            TypedPlan.from_vars(host, variables), _from_inventory(host, variables)
        )
    return _from_inventory(host, variables)


def expectation_from_plan(plan: TypedPlan, base: Expectation) -> Expectation:
    """`base` (the inventory's view) with every value the typed plan holds taken from it."""
    out = replace(
        base,
        roles=plan.roles,
        gpu_count=plan.validation.expected_gpus,
        mig_layout=plan.mig.layout if plan.mig else None,
        mig_configs=plan.mig.configs if plan.mig else None,
        mig=plan.mig,
    )
    if plan.driver is not None:
        out = replace(
            out,
            driver_version=plan.driver.version,
            driver_flavour=plan.driver.flavour,
            fabricmanager=plan.driver.fabricmanager,
            persistenced=plan.driver.persistenced,
            driver_state_file=plan.driver.state_file,
        )
    if plan.toolkit is not None:
        out = replace(out, toolkit_version=plan.toolkit.version, cdi_spec=plan.toolkit.cdi_spec)
    return out


def _from_inventory(host: str, variables: Mapping[str, Any]) -> Expectation:
    table = default_table()

    def value(name: str) -> Any:
        """The variable, else the knob's default (the role's, or gpuprov's)."""
        return variables[name] if name in variables else table.default(name)

    roles_value = value("gpuprov_roles")
    if not isinstance(roles_value, (list, tuple)) or not all(
        isinstance(r, str) for r in roles_value
    ):
        raise PolicyError(
            f"gpuprov_roles must be a list of role names, got {roles_value!r}",
            host=host,
            fix="set gpuprov_roles: [nvidia_driver, docker, nvidia_container_toolkit]",
        )
    count = value("gpuprov_validation_expected_gpus")
    if isinstance(count, str) and count.strip().isdigit():
        count = int(count)  # an INI inventory's "8"
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise PolicyError(
            f"gpuprov_validation_expected_gpus must be a GPU count, got {count!r}",
            host=host,
            fix="set a number, or 0 to expect every GPU on the PCI bus",
        )
    configs = variables.get("mig_configs")
    layout = _str_or_none(host, "mig_layout", variables.get("mig_layout"))
    mig_plan = None
    if layout is not None:
        configs = configs if isinstance(configs, Mapping) else {}
        mig_plan = MigPlan.parse(layout, configs, host)
    return Expectation(
        host=host,
        roles=tuple(roles_value),
        driver_version=_str_or_none(
            host, "nvidia_driver_version", variables.get("nvidia_driver_version")
        ),
        driver_flavour=_str_or_none(
            host, "nvidia_driver_flavour", variables.get("nvidia_driver_flavour")
        ),
        fabricmanager=_bool_or_none(
            host, "nvidia_driver_fabricmanager", variables.get("nvidia_driver_fabricmanager")
        ),
        persistenced=bool(value("nvidia_driver_persistenced")),
        driver_state_file=str(value("nvidia_driver_state_file")),
        toolkit_version=_str_or_none(
            host,
            "nvidia_container_toolkit_version",
            variables.get("nvidia_container_toolkit_version"),
        ),
        cdi_spec=str(value("nvidia_container_toolkit_cdi_spec")),
        daemon_json=DOCKER_DAEMON_JSON,
        gpu_count=count or None,  # 0: every GPU on the PCI bus
        mig_layout=layout,
        mig_configs=configs if isinstance(configs, Mapping) else None,
        mig=mig_plan,
    )


def upstream_version(package_version: str) -> str:
    """Debian/RPM package version -> upstream part: '1:535.261.03-1~deb12u1' -> '535.261.03'."""
    version = package_version.split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version
