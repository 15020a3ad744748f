"""The role table (``roles.yaml`` beside this module): each role's order, variable prefix and
the roles it depends on, declared once.

playbooks/site.yml runs the roles in this order (a unit test holds the two equal); the planner
(plan.py) orders a host's roles by it, the converged-skip (converged.py) reads its
dependencies, and the knob table (knobs.py) finds each role's inputs by its prefix.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from .catalog import SAFE_LOADER
from .errors import CatalogError

DATA = Path(__file__).with_name("roles.yaml")


@dataclass(frozen=True)
class Role:
    name: str
    prefix: str  # every public variable of the role starts with it
    depends_on: tuple[str, ...]  # roles whose state this one builds on
    default: bool  # in gpuprov_roles' default
    runs_with: str | None = None  # a helper role: runs in that role's turn (pre/post tasks)
    planner: str | None = None  # "module:function" under orchestrator/planners/
    joins: str = "listed"  # listed | detected | set:KNOB (roles.yaml's header)

    @property
    def joins_knob(self) -> str | None:
        """The knob whose value makes the role join a host's plan (`set:KNOB`)."""
        return self.joins.removeprefix("set:") if self.joins.startswith("set:") else None


@dataclass(frozen=True)
class RoleTable:
    rows: tuple[Role, ...]

    @property
    def order(self) -> tuple[str, ...]:
        """The roles site.yml runs in turn (gpuprov_roles' choices), in its order."""
        return tuple(r.name for r in self.rows if r.runs_with is None)

    @property
    def defaults(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.rows if r.default and r.runs_with is None)

    @property
    def prefixes(self) -> Mapping[str, str]:
        """role -> the prefix of its variables, helper roles included."""
        return {r.name: r.prefix for r in self.rows}

    def __getitem__(self, name: str) -> Role:
        return next(r for r in self.rows if r.name == name)

    def position(self, name: str) -> int:
        """Where `name` runs in site.yml's order (unknown names last)."""
        order = self.order
        return order.index(name) if name in order else len(order)


def load_roles(path: Path = DATA) -> RoleTable:
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except (OSError, yaml.YAMLError) as e:
        raise CatalogError(f"{path}: cannot be read as YAML ({e})") from e
    rows: list[Role] = []
    for body in doc["roles"]:
        name = str(body["name"])
        role = Role(
            name=name,
            prefix=str(body["prefix"]),
            depends_on=tuple(body.get("depends_on") or ()),
            default=bool(body.get("default", False)),
            runs_with=body.get("runs_with"),
            planner=body.get("planner"),
            joins=str(body.get("joins", "listed")),
        )
        earlier = {r.name for r in rows}
        unknown = [d for d in (*role.depends_on, role.runs_with) if d and d not in earlier]
        joins_ok = role.joins in ("listed", "detected") or bool(role.joins_knob)
        if not joins_ok or (role.planner is not None and ":" not in role.planner):
            raise CatalogError(
                f"{path}: role {name}: joins {role.joins!r} / planner {role.planner!r}; fix: "
                "joins is listed, detected or set:KNOB, a planner is MODULE:FUNCTION"
            )
        if unknown or name in earlier or not role.prefix.startswith(name):
            raise CatalogError(
                f"{path}: role {name}: a repeated name, a prefix not starting with the name, "
                f"or a dependency on a role not listed before it ({', '.join(unknown)}); "
                "fix: one row per role, after the roles it depends on"
            )
        rows.append(role)
    return RoleTable(tuple(rows))


@functools.cache
def default_roles() -> RoleTable:
    return load_roles()
