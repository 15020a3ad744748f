#!/usr/bin/python
"""gpuprov.nvidia.mig_applier: install gpuprov's MIG applier on the host, from the very
module_utils Ansible shipped with this module (one copy: plugins/module_utils/)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: mig_applier
short_description: Install gpuprov's MIG applier (the gpuprov-mig command's Python package)
description:
  - Writes the Python package C(gpuprov_mig) under O(path) - the applier
    (plugins/module_utils/mig_apply.py) and the modules it imports (mig.py, errors.py,
    parsers/mig.py, parsers/_text.py; standard library only) - taken from the module_utils
    Ansible shipped with this module, so the host validates and applies layouts with exactly
    the rules the planner used; and the command, C(__main__.py) (the text of the collection's
    orchestrator/mig_cli.py, which prints and exits so that module_utils does not). The mig
    role's gpuprov-mig command and boot unit run C(python3 -m gpuprov_mig) from there.
  - Files that already hold the same text are left alone (changed is false). Check mode
    reports what would be written and writes nothing.
options:
  path:
    description: The directory the package is installed into (the mig role's mig_install_dir).
    type: path
    required: true
author: gpuprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Install the MIG applier's package where the gpuprov-mig command and the boot unit read it
  gpuprov.nvidia.mig_applier:
    path: /usr/local/lib/gpuprov
  register: applier

- name: Show what was written
  ansible.builtin.debug:
    var: applier.written
"""

RETURN = r"""
written:
  description: The files written (or, in check mode, that would be), under O(path).
  type: list
  elements: str
  returned: always
"""

import os
import tempfile
from types import ModuleType

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.nvidia.plugins.module_utils import (
    errors,
    mig,
    mig_apply,
    parsers,
)
from ansible_collections.gpuprov.nvidia.plugins.module_utils.parsers import (
    _text,
)
from ansible_collections.gpuprov.nvidia.plugins.module_utils.parsers import (
    mig as mig_parsers,
)

PACKAGE = "gpuprov_mig"
_INIT = '"""gpuprov\'s MIG applier, installed by the mig role (gpuprov.nvidia.mig_applier)."""\n'
# The command (`python3 -m gpuprov_mig`): printing and exiting stay out of module_utils, so
# this is the text of orchestrator/mig_cli.py (tests/unit/test_mig_role_files.py holds the two
# equal; the orchestrator's copy is the one ruff and mypy read).
_MAIN = r'''"""The gpuprov-mig command.

`python3 -m orchestrator.mig_cli` in a checkout; on hosts the same text is
gpuprov_mig/__main__.py, written by gpuprov.nvidia.mig_applier (`python3 -m gpuprov_mig`).
The work is mig_apply.cli, in the collection's module_utils, which neither prints nor exits."""

from __future__ import annotations

import sys

from .mig_apply import cli


def main() -> int:
    outcome = cli(sys.argv[1:])
    sys.stdout.write(outcome.stdout)
    sys.stderr.write(outcome.stderr)
    return outcome.code


if __name__ == "__main__":
    raise SystemExit(main())
'''


def _source(module: ModuleType) -> str:
    # from the loader that imported it: Ansible's payload (a zip), or a checkout's file
    return str(module.__loader__.get_source(module.__name__))  # type: ignore[union-attr]


def package_files() -> dict[str, str]:
    """Relative path -> text of every file of the installed package."""
    return {
        "__init__.py": _INIT,
        "__main__.py": _MAIN,
        "errors.py": _source(errors),
        "mig.py": _source(mig),
        "mig_apply.py": _source(mig_apply),
        "parsers/__init__.py": _source(parsers),
        "parsers/_text.py": _source(_text),
        "parsers/mig.py": _source(mig_parsers),
    }


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def main() -> None:
    module = AnsibleModule(
        argument_spec={"path": {"type": "path", "required": True}},
        supports_check_mode=True,
    )
    root = os.path.join(module.params["path"], PACKAGE)
    written = []
    for rel, text in sorted(package_files().items()):
        dest = os.path.join(root, rel)
        if _read(dest) == text:
            continue
        written.append(os.path.join(PACKAGE, rel))
        if module.check_mode:
            continue
        os.makedirs(os.path.dirname(dest), mode=0o755, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".gpuprov-mig.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        module.atomic_move(tmp, dest)
    module.exit_json(changed=bool(written), written=written)


if __name__ == "__main__":
    main()
