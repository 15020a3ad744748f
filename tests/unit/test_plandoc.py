"""The plan document: what apply passes to the playbook is what verify reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import BadInputError
from orchestrator.plandoc import host_entry, read_plan_document, write_plan_document
from orchestrator.verify.runner import SUITE, suite_command

PLAN = {
    "gpu-1": {"gpuprov_roles": ["nvidia_driver"], "nvidia_driver_branch": "580"},
    "gpu-2": {"gpuprov_roles": [], "nvidia_driver_fabricmanager": True},
}


def test_round_trip_and_shape(tmp_path: Path) -> None:
    path = write_plan_document(tmp_path, PLAN)
    assert path.name == "plan.json"
    doc = json.loads(path.read_text())
    assert doc == {"gpuprov_plan": {"format": 1, "hosts": PLAN}}
    assert read_plan_document(path) == PLAN
    assert host_entry(PLAN, "gpu-2") == PLAN["gpu-2"]
    assert host_entry(PLAN, "gpu-3") is None
    assert host_entry({"*": {"a": 1}}, "gpu-3") == {"a": 1}


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps({"gpu-1": {}}),  # the old {host: vars} shape
        json.dumps({"gpuprov_plan": {"format": 2, "hosts": {}}}),
        json.dumps({"gpuprov_plan": {"format": 1, "hosts": {"gpu-1": ["x"]}}}),
    ],
)
def test_anything_else_is_bad_input(tmp_path: Path, text: str) -> None:
    path = tmp_path / "plan.json"
    path.write_text(text)
    with pytest.raises(BadInputError, match="plan"):
        read_plan_document(path)


@pytest.mark.ansible
def test_the_suite_reads_the_document_apply_writes(tmp_path: Path) -> None:
    """The suite takes the same plan.json (--gpuprov-plan); a wrong file stops it at start."""
    good = write_plan_document(tmp_path, PLAN)
    cmd = suite_command(Path("inv.ini"), "gpu_nodes", tmp_path / "j.xml", good, workers=1)
    assert f"--gpuprov-plan={good}" in cmd
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(PLAN))
    for plan, rc, words in ((good, 0, "collected"), (bad, 4, "not a gpuprov plan document")):
        args = ["--collect-only", "--hosts=local://", f"--gpuprov-plan={plan}"]
        done = subprocess.run(
            [sys.executable, "-m", "pytest", str(SUITE), "-p", "no:cacheprovider", "-q", *args],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == rc, done.stdout + done.stderr
        assert words in done.stdout + done.stderr
