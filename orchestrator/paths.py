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
