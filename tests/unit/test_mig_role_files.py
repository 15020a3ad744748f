"""The mig role installs a self-sufficient applier: gpuprov.nvidia.mig_applier writes the
collection's MIG module_utils (what Ansible ships with it), which import on a host that has only
Python's standard library; and the boot unit is ordered as the issue asks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

# runs ansible-playbook (or ansible-doc / the role's modules) on this machine: the ansible tier
pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "mig"
BIN = Path(sys.executable).parent


def _install(path: Path) -> dict[str, object]:
    """Run gpuprov.nvidia.mig_applier on localhost through Ansible (its AnsiballZ payload)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_COLLECTIONS_PATH"] = str(REPO / "collections")
    done = subprocess.run(
        [str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,", "-o",
         "-e", f"ansible_python_interpreter={sys.executable}",
         "-m", "gpuprov.nvidia.mig_applier", "-a", f"path={path}"],
        capture_output=True, text=True, check=False, env=env, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, object] = json.loads(done.stdout.split("=>", 1)[1])
    return result


def test_the_installed_applier_is_the_collections_module_utils_and_self_sufficient(
    tmp_path: Path,
) -> None:
    first = _install(tmp_path)
    assert first["changed"] is True
    package = tmp_path / "gpuprov_mig"
    utils = REPO / "plugins" / "module_utils"
    for name in ("errors.py", "mig.py", "mig_apply.py", "parsers/_text.py", "parsers/mig.py"):
        assert (package / name).read_text() == (utils / name).read_text(), name
    # the command: the text of orchestrator/mig_cli.py, outside module_utils (issue 50)
    assert (package / "__main__.py").read_text() == (
        REPO / "orchestrator" / "mig_cli.py"
    ).read_text()
    assert not any(
        "print(" in p.read_text() or "sys.exit(" in p.read_text() for p in utils.rglob("*.py")
    )
    # as the gpuprov-mig wrapper runs it (roles/mig/templates/gpuprov-mig.j2)
    helped = subprocess.run(
        [sys.executable, "-s", "-m", "gpuprov_mig", "--help"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    assert helped.returncode == 0 and helped.stdout.startswith("usage: gpuprov-mig"), helped.stderr
    assert _install(tmp_path) == {**first, "changed": False, "written": []}
    probe = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import gpuprov_mig.mig_apply; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('gpuprov', 'yaml', "
        "'ansible')))))"
    )
    # -I: isolated, no site-packages (hosts have no PyYAML and no gpuprov)
    done = subprocess.run(
        [sys.executable, "-I", "-c", probe, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert {"gpuprov_mig.mig", "gpuprov_mig.parsers.mig", "gpuprov_mig.errors"} <= loaded
    assert loaded <= {"gpuprov_mig", "gpuprov_mig.parsers", "gpuprov_mig.__main__"} | {
        "gpuprov_mig." + p.removesuffix(".py").replace("/", ".")
        for p in ("errors.py", "mig.py", "mig_apply.py", "parsers/_text.py", "parsers/mig.py")
    }


def test_boot_unit_runs_after_the_driver_and_before_docker_and_clients() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    internal = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    text = jinja2.Template((ROLE / "templates" / "gpuprov-mig.service.j2").read_text()).render(
        ansible_managed="managed", **defaults, __mig_command=internal["__mig_command"]
    )
    lines = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#")
    assert {"nvidia-persistenced.service", "nvidia-fabricmanager.service"} <= set(
        lines["After"].split()
    )
    assert {"docker.service", "nvidia-dcgm.service", "dcgm-exporter.service"} <= set(
        lines["Before"].split()
    )
    assert lines["Type"] == "oneshot" and lines["WantedBy"] == "multi-user.target"
    assert lines["ExecStart"].split() == [
        "/usr/local/sbin/gpuprov-mig", "--config", "/etc/gpuprov/mig.json", "apply", "--no-block",
    ]  # fmt: skip
