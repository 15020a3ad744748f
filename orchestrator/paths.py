"""Where gpuprov's files are, in a checkout and in an installed wheel.

`SOURCE_ROOT` holds what Ansible and the lab read (ansible.cfg, roles/, playbooks/, meta/,
inventory/group_vars, the lab's test doubles under tests/lab/, tests/recorded/reference/): the
checkout itself, or `orchestrator/_bundle/` where the wheel carries a copy laid out the same way
(setup.py's build step). `STATE_ROOT` is where gpuprov writes (fact cache, lab state, image
build cache): the checkout, or `$XDG_CACHE_HOME/gpuprov` (default ~/.cache/gpuprov) when
installed, so an installed `provision` works from any directory and never writes into
site-packages.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
BUNDLE = PACKAGE / "_bundle"


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
    """A collections path entry holding the collection gpuprov.nvidia as `SOURCE_ROOT` (what
    site.yml's roles and plugins by FQCN resolve to): the checkout's own `collections/`
    (committed: `ansible_collections/gpuprov/nvidia` links back to the checkout), else, for an
    installed wheel, such a link made under the state root for this installation's bundle."""
    here = SOURCE_ROOT.resolve()
    checkout = SOURCE_ROOT / "collections"
    if checkout.joinpath("ansible_collections", *COLLECTION).resolve() == here:
        return checkout
    tag = hashlib.sha256(str(here).encode()).hexdigest()[:12]
    root = state_root() / "collections" / tag
    link = root.joinpath("ansible_collections", *COLLECTION)
    if not (link.is_symlink() and link.resolve() == here):
        link.parent.mkdir(parents=True, exist_ok=True)
        fresh = link.with_name(f".{link.name}.{os.getpid()}")
        fresh.unlink(missing_ok=True)
        fresh.symlink_to(here, target_is_directory=True)
        os.replace(fresh, link)
    return root
