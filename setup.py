"""The wheel carries the Ansible collection and the lab's test doubles as package data.

pyproject.toml holds the metadata; this build step copies the files Ansible and the lab read
(listed in BUNDLE, paths in the checkout) into `orchestrator/_bundle/`, laid out as in the
checkout, so an installed `provision apply` / `provision lab` work from any directory
(orchestrator/paths.py finds them there). An editable install reads the checkout itself.
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
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


class BuildWithBundle(build_py):  # type: ignore[misc]  # setuptools is untyped here
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "orchestrator" / "_bundle"
        shutil.rmtree(target, ignore_errors=True)
        for name in BUNDLE:
            src, dst = ROOT / name, target / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, ignore=_IGNORE, symlinks=True)
            else:
                shutil.copy2(src, dst)


setup(cmdclass={"build_py": BuildWithBundle})
