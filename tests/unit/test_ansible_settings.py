"""gpuprov's Ansible settings layered under the user's ansible.cfg / ANSIBLE_* environment, and
the ansible-playbook options `provision apply` passes through."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import pytest

from orchestrator import ansiblecfg, paths
from orchestrator.apply import AnsibleOptions, ansible_options
from orchestrator.cli import build_parser, main
from orchestrator.errors import BadInputError


def test_every_gpuprov_setting_has_ansible_core_names() -> None:
    settings = {(s.section, s.key): s for s in ansiblecfg.gpuprov_settings()}
    assert settings[("defaults", "forks")].env == ("ANSIBLE_FORKS",)
    assert settings[("ssh_connection", "pipelining")].env[0] == "ANSIBLE_PIPELINING"
    # pipelining is read from [defaults], [connection] and [ssh_connection] alike
    assert ("defaults", "pipelining") in settings[("ssh_connection", "pipelining")].ini
    assert settings[("ssh_connection", "ssh_args")].env == ("ANSIBLE_SSH_ARGS",)


def test_unknown_key_in_a_config_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\nno_such_setting_at_all = 1\n")
    with pytest.raises(BadInputError, match="no_such_setting_at_all"):
        ansiblecfg.gpuprov_settings(cfg)


def test_without_a_user_config_gpuprov_settings_apply() -> None:
    env = ansiblecfg.layered_env({}, None)
    assert env["ANSIBLE_FORKS"] == "50"
    assert env["ANSIBLE_PIPELINING"] == "True"
    assert "StrictHostKeyChecking=yes" in env["ANSIBLE_SSH_ARGS"]
    assert env["ANSIBLE_ROLES_PATH"] == str(paths.ROLES_DIR)
    assert env["ANSIBLE_CACHE_PLUGIN_CONNECTION"] == str(paths.state_root() / ".cache" / "facts")
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert "ANSIBLE_CONFIG" not in env


def test_the_users_config_and_environment_win(tmp_path: Path) -> None:
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text(
        "[defaults]\nforks = 7\nroles_path = my_roles:/srv/roles\nhost_key_checking = False\n"
        "[connection]\npipelining = False\n"
    )
    env = ansiblecfg.layered_env({"ANSIBLE_SSH_ARGS": "-o ForwardAgent=yes"}, cfg)
    assert "ANSIBLE_FORKS" not in env  # theirs: 7, from their file
    assert "ANSIBLE_PIPELINING" not in env  # set under another section Ansible also reads
    assert "ANSIBLE_SSH_ARGS" not in env  # theirs, from their environment
    assert env["ANSIBLE_GATHERING"] == "smart"  # not theirs: gpuprov's
    # their roles first (relative to their file, as Ansible reads it), then gpuprov's
    assert env["ANSIBLE_ROLES_PATH"].split(os.pathsep) == [
        str(tmp_path / "my_roles"),
        "/srv/roles",
        str(paths.ROLES_DIR),
    ]
    # never off: gpuprov does not accept unknown host keys
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert env["ANSIBLE_SSH_HOST_KEY_CHECKING"] == "True"


def test_gpuprovs_collection_comes_first_on_the_collections_path(tmp_path: Path) -> None:
    """site.yml's roles and plugins by FQCN (gpuprov.nvidia.*) are gpuprov's own, whatever
    else the user's collections path holds; the user's path follows, else Ansible's default
    places (the rest of gpuprov's ansible.cfg value)."""
    own = str(paths.collections_dir())
    assert ansiblecfg.layered_env({}, None)["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep) == [
        own,
        "~/.ansible/collections",
        "/usr/share/ansible/collections",
    ]
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\ncollections_path = mine\n")
    env = ansiblecfg.layered_env({}, cfg)
    assert env["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep) == [own, str(tmp_path / "mine")]
    env = ansiblecfg.layered_env({"ANSIBLE_COLLECTIONS_PATH": "/srv/c"}, cfg)
    assert env["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep) == [own, "/srv/c"]


def test_an_installed_bundle_gets_a_collection_link_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wheel's bundle has no committed collections/ link: a folder is made under the state
    root, per bundle, linking to the bundle's entries and to the package as orchestrator/;
    made again when a link points elsewhere (or an older gpuprov made one link)."""
    package = tmp_path / "site-packages" / "orchestrator"
    bundle = package / "_bundle"
    (bundle / "playbooks").mkdir(parents=True)
    monkeypatch.setattr(paths, "SOURCE_ROOT", bundle)
    monkeypatch.setattr(paths, "PACKAGE", package)
    monkeypatch.setattr(paths, "state_root", lambda: tmp_path / "state")
    found = paths.collections_dir()
    folder = found / "ansible_collections" / "gpuprov" / "nvidia"
    assert found.parent == tmp_path / "state" / "collections"
    assert not folder.is_symlink()
    assert {p.name: p.resolve() for p in folder.iterdir()} == {
        "playbooks": (bundle / "playbooks").resolve(),
        "orchestrator": package.resolve(),
    }
    assert paths.collections_dir() == found  # kept as it is
    (folder / "playbooks").unlink()
    (folder / "playbooks").symlink_to(tmp_path)
    assert paths.collections_dir() == found
    assert (folder / "playbooks").resolve() == (bundle / "playbooks").resolve()
    shutil.rmtree(folder)
    folder.symlink_to(bundle)  # what an older gpuprov made
    assert paths.collections_dir() == found and not folder.is_symlink()
    assert (folder / "orchestrator").resolve() == package.resolve()


def test_the_users_config_is_the_one_ansible_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ansible.cfg").write_text("[defaults]\nforks = 3\n")
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    assert ansiblecfg.user_config(tmp_path) == (tmp_path / "ansible.cfg").resolve()
    other = tmp_path / "elsewhere.cfg"
    other.write_text("[defaults]\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(other))
    assert ansiblecfg.user_config(tmp_path) == other.resolve()


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["apply", *argv])


def test_pass_through_options_reach_the_command_line() -> None:
    asked: list[str] = []

    def ask(prompt: str) -> str:
        asked.append(prompt)
        return "s3cret"

    args = _args(
        "--tags", "docker,mig", "-t", "nvidia_driver", "--skip-tags", "mig",
        "-e", "a=1", "--extra-vars", "@vars.yml", "--vault-id", "prod@prompt",
        "-J", "-K", "--forks", "5", "--diff", "-vvv",
    )  # fmt: skip
    opts = ansible_options(args, ask=ask)
    assert asked == ["BECOME password: ", "Vault password: "]
    assert opts.cmdline() == [
        "--tags", "docker,mig,nvidia_driver", "--skip-tags", "mig", "-e", "a=1",
        "-e", "@vars.yml", "--vault-id", "prod@prompt", "--ask-vault-pass",
        "--ask-become-pass", "--forks", "5", "--diff",
    ]  # fmt: skip
    passwords = opts.passwords()
    assert set(passwords.values()) == {"s3cret"}
    assert args.verbose == 3
    assert AnsibleOptions().cmdline() == [] and AnsibleOptions().passwords() == {}


def test_bad_forks_is_bad_input() -> None:
    with pytest.raises(BadInputError, match="--forks 0"):
        ansible_options(_args("--forks", "0"), ask=lambda _: "")


@pytest.mark.parametrize(
    "argv",
    [["plan", "--tags", "docker"], ["detect", "-e", "a=1"], ["verify", "--forks", "3"],
     ["validate", "--diff"]],
)  # fmt: skip
def test_stages_that_run_no_playbook_refuse_its_options(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    if argv[1] == "-e":  # -e is for every stage that plans (issue 46), not detect
        assert "`provision detect` does not use it" in err
    else:
        assert "of `provision apply` and the full run" in err


PLAY = """\
- name: Pass-through
  hosts: all
  gather_facts: false
  tasks:
    - name: Record what the run was given
      ansible.builtin.copy:
        dest: "{{ out }}/{{ inventory_hostname }}.txt"
        content: "forks={{ ansible_forks }} e={{ from_e }} secret={{ secret }}\\n"
        mode: "0644"
      tags: [record]
    - name: Skipped by --skip-tags
      ansible.builtin.copy:
        dest: "{{ out }}/skipped.txt"
        content: "x"
        mode: "0644"
      tags: [never_here]
"""


@pytest.mark.ansible
def test_options_user_config_and_passwords_reach_ansible_playbook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ansible.parsing.vault import VaultLib, VaultSecret

    from orchestrator.apply import new_run_dir, run_playbook

    out = tmp_path / "out"
    out.mkdir()
    inventory = tmp_path / "inv.ini"
    inventory.write_text(
        f"node-a ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    vaulted = VaultLib([("default", VaultSecret(b"vaultpw"))]).encrypt("hush").decode()
    (tmp_path / "vars.yml").write_text(
        f"out: {out}\nsecret: !vault |\n" + "".join(f"  {line}\n" for line in vaulted.split())
    )
    user = tmp_path / "project"
    user.mkdir()
    (user / "ansible.cfg").write_text("[defaults]\nforks = 3\n")  # the user's, in their cwd
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    monkeypatch.chdir(user)
    opts = AnsibleOptions(
        skip_tags=("never_here",),
        extra_vars=("from_e=yes", f"@{tmp_path / 'vars.yml'}"),
        ask_vault_pass=True,
        vault_password="vaultpw",
        become_password="unused-here",
    )
    result = run_playbook(
        inventories=[inventory],
        hosts=["node-a"],
        host_vars={},
        run_dir=new_run_dir(tmp_path / "artifacts"),
        playbook=playbook,
        options=opts,
    )
    assert result.status == "successful", result
    assert (out / "node-a.txt").read_text() == "forks=3 e=yes secret=hush\n"
    assert not (out / "skipped.txt").exists()
    # the passwords were answered to the prompts, never written to the artifacts
    for path in result.artifact_dir.rglob("*"):
        if path.is_file():
            assert b"vaultpw" not in path.read_bytes() and b"unused-here" not in path.read_bytes()


@pytest.mark.ansible
@pytest.mark.parametrize("echo", [None, False])
def test_v_shows_ansibles_own_output_unless_stdout_carries_json(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], echo: bool | None
) -> None:
    from orchestrator.apply import new_run_dir, run_playbook

    inventory = tmp_path / "inv.ini"
    inventory.write_text(
        f"node-a ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    result = run_playbook(
        inventories=[inventory],
        hosts=["node-a"],
        host_vars={},
        run_dir=new_run_dir(tmp_path / "artifacts"),
        playbook=playbook,
        verbosity=3,
        echo=echo,
        options=AnsibleOptions(
            extra_vars=(f"out={tmp_path}", "from_e=1", "secret=s"), skip_tags=("never_here",)
        ),
    )
    assert result.status == "successful"
    printed = capfd.readouterr().out
    stdout = (result.artifact_dir / "ansible" / "stdout").read_text()
    assert "TASK [Record what the run was given]" in stdout
    assert "ESTABLISH LOCAL CONNECTION" in stdout  # -vvv: Ansible's connection debugging
    if echo is None:
        assert "TASK [Record what the run was given]" in printed
    else:
        assert "TASK [" not in printed


def test_a_hung_host_or_task_cannot_stall_a_run() -> None:
    """Issue 27: SSH keepalives (a host that stops answering fails after 15 s x 4) and a
    task deadline, from gpuprov's ansible.cfg, when the user sets neither."""
    from orchestrator.ansiblecfg import layered_env

    env = layered_env({}, None)
    assert env["ANSIBLE_TASK_TIMEOUT"] == "7200"
    args = env["ANSIBLE_SSH_ARGS"].split()
    assert "ServerAliveInterval=15" in args and "ServerAliveCountMax=4" in args
