"""Read an Ansible inventory (INI or YAML, with group_vars/host_vars) through ansible-core.

`load_inventory(path, limit)` -> Inventory: every host with its connection settings resolved
(ansible_host/port/user/ssh_private_key_file/connection, known-hosts files) and all its
variables, as ansible-playbook would see them before gathering facts. Several sources (several
`-i`) are read by one InventoryManager, so they merge as they do for ansible-playbook (a later
source's value wins; each source's own group_vars/host_vars are read). `inventory_sources`:
the sources ansible-playbook would read when no `-i` is given (ANSIBLE_INVENTORY, else
ansible.cfg's `inventory =`), from ansible-core's own configuration manager.

Become, as Ansible reads it: ansible_become (else ansible.cfg's become), ansible_become_method
(sudo: the one gpuprov's own connections use; any other is refused, exit 2), and the user,
flags and password as ansible-core's sudo become plugin resolves them (host variables such
as ansible_become_user, ansible_become_flags, ansible_become_password / ansible_become_pass,
then ANSIBLE_BECOME_* and ansible.cfg, then root and `-H`); no password there: the one asked
once with -K. The password is taken out of the host's variables and kept only in
`InventoryHost.become_password` (not shown by repr). Vault: `VaultOptions` (--vault-id,
--vault-password-file, the password asked with --ask-vault-pass, and ansible.cfg's
vault_password_file / vault_identity_list) become ansible-core's own vault secrets, so inline
`!vault` values and vault-encrypted vars files decrypt as they do for ansible-playbook.
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

from .errors import InventoryError
from .knobs import GUARDED_PREFIXES

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
_PASSWORD_VARS = ("ansible_become_password", "ansible_become_pass", "ansible_sudo_pass")
BECOME_METHODS = ("sudo",)  # what detection, validation and verify can become with
_VAULT_FIX = (
    "give the vault password as for ansible-playbook: --vault-password-file FILE, "
    "--vault-id [ID@]FILE, or --ask-vault-pass (-J)"
)


@dataclass(frozen=True)
class VaultOptions:
    """Where the inventory's vault secrets come from (ansible-playbook's options)."""

    ids: tuple[str, ...] = ()  # --vault-id [label@]source
    password_files: tuple[str, ...] = ()  # --vault-password-file
    password: str | None = field(default=None, repr=False)  # asked once with --ask-vault-pass

    def __bool__(self) -> bool:
        return bool(self.ids or self.password_files or self.password is not None)


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
    become: bool  # ansible_become: gpuprov's commands run through sudo
    vars: dict[str, Any] = field(default_factory=dict)  # without the become password
    origins: dict[str, str] = field(default_factory=dict)  # variable -> "file:line" it came from
    become_user: str = "root"  # ansible_become_user
    become_flags: tuple[str, ...] = ()  # ansible_become_flags (sudo's own options)
    # ansible_become_password / _pass (vault values decrypted), else -K's; None: `sudo -n`
    become_password: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Inventory:
    path: Path  # the first source
    limit: str | None
    hosts: tuple[InventoryHost, ...]
    groups: tuple[str, ...]  # every group in the inventory (not only the limited hosts')
    sources: tuple[Path, ...] = ()  # every source, in the order given (() : `path` alone)

    @property
    def where(self) -> str:
        """The sources, for messages: "a.ini" or "a.ini + b.ini"."""
        return " + ".join(str(p) for p in self.sources or (self.path,))

    def host(self, name: str) -> InventoryHost:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts)


class _Undecryptable(Exception):
    """A vault-encrypted value that no given vault secret decrypts."""


def _plain(value: Any) -> Any:
    """Ansible's tagged values (2.19 data tagging) -> plain Python values; a vault-encrypted
    string is decrypted with the vault secrets (_Undecryptable when none does)."""
    if type(value).__name__ == "EncryptedString":
        try:
            return str(value)  # ansible-core decrypts it (VaultSecretsContext)
        except Exception as exc:  # no secret, or none that fits: what ansible-core raises
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if "VaultSecretsContext" in text:
                text = "no vault password was given"
            raise _Undecryptable(text) from None
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
            name, _sep, value = option.partition("=")
            if name.strip().lower() == "userknownhostsfile":
                files.extend(os.path.expanduser(v) for v in value.split())
    files.extend(os.path.expanduser(f) for f in DEFAULT_KNOWN_HOSTS)
    return tuple(dict.fromkeys(files))


def _int(host: str, key: str, value: Any, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except (TypeError, ValueError) as exc:
        raise InventoryError(
            f"{key}={value!r} is not a port number",
            host=host,
            fix=f"set {key} to an integer such as 22",
        ) from exc
    if not 1 <= number <= 65535:  # a TCP port; SSH would fail with a misleading cause
        raise InventoryError(
            f"{key}={value!r} is not a TCP port (1 to 65535)",
            host=host,
            fix=f"set {key} to the port sshd listens on, such as 22",
        )
    return number


def _sudo_options(hv: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """(user, flags, password) as ansible-core's sudo become plugin resolves them for this
    host: its variables (ansible_become_user / ansible_sudo_user, ansible_become_flags,
    ansible_become_password / _pass / ansible_sudo_pass), then ANSIBLE_BECOME_* and ansible.cfg,
    then the plugin's defaults (root, `-H -S -n`)."""
    from ansible.plugins.loader import become_loader

    plugin = become_loader.get("sudo")
    plugin.set_options(var_options=dict(hv))
    password = plugin.get_option("become_pass")
    return (
        str(plugin.get_option("become_user") or "root"),
        str(plugin.get_option("become_flags") or ""),
        str(password) if password not in (None, "") else None,
    )


def _become_flags(name: str, text: str) -> tuple[str, ...]:
    """sudo's flags without the options gpuprov sets itself (-n, -S, -p, -u)."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InventoryError(
            f"ansible_become_flags={text!r} has unbalanced quotes",
            host=name,
            fix="quote the value of ansible_become_flags properly in the inventory",
        ) from exc
    out: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in ("-p", "-u", "--prompt", "--user"):
            skip = True
        elif word not in ("-n", "-S", "--non-interactive", "--stdin") and not (
            word.startswith(("-p", "-u", "--prompt=", "--user=")) and len(word) > 2
        ):
            out.append(word)
    return tuple(out)


def _host(
    name: str, groups: tuple[str, ...], hv: dict[str, Any], become_password: str | None = None
) -> InventoryHost:
    connection = str(hv.get("ansible_connection") or "ssh")
    if connection not in ("ssh", "paramiko", "smart", "local"):
        raise InventoryError(
            f"ansible_connection={connection!r} is not supported by detection",
            host=name,
            fix="use ansible_connection=ssh (the default) or local",
        )
    key = hv.get("ansible_ssh_private_key_file") or hv.get("ansible_private_key_file")
    import ansible.constants as C

    # as ansible-core's ssh connection reads remote_user: the host's variables, else -u /
    # ANSIBLE_REMOTE_USER / ansible.cfg's remote_user (provision -u sets the variable), else
    # the SSH default
    user = (
        hv.get("ansible_user")
        or hv.get("ansible_ssh_user")
        or C.config.get_config_value("DEFAULT_REMOTE_USER")
    )

    become = str(hv.get("ansible_become", C.DEFAULT_BECOME)).lower() in _TRUE
    method = str(hv.get("ansible_become_method") or C.DEFAULT_BECOME_METHOD or "sudo")
    if become and method not in BECOME_METHODS:
        raise InventoryError(
            f"ansible_become_method={method!r}: detection, validation and verify become "
            f"{hv.get('ansible_become_user') or 'root'} with sudo only",
            host=name,
            fix="use ansible_become_method=sudo (Ansible's default) for this host, or "
            "connect as root (ansible_user=root, ansible_become=false)",
        )
    become_user, flags, password = _sudo_options(hv) if become else ("root", "", None)
    for k in _PASSWORD_VARS:  # kept only in become_password, out of reports and plans
        hv.pop(k, None)
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
        become_user=become_user,
        become_flags=_become_flags(name, flags),
        become_password=password if password is not None else become_password,
    )


def _origin(value: Any) -> str | None:
    """Where ansible-core read a value ("path:line[:column]", 2.19 data tagging), if it knows."""
    try:
        from ansible._internal._datatag._tags import Origin
    except ImportError:  # another ansible-core: the messages say "the inventory"
        return None
    tag = Origin.get_tag(value)
    return str(tag) if tag is not None else None


def _plugin_error(exc: BaseException) -> str:
    """An inventory plugin's message, with the help text ansible-core keeps apart (a
    dynamic inventory script's stderr)."""
    text = " ".join(str(getattr(exc, "message", "") or exc).split()) or type(exc).__name__
    helptext = str(getattr(exc, "_help_text", "") or "").strip()
    if helptext:
        text = text.rstrip(".") + "; " + " ".join(helptext.split())
    return text


def _why_unparsed(path: Path, loader: Any, *, quiet: bool = False) -> str:
    """Why ansible-core's enabled inventory plugins refused `path`: each plugin that takes
    such a file parses it again and says why not (the script plugin for an executable, the
    yaml plugin for .yml/.yaml/.json, else the ini plugin come first)."""
    import ansible.constants as C
    from ansible.inventory.data import InventoryData
    from ansible.plugins.loader import inventory_loader

    source = str(path.absolute())  # ansible-core 2.19 wants absolute sources (data tagging)
    failures: dict[str, str] = {}
    for name in C.INVENTORY_ENABLED:
        plugin = inventory_loader.get(name)
        if plugin is None:
            continue
        try:
            if not plugin.verify_file(source):
                continue
            plugin.parse(InventoryData(), loader, source, cache=False)
        except Exception as exc:  # the plugin's own message is the useful part
            failures[name] = _plugin_error(exc)
    if not failures:
        return "" if quiet else "no inventory plugin accepted it"
    first = [
        "script" if os.access(path, os.X_OK) and not path.is_dir() else "",
        "yaml" if path.suffix in _YAML_SUFFIXES else "ini",
    ]
    name = next((n for n in first if n in failures), next(iter(failures)))
    return f"{name} inventory: {failures[name]}"


_YAML_SUFFIXES = (".yml", ".yaml", ".json")


def _bad_host_name(name: str) -> bool:
    """Not a name any inventory means: control characters or undecodable bytes (a binary
    file read as INI), or JSON/YAML punctuation (a YAML file the ini plugin read as one
    host, e.g. `{}`)."""
    return (
        not name.isprintable()
        or any(0xDC80 <= ord(c) <= 0xDCFF for c in name)
        or any(c in name for c in "{}\"'")
    )


def _vault_secrets(loader: Any, vault: VaultOptions) -> None:
    """The vault secrets ansible-playbook would have: --vault-id, --vault-password-file, the
    asked password, and ansible.cfg's vault_password_file / vault_identity_list (ansible-core's
    own CLI helper reads them all). Nothing is loaded when none is given."""
    import ansible.constants as C

    if not (vault or C.DEFAULT_VAULT_PASSWORD_FILE or C.DEFAULT_VAULT_IDENTITY_LIST):
        return
    from ansible.cli import CLI
    from ansible.errors import AnsibleError
    from ansible.parsing.vault import VaultSecret, VaultSecretsContext

    try:
        secrets = CLI.setup_vault_secrets(
            loader,
            list(vault.ids),
            list(vault.password_files),
            ask_vault_pass=False,
            auto_prompt=False,
            initialize_context=False,
        )
    except AnsibleError as exc:
        raise InventoryError(
            f"the vault password could not be read: {str(exc).splitlines()[0]}",
            fix="check the file given with --vault-password-file / --vault-id (it holds the "
            "password on one line, or is an executable script printing it)",
        ) from exc
    if vault.password is not None:
        secrets = [*secrets, (C.DEFAULT_VAULT_IDENTITY, VaultSecret(vault.password.encode()))]
    loader.set_vault_secrets(secrets)
    current = VaultSecretsContext.current(optional=True)
    if current is None:
        VaultSecretsContext.initialize(VaultSecretsContext(secrets))
    else:  # a second inventory in one process (tests, `provision plan --facts -i`)
        current.secrets[:] = secrets


def inventory_sources(given: Sequence[str] | None) -> tuple[str, ...]:
    """The inventory sources, as ansible-playbook takes them: every `-i`, in order; without
    any, ansible-core's DEFAULT_HOST_LIST setting, read by its configuration manager
    (ANSIBLE_INVENTORY, a comma-separated list, relative to the current directory; else the
    `inventory =` of the ansible.cfg Ansible finds, relative to that file). Ansible's built-in
    default (/etc/ansible/hosts) is not taken: () means no inventory was given."""
    if given:
        return tuple(given)
    import ansible.constants as C

    value, origin = C.config.get_config_value_and_origin("DEFAULT_HOST_LIST")
    if origin == "default" or not value:
        return ()
    return tuple(str(v) for v in value)


def _manager(paths: Sequence[Path], vault: VaultOptions) -> tuple[Any, Any, Any]:
    import ansible.constants as C
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.vars.manager import VariableManager

    from .yamlbudget import data_loader

    loader = data_loader()  # DataLoader with an alias budget (yamlbudget.py)
    _vault_secrets(loader, vault)
    saved = C.INVENTORY_ANY_UNPARSED_IS_FAILED
    C.INVENTORY_ANY_UNPARSED_IS_FAILED = True  # a broken file is an error, not a warning
    try:
        manager = InventoryManager(loader=loader, sources=[str(p) for p in paths])
    except AnsibleError as exc:
        # the source that fails alone is the one to name (several -i: any of them)
        failing = [p for p in paths if p.is_file() and _why_unparsed(p, loader, quiet=True)]
        path = failing[0] if failing else paths[0]
        reason = _why_unparsed(path, loader) if path.is_file() else str(exc).splitlines()[0]
        raise InventoryError(
            f"inventory {path} could not be parsed: {reason}",
            fix="fix the inventory (an INI or YAML file, or an executable script printing "
            f"JSON); `ansible-inventory -i {path} --list` shows the same error",
        ) from exc
    finally:
        C.INVENTORY_ANY_UNPARSED_IS_FAILED = saved
    # The variables as before gathering facts: not Ansible's fact cache (ansible.cfg's
    # fact_caching), whose entries come and go with playbook runs and their timeout. Read, a
    # value templated from a fact would resolve only while an entry is fresh, and what is
    # derived from the variables (the converged-skip's input digest) would change with it.
    saved_cache = C.CACHE_PLUGIN
    C.CACHE_PLUGIN = "memory"  # an empty cache of this manager's own (the builtin)
    try:
        variables = VariableManager(loader=loader, inventory=manager)
    finally:
        C.CACHE_PLUGIN = saved_cache
    return loader, manager, variables


def load_inventory(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    limit: str | None = None,
    *,
    vault: VaultOptions | None = None,
    become_password: str | None = None,
) -> Inventory:
    """Parse the inventory (one source, or several merged as ansible-playbook merges several
    `-i`), apply `limit` (Ansible host patterns), resolve every host.

    `vault`: the vault secrets; `become_password`: -K's, for hosts whose inventory gives none
    (an inventory password wins, as in Ansible)."""
    given = [path] if isinstance(path, str | os.PathLike) else list(path)
    sources = tuple(Path(p).expanduser() for p in given)
    for inv_path in sources:
        if not inv_path.exists():
            raise InventoryError(
                f"inventory {inv_path} does not exist",
                fix="pass --inventory PATH to an INI or YAML inventory (e.g. inventory/p5.ini), "
                "or `provision lab up` for a local lab",
            )
    inv_path = sources[0]
    named = " + ".join(str(p) for p in sources)
    from ansible.errors import AnsibleError
    from ansible.template import Templar

    loader, manager, variables = _manager(sources, vault or VaultOptions())
    groups = tuple(sorted(g for g in manager.groups if g not in ("all", "ungrouped")))
    if not manager.get_hosts("all"):
        raise InventoryError(
            f"inventory {named} holds no hosts",
            fix="add hosts under a group such as [gpu_nodes]",
        )
    odd = [str(h.name) for h in manager.get_hosts("all") if _bad_host_name(str(h.name))]
    if odd:
        why = _why_unparsed(inv_path, loader) if inv_path.suffix in _YAML_SUFFIXES else ""
        raise InventoryError(
            f"inventory {inv_path} was read as a host named {odd[0]!r}"
            + (f" and {len(odd) - 1} more" if len(odd) > 1 else "")
            + (f"; {why}" if why else ": is it a binary or a non-inventory file?"),
            fix="pass an INI or YAML inventory with hosts under a group such as gpu_nodes; "
            f"`ansible-inventory -i {inv_path} --list` shows how Ansible reads it",
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
                f"--limit {limit!r} matches no host of {named}",
                fix=f"use a host name or one of the groups: {', '.join(groups) or '(none)'}",
            )
    hosts = []
    for h in manager.get_hosts("all"):
        try:
            raw_vars = variables.get_vars(host=h, include_hostvars=False)
        except AnsibleError as exc:  # e.g. a vault-encrypted vars file and no vault secret
            raise InventoryError(
                f"the variables of host {h.name} could not be read: {str(exc).splitlines()[0]}",
                host=str(h.name),
                fix=_VAULT_FIX if "vault" in str(exc).lower() else "fix the vars file named",
            ) from exc
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
            try:
                resolved[str(key)] = _plain(value)
            except _Undecryptable as exc:
                if not str(key).lower().startswith(("ansible_", *GUARDED_PREFIXES)):
                    continue  # not one gpuprov reads: left to Ansible, which needs the secret
                raise InventoryError(
                    f"{key} is vault-encrypted and could not be decrypted ({exc})"
                    + (f", in {where}" if where else ""),
                    host=str(h.name),
                    fix=_VAULT_FIX,
                ) from None
        member_of = tuple(sorted(g.name for g in h.get_groups() if g.name != "all"))
        host = _host(str(h.name), member_of, resolved, become_password)
        hosts.append(replace(host, origins=origins))
    return Inventory(inv_path, limit, tuple(hosts), groups, sources)


def _select(hosts: Sequence[str], groups: Mapping[str, Sequence[str]], pattern: str) -> set[str]:
    """`pattern` over hosts known by name and groups, by ansible-core's own matcher
    (AnsibleError for a pattern it cannot use)."""
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
    with contextlib.redirect_stderr(io.StringIO()):  # a part matching nothing: callers say
        manager.subset(pattern)
        return {h.name for h in manager.get_hosts("all")}


def pattern_hosts(inventory: Inventory, pattern: str) -> set[str]:
    """The hosts of `inventory` (as loaded, its --limit applied) that a host pattern such as
    `gpuprov_target` selects; InventoryError when Ansible cannot use the pattern."""
    from ansible.errors import AnsibleError

    from .inputs import check_limit

    check_limit(pattern, "pattern")
    try:
        return _select(inventory.names, {h.name: h.groups for h in inventory.hosts}, pattern)
    except AnsibleError as exc:
        raise InventoryError(
            f"{pattern!r} is not a valid host pattern: {str(exc).splitlines()[0]}",
            fix="use Ansible host patterns: a group, a host, 'a:b', 'g:!h', 'g[0:3]'",
        ) from exc


def match_limit(
    hosts: Sequence[str], groups: Mapping[str, Sequence[str]], limit: str, where: str
) -> list[str]:
    """`limit` over hosts known only by name (a saved facts directory), by ansible-core's own
    pattern matcher: host names, groups (`groups`: host -> its groups, e.g. from the
    inventory), `a:b` / `a,b`, `!` exclusions, `&` intersections, wildcards, `~regex`,
    `g[0:2]` subscripts. Hosts keep the given order."""
    from ansible.errors import AnsibleError

    try:
        selected = _select(hosts, groups, limit)
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
