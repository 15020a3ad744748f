"""After `pip install` of the wheel, Ansible finds the collection gpuprov.nvidia on its own, as
it finds the collections the `ansible` package ships (site-packages/ansible_collections):
`ansible-doc gpuprov.nvidia.plan` in a fresh virtual environment, from a directory that is not
the checkout, with no collections path set (issue 50)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# builds and installs the wheel, runs ansible-doc: the ansible tier
pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_pip_install_then_ansible_doc_finds_the_collection(tmp_path: Path) -> None:
    # no setting of the caller's points Ansible at a collection
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHON"))}
    env["HOME"] = str(tmp_path / "home")  # no ~/.ansible/collections of the user's either
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(REPO)], tmp_path, env)
    (wheel,) = (tmp_path / "dist").glob("gpuprov-*.whl")
    constraints = (
        REPO / "constraints" / ("oldest.txt" if sys.version_info < (3, 13) else "newest.txt")
    )
    # ansible-core at CI's version, then the wheel (its other requirements play no part here)
    _run([*pip, "install", "-q", "-c", str(constraints), "ansible-core"], tmp_path, env)
    _run([*pip, "install", "-q", "--no-deps", str(wheel)], tmp_path, env)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = _run([str(venv / "bin" / "ansible-doc"), "--json", "gpuprov.nvidia.plan"], elsewhere, env)
    doc = json.loads(out)["gpuprov.nvidia.plan"]["doc"]
    site = next((venv / "lib").glob("python3*/site-packages"))
    collection = site / "ansible_collections" / "gpuprov" / "nvidia"
    assert doc["filename"] == str(collection / "plugins" / "modules" / "plan.py")
    assert doc["short_description"].startswith("Detect this host's GPUs and plan it")
    # the planner its action imports, and the playbooks, under the collection's name
    assert (collection / "orchestrator" / "plan.py").is_file()
    listed = _run(
        [str(venv / "bin" / "ansible-playbook"), "--list-tasks", "-i", "localhost,",
         "gpuprov.nvidia.check_driver"],
        elsewhere, env,
    )  # fmt: skip
    assert "Check the NVIDIA driver without changing anything" in listed
