"""The one table of knobs: every variable gpuprov or its roles read, with its contract.

Role inputs come from the roles themselves: type, choices, elements and description from
``roles/<role>/meta/argument_specs.yml``, the default from ``roles/<role>/defaults/main.yml``
(its only home). gpuprov's own ``gpuprov_*`` knobs, the lab's, and how the planner reads the
role inputs it decides (``nvidia_driver_flavour: auto``...) come from ``knobs.yaml`` beside
this module. Policy parsing (policy.py), the docs in ``inventory/group_vars/all.yml``
(:func:`render_group_vars`), verify's expectations and the report read this table; nothing
else copies a default.

A variable named like a knob (``gpuprov_*`` or a role's prefix) that the table does not know
is a typo or a knob that does not exist: :func:`unknown_knobs` finds those, with the closest
known name.
"""

from __future__ import annotations

import difflib
import functools
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from . import paths
from .catalog import SAFE_LOADER
from .errors import CatalogError

REPO_ROOT = paths.SOURCE_ROOT  # the checkout, or the wheel's bundle
ROLES_DIR = REPO_ROOT / "roles"
DATA = Path(__file__).with_name("knobs.yaml")

# role -> the prefix of its variables (the project's naming rule)
ROLE_PREFIXES: Mapping[str, str] = {
    "nvidia_driver": "nvidia_driver_",
    "docker": "docker_",
    "nvidia_container_toolkit": "nvidia_container_toolkit_",
    "mig": "mig_",
    "driver_upgrade": "driver_upgrade_",
}
GUARDED_PREFIXES = ("gpuprov_", *ROLE_PREFIXES.values())
_SPEC_FIELDS = ("type", "elements", "choices", "default", "no_log", "description")


@dataclass(frozen=True)
class Knob:
    """One variable's contract."""

    name: str
    owner: str  # a role name, "gpuprov" or "lab"
    type: str  # an argument_specs type: str, int, bool, list, dict, path, raw
    default: Any
    doc: str
    choices: tuple[Any, ...] = ()
    elements: str | None = None
    no_log: bool = False
    set_by: str | None = None  # "orchestrator" / "lab": not for users to set
    spec: Mapping[str, Any] | None = None  # role inputs: the argument_specs option, verbatim

    @property
    def is_role_input(self) -> bool:
        return self.owner in ROLE_PREFIXES


@dataclass(frozen=True)
class KnobTable:
    knobs: Mapping[str, Knob]  # every known variable
    policy: Mapping[str, Knob]  # role inputs as the planner reads them (its default, choices)
    planned: tuple[str, ...]  # role inputs the planner computes for every host

    def __getitem__(self, name: str) -> Knob:
        return self.knobs[name]

    def default(self, name: str) -> Any:
        """The default the planner (policy knobs) or the role / gpuprov (others) applies."""
        knob = self.policy.get(name) or self.knobs[name]
        return knob.default

    def role_default(self, name: str) -> Any:
        """A role input's own default (defaults/main.yml), as the role applies it."""
        knob = self.knobs[name]
        if not knob.is_role_input:
            raise KeyError(f"{name} is not a role input")
        return knob.default

    def role_knobs(self, role: str) -> tuple[Knob, ...]:
        return tuple(k for k in self.knobs.values() if k.owner == role)

    def is_guarded(self, name: str) -> bool:
        """Named like a knob: a `gpuprov_*` variable or one with a role's prefix."""
        return name.startswith(GUARDED_PREFIXES)

    def closest(self, name: str) -> str | None:
        found = difflib.get_close_matches(name, list(self.knobs), n=1, cutoff=0.6)
        return found[0] if found else None


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


def _load_yaml(path: Path) -> Any:
    try:
        # libyaml's loader where present: every command loads the table (0.15 s pure-Python)
        return yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except (OSError, yaml.YAMLError) as e:
        raise CatalogError(f"{path}: cannot be read as YAML ({e})") from e


def _doc(value: object) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value or "")


def role_knobs(role: str, roles_dir: Path = ROLES_DIR) -> dict[str, Knob]:
    """A role's inputs: argument_specs (every entry point, which must agree) + defaults."""
    specs = _load_yaml(roles_dir / role / "meta" / "argument_specs.yml")["argument_specs"]
    defaults = _load_yaml(roles_dir / role / "defaults" / "main.yml") or {}
    out: dict[str, Knob] = {}
    for entry, body in specs.items():
        for name, option in (body.get("options") or {}).items():
            if name in out and out[name].spec != option:
                raise CatalogError(
                    f"roles/{role}/meta/argument_specs.yml: {name} differs between entry "
                    f"points ({entry}); fix: describe it the same way in each"
                )
            if name not in defaults:
                raise CatalogError(
                    f"roles/{role}: {name} is in argument_specs but has no default in "
                    "defaults/main.yml; fix: give it one there"
                )
            out[name] = Knob(
                name=name,
                owner=role,
                type=str(option.get("type", "str")),
                default=defaults[name],
                doc=_doc(option.get("description")),
                choices=tuple(option.get("choices") or ()),
                elements=option.get("elements"),
                no_log=bool(option.get("no_log", False)),
                spec=dict(option),
            )
    return out


def _own_knob(name: str, owner: str, body: Mapping[str, Any]) -> Knob:
    return Knob(
        name=name,
        owner=owner,
        type=str(body.get("type", "str")),
        default=body.get("default"),
        doc=_doc(body.get("doc")),
        choices=tuple(body.get("choices") or ()),
        elements=body.get("elements"),
        set_by=body.get("set_by"),
    )


def load_table(data: Path = DATA, roles_dir: Path = ROLES_DIR) -> KnobTable:
    doc = _load_yaml(data)
    knobs: dict[str, Knob] = {}
    for role in ROLE_PREFIXES:
        knobs.update(role_knobs(role, roles_dir))
    for owner in ("gpuprov", "lab"):
        for name, body in (doc.get(owner) or {}).items():
            if name in knobs:
                raise CatalogError(f"{data}: {name} is already a role input")
            knobs[name] = _own_knob(name, owner, body)
    policy: dict[str, Knob] = {}
    for name, body in (doc.get("policy") or {}).items():
        if name not in knobs:
            raise CatalogError(f"{data}: policy knob {name} is no role input")
        fields = {k: body[k] for k in ("default", "doc") if k in body}
        if "choices" in body:
            fields["choices"] = tuple(body["choices"])
        policy[name] = replace(knobs[name], **fields)
    for name, knob in knobs.items():
        if knob.owner == "gpuprov":
            policy[name] = knob
    planned = tuple(doc.get("planned") or ())
    for name in planned:
        if name not in knobs:
            raise CatalogError(f"{data}: planned knob {name} is no role input")
    return KnobTable(knobs, policy, planned)


@functools.cache
def default_table() -> KnobTable:
    return load_table()


def spec_options(table: KnobTable, role: str) -> dict[str, dict[str, Any]]:
    """A role's argument_specs options rebuilt from the table (the round-trip check)."""
    out: dict[str, dict[str, Any]] = {}
    for knob in table.role_knobs(role):
        option: dict[str, Any] = {"type": knob.type}
        if knob.elements:
            option["elements"] = knob.elements
        if knob.choices:
            option["choices"] = list(knob.choices)
        assert knob.spec is not None
        if "default" in knob.spec:
            option["default"] = knob.default
        if knob.no_log:
            option["no_log"] = True
        option["description"] = knob.spec.get("description")
        out[knob.name] = {k: option[k] for k in _SPEC_FIELDS if k in option}
    return out


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
