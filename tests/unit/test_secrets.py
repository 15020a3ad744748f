"""Secrets never stay in the artifacts (issue 27, item 7): the command file ansible-runner
writes, scrubbed; a real run on a local host leaves no secret anywhere under its directory."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from orchestrator.secrets import REDACTED, scrub_command, scrub_command_file, scrub_env


def test_inline_extra_vars_are_redacted_files_and_ours_kept() -> None:
    command = [
        "ansible-playbook", "-e", "@/run/plan.json", "-e", '{"gpuprov_serial": "1"}',
        "-e", "ansible_become_password=hunter2", "--extra-vars={\"token\": \"t0k\"}",
        "-ekey=v", "--limit", "a,b", "site.yml",
    ]  # fmt: skip
    out = scrub_command(command)
    assert "hunter2" not in json.dumps(out) and "t0k" not in json.dumps(out)
    assert out[1:5] == ["-e", "@/run/plan.json", "-e", '{"gpuprov_serial": "1"}']
    assert out[6] == REDACTED and out[-3:] == ["--limit", "a,b", "site.yml"]


def test_env_keeps_ansible_settings_without_secrets() -> None:
    env = {
        "AWS_SECRET_ACCESS_KEY": "x",
        "PATH": "/bin",
        "ANSIBLE_FORKS": "5",
        "ANSIBLE_BECOME_PASSWORD": "hunter2",
        "RUNNER_OMIT_EVENTS": "False",
    }
    assert scrub_env(env) == {"PATH": "/bin", "ANSIBLE_FORKS": "5", "RUNNER_OMIT_EVENTS": "False"}


def test_the_file_is_rewritten_0600(tmp_path: Path) -> None:
    path = tmp_path / "command"
    path.write_text(json.dumps({"command": ["x", "-e", "a=b"], "env": {"HOME": "/root"}}))
    scrub_command_file(path)
    assert json.loads(path.read_text()) == {"command": ["x", "-e", REDACTED], "env": {}}
    assert path.stat().st_mode & 0o777 == 0o600


PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: Use the secret
      ansible.builtin.copy:
        dest: "{{ out }}/used"
        content: "{{ (ansible_become_password | length) }}"
        mode: "0600"
"""


@pytest.mark.ansible
def test_a_run_leaves_no_secret_in_its_artifacts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.apply import AnsibleOptions, new_run_dir, run_playbook

    monkeypatch.setenv("GPUPROV_TEST_CLOUD_TOKEN", "cloud-s3cret")
    inventory = tmp_path / "inv.ini"
    inventory.write_text(
        f"a ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    (tmp_path / "play.yml").write_text(PLAY)
    result = run_playbook(
        inventories=[inventory],
        hosts=["a"],
        host_vars={},
        run_dir=new_run_dir(tmp_path / "artifacts"),
        playbook=tmp_path / "play.yml",
        options=AnsibleOptions(
            extra_vars=(f"out={tmp_path}", "ansible_become_password=hunter2-s3cret")
        ),
    )
    assert result.status == "successful"
    assert (tmp_path / "used").read_text() == str(len("hunter2-s3cret")), "Ansible got it"
    for path in result.artifact_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"hunter2-s3cret" not in data, path
            assert b"cloud-s3cret" not in data, path
    assert result.artifact_dir.stat().st_mode & 0o777 == 0o700


def test_run_directories_are_rotated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime as dt

    from orchestrator.apply import artifacts_root, new_run_dir

    monkeypatch.setenv("GPUPROV_ARTIFACTS_KEEP", "3")
    base = tmp_path / "arts"
    start = dt.datetime(2026, 12, 1, 17, 0, tzinfo=dt.UTC)
    made = [new_run_dir(base, start + dt.timedelta(minutes=i)) for i in range(5)]
    (base / "notes").mkdir()  # not a run directory: kept
    new_run_dir(base, start + dt.timedelta(minutes=9))
    left = sorted(p.name for p in base.iterdir())
    assert left == sorted([made[3].name, made[4].name, "20261201T170900Z", "notes"])
    monkeypatch.setenv("GPUPROV_ARTIFACTS_DIR", str(tmp_path / "elsewhere"))
    assert artifacts_root() == tmp_path / "elsewhere"
    assert artifacts_root("given") == Path("given")
    os.environ.pop("GPUPROV_ARTIFACTS_DIR", None)
