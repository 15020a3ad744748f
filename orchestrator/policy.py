"""Policy: what the operator asked for, typed and checked, from a host's inventory variables.

Every knob, its type, choices and default, is in one table (orchestrator/knobs.py: the roles'
argument_specs and defaults, plus gpuprov's own knobs); the names are the roles' own variable
names (``nvidia_driver_branch``...) so plain ansible-playbook users set the same thing. Values
are accepted the way Ansible's argument_specs coerce them (an INI inventory gives "580" and
"true" as strings); anything else is a PolicyError naming the host, the variable, the value and
the fix. A variable named like a knob (``gpuprov_*`` or a role's prefix) that the table does
not know is a PolicyError too, naming where it was set and the closest known name. All problems
of all hosts are collected before raising, so one run shows every mistake at once, before any
host is touched.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from orchestrator.errors import PolicyError
from orchestrator.knobs import KnobTable, default_table, unknown_knobs

_TABLE = default_table()
KNOWN_ROLES: tuple[str, ...] = _TABLE["gpuprov_roles"].choices
DEFAULT_ROLES: tuple[str, ...] = tuple(_TABLE.default("gpuprov_roles"))

DriverSource = Literal["cuda", "distribution"]
DriverFlavour = Literal["auto", "open", "proprietary"]
RebootPolicy = Literal["allow", "forbid"]
DockerSource = Literal["docker", "distribution"]
ValidationRuntime = Literal["auto", "docker", "host"]

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
# A driver release as NVIDIA numbers them: branch.minor.patch, e.g. 535.54.03, 580.159.04,
# 595.91.07 (every version in tests/recorded/reference/packages.yaml has this shape); "580.95"
# is none (issue 27)
_VERSION = re.compile(r"^\d{3}\.\d{2,3}\.\d{2}$")


def _table_default(name: str) -> Callable[[], Any]:
    """The knob's default from the table, read as the policy reads a value."""
    return lambda: _KNOBS[name].convert(_TABLE.default(name))


@dataclass(frozen=True)
class Policy:
    host: str
    roles: tuple[str, ...] = field(default_factory=_table_default("gpuprov_roles"))
    # None: the planner picks (newest LTSB fitting all GPUs; the version's, when one is set)
    driver_branch: int | None = field(default_factory=_table_default("nvidia_driver_branch"))
    # None: newest of the branch, then held
    driver_version: str | None = field(default_factory=_table_default("nvidia_driver_version"))
    driver_source: DriverSource = field(default_factory=_table_default("nvidia_driver_source"))
    driver_flavour: DriverFlavour = field(default_factory=_table_default("nvidia_driver_flavour"))
    driver_reboot: RebootPolicy = field(default_factory=_table_default("nvidia_driver_reboot"))
    # role inputs the planner passes on as set (the plan's driver/toolkit records carry them)
    driver_persistenced: bool = field(default_factory=_table_default("nvidia_driver_persistenced"))
    driver_state_file: str = field(default_factory=_table_default("nvidia_driver_state_file"))
    toolkit_cdi_spec: str = field(
        default_factory=_table_default("nvidia_container_toolkit_cdi_spec")
    )
    docker_source: DockerSource = field(default_factory=_table_default("docker_source"))
    toolkit_version: str | None = field(
        default_factory=_table_default("nvidia_container_toolkit_version")
    )
    toolkit_default_runtime: bool = field(
        default_factory=_table_default("nvidia_container_toolkit_default_runtime")
    )
    # None: leave MIG alone; "disabled": tear MIG down
    mig_layout: str | None = field(default_factory=_table_default("mig_layout"))
    mig_configs: Mapping[str, object] = field(default_factory=_table_default("mig_configs"))
    # the multi-GPU NCCL all_reduce check is required
    validation_nccl: bool = field(default_factory=_table_default("gpuprov_validation_nccl"))
    # None: every GPU on the PCI bus
    validation_expected_gpus: int | None = field(
        default_factory=_table_default("gpuprov_validation_expected_gpus")
    )
    validation_runtime: ValidationRuntime = field(
        default_factory=_table_default("gpuprov_validation_runtime")
    )
    # CUDA the workloads are built with ("12.8"): driver floor
    cuda_version: str | None = field(default_factory=_table_default("gpuprov_cuda_version"))


@dataclass
class _Reader:
    """Reads one host's variables, collecting every problem instead of stopping at the first."""

    host: str
    hostvars: Mapping[str, object]
    problems: list[str] = field(default_factory=list)

    def get(self, name: str) -> Any:
        """The knob's value read as policy; its default when unset; a problem when wrong."""
        knob = _KNOBS[name]
        default = knob.convert(_TABLE.default(name))
        if name not in self.hostvars or self.hostvars[name] is None:
            return default
        value = self.hostvars[name]
        expected = knob.expected
        try:
            return knob.convert(value)
        except (TypeError, ValueError):
            self.problems.append(
                f"{name}={value!r} ({type(value).__name__}) is not {expected}; "
                f"fix: set {name} to {expected} in the inventory (group_vars or host_vars)"
            )
            return default


def _choice(*choices: str) -> Callable[[object], str]:
    def convert(value: object) -> str:
        if isinstance(value, str) and value in choices:
            return value
        raise ValueError(value)

    return convert


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
        return value.lower() in _TRUE
    raise ValueError(value)


def _optional_int(value: object) -> int | None:
    """An int, a string of digits, or "" / 0 for "automatic"."""
    if isinstance(value, bool):
        raise TypeError(value)
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.strip() in ("", "auto"):
        return None
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value)
    else:
        raise ValueError(value)
    if number < 0:
        raise ValueError(value)
    return number or None


def _branch(value: object) -> int | None:
    branch = _optional_int(value)
    if branch is not None and not 100 <= branch <= 999:
        raise ValueError(value)
    return branch


def _optional_version(value: object) -> str | None:
    if isinstance(value, str) and value.strip() == "":
        return None
    if isinstance(value, str) and _VERSION.match(value.strip()):
        return value.strip()
    raise ValueError(value)


def _optional_text(value: object) -> str | None:
    if isinstance(value, str):
        return value.strip() or None
    raise ValueError(value)


def _cuda_version(value: object) -> str | None:
    if isinstance(value, str) and value.strip() == "":
        return None
    if isinstance(value, str) and re.fullmatch(r"\d+\.\d+", value.strip()):
        return value.strip()
    raise ValueError(value)  # a float (12.10 would read as 12.1) is refused on purpose


def _path(value: object) -> str:
    if isinstance(value, str) and value.strip().startswith("/"):
        return value.strip()
    raise ValueError(value)


def _roles(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(v in KNOWN_ROLES for v in value):
        raise ValueError(value)
    return tuple(cast(list[str], list(value)))


def _mapping(value: object) -> Mapping[str, object]:
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return cast(Mapping[str, object], value)
    raise ValueError(value)


@dataclass(frozen=True)
class _PolicyKnob:
    field: str  # Policy's field
    convert: Callable[[object], Any]
    expected: str  # what a valid value looks like, for the message


def _choices(name: str, field_name: str) -> _PolicyKnob:
    choices = tuple(str(c) for c in _TABLE.policy[name].choices)
    return _PolicyKnob(
        field_name, _choice(*choices), ", ".join(choices[:-1]) + " or " + choices[-1]
    )


# knob -> how the policy reads it; the knobs with choices take them from the table
_KNOBS: dict[str, _PolicyKnob] = {
    "gpuprov_roles": _PolicyKnob(
        "roles", _roles, "a list drawn from " + ", ".join(str(r) for r in KNOWN_ROLES)
    ),
    "nvidia_driver_branch": _PolicyKnob(
        "driver_branch", _branch, 'a driver branch number such as 580, or ""'
    ),
    "nvidia_driver_version": _PolicyKnob(
        "driver_version", _optional_version, 'a full driver version such as "580.159.04", or ""'
    ),
    "nvidia_driver_source": _choices("nvidia_driver_source", "driver_source"),
    "nvidia_driver_flavour": _choices("nvidia_driver_flavour", "driver_flavour"),
    "nvidia_driver_reboot": _choices("nvidia_driver_reboot", "driver_reboot"),
    "nvidia_driver_persistenced": _PolicyKnob("driver_persistenced", _bool, "true or false"),
    "nvidia_driver_state_file": _PolicyKnob(
        "driver_state_file", _path, "an absolute path on the host"
    ),
    "docker_source": _choices("docker_source", "docker_source"),
    "nvidia_container_toolkit_version": _PolicyKnob(
        "toolkit_version", _optional_text, 'a version string or ""'
    ),
    "nvidia_container_toolkit_default_runtime": _PolicyKnob(
        "toolkit_default_runtime", _bool, "true or false"
    ),
    "nvidia_container_toolkit_cdi_spec": _PolicyKnob(
        "toolkit_cdi_spec", _path, "an absolute path on the host"
    ),
    "mig_layout": _PolicyKnob(
        "mig_layout", _optional_text, 'a name from mig_configs, "disabled" or ""'
    ),
    "mig_configs": _PolicyKnob("mig_configs", _mapping, "a mapping of layout name -> devices list"),
    "gpuprov_validation_nccl": _PolicyKnob("validation_nccl", _bool, "true or false"),
    "gpuprov_validation_expected_gpus": _PolicyKnob(
        "validation_expected_gpus", _optional_int, "a GPU count, or 0 for all"
    ),
    "gpuprov_validation_runtime": _choices("gpuprov_validation_runtime", "validation_runtime"),
    "gpuprov_cuda_version": _PolicyKnob(
        "cuda_version", _cuda_version, 'a quoted CUDA version such as "12.8"'
    ),
}


def _unknown(
    hostvars: Mapping[str, object], origins: Mapping[str, str], table: KnobTable
) -> list[str]:
    problems = []
    for found in unknown_knobs(table, hostvars):
        where = origins.get(found.name, "the inventory")
        hint = f"did you mean {found.closest}? " if found.closest else ""
        fix = f"rename it to {found.closest}" if found.closest else "remove it"
        problems.append(
            f"{found.name} (set in {where}) is not a knob of gpuprov or its roles; {hint}"
            f"fix: {fix} (every knob: inventory/group_vars/all.yml, the roles' READMEs)"
        )
    return problems


def policy_problems(
    host: str, hostvars: Mapping[str, object], origins: Mapping[str, str] | None = None
) -> tuple[Policy, list[str]]:
    """Build the host's policy; also return every problem found (empty when all is well).
    `origins`: where each variable was set ("file:line"), for the messages."""
    r = _Reader(host, hostvars)
    r.problems.extend(_unknown(hostvars, origins or {}, _TABLE))
    values = {knob.field: r.get(name) for name, knob in _KNOBS.items()}
    policy = Policy(host=host, **values)
    version, branch = policy.driver_version, policy.driver_branch
    if version and branch and int(version.split(".")[0]) != branch:
        r.problems.append(
            f"nvidia_driver_version={version} is not a release of "
            f"nvidia_driver_branch={branch}; fix: set one of them, or make "
            "the version's first number the branch"
        )
    elif version and branch is None:
        try:  # the version alone names its branch
            policy = replace(policy, driver_branch=_branch(version.split(".")[0]))
        except ValueError:
            r.problems.append(
                f"nvidia_driver_version={version} names no driver branch (its first number "
                "should be three digits); fix: set a version such as 580.159.04"
            )
    if policy.mig_layout not in (None, "disabled") and policy.mig_layout not in policy.mig_configs:
        known = ", ".join(sorted(policy.mig_configs)) or "none defined"
        r.problems.append(
            f"mig_layout={policy.mig_layout!r} is not a key of mig_configs ({known}); fix: "
            'define it under mig_configs, or set mig_layout to "disabled" or ""'
        )
    return policy, r.problems


def load_policy(
    host: str, hostvars: Mapping[str, object], origins: Mapping[str, str] | None = None
) -> Policy:
    """The host's policy, or PolicyError listing every problem with it."""
    policy, problems = policy_problems(host, hostvars, origins)
    if problems:
        raise PolicyError("bad policy:\n  " + "\n  ".join(problems), host=host)
    return policy


def load_policies(
    hostvars: Mapping[str, Mapping[str, object]],
    origins: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Policy]:
    """Policies for every host; one PolicyError naming every bad host and variable.
    `origins`: per host, where each variable was set ("file:line")."""
    policies: dict[str, Policy] = {}
    lines: list[str] = []
    for host, variables in hostvars.items():
        policy, problems = policy_problems(host, variables, (origins or {}).get(host))
        policies[host] = policy
        lines.extend(f"{host}: {p}" for p in problems)
    if lines:
        raise PolicyError(
            f"bad policy on {len({ln.split(':')[0] for ln in lines})} host(s), "
            "nothing was changed:\n  " + "\n  ".join(lines)
        )
    return policies
