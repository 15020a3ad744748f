"""The user's options checked before any host is touched: each bad one is exit 2, named.

`check_inputs(args)` is the CLI's one call (after its own path checks): `--limit` as
ansible-core splits it, output paths (`--report`, `--junit`), `-e` as ansible-core loads it
(its knobs checked like the inventory's), `--tags` / `--skip-tags` against the playbook's
tags, and the options a stage would accept and ignore. `inventory_problems(...)` checks what
only the loaded inventory shows (variables provision sets itself, `gpuprov_target`); the
pipeline calls it where the inventory is loaded.

Ansible does the parsing everywhere: `split_host_pattern` (what `--limit` becomes),
`load_extra_vars` (`@file`, JSON/YAML, key=value, vault), its inventory pattern matcher.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from .catalog import SAFE_LOADER
from .errors import BadInputError

# Ansible's own tags, valid whatever the playbook says (ansible-core's "special tags").
SPECIAL_TAGS = frozenset({"all", "always", "never", "tagged", "untagged"})
# Stages whose report has no checks: a --junit there would write an empty file.
NO_JUNIT_STAGES = ("detect", "plan")
# Set by the plan document provision passes to every host: an inventory value is never
# applied (site.yml's first pre-task makes the plan's host facts), so it is refused.
PLAN_OVERRIDES = ("gpuprov_plan", "gpuprov_role_digests", "gpuprov_skip_roles")

# --- --limit ------------------------------------------------------------------------------


def check_limit(limit: str | None, option: str = "--limit") -> None:
    """`limit` as ansible-core's `split_host_pattern` reads it: refused when that drops part
    of it. Without a comma, ansible-core splits on ':' and keeps only words and whole
    `[...]` groups, so `~node[` becomes `~node` (every host whose name starts so) and
    `node[1` becomes `node` and `1`: a typo that widens the run. One that reads as no
    pattern at all (``, `,`, an empty `@file`) would select every host: refused too."""
    if limit is None:
        return
    from ansible.inventory.manager import split_host_pattern

    kept = split_host_pattern(limit)
    _check_selects_something(limit, kept, option)
    if "," in limit:
        return  # split on commas only: nothing is dropped (each part is matched as given)
    if re.sub(r"[\s:]", "", "".join(kept)) == re.sub(r"[\s:]", "", limit):
        return  # only separators went (':' and spaces; a ':' inside [0:3] stays)
    read = ", ".join(repr(p) for p in kept) or "nothing"
    raise BadInputError(
        f"{option} {limit!r} is not a host pattern Ansible can read whole: it reads "
        f"{read} (an unmatched '[' or ']' is dropped), which can select more hosts than meant",
        fix="close the bracket ('g[0:3]', '~node[12]'), or separate patterns with commas "
        "('a,b'); Ansible's host patterns: a group, a host, 'a:b', 'g:!h', '~regex'",
    )


def _read_as_ansible(patterns: Sequence[str]) -> list[str]:
    """The patterns ansible-core's `InventoryManager.subset` keeps: each `@file` replaced by
    its lines, stripped; empty ones it skips when matching. An unreadable file is left to
    Ansible's own error (read where the inventory is loaded)."""
    read: list[str] = []
    for pattern in patterns:
        if pattern.startswith("@"):
            try:
                text = Path(pattern[1:]).read_text(errors="replace")
            except OSError:
                read.append(pattern)
                continue
            read.extend(line.strip() for line in text.split("\n"))
        else:
            read.append(pattern)
    return [p for p in read if p]


def _check_selects_something(limit: str, kept: Sequence[str], option: str) -> None:
    """ansible-core applies no subset at all when every pattern it reads is empty (`,`, an
    empty or blank `@file`): the run would take every host. Refused; `all` says so."""
    if _read_as_ansible(kept):
        return
    files = [p[1:] for p in kept if p.startswith("@")]
    said = f" ({', '.join(files)} holds no host pattern)" if files else ""
    raise BadInputError(
        f"{option} {limit!r} names no host{said}: Ansible reads it as no limit at all and "
        "would select every host",
        fix=f"name the hosts or groups ({option} node1,node2; a file of one pattern per line "
        f"as {option} @FILE), or {option} all to mean every host",
    )


# --- output paths --------------------------------------------------------------------------

_KINDS = (
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "special file")


def output_target(path: str | os.PathLike[str], option: str) -> Path:
    """The file `option` will write: `path` when it does not exist, else the regular file it
    is or (through symbolic links) points to. Anything else is refused (exit 2): a
    directory, a device (/dev/null, /dev/full), a FIFO, a socket, /dev/stdout, a link to
    none of these or to nothing. The file is replaced by a rename in its own directory, so
    a link keeps pointing at it and no device node is ever replaced."""
    given = Path(path).expanduser()
    try:
        st = os.stat(given)
    except FileNotFoundError:
        if given.is_symlink():
            raise BadInputError(
                f"{option} {given} is a symbolic link to {os.readlink(given)}, which does "
                "not exist",
                fix=f"create the file it points to first, or pass another path for {option}",
            ) from None
        parent = given.parent
        if not parent.is_dir():
            raise BadInputError(
                f"{option} {given}: directory {parent} does not exist",
                fix=f"create it first (mkdir -p {parent}) or pass another path",
            ) from None
        _writable(given, parent, option)
        return given
    except NotADirectoryError:
        raise BadInputError(
            f"{option} {given}: a part of the path is a file, not a directory",
            fix=f"pass a file path in an existing directory for {option}",
        ) from None
    if stat.S_ISDIR(st.st_mode):
        raise BadInputError(
            f"{option} {given} is a directory",
            fix=f"pass a file path for {option}, e.g. {given / 'report.json'}",
        )
    real = Path(os.path.realpath(given))
    if _stream(given, real):
        raise BadInputError(
            f"{option} {given} is a stream of this process ({real}), not a file: gpuprov "
            "writes a new file or replaces a regular one, and would replace what it points to",
            fix=f"pass a file path for {option}; --json prints the report on stdout",
        )
    if not stat.S_ISREG(st.st_mode):
        via = f" ({given} points to {real})" if real != given else ""
        raise BadInputError(
            f"{option} {given} is a {_kind(st.st_mode)}{via}, not a regular file: gpuprov "
            "writes a new file or replaces a regular one, never a device or a pipe",
            fix=f"pass a file path for {option} (leave {option} out to write nothing; "
            "--json prints the report on stdout)",
        )
    _writable(real, real.parent, option)
    return real


def _stream(given: Path, real: Path) -> bool:
    """/dev/stdout, /dev/fd/N, /proc/self/fd/N: a descriptor of this process, whatever file
    it happens to be (a regular file when the shell redirected it)."""
    return real.parts[1:2] == ("proc",) or (
        given.absolute().parts[1:2] == ("dev",) and real.parts[1:2] != ("dev",)
    )


def _writable(path: Path, directory: Path, option: str) -> None:
    # the file is replaced through a temporary file in its directory: both must be writable
    if not os.access(directory, os.W_OK | os.X_OK) or (
        path.exists() and not os.access(path, os.W_OK)
    ):
        raise BadInputError(
            f"{option} {path} is not writable",
            fix=f"pass a path you can write for {option}",
        )


# --- -e / --extra-vars ---------------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def load_extra_vars(
    values: Sequence[str],
    *,
    vault_ids: Sequence[str] = (),
    vault_password_files: Sequence[str] = (),
    ask_vault_pass: bool = False,
) -> dict[str, Any]:
    """The variables `-e VALUE...` give, loaded by ansible-core's own `load_extra_vars` (what
    ansible-playbook does with them: `@file` as YAML/JSON, `{...}` / `[...]` as YAML, else
    key=value), one value at a time so that an error names the value. A vault-encrypted
    file decrypts with the given vault password files; with only --ask-vault-pass (asked
    later, once) it is left to Ansible and contributes no names here."""
    from ansible import context
    from ansible.errors import AnsibleError
    from ansible.module_utils.common.collections import ImmutableDict
    from ansible.utils import vars as ansible_vars

    from .inventory import VaultOptions, _vault_secrets
    from .yamlbudget import data_loader

    loader = data_loader()  # DataLoader with an alias budget (yamlbudget.py)
    if any(v.startswith("@") for v in values):  # a file may be vault-encrypted
        # an ID whose source is `prompt` would ask now and again later: left to Ansible
        ids = tuple(i for i in vault_ids if not i.endswith("@prompt") and i != "prompt")
        _vault_secrets(loader, VaultOptions(ids, tuple(vault_password_files)))
    out: dict[str, Any] = {}
    saved = context.CLIARGS
    try:
        for value in values:
            context.CLIARGS = ImmutableDict(extra_vars=(value,))
            ansible_vars.load_extra_vars.extra_vars = None
            try:
                out.update(ansible_vars.load_extra_vars(loader))
            except AnsibleError as exc:
                text = _first_line(exc)
                asked = ask_vault_pass or any(i.endswith("prompt") for i in vault_ids)
                if "vault" in text.lower() and asked:
                    continue  # decrypted by ansible-playbook with the password asked later
                raise BadInputError(
                    f"-e {value!r} cannot be read: {text}", fix=_extra_vars_fix(value, text)
                ) from None
    finally:
        context.CLIARGS = saved
        ansible_vars.load_extra_vars.extra_vars = None
    return out


def _extra_vars_fix(value: str, text: str) -> str:
    if value.startswith("@"):
        if "vault" in text.lower():
            return "give the vault password: --vault-password-file FILE or --vault-id [ID@]FILE"
        return f"check that {value[1:]} exists and holds a YAML or JSON mapping"
    if value[:1] in "{[":
        return 'give a JSON or YAML mapping, e.g. -e \'{"docker_source": "distribution"}\''
    return "give key=value pairs, a JSON/YAML mapping, or @FILE (as for ansible-playbook)"


def extra_vars_problems(variables: Mapping[str, Any]) -> list[str]:
    """Names and values of `-e` checked as the inventory's are: a name like a knob that no
    knob has (with the closest one), a value of the wrong type, and variables provision
    sets itself (the plan document, batches): those are its options' job."""
    from .inventory import _plain, _Undecryptable
    from .knobs import default_table, unknown_knobs
    from .policy import policy_problems

    table = default_table()
    problems = []
    for name in sorted(variables):
        knob = table.knobs.get(name)
        if knob is not None and knob.set_by == "orchestrator":
            problems.append(
                f"{name} is set by provision itself ({_owned_by(name)}); fix: drop it from -e"
            )
    for found in unknown_knobs(table, variables):
        hint = f"did you mean {found.closest}? " if found.closest else ""
        fix = f"rename it to {found.closest}" if found.closest else "remove it"
        problems.append(
            f"{found.name} is not a knob of gpuprov or its roles; {hint}fix: {fix} (every "
            "knob: inventory/group_vars/all.yml, the roles' READMEs)"
        )
    plain: dict[str, Any] = {}
    for name, value in variables.items():
        with contextlib.suppress(_Undecryptable):
            plain[name] = _plain(value)
    typed = policy_problems("-e", {k: v for k, v in plain.items() if k in table.policy})[1]
    where = "in the inventory (group_vars or host_vars)"  # policy.py's words for the fix
    problems.extend(p.replace(where, "with -e") for p in typed)
    return problems


def _owned_by(name: str) -> str:
    return {
        "gpuprov_plan": "the plan document it passes to every host",
        "gpuprov_role_digests": "the plan's input digests, docs/reruns.md",
        "gpuprov_skip_roles": "the roles a host has converged, docs/reruns.md; leave a role "
        "out with gpuprov_roles, run every role with --full",
        "gpuprov_serial": "--serial, or the batch --max-unavailable allows",
        "gpuprov_max_fail_percent": "--max-fail-percent",
    }.get(name, "see orchestrator/knobs.yaml")


def check_extra_vars(args: argparse.Namespace) -> dict[str, Any]:
    values = [v for v in getattr(args, "extra_vars", None) or () if v]
    if not values:
        return {}
    variables = load_extra_vars(
        values,
        vault_ids=getattr(args, "vault_id", None) or (),
        vault_password_files=getattr(args, "vault_password_file", None) or (),
        ask_vault_pass=bool(getattr(args, "ask_vault_pass", False)),
    )
    problems = extra_vars_problems(variables)
    if problems:
        raise BadInputError(
            "bad extra variables (-e), nothing was changed:\n  " + "\n  ".join(problems)
        )
    return variables


# --- --tags / --skip-tags ------------------------------------------------------------------


def _tags_in(data: Any) -> Iterable[str]:
    """Every value of a `tags:` key in a playbook or task file's data (a list, or a string
    of comma-separated tags, as Ansible takes both)."""
    if isinstance(data, Mapping):
        for key, value in data.items():
            if key == "tags":
                items = value if isinstance(value, list) else str(value).split(",")
                yield from (str(t).strip() for t in items if str(t).strip())
            else:
                yield from _tags_in(value)
    elif isinstance(data, list):
        for item in data:
            yield from _tags_in(item)


@functools.cache
def playbook_tags() -> frozenset[str]:
    """The tags `provision apply` can select: those in playbooks/ and in the roles' task and
    handler files (tests/unit/test_inputs.py keeps this equal to `ansible-playbook
    --list-tags playbooks/site.yml`, which needs a second process and seconds to say it)."""
    from . import paths

    files = [
        *paths.PLAYBOOKS_DIR.rglob("*.yml"),
        *paths.ROLES_DIR.glob("*/tasks/*.yml"),
        *paths.ROLES_DIR.glob("*/handlers/*.yml"),
    ]
    found: set[str] = set()
    for f in files:
        with contextlib.suppress(OSError, yaml.YAMLError):
            found.update(_tags_in(yaml.load(f.read_text(encoding="utf-8"), Loader=SAFE_LOADER)))
    return frozenset(found)


def check_tags(tags: Sequence[str], skip_tags: Sequence[str]) -> None:
    """Every tag given is one the site playbook has (the playbook's files are read only
    when a tag is given: 94 YAML files, about 25 ms with libyaml, 0.3 s without)."""
    problems = []
    for option, given in (("--tags", tags), ("--skip-tags", skip_tags)):
        for tag in (t.strip() for item in given for t in item.split(",")):
            if tag and tag not in SPECIAL_TAGS and tag not in playbook_tags():
                known = playbook_tags() | SPECIAL_TAGS
                import difflib

                close = difflib.get_close_matches(tag, sorted(known), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                problems.append(f"{option} {tag}: no task of the site playbook has it{hint}")
    if problems:
        raise BadInputError(
            "; ".join(problems),
            fix="use the playbook's tags: "
            + ", ".join(sorted(playbook_tags() - {"always"}))
            + " (or Ansible's own: "
            + ", ".join(sorted(SPECIAL_TAGS))
            + ")",
        )


# --- the CLI's one call --------------------------------------------------------------------


def check_inputs(args: argparse.Namespace) -> None:
    """Every option a user can get wrong in a way Ansible would not refuse (exit 2)."""
    stage = getattr(args, "stage", None) or "all"
    if stage == "lab":
        return
    check_limit(getattr(args, "limit", None))
    if getattr(args, "junit", None) and stage in NO_JUNIT_STAGES:
        raise BadInputError(
            f"--junit: `provision {stage}` runs no checks, so it would write no testcase",
            fix=f"drop --junit, or run `provision validate` / `provision verify` with it "
            f"(--report PATH keeps the {stage} result as JSON)",
        )
    for option in ("report", "junit"):
        value = getattr(args, option, None)
        if value:
            output_target(value, f"--{option}")
    check_tags(getattr(args, "tags", None) or (), getattr(args, "skip_tags", None) or ())
    check_extra_vars(args)


# --- what only the loaded inventory shows ---------------------------------------------------


def inventory_problems(
    hostvars: Mapping[str, Mapping[str, object]],
    origins: Mapping[str, Mapping[str, str]],
    select: Any,
) -> list[str]:
    """Per host: variables the plan document always overrides (refused: the inventory value
    would be silently dropped), and a `gpuprov_target` (the site playbook's host pattern)
    that does not select the host. `select(pattern)` -> the inventory's host names it
    matches (ansible-core's matcher), or raises BadInputError for a bad pattern."""
    problems = []
    for host, variables in hostvars.items():
        where = origins.get(host, {})
        for name in PLAN_OVERRIDES:
            if name in variables:
                problems.append(
                    f"{host}: {name} (set in {where.get(name, 'the inventory')}) is set by "
                    f"provision ({_owned_by(name)}), so this value would be ignored; fix: "
                    "remove it from the inventory"
                )
        target = variables.get("gpuprov_target")
        if target in (None, "", "gpu_nodes"):
            continue
        try:
            selected = select(str(target))
        except BadInputError as exc:
            problems.append(f"{host}: gpuprov_target={target!r}: {exc.message}")
            continue
        if host not in selected:
            problems.append(
                f"{host}: gpuprov_target={target!r} (set in "
                f"{where.get('gpuprov_target', 'the inventory')}) does not select this host "
                f"(it matches {len(selected)} host(s) of the inventory), so the site playbook "
                "would skip it; fix: set gpuprov_target to a group or pattern that includes it"
            )
    return problems


def check_inventory(inventory: Any) -> None:
    """`inventory_problems` of a loaded orchestrator.inventory.Inventory, as one bad input."""
    from .inventory import pattern_hosts

    problems = inventory_problems(
        {h.name: h.vars for h in inventory.hosts},
        {h.name: h.origins for h in inventory.hosts},
        lambda pattern: pattern_hosts(inventory, pattern),
    )
    if problems:
        raise BadInputError(
            f"bad inventory {inventory.path}, nothing was changed:\n  " + "\n  ".join(problems)
        )
