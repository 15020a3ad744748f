"""Issue 27, items 8-10 and 12-13: bad input that must be refused before any host is touched
(exit 2, the value named): --limit patterns Ansible would widen, output paths that are not
regular files, -e as ansible-core loads it, --tags, --junit where nothing is written, broken
inventories named by their real cause, inventory values provision would silently drop."""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _helpers import REPO as ROOT
from _helpers import copy_facts, write_inventory

from orchestrator import atomic, inputs, report
from orchestrator.cli import build_parser, main
from orchestrator.errors import BadInputError, HostError, InventoryError, PolicyError
from orchestrator.inventory import load_inventory
from orchestrator.policy import load_policy

TWO = "[gpu_nodes]\nnode1 ansible_connection=local\nnode2 ansible_connection=local\n"


def _inventory(tmp_path: Path, text: str = TWO, name: str = "hosts.ini") -> Path:
    return write_inventory(tmp_path, text, name)


def _facts(tmp_path: Path, names: tuple[str, ...] = ("node1", "node2")) -> Path:
    return copy_facts(tmp_path, names)


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


# --- item 8: --limit -----------------------------------------------------------------------


def test_ansible_itself_reads_an_unclosed_bracket_as_a_wider_pattern() -> None:
    """Why the check exists: ansible-core drops the '[' (and splits 'node[1' in two)."""
    from ansible.inventory.manager import split_host_pattern

    assert split_host_pattern("~node[") == ["~node"]
    assert split_host_pattern("node[1") == ["node", "1"]


@pytest.mark.parametrize("limit", ["~node[", "node[1", "gpu_nodes]", "node1:node[2"])
@pytest.mark.parametrize("stage", ["plan", "detect", "apply", None])
def test_a_limit_ansible_would_widen_is_exit_2_before_any_host(
    tmp_path: Path,
    limit: str,
    stage: str | None,
    no_hosts: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [*([stage] if stage else []), "-i", str(_inventory(tmp_path)), "--limit", limit]
    if stage in ("apply", None):
        argv.append("--check")
    _refused(argv, capsys, f"--limit {limit!r} is not a host pattern Ansible can read whole")
    assert no_hosts == []


def test_a_widening_limit_is_refused_offline_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--facts", str(_facts(tmp_path)), "--limit", "~node["]
    _refused(argv, capsys, "it reads '~node'")


@pytest.mark.parametrize(
    "limit", ["node1", "node*", "gpu_nodes[0]", "gpu_nodes[0:1]", "~node[12]", "node1:node2",
              "node1,node2", "gpu_nodes:!node2", "gpu_nodes:&node1", "node[1"  + ",node2"],
)  # fmt: skip
def test_patterns_ansible_reads_whole_pass(limit: str) -> None:
    inputs.check_limit(limit)


def test_a_valid_limit_still_selects_as_ansible_does(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path), "~node[2]")
    assert inv.names == ("node2",)


# --- item 9: output paths ------------------------------------------------------------------


def _plan_argv(tmp_path: Path, *extra: str) -> list[str]:
    return ["plan", "--facts", str(_facts(tmp_path, ("node1",))), *extra]


@pytest.mark.parametrize(("name", "minor"), [("null", 3), ("full", 7)])
def test_a_device_as_report_is_refused_and_left_a_device(
    tmp_path: Path, name: str, minor: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """A character device made for the test (as /dev/null and /dev/full are: major 1), never
    the machine's own: a regression here must not replace the real /dev/null of the CI host
    (it did once, while the fix was checked against the old code)."""
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root (CI runs as root)")
    device = tmp_path / name
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    _refused(_plan_argv(tmp_path, "--report", str(device)), capsys, "is a character device")
    assert stat.S_ISCHR(os.stat(device).st_mode)


def test_a_fifo_as_report_or_junit_is_refused_before_any_host(
    tmp_path: Path, no_hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    _refused(_plan_argv(tmp_path, "--report", str(fifo)), capsys, f"--report {fifo} is a FIFO")
    argv = ["validate", "-i", str(_inventory(tmp_path)), "--junit", str(fifo)]
    _refused(argv, capsys, f"--junit {fifo} is a FIFO")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and no_hosts == []


def test_dev_stdout_is_refused_not_replaced(capsys: pytest.CaptureFixture[str]) -> None:
    """/dev/stdout is a link to the process's stdout (under pytest a regular temporary file):
    refused as a stream, whatever it is (README's options say so)."""
    with pytest.raises(BadInputError, match="is a stream of this process"):
        inputs.output_target("/dev/stdout", "--report")
    assert os.path.islink("/dev/stdout")


def test_a_symlink_to_a_regular_file_is_written_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "kept" / "report.json"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "report.json"
    link.symlink_to(target)
    assert main(_plan_argv(tmp_path, "--report", str(link))) == 0
    assert link.is_symlink() and link.resolve() == target
    assert json.loads(target.read_text())["command"] == "plan"


def test_a_dangling_symlink_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    link = tmp_path / "report.json"
    link.symlink_to(tmp_path / "nowhere" / "r.json")
    _refused(_plan_argv(tmp_path, "--report", str(link)), capsys, "which does not exist")
    assert link.is_symlink()


def test_write_atomic_never_replaces_a_fifo_that_appeared_after_the_check(tmp_path: Path) -> None:
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        atomic.write_atomic(fifo, "{}\n")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left


def test_junit_writes_through_a_symlink(tmp_path: Path) -> None:
    from orchestrator.validate.junit import write_junit

    target = tmp_path / "real.xml"
    target.write_text("")
    link = tmp_path / "junit.xml"
    link.symlink_to(target)
    write_junit(str(link), report.RunReport("validate", ()))
    assert link.is_symlink() and "<testsuites" in target.read_text()


# --- item 10: -e, --tags, --junit ------------------------------------------------------------


def _apply(tmp_path: Path, *extra: str) -> list[str]:
    return ["apply", "-i", str(_inventory(tmp_path)), "--check", *extra]


def test_extra_vars_from_a_missing_file_is_exit_2_before_any_host(
    tmp_path: Path, no_hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _apply(tmp_path, "-e", f"@{tmp_path / 'missing.yml'}")
    _refused(argv, capsys, "cannot be read", f"check that {tmp_path / 'missing.yml'} exists")
    assert no_hosts == []


def test_extra_vars_bad_json_is_exit_2(
    tmp_path: Path, no_hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    _refused(_apply(tmp_path, "-e", '{"bad json'), capsys, "-e '{\"bad json' cannot be read")


def test_a_misspelled_knob_in_an_extra_vars_file_gets_a_did_you_mean(
    tmp_path: Path, no_hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    ev = tmp_path / "vars.yml"
    ev.write_text("docker_source: distribution\nnvidia_driver_brnch: '580'\n")
    _refused(
        _apply(tmp_path, "-e", f"@{ev}"),
        capsys,
        "nvidia_driver_brnch is not a knob",
        "did you mean nvidia_driver_branch?",
    )
    assert no_hosts == []


@pytest.mark.parametrize(
    "value", ["gpuprov_plan=x", '{"gpuprov_skip_roles": ["docker"]}', "gpuprov_serial=1"]
)
def test_orchestrator_owned_variables_in_extra_vars_are_refused(
    tmp_path: Path, value: str, no_hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    _refused(_apply(tmp_path, "-e", value), capsys, "is set by provision itself")


def test_extra_vars_values_are_typed_like_the_inventorys(
    tmp_path: Path, no_hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    _refused(
        _apply(tmp_path, "-e", "nvidia_driver_version=580.95"),
        capsys,
        "nvidia_driver_version='580.95'",
        "with -e",
    )


def test_good_extra_vars_load_as_ansible_loads_them(tmp_path: Path) -> None:
    ev = tmp_path / "vars.json"
    ev.write_text('{"docker_source": "distribution", "my_var": [1, 2]}')
    got = inputs.load_extra_vars(
        [f"@{ev}", "nvidia_driver_branch=580 other=x", '{"mig_layout": ""}']
    )
    assert got == {
        "docker_source": "distribution",
        "my_var": [1, 2],
        "nvidia_driver_branch": "580",
        "other": "x",
        "mig_layout": "",
    }
    assert inputs.extra_vars_problems(got) == []


def test_a_vault_encrypted_extra_vars_file_decrypts_with_the_password_file(
    tmp_path: Path,
) -> None:
    from ansible.parsing.vault import VaultLib, VaultSecret

    secret = tmp_path / "vault-pass"
    secret.write_text("s3cret\n")
    vault = VaultLib([("default", VaultSecret(b"s3cret"))])
    ev = tmp_path / "secret.yml"
    ev.write_bytes(vault.encrypt("nvidia_driver_brnch: '580'\n"))
    got = inputs.load_extra_vars([f"@{ev}"], vault_password_files=[str(secret)])
    assert list(got) == ["nvidia_driver_brnch"]
    with pytest.raises(BadInputError, match="vault"):
        inputs.load_extra_vars([f"@{ev}"])


@pytest.mark.parametrize(
    ("option", "tag", "hint"),
    [("--tags", "dockr", "did you mean docker?"), ("--skip-tags", "nvidia_drivers", "driver")],
)  # fmt: skip
def test_a_tag_no_task_has_is_exit_2(
    tmp_path: Path,
    option: str,
    tag: str,
    hint: str,
    no_hosts: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _refused(
        _apply(tmp_path, option, f"docker,{tag}"),
        capsys,
        f"{option} {tag}: no task of the site playbook has it",
        hint,
    )
    assert no_hosts == []


def test_real_and_special_tags_pass() -> None:
    inputs.check_tags(["nvidia_driver,docker", "mig"], ["driver_upgrade", "never", "always"])


def test_without_tags_the_playbook_is_not_read() -> None:
    """Every provision command checks its tags: with none given (or only Ansible's own),
    the playbook's files are not read (94 of them; 0.3 s without libyaml)."""
    inputs.playbook_tags.cache_clear()
    inputs.check_tags([], [])
    inputs.check_tags(["always"], ["never"])
    assert inputs.playbook_tags.cache_info().misses == 0
    inputs.check_tags(["mig"], [])
    assert inputs.playbook_tags.cache_info().misses == 1


@pytest.mark.ansible
def test_the_tags_are_the_ones_ansible_playbook_lists() -> None:
    """playbook_tags() reads the playbook's data; ansible-playbook --list-tags is the truth."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "--list-tags", "-i", "localhost,",
         str(ROOT / "playbooks" / "site.yml")],
        capture_output=True, text=True, check=True, cwd=ROOT, env=env, timeout=120,
    ).stdout  # fmt: skip
    listed = set()
    for m in re.finditer(r"TAGS: \[([^\]]*)\]", out):
        listed.update(t.strip() for t in m.group(1).split(",") if t.strip())
    assert listed and listed == set(inputs.playbook_tags())


@pytest.mark.parametrize("stage", ["plan", "detect"])
def test_junit_on_a_stage_without_checks_is_refused(
    tmp_path: Path, stage: str, no_hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [stage, "-i", str(_inventory(tmp_path)), "--junit", str(tmp_path / "j.xml")]
    _refused(argv, capsys, f"--junit: `provision {stage}` runs no checks")
    assert not (tmp_path / "j.xml").exists() and no_hosts == []


# --- item 12: inventories ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "cause"),
    [
        ("bad.ini", "[gpu_nodes\nn1\n", "ini inventory: Failed to parse inventory"),
        ("self.ini", "[a:children]\na\n[a]\nn1\n", "can't add group to itself"),
        ("bin.ini", b"\x00\x01\x02binary\xff\xfe", "is it a binary or a non-inventory file?"),
        ("empty.yml", "{}\n", "yaml inventory: Parsed empty YAML file"),
    ],
)
def test_a_relative_inventory_ansible_cannot_parse_names_the_real_cause(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    content: str | bytes,
    cause: str,
    no_hosts: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    monkeypatch.chdir(tmp_path)
    err = _refused(["plan", "-i", name], capsys, cause)
    assert "absolute path" not in err and no_hosts == []


def test_a_failing_dynamic_inventory_shows_its_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "cmdb.sh"
    script.write_text('#!/bin/sh\necho "cmdb: connection refused" >&2\nexit 3\n')
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    err = _refused(
        ["plan", "-i", "cmdb.sh"],
        capsys,
        "script inventory: Inventory script returned non-zero exit code 3",
        "cmdb: connection refused",
    )
    assert "absolute path" not in err


@pytest.mark.parametrize("port", ["70000", "-22"])
def test_a_port_out_of_range_is_bad_input(
    tmp_path: Path, port: str, no_hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    inv = _inventory(tmp_path, f"[gpu_nodes]\nnode1 ansible_port={port}\n")
    needle = f"node1: ansible_port={port} is not a TCP port (1 to 65535)"
    _refused(["detect", "-i", str(inv)], capsys, needle)
    assert no_hosts == []


def test_a_driver_version_without_a_releases_shape_is_refused() -> None:
    with pytest.raises(PolicyError, match=r"nvidia_driver_version='580\.95'"):
        load_policy("n1", {"nvidia_driver_version": "580.95"})
    assert load_policy("n1", {"nvidia_driver_version": "580.159.04"})["nvidia_driver_branch"] == 580


def test_every_recorded_driver_version_has_the_accepted_shape() -> None:
    """The shape comes from the reference: every example_driver_versions entry of
    tests/recorded/reference/packages.yaml (NVIDIA's repositories) is accepted."""
    data = yaml.safe_load((ROOT / "tests/recorded/reference/packages.yaml").read_text())
    versions: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "example_driver_versions" and isinstance(value, list):
                    versions.extend(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(data)
    assert len(versions) > 20
    for version in versions:
        assert (
            load_policy("n1", {"nvidia_driver_version": version})["nvidia_driver_version"]
            == version
        )


def test_a_target_that_selects_no_host_is_bad_input_at_plan_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = _inventory(tmp_path, TWO + "[gpu_nodes:vars]\ngpuprov_target=nosuchgroup\n")
    argv = ["plan", "--facts", str(_facts(tmp_path)), "-i", str(inv)]
    _refused(argv, capsys, "node1: gpuprov_target='nosuchgroup'", "does not select this host")


def test_a_target_that_selects_the_host_passes(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, TWO + "[gpu_nodes:vars]\ngpuprov_target=gpu_nodes:!nothing\n")
    assert main(["plan", "--facts", str(_facts(tmp_path)), "-i", str(inv)]) == 0


def test_user_set_skip_roles_is_refused_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = _inventory(tmp_path, TWO + "[gpu_nodes:vars]\ngpuprov_skip_roles=['docker']\n")
    argv = ["plan", "--facts", str(_facts(tmp_path)), "-i", str(inv)]
    _refused(
        argv,
        capsys,
        "node1: gpuprov_skip_roles (set in",
        "so this value would be ignored",
        "leave a role out with gpuprov_roles",
    )


def test_inventory_hosts_without_saved_facts_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = _inventory(tmp_path, TWO + "node3 ansible_connection=local\n")
    facts = _facts(tmp_path)
    assert main(["plan", "--facts", str(facts), "-i", str(inv)]) == 0
    out = capsys.readouterr().out
    assert f"node3: in {inv} but not in {facts}: not planned" in " ".join(out.split())
    assert "node1: in" not in out
    assert main(["plan", "--facts", str(facts), "-i", str(inv), "--limit", "node1"]) == 0
    assert "node3" not in capsys.readouterr().out  # outside the limit: not asked for


# --- item 13: cosmetics --------------------------------------------------------------------


@pytest.mark.parametrize("stage", ["detect", "plan", "validate", "verify"])
def test_a_stages_help_lists_only_the_options_it_takes(stage: str) -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = sub.choices[stage].format_help()
    for refused in ("--serial", "--max-unavailable", "--tags", "--forks",
                    "--check", "--full", "--diff"):  # fmt: skip
        assert refused not in text, (stage, refused)
    # -e outranks the inventory: every stage that plans takes it (issue 46)
    assert ("--extra-vars" in text) == (stage != "detect")
    assert ("--junit" in text) == (stage in ("validate", "verify"))
    assert "--vault-id" in text and "--report" in text


def test_apply_help_still_lists_the_rollout_options() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = sub.choices["apply"].format_help()
    for option in ("--serial", "--max-unavailable", "--tags", "--extra-vars", "--junit"):
        assert option in text


def test_an_unreachable_host_is_named_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator import detect

    def fake(inventory: object, on_host: object = None, **_: object) -> detect.DetectResult:
        def err(h: str) -> HostError:
            return HostError("unreachable: connecting to 10.0.0.2:22 timed out", host=h)

        hosts = tuple(detect.HostDetection(h, None, err(h), 0.0) for h in ("node1", "node2"))
        return detect.DetectResult(hosts, 0.0)

    monkeypatch.setattr(detect, "detect_hosts", fake)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["validate", "-i", str(_inventory(tmp_path))]) == 1
    out = capsys.readouterr().out
    assert "node2: unreachable: connecting to 10.0.0.2:22 timed out" in out
    assert "unreachable: node2" not in out and "unreachable: unreachable" not in out


def test_errors_name_the_class_of_input() -> None:
    assert issubclass(InventoryError, BadInputError)
