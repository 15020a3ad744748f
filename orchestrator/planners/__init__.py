"""The planners: one per decision, looked up from the role table's ``planner:`` column
(orchestrator/roles.yaml, ``module:function`` under this package, imported when a host needs
it, as testinfra looks up its backends).

A planner takes the host's :class:`HostContext` (facts, policy, catalog, the roles planned
before it) and returns the role's :class:`RolePlan` (its variables under the role's own
names, the reason) or None; what it notices goes to the context's warnings and blockers.
Bad input that makes the whole run wrong raises a BadInputError subclass. orchestrator/plan.py
is the loop over the table; it reads every planned role's variables against the role's own
``meta/argument_specs.yml`` (:func:`orchestrator.knobs.role_problems`).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import datetime as dt

    from ..catalog import Catalog, GpuModel
    from ..facts import HostFacts
    from ..policy import Policy
    from ..roletable import Role


@dataclass(frozen=True)
class RolePlan:
    name: str
    vars: Mapping[str, object]  # what Ansible receives, under the role's own names
    reason: str  # one line: why this role, with these variables
    change: bool = True  # False: the host already matches; the role should report no change
    # nvidia_driver: the packages it installs and holds, and where from (driver_packages)
    packages: Mapping[str, object] | None = None
    packages_line: str = ""


@dataclass
class Notes:
    warnings: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)


@dataclass
class HostContext:
    """What a planner reads: one host's facts and policy, the catalog, the host's GPUs (each
    GPU's catalog model in bus order, None when unknown), and the roles planned before it."""

    facts: HostFacts
    policy: Policy
    catalog: Catalog
    models: Sequence[GpuModel | None]
    nvswitches: int
    today: dt.date | None = None
    notes: Notes = field(default_factory=Notes)
    planned: dict[str, RolePlan] = field(default_factory=dict)

    @property
    def known(self) -> list[GpuModel]:
        """The GPUs the catalog knows (an unknown one already blocks the host)."""
        return [m for m in self.models if m is not None]

    def planned_var(self, role: str, name: str, default: Any = None) -> Any:
        """A variable of a role planned before this one (`default` when it is not planned)."""
        plan = self.planned.get(role)
        return plan.vars.get(name, default) if plan else default


Planner = Callable[[HostContext], RolePlan | None]


@functools.cache
def planner_of(spec: str) -> Planner:
    """The planner named `module:function` (relative to this package)."""
    module, function = spec.split(":", maxsplit=1)
    found: Planner = getattr(importlib.import_module(f"{__name__}.{module}"), function)
    return found


def os_name(facts: HostFacts) -> str:
    """ "Ubuntu 20.04.6 LTS (ubuntu 20.04)": what os-release calls it, and its id/version."""
    if facts.os is None:
        return "an unknown OS (no os-release)"
    return f"{facts.os.pretty_name} ({facts.os.id} {facts.os.version_id or facts.os.codename})"


@functools.cache
def role_data(role: str, path: str) -> Mapping[str, Any]:
    """A role's own data file (``vars/main.yml``...), read as YAML: the pins and names its
    preflight checks against, which a planner checks the same way before any change."""
    from ..knobs import ROLES_DIR, _load_yaml

    data = _load_yaml(ROLES_DIR / role / path)
    return data if isinstance(data, dict) else {}


def planner_for(role: Role) -> Planner | None:
    return planner_of(role.planner) if role.planner else None
