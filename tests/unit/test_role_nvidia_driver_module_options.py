"""The driver role's options for the nvidia module (issue 47): IMEX channel 0 on IMEX compute
trays and CDMM on Grace from R580, the lines Azure's and EKS's image builds write
(tests/recorded/reference/nvidia-module-options.yaml, with sources and commits).

The role's own task file (tasks/module-options.yml) and variables (vars/main.yml) run with
real ansible-playbook on local fake hosts; each writes its file under a temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from roleplay import run_plays, work_dirs

pytestmark = pytest.mark.ansible

ROLE = Path(__file__).resolve().parents[2] / "roles" / "nvidia_driver"
REF = yaml.safe_load(
    (ROLE.parents[1] / "tests/recorded/reference/nvidia-module-options.yaml").read_text()
)["options"]
IMEX, CDMM = REF["imex_channel0"]["line"], REF["cdmm"]["line"]
CASES = {  # architecture, branch, nvidia_driver_imex
    "gb200_tray": ("aarch64", "580", True),
    "gh200": ("aarch64", "580", False),
    "grace_575": ("aarch64", "575", False),
    "x86_imex": ("x86_64", "595", True),
    "p5": ("x86_64", "580", False),
}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work, out = work_dirs(tmp_path_factory, "module_options")
    (out / "p5.conf").write_text("options nvidia NVreg_CreateImexChannel0=1\n")  # left over
    plays = [
        {
            "name": case,
            "hosts": case,
            "gather_facts": False,
            "vars_files": [str(ROLE / "vars" / "main.yml")],
            "vars": {
                "ansible_facts": {"architecture": arch},
                "nvidia_driver_branch": branch,
                "nvidia_driver_imex": imex,
            },
            "tasks": [
                {
                    "name": "Run the role's task file",
                    "ansible.builtin.include_tasks": str(ROLE / "tasks" / "module-options.yml"),
                    "vars": {"__nvidia_driver_module_options_file": str(out / f"{case}.conf")},
                }
            ],
        }
        for case, (arch, branch, imex) in CASES.items()
    ]
    run_plays(work, CASES, plays)
    return out


def lines(out: Path, case: str) -> list[str] | None:
    path = out / f"{case}.conf"
    if not path.exists():
        return None
    return [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]


def test_the_lines_are_the_vendor_builds() -> None:
    assert IMEX == "options nvidia NVreg_CreateImexChannel0=1"
    assert CDMM == "options nvidia NVreg_CoherentGPUMemoryMode=driver"
    assert REF["cdmm"]["min_branch"] == 580


def test_an_imex_tray_on_grace_gets_the_channel_and_cdmm(written: Path) -> None:
    assert lines(written, "gb200_tray") == [IMEX, CDMM]


def test_grace_gets_cdmm_from_580_only(written: Path) -> None:
    assert lines(written, "gh200") == [CDMM]
    assert lines(written, "grace_575") is None


def test_imex_without_grace_gets_the_channel_only(written: Path) -> None:
    assert lines(written, "x86_imex") == [IMEX]


def test_a_host_needing_no_option_has_no_file(written: Path) -> None:
    assert lines(written, "p5") is None  # the leftover was removed
