"""The one table of knobs: it round-trips the roles' argument_specs, documents
inventory/group_vars/all.yml, and no role default is copied anywhere else."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.errors import CatalogError
from orchestrator.knobs import (
    GROUP_VARS_BEGIN,
    ROLE_PREFIXES,
    ROLES_DIR,
    default_table,
    group_vars_block,
    load_table,
    render_group_vars,
    unknown_knobs,
)

REPO = Path(__file__).resolve().parents[2]
GROUP_VARS = REPO / "inventory" / "group_vars" / "all.yml"
H200 = REPO / "tests" / "recorded" / "fixtures" / "real" / "h200x2-ubuntu2404-580"


@pytest.mark.parametrize("role", sorted(ROLE_PREFIXES))
def test_the_table_holds_every_role_argument_spec(role: str) -> None:
    """Every entry point's options are the table's specs, their defaults defaults/main.yml's
    (which the table holds), every name with the role table's prefix."""
    table = default_table()
    specs = yaml.safe_load((ROLES_DIR / role / "meta" / "argument_specs.yml").read_text())
    for entry, body in specs["argument_specs"].items():
        for name, option in body["options"].items():
            knob = table[name]
            assert {**knob.spec, "default": knob.default} == {"default": knob.default, **option}
            assert knob.owner == role, f"{role}:{entry}"
    defaults = yaml.safe_load((ROLES_DIR / role / "defaults" / "main.yml").read_text())
    assert {k.name: k.default for k in table.role_knobs(role)} == defaults
    assert all(k.name.startswith(ROLE_PREFIXES[role]) for k in table.role_knobs(role))


def test_a_spec_default_that_is_not_the_role_default_is_refused(tmp_path: Path) -> None:
    roles = tmp_path / "roles"
    shutil.copytree(ROLES_DIR, roles)
    spec = roles / "docker" / "meta" / "argument_specs.yml"
    spec.write_text(spec.read_text().replace("default: stable", "default: test"))
    with pytest.raises(CatalogError, match="docker_ce_channel's default 'test'"):
        load_table(roles_dir=roles)


def test_group_vars_docs_are_generated_from_the_table() -> None:
    """The knobs block of all.yml is exactly what the table renders (python -m
    orchestrator.knobs rewrites it); gpuprov_roles is left unset there (so that a plain
    ansible-playbook run plans each host)."""
    text = GROUP_VARS.read_text()
    assert group_vars_block(text) == render_group_vars(default_table()), (
        "run: python -m orchestrator.knobs"
    )
    variables = yaml.safe_load(text)
    assert "gpuprov_roles" not in variables
    assert set(variables) <= set(default_table().knobs)


def _searched_files() -> list[Path]:
    files = [*(REPO / "orchestrator").rglob("*.py"), *(REPO / "playbooks").rglob("*.yml")]
    files += [p for p in (REPO / "roles").rglob("*") if p.is_file() and p.suffix in (".yml", ".j2")]
    files.append(GROUP_VARS)
    return files


def _copies(path: Path, text: str) -> list[str]:
    """Each role input's default written again in `path`: as `name | default(...)` outside
    its role (any value), as a Python `.get("name", ...)` fallback or a path literal of it,
    or as a hand-written `name: value` in the group_vars docs."""
    rel = path.relative_to(REPO)
    found = []
    for knob in default_table().knobs.values():
        if knob.owner in ("gpuprov", "lab"):  # not a role input: no role default
            continue
        name, value = knob.name, knob.default
        literal = isinstance(value, str) and len(value) > 1 and "/" in value
        if path.suffix == ".py" and literal and f'"{value}"' in text:
            found.append(f"{rel}: {name}'s default {value!r} as a literal")
        if name not in text:  # every pattern below names the knob
            continue
        in_owner = rel.parts[:2] == ("roles", knob.owner)
        if not in_owner and re.search(rf"\b{name}\s*\|\s*default\(", text):
            found.append(f"{rel}: {name} | default(...)")
        if path.suffix == ".py" and re.search(rf"get\(\s*['\"]{name}['\"]\s*,", text):
            found.append(f"{rel}: .get({name!r}, <default>)")
        if path == GROUP_VARS and re.search(rf"^#\s*{name}:", text, re.MULTILINE):
            found.append(f"{rel}: {name} written by hand")
    return found


# Known copies in files this change does not own; each is reported to the lead.
KNOWN_ELSEWHERE = {
    # the docker role reads the toolkit's input: the toolkit/docker rewrite should drop the
    # default (`nvidia_container_toolkit_default_runtime is defined and ... | bool`)
    "roles/docker/tasks/preflight.yml: nvidia_container_toolkit_default_runtime | default(...)",
    # the MIG applier runs on the GPU host, without the roles: its --config default mirrors
    # mig_config_path; the mig role should pass --config everywhere and make it required
    "orchestrator/mig_apply.py: mig_config_path's default '/etc/gpuprov/mig.json' as a literal",
}


def test_each_role_default_lives_in_one_place() -> None:
    """A role input's default is written in its role (defaults/main.yml, and argument_specs,
    held equal by the round-trip test) and nowhere else: not in another role's or a
    playbook's tasks, not in verify, policy or the report, not hand-written in all.yml (its
    generated block is rendered from the table, checked above)."""
    generated = group_vars_block(GROUP_VARS.read_text()) or ""
    problems = []
    for path in _searched_files():
        text = path.read_text()
        if path == GROUP_VARS:
            text = text.replace(generated, "")
        problems += _copies(path, text)
    assert sorted(set(problems) - KNOWN_ELSEWHERE) == []
    assert set(problems) >= KNOWN_ELSEWHERE  # drop an entry once its copy is gone


def test_the_copy_finder_finds_copies() -> None:
    """The check above can fail: the copies this change removed are found again."""
    task = REPO / "roles" / "driver_upgrade" / "tasks" / "state.yml"
    old = "{{ (nvidia_driver_version | default('', true) or nvidia_driver_branch | default('580'))"
    assert len(_copies(task, old)) == 2
    expect = REPO / "orchestrator" / "verify" / "expect.py"
    line = 'variables.get("nvidia_container_toolkit_cdi_spec", "/etc/cdi/nvidia.yaml")'
    assert len(_copies(expect, line)) == 2
    assert _copies(GROUP_VARS, "# docker_users: []\n")


def test_unknown_knobs_and_their_closest_names() -> None:
    table = default_table()
    found = unknown_knobs(
        table, ["nvidia_driver_brnch", "ansible_host", "gpuprov_lab_os", "docker_users", "x"]
    )
    assert [(u.name, u.closest) for u in found] == [("nvidia_driver_brnch", "nvidia_driver_branch")]


def test_a_role_whose_entry_points_disagree_is_refused(tmp_path: Path) -> None:
    roles = tmp_path / "roles"
    shutil.copytree(ROLES_DIR, roles)
    spec = roles / "driver_upgrade" / "meta" / "argument_specs.yml"
    data = yaml.safe_load(spec.read_text())
    data["argument_specs"]["finish"]["options"]["driver_upgrade_hook_timeout"]["default"] = 60
    spec.write_text(yaml.safe_dump(data))
    with pytest.raises(CatalogError, match="driver_upgrade_hook_timeout differs"):
        load_table(roles_dir=roles)


def test_a_typo_in_the_inventory_stops_the_plan_naming_host_file_and_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = tmp_path / "facts"
    shutil.copytree(H200, facts / "h200-real")
    for p in facts.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[gpu_nodes]\nh200-real\n[gpu_nodes:vars]\ngpuprov_validaton_nccl=false\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "h200-real.yml").write_text('---\nnvidia_driver_brnch: "550"\n')
    rc = main(["plan", "--facts", str(facts), "-i", str(inventory)])
    captured = capsys.readouterr()
    text = " ".join((captured.out + captured.err).split())
    assert rc == 2
    assert f"h200-real: nvidia_driver_brnch (set in {tmp_path}/host_vars/h200-real.yml:2:" in text
    assert "did you mean nvidia_driver_branch?" in text
    assert f"gpuprov_validaton_nccl (set in {inventory}:4)" in text
    assert "did you mean gpuprov_validation_nccl?" in text
    assert GROUP_VARS_BEGIN not in text
