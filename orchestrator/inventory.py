"""Read an Ansible inventory (INI or YAML, with group_vars/host_vars) through ansible-core.

`load_inventory(path, limit)` -> Inventory: every host with its connection settings resolved
(ansible_host/port/user/ssh_private_key_file/connection, known-hosts files) and all its
variables, as ansible-playbook would see them before gathering facts.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from orchestrator.errors import InventoryError

DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts")

# Variables Ansible adds to every host; not inventory data.
_MAGIC = frozenset(
    {
        "ansible_config_file",
        "ansible_facts",
        "ansible_playbook_python",
        "ansible_version",
        "group_names",
        "groups",
        "inventory_dir",
        "inventory_file",
        "inventory_hostname",
        "inventory_hostname_short",
        "omit",
        "playbook_dir",
    }
)
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class InventoryHost:
    name: str
    address: str  # ansible_host, else the name
    port: int  # ansible_port, else 22
    user: str | None  # ansible_user; None: the SSH default (the local user)
    key_file: str | None  # ansible_ssh_private_key_file, "~" expanded
    connection: str  # "ssh" or "local"
    known_hosts: tuple[str, ...]  # files holding the host keys we accept
    groups: tuple[str, ...]
    become: bool  # ansible_become: the probe runs through `sudo -n`
    vars: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)  # variable -> "file:line" it came from


@dataclass(frozen=True)
class Inventory:
    path: Path
    limit: str | None
    hosts: tuple[InventoryHost, ...]
    groups: tuple[str, ...]  # every group in the inventory (not only the limited hosts')

    def host(self, name: str) -> InventoryHost:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts)


def _plain(value: Any) -> Any:
    """Ansible's tagged values (2.19 data tagging) -> plain Python values."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    return value


def known_hosts_files(host_vars: Mapping[str, Any]) -> tuple[str, ...]:
    """~/.ssh/known_hosts (and the system file), plus every UserKnownHostsFile= given in
    ansible_ssh_common_args / ansible_ssh_extra_args (a lab writes its own)."""
    files: list[str] = []
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        args = str(host_vars.get(key) or "")
        try:
            words = shlex.split(args)
        except ValueError as exc:
            raise InventoryError(
                f"{key}={args!r} has unbalanced quotes",
                fix=f"quote the value of {key} properly in the inventory",
            ) from exc
        for i, word in enumerate(words):
            option = word[2:] if word.startswith("-o") and len(word) > 2 else ""
            if word == "-o" and i + 1 < len(words):
                option = words[i + 1]
            name, _, value = option.partition("=")
            if name.strip().lower() == "userknownhostsfile":
                files.extend(os.path.expanduser(v) for v in value.split())
    files.extend(os.path.expanduser(f) for f in DEFAULT_KNOWN_HOSTS)
    return tuple(dict.fromkeys(files))


def _int(host: str, key: str, value: Any, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise InventoryError(
            f"{key}={value!r} is not a port number",
            host=host,
            fix=f"set {key} to an integer such as 22",
        ) from exc


def _host(name: str, groups: tuple[str, ...], hv: dict[str, Any]) -> InventoryHost:
    connection = str(hv.get("ansible_connection") or "ssh")
    if connection not in ("ssh", "paramiko", "smart", "local"):
        raise InventoryError(
            f"ansible_connection={connection!r} is not supported by detection",
            host=name,
            fix="use ansible_connection=ssh (the default) or local",
        )
    key = hv.get("ansible_ssh_private_key_file") or hv.get("ansible_private_key_file")
    user = hv.get("ansible_user") or hv.get("ansible_ssh_user")
    become = str(hv.get("ansible_become", False)).lower() in _TRUE
    return InventoryHost(
        name=name,
        address=str(hv.get("ansible_host") or hv.get("ansible_ssh_host") or name),
        port=_int(name, "ansible_port", hv.get("ansible_port") or hv.get("ansible_ssh_port"), 22),
        user=str(user) if user else None,
        key_file=os.path.expanduser(str(key)) if key else None,
        connection="local" if connection == "local" else "ssh",
        known_hosts=known_hosts_files(hv),
        groups=groups,
        become=become,
        vars=hv,
    )


def _origin(value: Any) -> str | None:
    """Where ansible-core read a value ("path:line[:column]", 2.19 data tagging), if it knows."""
    try:
        from ansible._internal._datatag._tags import Origin
    except ImportError:  # another ansible-core: the messages say "the inventory"
        return None
    tag = Origin.get_tag(value)
    return str(tag) if tag is not None else None


def _why_unparsed(path: Path, loader: Any) -> str:
    from ansible.inventory.data import InventoryData
    from ansible.plugins.loader import inventory_loader

    plugin_name = "yaml" if path.suffix in (".yml", ".yaml", ".json") else "ini"
    plugin = inventory_loader.get(plugin_name)
    try:
        plugin.parse(InventoryData(), loader, str(path), cache=False)
    except Exception as exc:  # the plugin's own message is the useful part
        return f"{plugin_name} inventory: {str(exc).splitlines()[0]}"
    return "no inventory plugin accepted it"


def _manager(path: Path) -> tuple[Any, Any, Any]:
    import ansible.constants as C
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    saved = C.INVENTORY_ANY_UNPARSED_IS_FAILED
    C.INVENTORY_ANY_UNPARSED_IS_FAILED = True  # a broken file is an error, not a warning
    try:
        manager = InventoryManager(loader=loader, sources=[str(path)])
    except AnsibleError as exc:
        reason = _why_unparsed(path, loader) if path.is_file() else str(exc).splitlines()[0]
        raise InventoryError(
            f"inventory {path} could not be parsed: {reason}",
            fix="fix the file (INI or YAML inventory format); "
            f"`ansible-inventory -i {path} --list` shows the same error",
        ) from exc
    finally:
        C.INVENTORY_ANY_UNPARSED_IS_FAILED = saved
    return loader, manager, VariableManager(loader=loader, inventory=manager)


def load_inventory(path: str | os.PathLike[str], limit: str | None = None) -> Inventory:
    """Parse the inventory, apply `limit` (Ansible host patterns), resolve every host."""
    inv_path = Path(path).expanduser()
    if not inv_path.exists():
        raise InventoryError(
            f"inventory {inv_path} does not exist",
            fix="pass --inventory PATH to an INI or YAML inventory (e.g. inventory/p5.ini), "
            "or `provision lab up` for a local lab",
        )
    from ansible.errors import AnsibleError
    from ansible.template import Templar

    loader, manager, variables = _manager(inv_path)
    groups = tuple(sorted(g for g in manager.groups if g not in ("all", "ungrouped")))
    if not manager.get_hosts("all"):
        raise InventoryError(
            f"inventory {inv_path} holds no hosts",
            fix="add hosts under a group such as [gpu_nodes]",
        )
    if limit:
        try:
            manager.subset(limit)
            selected = manager.get_hosts("all")
        except AnsibleError as exc:
            raise InventoryError(
                f"--limit {limit!r} is not a valid host pattern: {str(exc).splitlines()[0]}",
                fix="use Ansible host patterns: a group, a host, 'a:b', 'g:!h', 'g[0:3]'",
            ) from exc
        if not selected:
            raise InventoryError(
                f"--limit {limit!r} matches no host of {inv_path}",
                fix=f"use a host name or one of the groups: {', '.join(groups) or '(none)'}",
            )
    hosts = []
    for h in manager.get_hosts("all"):
        raw_vars = variables.get_vars(host=h, include_hostvars=False)
        templar = Templar(loader=loader, variables=raw_vars)
        resolved: dict[str, Any] = {}
        origins: dict[str, str] = {}
        for key, value in raw_vars.items():
            if key in _MAGIC:
                continue
            where = _origin(value)
            if where:
                origins[str(key)] = where
            # a value that refers to facts known only during a play is kept as written
            with contextlib.suppress(AnsibleError):
                value = templar.template(value)
            resolved[str(key)] = _plain(value)
        member_of = tuple(sorted(g.name for g in h.get_groups() if g.name != "all"))
        hosts.append(replace(_host(str(h.name), member_of, resolved), origins=origins))
    return Inventory(inv_path, limit, tuple(hosts), groups)


def match_limit(
    hosts: Sequence[str], groups: Mapping[str, Sequence[str]], limit: str, where: str
) -> list[str]:
    """`limit` over hosts known only by name (a saved facts directory), by ansible-core's own
    pattern matcher: host names, groups (`groups`: host -> its groups, e.g. from the
    inventory), `a:b` / `a,b`, `!` exclusions, `&` intersections, wildcards, `~regex`,
    `g[0:2]` subscripts. Hosts keep the given order."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    with contextlib.redirect_stderr(io.StringIO()):  # "no inventory was parsed": none is
        manager = InventoryManager(loader=DataLoader(), sources=[])
    for host in hosts:
        manager._inventory.add_host(host, group="all")
        for group in groups.get(host, ()):
            if group in ("all", "ungrouped"):
                continue
            manager._inventory.add_group(group)
            manager._inventory.add_child(group, host)
    manager._inventory.reconcile_inventory()
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # a part matching nothing: see below
            manager.subset(limit)
            selected = {h.name for h in manager.get_hosts("all")}
    except AnsibleError as exc:
        raise InventoryError(
            f"--limit {limit!r} is not a valid host pattern: {str(exc).splitlines()[0]}",
            fix="use Ansible host patterns: a group, a host, 'a:b', 'g:!h', 'g:&h', 'g[0:3]'",
        ) from exc
    kept = [h for h in hosts if h in selected]
    if not kept:
        known = sorted({g for gs in groups.values() for g in gs} - {"all", "ungrouped"})
        raise InventoryError(
            f"--limit {limit!r} matches no host of {where}",
            fix=f"use a host ({', '.join(sorted(hosts)[:10])}"
            + (", ..." if len(hosts) > 10 else "")
            + ")"
            + (f" or a group ({', '.join(known)})" if known else ""),
        )
    return kept
