"""The wheel carries the Ansible collection and the lab's test doubles.

pyproject.toml holds the metadata; this build step copies the files Ansible and the lab read
(listed in BUNDLE, paths in the checkout), laid out as in the checkout, into
`ansible_collections/gpuprov/nvidia/` beside the `orchestrator` package, with a copy of that
package as the collection's own `orchestrator/` (the planner its action plugins import). In
site-packages that is where Ansible looks for collections on its Python path, as the
`ansible` package ships its collections: after `pip install`, `ansible-doc gpuprov.nvidia.plan`
and `ansible-playbook gpuprov.nvidia.site` find it; an installed `provision apply` /
`provision lab` work from any directory (orchestrator/paths.py finds the files there). An
editable install reads the checkout itself.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUNDLE = (
    "LICENSE",
    "ansible.cfg",
    "galaxy.yml",
    "meta",
    "plugins",
    "roles",
    "playbooks",
    "inventory",
    "tests/lab/aptrepo",
    "tests/lab/gpusim",
    "tests/lab/profiles",
    "tests/recorded/reference",
)
# galaxy.yml's namespace and name, where Ansible finds a collection on its Python path
COLLECTION = ("ansible_collections", "gpuprov", "nvidia")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


class BuildWithBundle(build_py):  # type: ignore[misc]  # setuptools is untyped here
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib).joinpath(*COLLECTION)
        shutil.rmtree(target, ignore_errors=True)
        for name in BUNDLE:
            src, dst = ROOT / name, target / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, ignore=_IGNORE, symlinks=True)
            else:
                shutil.copy2(src, dst)
        # the package as built (its links to plugins/module_utils resolved: a wheel holds files)
        built = Path(self.build_lib) / "orchestrator"
        shutil.copytree(built, target / "orchestrator", ignore=_IGNORE)


setup(cmdclass={"build_py": BuildWithBundle})
