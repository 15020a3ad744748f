"""The planner: a pure function of a host's facts, its policy and the GPU catalog.

``plan_host`` is the loop over the role table (orchestrator/roles.yaml): for each role, in
site.yml's order, that joins the host's plan (listed in gpuprov_roles, detected, or asked for
by a knob), its planner (orchestrator/planners/) decides the role's variables, under the role's
own names, with a one-line reason; the host's plan holds them in order with the validation
plan, warnings (worth reading, not stopping) and blockers (this host is not touched). Every
planned role's inputs, the plan's over the inventory's as the role will receive them, are read
against the role's own ``meta/argument_specs.yml`` here: a plan that is made is one the roles
accept. Bad input that makes the whole run wrong (a pinned branch too old for a GPU, a MIG
layout that cannot fit, a value the role's spec refuses) raises a BadInputError subclass
instead, before any host is changed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .catalog import Catalog, GpuModel
from .errors import PolicyError
from .facts import HostFacts, PciDevice
from .knobs import default_table, role_problems, templated
from .planners import HostContext, Notes, RolePlan, planner_for
from .planners.driver import CUDA_ARCH_DIRS, UpgradePlan, repository
from .policy import Policy
from .roletable import Role, default_roles
from .sanity import check_captures

__all__ = ["CUDA_ARCH_DIRS", "GpuGroup", "HostPlan", "RolePlan", "plan_fleet", "plan_host"]

# The validation plan: gpuprov's knobs the plan document carries for validate and verify.
VALIDATION_KNOBS = (
    "gpuprov_validation_nccl",
    "gpuprov_validation_expected_gpus",
    "gpuprov_validation_runtime",
    "gpuprov_cuda_version",
)


@dataclass(frozen=True)
class GpuGroup:
    """GPUs of one model on a host."""

    device_id: int
    count: int
    model: str  # catalog model name, or "unknown 10de:xxxx"
    sku: str | None  # None: not in the catalog


@dataclass(frozen=True)
class HostPlan:
    host: str
    simulated: bool
    gpus: tuple[GpuGroup, ...]
    nvswitches: int
    roles: tuple[RolePlan, ...]
    warnings: tuple[str, ...] = ()
    blockers: tuple[str, ...] = ()
    arch: str = ""  # the host's CPU architecture (`uname -m`), "" when unknown
    repository: str = ""  # NVIDIA's CUDA repository path for the driver, e.g. "ubuntu2404/sbsa"
    # the validation plan (VALIDATION_KNOBS as the document carries them); None: the defaults
    validation: Mapping[str, object] | None = None
    upgrade: UpgradePlan | None = None  # a loaded driver the plan replaces

    @property
    def blocked(self) -> bool:
        return bool(self.blockers)

    @property
    def gpu_summary(self) -> str:
        """ "2x H200 SXM 141GB (simulated)"; "no GPU" when none."""
        text = ", ".join(f"{g.count}x {g.model}" for g in self.gpus) or "no GPU"
        return f"{text} (simulated)" if self.simulated else text

    def role(self, name: str) -> RolePlan | None:
        return next((r for r in self.roles if r.name == name), None)

    def role_vars(self) -> dict[str, object]:
        """Every role variable of the plan, plus `gpuprov_roles`: the host's inventory overlay."""
        out: dict[str, object] = {}
        for role in self.roles:
            out.update(role.vars)
        out["gpuprov_roles"] = [r.name for r in self.roles]
        return out

    def document_vars(self) -> dict[str, object]:
        """The host's entry of the plan document: role variables and the validation plan."""
        table = default_table()
        validation = self.validation or {k: table.default(k) for k in VALIDATION_KNOBS}
        return {**self.role_vars(), **validation}


def _gpu_groups(gpus: Sequence[PciDevice], catalog: Catalog) -> tuple[GpuGroup, ...]:
    counts: dict[int, int] = {}
    for gpu in gpus:
        counts[gpu.device_id] = counts.get(gpu.device_id, 0) + 1
    groups = []
    for device_id, count in counts.items():
        model = catalog.gpu(device_id)
        groups.append(
            GpuGroup(
                device_id=device_id,
                count=count,
                model=model.model if model else f"unknown 10de:{device_id:04x}",
                sku=model.sku if model else None,
            )
        )
    return tuple(groups)


def _nvswitch_count(facts: HostFacts, catalog: Catalog, notes: Notes, gpus: int) -> int:
    endpoints, per_board = facts.nvswitch_board(catalog)
    if endpoints and gpus == 8 and endpoints != per_board:
        notes.warnings.append(
            f"{endpoints} NVSwitch devices on the PCI bus; an 8-GPU board of this generation "
            f"has {per_board}: check the board (a missing switch lowers NVLink bandwidth)"
        )
    return endpoints


def _with_cpu(facts: HostFacts, models: Sequence[GpuModel], notes: Notes) -> HostFacts:
    """The host's CPU architecture: `uname -m`'s, or, where the capture has none, that of a
    superchip's own CPU (catalog `cpu`: Grace is aarch64), never a guess of x86_64 for it."""
    cpus = {m.cpu: m.model for m in models if m.cpu}
    if not cpus:
        return facts
    cpu, model = next(iter(cpus.items()))
    if not facts.arch:
        notes.warnings.append(
            f"CPU architecture {cpu} from the GPUs ({model} is a Grace superchip): the capture "
            "has no `uname -m`"
        )
        return replace(facts, arch=cpu)
    if facts.arch != cpu:
        notes.blockers.append(
            f"`uname -m` says {facts.arch} but {model} is a Grace superchip ({cpu}): the capture "
            "is not of one host; fix: re-run `provision detect` (uname-m.txt)"
        )
    return facts


def _asked(role: Role, policy: Policy) -> bool:
    """Whether `role`'s planner is asked for this host (roles.yaml's `joins`)."""
    if role.joins == "detected":
        return True
    knob = role.joins_knob
    return role.name in policy["gpuprov_roles"] or bool(knob and policy[knob])


def _left_out(role: RolePlan) -> str:
    return (
        f"{role.name} is not in gpuprov_roles, which the inventory sets: left out although "
        f"planned here ({role.reason}); fix: add {role.name} to gpuprov_roles, or leave "
        "gpuprov_roles unset"
    )


def _checked(role: RolePlan, hostvars: Mapping[str, Any] | None) -> tuple[RolePlan, list[str]]:
    """The role's plan with its inputs read as the role reads them (its argument_specs: the
    plan's values over the inventory's), and every value the role would refuse."""
    table = default_table()
    given = {k: v for k, v in (hostvars or {}).items() if k in table.knobs}
    values, problems = role_problems(table, role.name, {**given, **role.vars})
    return replace(role, vars={k: values[k] for k in role.vars}), problems


def _contradictions(
    roles: Mapping[str, RolePlan],
    policy: Policy,
    hostvars: Mapping[str, Any] | None,
    extra_vars: Mapping[str, Any] | None,
) -> list[str]:
    """Planned values that a user's value for the same variable contradicts. -e outranks the
    plan in Ansible (extra vars beat the plan's host facts), so any -e value that the role
    reads differently from the plan's is one; an inventory value loses to the plan, so only
    one the planner does not read as its input (a value it owns: the fabric manager, NVLink5,
    IMEX) and that the plan overrides is one (the inputs it reads, it decided from)."""
    table = default_table()
    problems = []
    for role in roles.values():
        for name, planned in role.vars.items():
            if extra_vars is not None and name in extra_vars:
                given, where = extra_vars[name], "-e"
            elif hostvars is not None and name in hostvars and name not in table.policy:
                given, where = hostvars[name], "the inventory"
                if policy[name] is None:  # "" and the like: the planner chooses
                    continue
            else:
                continue
            if given is None or templated(given):
                continue
            read = role_problems(table, role.name, {name: given})[0]
            if read[name] != planned:
                fix = (
                    f"drop {name} from -e (set it in the inventory, which the planner reads), "
                    "or give -e the planned value"
                    if where == "-e"
                    else f"remove {name} from the inventory: the planner decides it"
                )
                problems.append(
                    f"{name}={given!r} ({where}) contradicts the plan's {name}={planned!r} "
                    f"for role {role.name}; fix: {fix}"
                )
    return problems


def plan_host(
    facts: HostFacts,
    policy: Policy,
    catalog: Catalog,
    *,
    today: dt.date | None = None,
    hostvars: Mapping[str, Any] | None = None,
    extra_vars: Mapping[str, Any] | None = None,
) -> HostPlan:
    """Plan one host. `today` enables end-of-life warnings (None keeps the plan date-free);
    `hostvars`: the host's inventory variables (-e's over them), which its roles receive under
    the plan's (read against each role's argument_specs with them); `extra_vars`: what -e
    gives, which no planned value may contradict."""
    notes = Notes()
    gpus = sorted(facts.gpus, key=lambda d: d.address)
    models = [catalog.gpu(d.device_id) for d in gpus]
    for dev, model in zip(gpus, models, strict=True):
        if model is None:
            notes.blockers.append(
                f"unknown GPU: PCI device 10de:{dev.device_id:04x} at {dev.address} is not in "
                "the catalog; fix: add it to orchestrator/catalog.yaml from a trusted source, "
                "or leave this host out (--limit)"
            )
    pci_errors = [e for e in facts.errors if e.startswith("sysfs-pci-devices.txt")]
    if not gpus and pci_errors:  # the capture is broken, not the host: say what is broken
        notes.blockers.append(
            f"PCI devices unknown: {pci_errors[0]}; fix: re-run `provision detect` (with "
            "--save DIR, check DIR/<host>/sysfs-pci-devices.txt), or repair the saved file"
        )
    elif not gpus:
        notes.blockers.append(
            "no NVIDIA GPU on the PCI bus; fix: check the host (passthrough, BIOS) or leave "
            "it out of gpu_nodes"
        )
    facts = _with_cpu(facts, [m for m in models if m is not None], notes)
    nvswitches = _nvswitch_count(facts, catalog, notes, len(gpus))
    ctx = HostContext(facts, policy, catalog, models, nvswitches, today, notes)
    listed = policy["gpuprov_roles"]
    for role in default_roles().rows:
        if role.runs_with is not None or not _asked(role, policy):
            continue
        planner = planner_for(role)
        planned = (
            planner(ctx)
            if planner
            else RolePlan(
                role.name, {}, "listed in gpuprov_roles: its inputs as the inventory sets them"
            )
        )
        if planned is None:
            continue
        if policy.listed and role.name not in listed:
            notes.warnings.append(_left_out(planned))
            continue
        ctx.planned[role.name] = planned
    problems: list[str] = []
    for name, planned in list(ctx.planned.items()):
        ctx.planned[name], found = _checked(planned, hostvars)
        problems += found
    problems += _contradictions(ctx.planned, policy, hostvars, extra_vars)
    if problems:
        raise PolicyError(
            "the plan's role inputs are not what the roles would accept and get:\n  "
            + "\n  ".join(problems),
            host=facts.host,
            fix="as each line says, nothing was changed",
        )
    notes.warnings.extend(f"detection: {e}" for e in facts.errors)
    check_captures(facts, catalog, notes.warnings, notes.blockers)  # orchestrator/sanity.py
    if facts.simulated:
        notes.warnings.append("simulated host: GPU facts come from the lab's GPU simulator")
    roles = tuple(ctx.planned.values())
    driver = ctx.planned.get("nvidia_driver")
    source = repository(facts, policy, catalog, roles, notes)  # may add a warning
    return HostPlan(
        host=facts.host,
        simulated=facts.simulated,
        gpus=_gpu_groups(gpus, catalog),
        nvswitches=nvswitches,
        roles=roles,
        warnings=tuple(dict.fromkeys(notes.warnings)),
        blockers=tuple(notes.blockers),
        arch=facts.arch,
        repository=source,
        validation=_validation(policy),
        upgrade=UpgradePlan.of(driver, facts.loaded_driver),
    )


def _validation(policy: Policy) -> dict[str, object]:
    table = default_table()
    return {k: policy[k] if policy[k] is not None else table.default(k) for k in VALIDATION_KNOBS}


def plan_fleet(
    facts: Mapping[str, HostFacts],
    policies: Mapping[str, Policy],
    catalog: Catalog,
    *,
    today: dt.date | None = None,
    hostvars: Mapping[str, Mapping[str, Any]] | None = None,
    extra_vars: Mapping[str, Any] | None = None,
) -> dict[str, HostPlan]:
    """Plan every host; bad input anywhere raises before any plan is returned. `hostvars`:
    per host, its inventory variables; `extra_vars`: what -e gives (final, every host)."""
    return {
        host: plan_host(
            facts[host],
            policies[host],
            catalog,
            today=today,
            hostvars=(hostvars or {}).get(host),
            extra_vars=extra_vars,
        )
        for host in sorted(facts)
    }
