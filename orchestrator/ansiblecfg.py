"""gpuprov's Ansible settings, layered under the user's ansible.cfg and ANSIBLE_* environment.

Precedence for `provision apply`, lowest first (docs/install.md):

  1. Ansible's own defaults
  2. gpuprov's settings: the collection's ansible.cfg (forks, pipelining, ssh_args, fact cache)
  3. the user's ansible.cfg: the one Ansible itself would read from where `provision` runs
     (ANSIBLE_CONFIG, ./ansible.cfg, ~/.ansible.cfg, /etc/ansible/ansible.cfg)
  4. the user's ANSIBLE_* environment variables
  5. the command line (`--forks`, `-e`, ...)

Ansible ranks environment variables above config files, so gpuprov's settings go in the
environment only for the settings neither the user's file nor the user's environment sets; the
names come from ansible-core's own definitions of each setting (every ini key and environment
variable that sets it). ANSIBLE_CONFIG is never set or changed. Three exceptions, by design:
gpuprov's roles are always on the roles path (after the user's), gpuprov's own collection
gpuprov.nvidia (site.yml's roles and plugins by FQCN) is always first on the collections path
(then the user's, else Ansible's default places), and host key checking is always on (gpuprov
never accepts an unknown host key; a user's `host_key_checking = False` does not turn it off).
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from . import paths
from .errors import BadInputError

# gpuprov's ansible.cfg keys whose relative value is a path inside the collection or the state.
_FACT_CACHE = ("defaults", "fact_caching_connection")
_ROLES = ("defaults", "roles_path")
_COLLECTIONS = ("defaults", "collections_path")
_HOST_KEY_CHECKING = ("defaults", "host_key_checking")
# The plugins whose options gpuprov's ansible.cfg sets besides ansible-core's base settings.
_PLUGINS = (("connection", "ssh"), ("callback", "default"))


@dataclass(frozen=True)
class Setting:
    """One gpuprov setting: its ini spelling, every ini key and env var Ansible reads for it."""

    section: str
    key: str
    value: str
    ini: tuple[tuple[str, str], ...]
    env: tuple[str, ...]


def _definitions() -> list[dict[str, object]]:
    import ansible.constants as C
    from ansible.plugins.loader import callback_loader, connection_loader

    loaders = {"connection": connection_loader, "callback": callback_loader}
    defs: list[dict[str, object]] = list(C.config.get_configuration_definitions().values())
    for kind, name in _PLUGINS:
        loaders[kind].get(name, class_only=True)  # registers the plugin's option definitions
        defs += C.config.get_configuration_definitions(plugin_type=kind, name=name).values()
    return defs


def _read(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";",))
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise BadInputError(
            f"ansible config {path} cannot be read: {str(exc).splitlines()[0]}",
            fix=f"fix {path} (`ansible-config dump --only-changed` shows the same error)",
        ) from exc
    return parser


def gpuprov_settings(cfg: Path = paths.ANSIBLE_CFG) -> tuple[Setting, ...]:
    """Every setting of gpuprov's ansible.cfg, with the names Ansible knows it by."""
    parser = _read(cfg)
    defs = _definitions()
    out: list[Setting] = []
    for section in parser.sections():
        for key, value in parser.items(section):
            matching = [
                d
                for d in defs
                if any(
                    isinstance(i, Mapping) and (i.get("section"), i.get("key")) == (section, key)
                    for i in d.get("ini") or []  # type: ignore[attr-defined]
                )
            ]
            if not matching:
                raise BadInputError(
                    f"{cfg}: [{section}] {key} is not a setting ansible-core knows",
                    fix=f"remove it from {cfg}",
                )
            ini = {
                (str(i["section"]), str(i["key"]))
                for d in matching
                for i in d.get("ini") or []  # type: ignore[attr-defined]
            }
            env = [str(e["name"]) for d in matching for e in d.get("env") or []]  # type: ignore[attr-defined]
            out.append(Setting(section, key, value, tuple(sorted(ini)), tuple(dict.fromkeys(env))))
    return tuple(out)


def user_config(cwd: Path | None = None) -> Path | None:
    """The ansible.cfg Ansible itself reads when run in `cwd` (None: no file)."""
    from ansible.config.manager import find_ini_config_file

    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        found = find_ini_config_file()
    finally:
        os.chdir(here)
    return Path(found).resolve() if found else None


def _value(setting: Setting) -> str:
    if (setting.section, setting.key) == _FACT_CACHE:
        return str(fact_cache_dir())
    return setting.value


def fact_cache_dir() -> Path:
    """gpuprov's fact cache folder (Ansible's jsonfile cache: every host's facts, its
    hostvars), made 0700 before Ansible writes into it, as its jsonfile plugin would make it
    with the umask's mode (world-readable under the usual 022); an existing one is narrowed.
    A folder that cannot be made (a read-only or full $XDG_CACHE_HOME) is bad input, named."""
    folder = paths.state_root() / ".cache" / "facts"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if folder.stat().st_mode & 0o077:
            folder.chmod(0o700)
    except OSError as exc:
        raise BadInputError(
            f"gpuprov's fact cache folder {folder} cannot be made or narrowed to 0700: "
            f"{exc.strerror or exc}",
            fix="make the folder writable (installed: $XDG_CACHE_HOME/gpuprov, default "
            "~/.cache/gpuprov; set XDG_CACHE_HOME to a folder you can write)",
        ) from exc
    return folder


def load_constants() -> None:
    """Load ansible-core's settings (`ansible.constants`) once, early. Loading them makes
    Ansible's local temporary folder (ANSIBLE_LOCAL_TEMP, `local_tmp`, default
    ~/.ansible/tmp); under a read-only or missing $HOME that fails inside an import, which
    would print Ansible's traceback: here it is bad input, named, before any host."""
    from ansible.errors import AnsibleError

    try:
        import ansible.constants  # noqa: F401
    except AnsibleError as exc:
        raise BadInputError(
            f"ansible-core cannot start: {str(exc).splitlines()[0]}",
            fix="make $HOME writable, or set ANSIBLE_LOCAL_TEMP to a folder you can write "
            "(e.g. ANSIBLE_LOCAL_TEMP=/tmp/ansible-$USER)",
        ) from exc


def _their_paths(
    s: Setting, environ: Mapping[str, str], user: configparser.ConfigParser, user_cfg: Path | None
) -> str | None:
    """The user's value of a path-list setting: from the environment, else their file
    (relative entries read from the file's folder, as Ansible reads them)."""
    theirs = next((environ[e] for e in s.env if environ.get(e)), None)
    if theirs is None:
        for section, key in s.ini:
            if user.has_option(section, key):
                base = user_cfg.parent if user_cfg else Path.cwd()
                return os.pathsep.join(
                    str(base / os.path.expanduser(p))
                    for p in user.get(section, key).split(os.pathsep)
                    if p
                )
    return theirs


def layered_env(
    environ: Mapping[str, str],
    user_cfg: Path | None,
    settings: tuple[Setting, ...] | None = None,
) -> dict[str, str]:
    """The ANSIBLE_* variables to add for a run: gpuprov's settings that neither `user_cfg`
    nor `environ` set, gpuprov's roles after the user's roles path, gpuprov's collection
    first on the collections path, host key checking on."""
    settings = gpuprov_settings() if settings is None else settings
    user = _read(user_cfg) if user_cfg is not None else configparser.ConfigParser()
    out: dict[str, str] = {}
    for s in settings:
        if (s.section, s.key) == _ROLES:
            theirs = _their_paths(s, environ, user, user_cfg)
            own = str(paths.ROLES_DIR)
            out[s.env[0]] = f"{theirs}{os.pathsep}{own}" if theirs else own
            continue
        if (s.section, s.key) == _COLLECTIONS:
            # gpuprov's own entry (./collections) first; then theirs, else the rest of ours
            rest = os.pathsep.join(s.value.split(os.pathsep)[1:])
            theirs = _their_paths(s, environ, user, user_cfg) or rest
            own = str(paths.collections_dir())
            out[s.env[0]] = f"{own}{os.pathsep}{theirs}" if theirs else own
            continue
        if (s.section, s.key) == _HOST_KEY_CHECKING:
            for name in s.env:
                out[name] = "True"
            continue
        in_env = any(e in environ for e in s.env)
        in_cfg = any(user.has_option(section, key) for section, key in s.ini)
        if not in_env and not in_cfg:
            out[s.env[0]] = _value(s)
    return out
