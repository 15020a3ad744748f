"""Small helpers shared by the unit tests: the real H200 fixture, copies of it as a saved
facts directory, inventory files, a lab host's spec, and loading a file as a module."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

from orchestrator.lab import container

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "recorded" / "fixtures" / "real" / "h200x2-ubuntu2404-580"


def copy_facts(tmp_path: Path, names: tuple[str, ...]) -> Path:
    """A facts directory (tmp_path/facts) holding one copy of the H200 fixture per name."""
    root = tmp_path / "facts"
    for name in names:
        shutil.copytree(H200, root / name)
    for p in root.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return root


def write_inventory(tmp_path: Path, text: str, name: str = "hosts.ini") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def lab_host_spec(tmp_path: Path, gpusim: Path | None = None) -> container.HostSpec:
    """A lab host (Debian 12, p5.48xlarge) as the lab would create it; nothing is started."""
    return container.HostSpec(
        lab="unit",
        name="unit-deb12-1",
        os="debian12",
        profile="p5.48xlarge",
        port=40022,
        image="gpuprov-lab/debian12:0123456789ab",
        network="gpuprov-lab-unit",
        profile_file=tmp_path / "profile.yaml",
        gpusim_dir=gpusim,
    )


def load_module(name: str, path: Path, *, register: bool = False) -> ModuleType:
    """The Python file at `path` (a script without .py too) imported as module `name`;
    `register`: put in sys.modules before it runs."""
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    loader.exec_module(module)
    return module
