"""tasks/kernels-dnf.yml's own "Work out the -devel packages" task on what rpm reports: every
installed kernel's -devel package at its release, kernel-devel-matched at the newest kernel
(RHEL 9) unless installed, AL2023's kernel6.12 -> kernel6.12-devel, nothing when covered.

Releases: Rocky 9's (tests/lab/rpmrepo/model.py KERNELS_EL9, sources there); AL2023's from
public transcripts (tests/unit/test_kernels_dnf.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
from roleplay import run_plays  # noqa: E402

pytestmark = pytest.mark.ansible  # role renders through real Ansible (the ansible tier)

TASKS = REPO / "roles" / "nvidia_driver" / "tasks" / "kernels-dnf.yml"
A, B, C = (
    "5.14.0-162.22.2.el9_1.x86_64",
    "5.14.0-284.11.1.el9_2.x86_64",
    "5.14.0-284.30.1.el9_2.x86_64",
)
AL61, AL612 = "6.1.112-122.189.amzn2023.x86_64", "6.12.80-106.156.amzn2023.x86_64"

CASES: dict[str, tuple[str, list[str]]] = {
    # rpm lines (sorted by release, as the task's `sort -k2,2V`), matched package
    "el9_two_kernels_no_devel": ("kernel-devel-matched", [f"kernel {A}", f"kernel-core {A}",
                                 f"kernel {B}", f"kernel-core {B}"]),
    "el9_covered": ("kernel-devel-matched", [f"kernel-core {A}", f"kernel-devel {A}",
                    f"kernel-core {B}", f"kernel-devel {B}", f"kernel-devel-matched {B}"]),
    "el9_a_later_kernel_without_devel": ("kernel-devel-matched", [
        f"kernel-core {B}", f"kernel-devel {B}", f"kernel-devel-matched {B}",
        f"kernel-core {C}"]),
    "el8_no_matched": ("", [f"kernel-core {A}", f"kernel-core {B}", f"kernel-devel {B}"]),
    "al2023_61_and_612": ("", [f"kernel {AL61}", f"kernel-devel {AL61}", f"kernel6.12 {AL612}"]),
    "no_kernel_in_the_root": ("kernel-devel-matched", []),
}  # fmt: skip
EXPECTED: dict[str, list[str]] = {
    "el9_two_kernels_no_devel": [
        f"kernel-devel-{A}",
        f"kernel-devel-{B}",
        f"kernel-devel-matched-{B}",
    ],
    "el9_covered": [],
    "el9_a_later_kernel_without_devel": [f"kernel-devel-{C}"],
    "el8_no_matched": [f"kernel-devel-{A}"],
    "al2023_61_and_612": [f"kernel6.12-devel-{AL612}"],
    "no_kernel_in_the_root": [],
}


@pytest.fixture(scope="module")
def worked_out(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    tasks = yaml.safe_load(TASKS.read_text(encoding="utf-8"))
    work = next(t for t in tasks if t["name"].startswith("Work out the -devel packages"))
    tmp = tmp_path_factory.mktemp("kernels-dnf")
    plays = [
        {
            "name": case,
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "__nvidia_driver_kernel_devel_matched": matched,
                "__nvidia_driver_rpm_kernels": {"stdout_lines": lines},
            },
            "tasks": [
                work,
                {
                    "gpuprov_test_record": {
                        "dest": str(tmp / f"{case}.json"),
                        "content": "{{ __nvidia_driver_kernel_devel_needed | to_json }}",
                    }
                },
            ],
        }
        for case, (matched, lines) in CASES.items()
    ]
    run_plays(tmp, ["localhost"], plays)
    return {case: json.loads((tmp / f"{case}.json").read_text()) for case in CASES}


@pytest.mark.parametrize("case", sorted(CASES))
def test_devel_packages_needed(worked_out: dict[str, list[str]], case: str) -> None:
    assert sorted(worked_out[case]) == sorted(EXPECTED[case])
