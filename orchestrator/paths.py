"""Where gpuprov's files are, in a checkout and in an installed wheel.

`SOURCE_ROOT` holds what Ansible and the lab read (ansible.cfg, roles/, playbooks/, meta/,
inventory/group_vars, the lab's test doubles under tests/lab/, tests/recorded/reference/): the
checkout itself, or, installed from the wheel, `ansible_collections/gpuprov/nvidia/` beside this
package, a copy laid out the same way (setup.py's build step), where Ansible finds the
collection on its Python path too. `STATE_ROOT` is where gpuprov writes (fact cache, lab
state, image build cache): the checkout, or `$XDG_CACHE_HOME/gpuprov` (default
~/.cache/gpuprov) when installed, so an installed `provision` works from any directory and
never writes into site-packages.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
BUNDLE = PACKAGE.parent / "ansible_collections" / "gpuprov" / "nvidia"


def installed() -> bool:
    """True when running from a wheel (the bundle is there), False in a checkout."""
    return (BUNDLE / "playbooks" / "site.yml").is_file()


SOURCE_ROOT = BUNDLE if installed() else PACKAGE.parent


def state_root() -> Path:
    """Writable state: the checkout, or the user's cache directory for gpuprov."""
    if not installed():
        return PACKAGE.parent
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "gpuprov"


ANSIBLE_CFG = SOURCE_ROOT / "ansible.cfg"
ROLES_DIR = SOURCE_ROOT / "roles"
PLAYBOOKS_DIR = SOURCE_ROOT / "playbooks"
SITE_PLAYBOOK = PLAYBOOKS_DIR / "site.yml"
COLLECTION = ("gpuprov", "nvidia")  # galaxy.yml's namespace and name


def collections_dir() -> Path:
    """A collections path entry holding the collection gpuprov.nvidia (what site.yml's roles
    and plugins by FQCN resolve to): the checkout's own `collections/` (committed:
    `ansible_collections/gpuprov/nvidia` links back to the checkout), else, for an installed
    wheel, a folder made under the state root whose entries link to this installation's
    bundle (roles, playbooks, plugins, ...) and to this package as the collection's
    `orchestrator/`, the planner its action plugins import (the one `provision` runs, not the
    bundle's copy, which serves Ansible run without `provision`)."""
    here = SOURCE_ROOT.resolve()
    checkout = SOURCE_ROOT / "collections"
    if checkout.joinpath("ansible_collections", *COLLECTION).resolve() == here:
        return checkout
    tag = hashlib.sha256(str(here).encode()).hexdigest()[:12]
    root = state_root() / "collections" / tag
    folder = root.joinpath("ansible_collections", *COLLECTION)
    wanted = {p.name: p for p in here.iterdir()} | {"orchestrator": PACKAGE}
    if _links(folder) != wanted:
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a read-only or full $XDG_CACHE_HOME: named, no traceback
            from .errors import BadInputError

            raise BadInputError(
                f"gpuprov's state folder {folder.parent} cannot be made: {exc.strerror or exc}",
                fix="set XDG_CACHE_HOME to a folder you can write (default ~/.cache)",
            ) from exc
        fresh = folder.with_name(f".{folder.name}.{os.getpid()}")
        shutil.rmtree(fresh, ignore_errors=True)
        fresh.mkdir()
        for name, target in wanted.items():
            (fresh / name).symlink_to(target, target_is_directory=target.is_dir())
        if folder.is_symlink() or folder.is_file():
            folder.unlink()
        elif folder.is_dir():
            shutil.rmtree(folder)  # links only: their targets stay
        try:
            os.replace(fresh, folder)
        except OSError:  # another run made it meanwhile
            shutil.rmtree(fresh, ignore_errors=True)
    return root


def _links(folder: Path) -> dict[str, Path] | None:
    if folder.is_symlink() or not folder.is_dir():
        return None
    return {p.name: p.resolve() for p in folder.iterdir() if p.is_symlink()}
