"""The one table of knobs: every variable gpuprov or its roles read, with its contract, and
the one reader of their values.

Role inputs come from the roles themselves: their spec (type, choices, elements,
description) from ``roles/<role>/meta/argument_specs.yml``, the default from
``roles/<role>/defaults/main.yml`` (which must agree with the spec's). gpuprov's own
``gpuprov_*`` knobs, the lab's, and how the planner reads the role inputs it decides
(``nvidia_driver_flavour: auto``...) come from ``knobs.yaml`` beside this module, written in
the same form. :func:`read` reads values with ansible-core's ``ArgumentSpecValidator``, as
the role's own argument validation does (``"false"``, ``"off"``, ``"8"``, ``"a,b"`` from an
INI inventory), for the planner (policy.py), the planned role inputs
(:func:`role_problems`) and verify (verify/expect.py) alike; a bad value is one line naming
the knob, the value and the fix.
The docs in ``inventory/group_vars/all.yml`` (:func:`render_group_vars`) read this table too.

A variable named like a knob (``gpuprov_*`` or a role's prefix) that the table does not know
is a typo or a knob that does not exist: :func:`unknown_knobs` finds those, with the closest
known name.
"""

from __future__ import annotations

import difflib
import functools
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from . import paths
from .catalog import SAFE_LOADER
from .errors import CatalogError
from .roletable import default_roles

REPO_ROOT = paths.SOURCE_ROOT  # the checkout, or the wheel's bundle
ROLES_DIR = REPO_ROOT / "roles"
DATA = Path(__file__).with_name("knobs.yaml")

# role -> the prefix of its variables (the role table's)
ROLE_PREFIXES: Mapping[str, str] = default_roles().prefixes
GUARDED_PREFIXES = ("gpuprov_", *ROLE_PREFIXES.values())


@dataclass(frozen=True)
class Knob:
    """One variable's contract: its argument_specs option (`spec`) and its default."""

    name: str
    owner: str  # a role name, "gpuprov" or "lab"
    default: Any
    spec: Mapping[str, Any]  # the argument_specs option (its `default` left to `default`)
    set_by: str | None = None  # "orchestrator": not for users to set

    @property
    def type(self) -> str:
        return str(self.spec.get("type", "str"))

    @property
    def choices(self) -> tuple[Any, ...]:
        return tuple(self.spec.get("choices") or ())

    @property
    def doc(self) -> str:
        value = self.spec.get("description")
        return " ".join(str(v) for v in value) if isinstance(value, list) else str(value or "")

    @property
    def expected(self) -> str:
        """What a valid value looks like, for a message."""
        if self.choices:
            words = [str(c) for c in self.choices]
            listed = ", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else words[0]
            return f"a list drawn from {', '.join(words)}" if self.type == "list" else listed
        return _EXPECTED.get(self.type, f"a {self.type}")


_EXPECTED = {
    "bool": "true or false",
    "int": "an integer",
    "list": "a list",
    "dict": "a mapping",
    "path": "a path",
    "str": "a string",
}


@dataclass(frozen=True)
class KnobTable:
    knobs: Mapping[str, Knob]  # every known variable, as its owner reads it
    policy: Mapping[str, Knob]  # role inputs as the planner reads them (its default, choices)
    renamed: Mapping[str, str] = field(default_factory=dict)  # a retired knob -> its successor

    def __getitem__(self, name: str) -> Knob:
        return self.knobs[name]

    def default(self, name: str) -> Any:
        """The default the planner (policy knobs) or the role / gpuprov (others) applies."""
        knob = self.policy.get(name) or self.knobs[name]
        return knob.default

    def role_knobs(self, role: str) -> tuple[Knob, ...]:
        return tuple(k for k in self.knobs.values() if k.owner == role)

    def is_guarded(self, name: str) -> bool:
        """Named like a knob: a `gpuprov_*` variable or one with a role's prefix (in any case:
        Ansible's names are case-sensitive, so NVIDIA_DRIVER_BRANCH is no knob's)."""
        return name.lower().startswith(GUARDED_PREFIXES)

    def closest(self, name: str) -> str | None:
        if name in self.renamed:
            return self.renamed[name]
        if name.lower() in self.knobs:
            return name.lower()
        found = difflib.get_close_matches(name.lower(), list(self.knobs), n=1, cutoff=0.6)
        return found[0] if found else None

    def reading(self, planner: bool) -> Mapping[str, Knob]:
        """Every knob as the planner reads it (`planner`), or as its owner does."""
        return {**self.knobs, **self.policy} if planner else self.knobs


@dataclass(frozen=True)
class UnknownKnob:
    name: str
    closest: str | None


def unknown_knobs(table: KnobTable, names: Iterable[str]) -> list[UnknownKnob]:
    """The variables among `names` named like a knob that the table does not know."""
    return [
        UnknownKnob(n, table.closest(n))
        for n in sorted(set(names))
        if table.is_guarded(n) and n not in table.knobs
    ]


# --- reading values: ansible-core's argument spec validation ----------------------------


def templated(value: object) -> bool:
    """A value Ansible templates in the play (it refers to facts): its type is known then."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _validate(knobs: tuple[Knob, ...], given: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """ansible-core's validation of `given`, as a role's validate_argument_spec runs it."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    validator = ArgumentSpecValidator({k.name: dict(k.spec) for k in knobs})
    result = validator.validate(dict(given), validate_role_argument_spec=True)
    return result.validated_parameters, result.error_messages


def read(
    table: KnobTable, variables: Mapping[str, Any], *, planner: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """Every knob's value in `variables` read as ansible-core's argument spec validation
    reads it (the role's own spec; `planner`: the planner's reading of the inputs it
    decides), and every problem: one line per bad value, naming the knob, the value and the
    fix. A knob left unset (or None) is its default; a value Ansible templates in the play
    is passed on as written."""
    knobs = table.reading(planner)
    given = {
        n: v for n, v in variables.items() if n in knobs and v is not None and not templated(v)
    }
    chosen = tuple(knobs[n] for n in sorted(given))
    validated, errors = _validate(chosen, given)
    problems: list[str] = []
    if errors:  # each bad knob alone: its own message
        for knob in chosen:
            own = _validate((knob,), {knob.name: given[knob.name]})[1]
            if own:
                problems.append(bad_value(knob, given[knob.name], "; ".join(own)))
    values = {n: k.default for n, k in knobs.items()}
    values.update({n: v for n, v in variables.items() if n in knobs and templated(v)})
    values.update({n: v for n, v in validated.items() if n in given and n in knobs})
    return values, problems


def role_problems(
    table: KnobTable, role: str, variables: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """`variables` (a role's planned inputs over the inventory's) read as the role's own
    argument_specs reads them when it starts (ansible-core's validator): the values it would
    get, and every one it would refuse, one line each naming the role."""
    knobs = tuple(table.role_knobs(role))
    given = {k.name: variables[k.name] for k in knobs if k.name in variables}
    values, problems = read(KnobTable({k.name: k for k in knobs}, {}), given, planner=False)
    return values, [f"role {role}: {p}" for p in problems]


def bad_value(knob: Knob, value: object, why: str = "", expected: str = "") -> str:
    """The one message of a bad knob value (policy, plan and verify print it alike)."""
    expected = expected or knob.expected
    detail = f" ({why})" if why else ""
    return (
        f"{knob.name}={value!r} ({type(value).__name__}) is not {expected}{detail}; "
        f"fix: set {knob.name} to {expected} in the inventory (group_vars or host_vars)"
    )


# --- loading the table -------------------------------------------------------------------


def _load_yaml(path: Path) -> Any:
    try:
        # libyaml's loader where present: every command loads the table (0.15 s pure-Python)
        return yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except (OSError, yaml.YAMLError) as e:
        raise CatalogError(f"{path}: cannot be read as YAML ({e})") from e


def _option(option: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in option.items() if k != "default"}


def role_knobs(role: str, roles_dir: Path = ROLES_DIR) -> dict[str, Knob]:
    """A role's inputs: argument_specs (every entry point, which must agree) + defaults."""
    where = f"roles/{role}/meta/argument_specs.yml"
    specs = _load_yaml(roles_dir / role / "meta" / "argument_specs.yml")["argument_specs"]
    defaults = _load_yaml(roles_dir / role / "defaults" / "main.yml") or {}
    out: dict[str, Knob] = {}
    seen: dict[str, Any] = {}
    for entry, body in specs.items():
        for name, option in (body.get("options") or {}).items():
            if seen.setdefault(name, option) != option:
                raise CatalogError(
                    f"{where}: {name} differs between entry points ({entry}); fix: describe it "
                    "the same way in each"
                )
    for name, option in seen.items():
        if name not in defaults:
            raise CatalogError(
                f"roles/{role}: {name} is in argument_specs but has no default in "
                "defaults/main.yml; fix: give it one there"
            )
        if "default" in option and option["default"] != defaults[name]:
            raise CatalogError(
                f"{where}: {name}'s default {option['default']!r} is not defaults/main.yml's "
                f"{defaults[name]!r}; fix: make them equal"
            )
        out[name] = Knob(name, role, defaults[name], _option(option))
    return out


def load_table(data: Path = DATA, roles_dir: Path = ROLES_DIR) -> KnobTable:
    doc = _load_yaml(data)
    specs = doc["argument_specs"]
    roles = default_roles()
    set_by = {n: who for who, names in (doc.get("set_by") or {}).items() for n in names}
    knobs: dict[str, Knob] = {}
    for role in ROLE_PREFIXES:
        knobs.update(role_knobs(role, roles_dir))
    for owner in ("gpuprov", "lab"):
        for name, option in (specs[owner].get("options") or {}).items():
            if name in knobs:
                raise CatalogError(f"{data}: {name} is already a role input")
            option = dict(option)
            if name == "gpuprov_roles":  # the role table's
                option.update(choices=list(roles.order), default=list(roles.defaults))
            knobs[name] = Knob(
                name, owner, option.get("default"), _option(option), set_by.get(name)
            )
    policy: dict[str, Knob] = {}
    for name, option in (specs["planner"].get("options") or {}).items():
        if name not in knobs:
            raise CatalogError(f"{data}: planner knob {name} is no role input")
        knob = knobs[name]
        default = option.get("default", knob.default)
        policy[name] = replace(knob, default=default, spec={**knob.spec, **_option(option)})
    for name, knob in knobs.items():
        if knob.owner == "gpuprov":
            policy[name] = knob
    renamed = {str(k): str(v) for k, v in (doc.get("renamed") or {}).items()}
    for old, new in renamed.items():
        if old in knobs or new not in knobs:
            raise CatalogError(f"{data}: renamed {old} -> {new}: {old} must be gone, {new} known")
    return KnobTable(knobs, policy, renamed)


@functools.cache
def default_table() -> KnobTable:
    return load_table()


# --- the docs in inventory/group_vars/all.yml --------------------------------------------

GROUP_VARS_BEGIN = (
    "# --- knobs: generated from orchestrator/knobs.py (python -m orchestrator.knobs) ---"
)
GROUP_VARS_END = "# --- end of generated knobs ---"
# Role inputs that operators commonly set, documented in all.yml besides the policy.
DOCUMENTED_ROLE_KNOBS = (
    "nvidia_driver_cuda_repo_url",
    "nvidia_driver_cuda_repo_key",
    "docker_daemon_options",
    "docker_users",
    "nvidia_container_toolkit_configure_containerd",
    "nvidia_container_toolkit_cdi_spec",
)


def _value(value: Any) -> str:
    if value == "":
        return '""'
    text = yaml.safe_dump({"x": value}, default_flow_style=True, width=10_000).strip()
    return text.removeprefix("{x: ").removesuffix("}")


def _commented(knob: Knob, where: str = "") -> list[str]:
    lines = textwrap.wrap(f"{knob.doc} ({where})" if where else knob.doc, width=93)
    out = [f"# {line}" for line in lines]
    if isinstance(knob.default, Mapping) and knob.default:
        out.append(f"# {knob.name}:")
        dumped = yaml.safe_dump(dict(knob.default), default_flow_style=False, sort_keys=False)
        out += [f"#   {line}" for line in dumped.splitlines()]
    else:
        out.append(f"# {knob.name}: {_value(knob.default)}")
    return out


def render_group_vars(table: KnobTable) -> str:
    """The generated block of inventory/group_vars/all.yml: every user knob, its default."""
    lines = [GROUP_VARS_BEGIN]
    lines.append("# Shown commented out with the default that applies when unset.")
    lines.append("# - read by the planner (policy; a wrong type or an unknown name stops the run):")
    for name, knob in table.policy.items():
        if knob.set_by or name in ("gpuprov_roles", "mig_configs"):
            continue  # set below this block, or not for users
        lines += _commented(knob)
    lines.append("# - passed to the roles as set (every other one: the role's README):")
    for name in DOCUMENTED_ROLE_KNOBS:
        knob = table.knobs[name]
        lines += _commented(knob, f"role {knob.owner}")
    lines.append(GROUP_VARS_END)
    return "\n".join(lines) + "\n"


def group_vars_block(text: str) -> str | None:
    """The generated block as it stands in a group_vars file (None: the file has none)."""
    start, end = text.find(GROUP_VARS_BEGIN), text.find(GROUP_VARS_END)
    if start < 0 or end < start:
        return None
    return text[start : end + len(GROUP_VARS_END)] + "\n"


def update_group_vars(path: Path, table: KnobTable) -> bool:
    """Rewrite the generated block of `path` in place; True when it changed."""
    text = path.read_text(encoding="utf-8")
    block = group_vars_block(text)
    if block is None:
        raise CatalogError(f"{path}: no generated knobs block ({GROUP_VARS_BEGIN!r})")
    new = text.replace(block, render_group_vars(table))
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":  # python -m orchestrator.knobs: regenerate the docs block
    changed = update_group_vars(REPO_ROOT / "inventory" / "group_vars" / "all.yml", default_table())
    print("inventory/group_vars/all.yml " + ("updated" if changed else "already up to date"))
