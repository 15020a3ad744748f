"""Policy: what the operator asked for, typed and checked, from a host's inventory variables.

Every knob, its type, choices and default, is in one table (orchestrator/knobs.py: the roles'
argument_specs and defaults, plus gpuprov's own knobs); the names are the roles' own variable
names (``nvidia_driver_branch``...) so plain ansible-playbook users set the same thing. Values
are read by ansible-core's argument spec validation (:func:`orchestrator.knobs.read`), as the
roles read them (an INI inventory gives "580" and "off" as strings); what stays here is what
the planner decides on top: "" meaning "the planner chooses", a branch being three digits,
a version belonging to its branch, a MIG layout being defined. Anything wrong is a
PolicyError naming the host, the variable, the value and the fix. A variable named like a
knob (``gpuprov_*`` or a role's prefix) that the table does not know is a PolicyError too,
naming where it was set and the closest known name. All problems of all hosts are collected
before raising, so one run shows every mistake at once, before any host is touched.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .errors import PolicyError
from .knobs import KnobTable, bad_value, default_table, read, templated, unknown_knobs

_TABLE = default_table()


class _Refused(ValueError):
    """A value the argument spec accepts but the planner cannot use; its text: what it wants."""


def _automatic(value: Any) -> Any:
    """ "" (and 0 for a count): the planner chooses."""
    return None if value in ("", 0) else value


def _quoted(pattern: str, expected: str) -> Callable[[Any, Any], str | None]:
    def rule(value: Any, raw: Any) -> str | None:
        if value == "" or (isinstance(value, str) and value.strip() == ""):
            return None
        if not isinstance(raw, str) or not re.fullmatch(pattern, str(value).strip()):
            raise _Refused(expected)  # a YAML float would read 580.10 as "580.1"
        return str(value).strip()

    return rule


def _branch(value: str, raw: Any = None) -> int | None:
    text = value.strip()
    if text == "":
        return None
    if not text.isdigit() or not 100 <= int(text) <= 999:
        raise _Refused('a driver branch number such as 580, or ""')
    return int(text)


def _absolute(value: str, raw: Any) -> str:
    if not value.startswith("/"):
        raise _Refused("an absolute path on the host")
    return value


def _count(value: int, raw: Any) -> int | None:
    if value < 0:
        raise _Refused("a GPU count, or 0 for all")
    return value or None


def _at_least_zero(value: int, raw: Any) -> int | None:
    if value < 0:
        raise _Refused("a number of at least 0 (0: no expectation)")
    return value or None


def _ip_addresses(value: list[str], raw: Any) -> tuple[str, ...]:
    """IMEX's node configuration lists the IP addresses of the NVLink domain's trays. Each
    entry as the role's preflight reads it: a blank or padded one is refused, not dropped
    (ansible-core reads `""` as `[""]`, which the role refuses; found by
    test_knob_contract's hypothesis run)."""
    nodes = tuple(str(v) for v in value)
    for node in nodes:
        try:
            ipaddress.ip_address(node)
        except ValueError:
            raise _Refused(
                f"a list of IP addresses ({node!r} is not an IP address: list the IP addresses, "
                "not host names, of the compute trays of this NVLink domain)"
            ) from None
    return nodes


# knob -> what the planner makes of its (validated) value; the rest is taken as read
_RULES: Mapping[str, Callable[[Any, Any], Any]] = {
    "gpuprov_roles": lambda value, raw: tuple(value),
    "nvidia_driver_branch": _branch,
    # a driver release as NVIDIA numbers them: branch.minor.patch (535.54.03, 580.159.04,
    # 595.91.07: every version in tests/recorded/reference/packages.yaml); "580.95" is none
    "nvidia_driver_version": _quoted(
        r"\d{3}\.\d{2,3}\.\d{2}", 'a full driver version such as "580.159.04", or ""'
    ),
    "nvidia_driver_state_file": _absolute,
    "nvidia_driver_imex_nodes": _ip_addresses,
    "nvidia_container_toolkit_cdi_spec": _absolute,
    "nvidia_container_toolkit_version": lambda value, raw: _automatic(value.strip()),
    "mig_layout": lambda value, raw: _automatic(value.strip()),
    "gpuprov_validation_expected_gpus": _count,
    "gpuprov_cuda_version": _quoted(r"\d+\.\d+", 'a quoted CUDA version such as "12.8"'),
    "gpuprov_fabric_instance_type": lambda value, raw: _automatic(value.strip()),
    "gpuprov_fabric_expected_devices": _at_least_zero,
    "gpuprov_fabric_link_rate_gbps": _at_least_zero,
}


def decide(
    table: KnobTable, variables: Mapping[str, Any], *, planner: bool = True
) -> tuple[dict[str, Any], list[str]]:
    """Every knob's value as the planner uses it (`planner`; else as the roles read it,
    with the same rules), and every problem, one line per bad knob."""
    values, problems = read(table, variables, planner=planner)
    knobs = table.reading(planner)
    for name in sorted(n for n in table.policy if n in variables and templated(values[n])):
        # a template the inventory could not resolve (an undefined variable, a fact of the
        # play): the planner cannot decide from it (the roles would template it, later)
        problems.append(
            f"{name}={variables[name]!r} is a template that cannot be resolved from the "
            "inventory (it names an undefined variable, or a fact known only during the "
            f"play), and the planner reads {name}; fix: set {name} to a value, or to a "
            "template of inventory variables"
        )
        values[name] = knobs[name].default
    bad = {p.split("=", 1)[0] for p in problems}
    for name, rule in _RULES.items():
        raw = variables[name] if variables.get(name) is not None else values[name]
        if name in bad or templated(values[name]):
            continue
        try:
            values[name] = rule(values[name], raw)
        except _Refused as e:
            problems.append(bad_value(knobs[name], raw, expected=str(e)))
            values[name] = rule(knobs[name].default, knobs[name].default)
    return values, problems


@dataclass(frozen=True)
class Policy:
    """A host's knobs as the planner reads them, under their own names (the roles' variable
    names, gpuprov's `gpuprov_*`): ``policy["nvidia_driver_branch"]``. `listed`: the inventory
    (or -e) sets gpuprov_roles, so a role that joins by detection or a knob and is not in it
    is left out."""

    host: str
    values: Mapping[str, Any]
    listed: bool = False

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def replace(self, **values: Any) -> Policy:
        return replace(self, values={**self.values, **values})


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
    values, problems = decide(_TABLE, hostvars)
    problems[:0] = _unknown(hostvars, origins or {}, _TABLE)
    policy = Policy(host, values, listed=hostvars.get("gpuprov_roles") is not None)
    version, branch = policy["nvidia_driver_version"], policy["nvidia_driver_branch"]
    if version and branch and int(version.split(".")[0]) != branch:
        problems.append(
            f"nvidia_driver_version={version} is not a release of "
            f"nvidia_driver_branch={branch}; fix: set one of them, or make "
            "the version's first number the branch"
        )
    elif version and branch is None:
        try:  # the version alone names its branch
            policy = policy.replace(nvidia_driver_branch=_branch(version.split(".")[0]))
        except _Refused:
            problems.append(
                f"nvidia_driver_version={version} names no driver branch (its first number "
                "should be three digits); fix: set a version such as 580.159.04"
            )
    layout, configs = policy["mig_layout"], policy["mig_configs"]
    if layout not in (None, "disabled") and layout not in configs:
        known = ", ".join(sorted(configs)) or "none defined"
        problems.append(
            f"mig_layout={layout!r} is not a key of mig_configs ({known}); fix: "
            'define it under mig_configs, or set mig_layout to "disabled" or ""'
        )
    if policy["nvidia_container_toolkit_default_runtime"] is True and (
        "nvidia_container_toolkit" not in policy["gpuprov_roles"]
    ):
        problems.append(
            "nvidia_container_toolkit_default_runtime=true but nvidia_container_toolkit is not "
            "in gpuprov_roles; fix: add the role, or set the default runtime to false"
        )
    return policy, problems


def load_policy(
    host: str, hostvars: Mapping[str, object], origins: Mapping[str, str] | None = None
) -> Policy:
    """The host's policy, or PolicyError listing every problem with it."""
    policy, problems = policy_problems(host, hostvars, origins)
    if problems:
        raise bad_policy(host, problems)
    return policy


def bad_policy(host: str, problems: list[str]) -> PolicyError:
    """The one bad-input error of a host's knob values: the planner's, the plan's and
    verify's readings raise it alike."""
    return PolicyError("bad policy:\n  " + "\n  ".join(problems), host=host)


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
