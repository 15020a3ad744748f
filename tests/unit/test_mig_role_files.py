"""The mig role installs a self-sufficient applier: the modules it lists import on a host that
has only Python's standard library, and the boot unit is ordered as the issue asks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "mig"


def test_listed_modules_are_all_the_applier_needs(tmp_path: Path) -> None:
    modules = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__mig_modules"]
    for name in modules:
        target = tmp_path / "orchestrator" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "orchestrator" / name, target)
    (tmp_path / "orchestrator" / "parsers" / "__init__.py").write_text('"""MIG parsers."""\n')
    probe = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import orchestrator.mig_apply; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('orchestrator') "
        "or m == 'yaml')))"
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
    loaded = json.loads(done.stdout)
    assert "yaml" not in loaded
    installed = {"orchestrator", "orchestrator.parsers"} | {
        "orchestrator." + m.removesuffix(".py").replace("/", ".") for m in modules
    }
    assert set(loaded) <= installed
    assert "orchestrator.mig" in loaded and "orchestrator.parsers.mig" in loaded


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
