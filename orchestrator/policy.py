"""Policy: what the operator asked for, typed and checked, from a host's inventory variables.

Every knob is documented with its default in ``inventory/group_vars/all.yml``; the names are
the roles' own variable names (``nvidia_driver_branch``...) so plain ansible-playbook users
set the same thing. Values are accepted the way Ansible's argument_specs coerce them (an
INI inventory gives "580" and "true" as strings); anything else is a PolicyError naming the
host, the variable, the value and the fix. All problems of all hosts are collected before
raising, so one run shows every mistake at once, before any host is touched.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar, cast

from orchestrator.errors import PolicyError

KNOWN_ROLES = ("nvidia_driver", "docker", "nvidia_container_toolkit", "mig")
DEFAULT_ROLES = ("nvidia_driver", "docker", "nvidia_container_toolkit")

DriverSource = Literal["cuda", "distribution"]
DriverFlavour = Literal["auto", "open", "proprietary"]
RebootPolicy = Literal["allow", "forbid"]
DockerSource = Literal["docker", "distribution"]
ValidationRuntime = Literal["auto", "docker", "host"]

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")

T = TypeVar("T")


@dataclass(frozen=True)
class Policy:
    host: str
    roles: tuple[str, ...] = DEFAULT_ROLES
    driver_branch: int | None = None  # None: the planner picks (newest LTSB fitting all GPUs)
    driver_version: str | None = None  # None: newest of the branch, then held
    driver_source: DriverSource = "cuda"
    driver_flavour: DriverFlavour = "auto"
    driver_reboot: RebootPolicy = "forbid"  # as the role: a reboot only when allowed
    docker_source: DockerSource = "docker"
    toolkit_version: str | None = None
    toolkit_default_runtime: bool = False
    mig_layout: str | None = None  # None: leave MIG alone; "disabled": tear MIG down
    mig_configs: Mapping[str, object] = field(default_factory=dict)
    validation_nccl: bool = True  # the multi-GPU NCCL all_reduce check is required
    validation_expected_gpus: int | None = None  # None: every GPU on the PCI bus
    validation_runtime: ValidationRuntime = "auto"
    cuda_version: str | None = None  # CUDA the workloads are built with ("12.8"): driver floor


@dataclass
class _Reader:
    """Reads one host's variables, collecting every problem instead of stopping at the first."""

    host: str
    hostvars: Mapping[str, object]
    problems: list[str] = field(default_factory=list)

    def get(self, name: str, default: T, convert: Callable[[object], T], expected: str) -> T:
        if name not in self.hostvars or self.hostvars[name] is None:
            return default
        value = self.hostvars[name]
        try:
            return convert(value)
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


def _roles(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(v in KNOWN_ROLES for v in value):
        raise ValueError(value)
    return tuple(cast(list[str], list(value)))


def _mapping(value: object) -> Mapping[str, object]:
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return cast(Mapping[str, object], value)
    raise ValueError(value)


def policy_problems(host: str, hostvars: Mapping[str, object]) -> tuple[Policy, list[str]]:
    """Build the host's policy; also return every problem found (empty when all is well)."""
    r = _Reader(host, hostvars)
    policy = Policy(
        host=host,
        roles=r.get(
            "gpuprov_roles", DEFAULT_ROLES, _roles, "a list drawn from " + ", ".join(KNOWN_ROLES)
        ),
        driver_branch=r.get(
            "nvidia_driver_branch", None, _branch, 'a driver branch number such as 580, or ""'
        ),
        driver_version=r.get(
            "nvidia_driver_version",
            None,
            _optional_version,
            'a full driver version such as "580.159.04", or ""',
        ),
        driver_source=cast(
            DriverSource,
            r.get(
                "nvidia_driver_source",
                "cuda",
                _choice("cuda", "distribution"),
                "cuda or distribution",
            ),
        ),
        driver_flavour=cast(
            DriverFlavour,
            r.get(
                "nvidia_driver_flavour",
                "auto",
                _choice("auto", "open", "proprietary"),
                "auto, open or proprietary",
            ),
        ),
        driver_reboot=cast(
            RebootPolicy,
            r.get("nvidia_driver_reboot", "forbid", _choice("allow", "forbid"), "allow or forbid"),
        ),
        docker_source=cast(
            DockerSource,
            r.get(
                "docker_source",
                "docker",
                _choice("docker", "distribution"),
                "docker or distribution",
            ),
        ),
        toolkit_version=r.get(
            "nvidia_container_toolkit_version", None, _optional_text, 'a version string or ""'
        ),
        toolkit_default_runtime=r.get(
            "nvidia_container_toolkit_default_runtime", False, _bool, "true or false"
        ),
        mig_layout=r.get(
            "mig_layout", None, _optional_text, 'a name from mig_configs, "disabled" or ""'
        ),
        mig_configs=r.get("mig_configs", {}, _mapping, "a mapping of layout name -> devices list"),
        validation_nccl=r.get("gpuprov_validation_nccl", True, _bool, "true or false"),
        validation_expected_gpus=r.get(
            "gpuprov_validation_expected_gpus", None, _optional_int, "a GPU count, or 0 for all"
        ),
        cuda_version=r.get(
            "gpuprov_cuda_version", None, _cuda_version, 'a quoted CUDA version such as "12.8"'
        ),
        validation_runtime=cast(
            ValidationRuntime,
            r.get(
                "gpuprov_validation_runtime",
                "auto",
                _choice("auto", "docker", "host"),
                "auto, docker or host",
            ),
        ),
    )
    version, branch = policy.driver_version, policy.driver_branch
    if version and branch and int(version.split(".")[0]) != branch:
        r.problems.append(
            f"nvidia_driver_version={version} is not a release of "
            f"nvidia_driver_branch={branch}; fix: set one of them, or make "
            "the version's first number the branch"
        )
    if policy.mig_layout not in (None, "disabled") and policy.mig_layout not in policy.mig_configs:
        known = ", ".join(sorted(policy.mig_configs)) or "none defined"
        r.problems.append(
            f"mig_layout={policy.mig_layout!r} is not a key of mig_configs ({known}); fix: "
            'define it under mig_configs, or set mig_layout to "disabled" or ""'
        )
    return policy, r.problems


def load_policy(host: str, hostvars: Mapping[str, object]) -> Policy:
    """The host's policy, or PolicyError listing every problem with it."""
    policy, problems = policy_problems(host, hostvars)
    if problems:
        raise PolicyError("bad policy:\n  " + "\n  ".join(problems), host=host)
    return policy


def load_policies(hostvars: Mapping[str, Mapping[str, object]]) -> dict[str, Policy]:
    """Policies for every host; one PolicyError naming every bad host and variable."""
    policies: dict[str, Policy] = {}
    lines: list[str] = []
    for host, variables in hostvars.items():
        policy, problems = policy_problems(host, variables)
        policies[host] = policy
        lines.extend(f"{host}: {p}" for p in problems)
    if lines:
        raise PolicyError(
            f"bad policy on {len({ln.split(':')[0] for ln in lines})} host(s), "
            "nothing was changed:\n  " + "\n  ".join(lines)
        )
    return policies
