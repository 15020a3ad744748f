"""The stages behind `provision`: detect, plan, apply, validate, verify, and all of them.

Each `run_*` takes the stage's options (:class:`StageOptions`, built once from the command
line by :meth:`StageOptions.of`) and returns the exit code (0 every host ok, 1 some host
failed, 2 bad input found before any change). Bad input anywhere (inventory, policy of any
host, options, a pinned branch too old for a GPU) raises before any host is touched; a host
the plan blocks is left out and the others go on. The other parts plug in through one small
function each (`_load_inventory`, `_detect`, `_validate_host`, `_verify_hosts`), so a part
that is missing says so plainly instead of pretending to pass.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import importlib
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from rich.console import Console
from rich.markup import escape

from . import apply as apply_mod
from . import interrupt, rollout, timing
from . import report as rep
from .catalog import Catalog, default_catalog
from .errors import EXIT_BAD_INPUT, EXIT_HOST_FAILED, EXIT_OK, BadInputError, HostError
from .facts import HostFacts
from .terminal import new_console

if TYPE_CHECKING:  # planning is imported where it runs: `provision detect` never plans
    from .plan import HostPlan
    from .policy import Policy

if TYPE_CHECKING:
    from .inventory import VaultOptions
    from .verify.runner import SuiteRun

RawFacts = dict[str, str]
GPU_GROUP = "gpu_nodes"


@dataclass(frozen=True)
class StageOptions:
    """What the stages read of the command line, typed; every field's default is the one a
    stage without that option has."""

    inventory: str | Sequence[str] | None = None  # every -i (or ANSIBLE_INVENTORY, ansible.cfg)
    limit: str | None = None
    json: bool = False
    junit: str | None = None
    report: str | None = None
    started: dt.datetime | None = None  # the run's start (before detection)
    save: str | None = None  # detect --save DIR
    facts: str | None = None  # plan --facts DIR
    check: bool = False
    verbose: int = 0
    serial: str | None = None
    max_fail_percent: int | None = None
    max_unavailable: str | None = None
    full: bool = False
    runtime: str | None = None  # validate --runtime
    image: str | None = None  # validate --image
    multinode: bool = False  # validate --multinode
    dcgm_level: int | None = None  # validate --dcgm-level: dcgmi diag -r N as well
    artifacts_dir: str | None = None  # --artifacts-dir (or $GPUPROV_ARTIFACTS_DIR)
    ansible_args: Mapping[str, Any] = field(default_factory=dict)  # -e, --tags, vault, -K...

    @classmethod
    def of(cls, args: argparse.Namespace) -> StageOptions:
        """The one reading of the parsed command line."""
        given = vars(args)
        names = [f for f in cls.__dataclass_fields__ if f != "ansible_args"]
        values = {n: given[n] for n in names if given.get(n) is not None}
        ansible = {k: v for k, v in given.items() if k not in names}
        return cls(**values, ansible_args=ansible)

    @functools.cached_property
    def extra_values(self) -> dict[str, Any]:
        """The variables -e gives, loaded as ansible-playbook loads them: they outrank the
        inventory, so the planner plans with them (orchestrator/inputs.py checked them)."""
        values = [v for v in self.ansible_args.get("extra_vars") or () if v]
        if not values:
            return {}
        from .inputs import load_extra_vars

        return load_extra_vars(
            values,
            vault_ids=self.ansible_args.get("vault_id") or (),
            vault_password_files=self.ansible_args.get("vault_password_file") or (),
            ask_vault_pass=bool(self.ansible_args.get("ask_vault_pass")),
        )

    @functools.cached_property
    def ansible(self) -> apply_mod.AnsibleOptions:
        """The pass-through options; -K and --ask-vault-pass ask here, once per run."""
        return apply_mod.ansible_options(SimpleNamespace(**self.ansible_args))


@dataclass(frozen=True)
class Fleet:
    """The hosts of one run: the inventory as loaded, and each host's variables."""

    inventory_path: Path | None  # the first source
    handle: object  # orchestrator.inventory's Inventory, handed back to detect
    hostvars: Mapping[str, Mapping[str, object]]
    origins: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # host -> var -> file
    vault: VaultOptions | None = None  # the vault secrets the inventory was read with
    inventory_paths: tuple[Path, ...] = ()  # every source (several -i), in order

    @property
    def sources(self) -> tuple[Path, ...]:
        if self.inventory_paths:
            return self.inventory_paths
        return (self.inventory_path,) if self.inventory_path is not None else ()

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(self.hostvars)


@dataclass(frozen=True)
class Detected:
    raw: Mapping[str, RawFacts]
    facts: Mapping[str, HostFacts]
    errors: Mapping[str, str]  # host -> why detection failed (unreachable, host key...)


# --- plug points: one small function per part ----------------------------------------------


def _load_inventory(
    path: str | Sequence[str] | None, limit: str | None, opts: StageOptions | None = None
) -> Fleet:
    """orchestrator.inventory (ansible-core's InventoryManager): hosts and resolved vars,
    vault values decrypted and -K's become password given (from `opts`, asked once).
    `path`: one source or several (-i given more than once), merged as Ansible merges them.

    Only members of `gpu_nodes` (the group the site playbook converges) are provisioned
    when the inventory has that group."""
    from .inventory import load_inventory

    sources = [path] if isinstance(path, str) else list(path or ())
    if not sources:
        raise BadInputError(
            "no inventory given",
            fix="pass -i/--inventory PATH (INI or YAML, e.g. inventory/p5.ini), or set it as "
            "for ansible-playbook: ANSIBLE_INVENTORY, or `inventory =` in ansible.cfg",
        )
    options = opts.ansible if opts is not None else None
    inv = load_inventory(
        [Path(p) for p in sources],
        limit,
        vault=options.vault() if options else None,
        become_password=options.become_password if options else None,
    )
    from .inputs import check_inventory

    check_inventory(inv)  # what only the loaded inventory shows (orchestrator/inputs.py)
    hosts = [h for h in inv.hosts if GPU_GROUP in h.groups or GPU_GROUP not in inv.groups]
    if not hosts:
        raise BadInputError(
            f"--limit {limit!r} matches no host of group {GPU_GROUP} in {inv.where}",
            fix=f"use a host pattern that selects members of {GPU_GROUP}",
        )
    return Fleet(
        inv.path,
        inv,
        {h.name: dict(h.vars) for h in hosts},
        {h.name: h.origins for h in hosts},
        options.vault() if options else None,
        inv.sources,
    )


def _detect(fleet: Fleet, console: Console, *, record: bool = False) -> Detected:
    """orchestrator.detect: the fleet's hosts probed in parallel, one SSH round-trip each."""
    from .detect import detect_hosts
    from .inventory import Inventory
    from .parsers import parse_host
    from .progress import StageProgress

    inv = cast(Inventory, fleet.handle)
    start = timing.now()
    hosts = tuple(h for h in inv.hosts if h.name in fleet.hostvars)
    with StageProgress(console, "detect", len(hosts), "unreachable") as stage:

        def done(d: Any) -> None:
            timing.TIMINGS.record(d.host, "detect", start, timing.now())
            stage.advance(failed=not d.ok)

        result = detect_hosts(replace(inv, hosts=hosts), on_host=done, record=record)
    raw = result.raw
    # the host is the report's own column: its name is not repeated in the reason
    errors = {h: str(HostError(e.message, fix=e.fix)) for h, e in result.failed.items()}
    return Detected(raw, {h: parse_host(h, r) for h, r in raw.items()}, errors)


def _executor(fleet: Fleet, host: str) -> Any:
    """How validation reaches a host: locally, or `ssh` with the inventory's host key files
    (StrictHostKeyChecking: an unknown key is refused, never accepted)."""
    from .connection import become_of, ssh_argv  # the same route as detection's
    from .inventory import Inventory
    from .validate.runner import SubprocessExecutor

    h = cast(Inventory, fleet.handle).host(host)
    become = become_of(h)  # sudo as detection runs it; a password answered on stdin
    if h.connection == "local":
        return SubprocessExecutor(become=become)
    return SubprocessExecutor(tuple(ssh_argv(h)), become=become, ssh=True)


def _validate_host(
    fleet: Fleet,
    host: str,
    facts: HostFacts,
    raw: RawFacts,
    policy: Policy,
    runtime: str | None,
    progress: Any = None,
    image: str | None = None,
    dcgm_level: int | None = None,
) -> rep.StageResult:
    """orchestrator.validate (GPU, NCCL and host health checks; DCGM's diag when asked) for
    one host."""
    try:
        runner = importlib.import_module("orchestrator.validate.runner")
    except ModuleNotFoundError:
        return rep.StageResult(
            "not_available", note="orchestrator.validate.runner is not installed"
        )
    checks = runner.validate_host(
        facts,
        raw,
        catalog=default_catalog(),
        policy=policy,
        execute=_executor(fleet, host),
        runtime=runtime,
        image=image,
        progress=progress,
        dcgm_level=dcgm_level,
    )
    return rep.StageResult("done", tuple(checks))


def _textfile(fleet: Fleet, host: str, result: rep.StageResult) -> rep.StageResult:
    """With gpuprov_validation_textfile_dir set: the host's Prometheus textfile, written on
    the host (orchestrator/validate/textfile.py); a failed write joins the results as a warn."""
    from .validate.textfile import directory_of, publish

    directory = directory_of(fleet.hostvars.get(host, {}))
    if not directory or result.state != "done":
        return result

    extra = publish(_executor(fleet, host), directory, host, result.checks, time.time())
    return replace(result, checks=(*result.checks, *extra)) if extra else result


def _document_vars(
    hosts: Sequence[str], plans: Mapping[str, HostPlan]
) -> dict[str, dict[str, object]]:
    """Each host's entry of the plan document: its roles' variables and validation plan."""
    return {h: plans[h].document_vars() for h in hosts}


def _verify_hosts(
    fleet: Fleet,
    hosts: Sequence[str],
    plans: Mapping[str, HostPlan],
    policies: Mapping[str, Policy],
    workdir: Path,
    plan_file: Path | None = None,
    console: Console | None = None,
    suite: SuiteRun | None = None,
) -> dict[str, rep.StageResult]:
    """orchestrator.verify: the testinfra suite against the planned state, read from the plan
    document the hosts were applied with (`plan_file`), else one written from the plans.
    `suite`: its processes, already started for these hosts and more (`_start_suite`)."""
    from .inventory import Inventory
    from .plandoc import write_plan_document
    from .progress import StageProgress
    from .verify.runner import run_suite

    if plan_file is None:
        plan_file = write_plan_document(workdir, _document_vars(hosts, plans))
    if not isinstance(fleet.handle, Inventory):
        return {h: rep.StageResult("not_available", note="needs an inventory") for h in hosts}
    shown = console or new_console(stderr=True, quiet=True)
    interrupt.stage_started("verify", tuple(hosts))  # what Ctrl-C reports
    with timing.stage("verify", hosts), StageProgress(shown, "verify", len(hosts)) as stage:
        # each host reached as detection reaches it (jump hosts, become, vault: the inventory
        # as loaded), one session per host for the whole suite
        if suite is not None:
            run = suite.finish(hosts, plan_file, workdir)
        else:
            run = run_suite([fleet.handle.host(h) for h in hosts], workdir, plan_file=plan_file)
        for h in hosts:
            stage.advance(failed=any(c.status == "fail" for c in run.results.get(h, ())))
    interrupt.stage_ended()
    return {
        h: _lost(run.results[h]) or rep.StageResult("done", tuple(run.results[h]))
        if h in run.results
        else rep.StageResult("error", note="the suite reported nothing for this host")
        for h in hosts
    }


def _start_suite(
    fleet: Fleet, opts: StageOptions, *, before_apply: bool = False
) -> tuple[Path, SuiteRun] | None:
    """The suite's processes, started for every host of the fleet while the caller detects
    and plans (and, `before_apply`, applies), in a folder of their own: `provision verify`'s
    run folder; before an apply, a `.verify-*` folder under the artifacts whose files join the
    apply's run folder when it verifies (`_drop_suite` removes it). None without an inventory
    (nothing to verify) or hosts."""
    from .inventory import Inventory
    from .verify.runner import start_suite

    if not isinstance(fleet.handle, Inventory) or not fleet.hosts:
        return None
    root = apply_mod.artifacts_root(opts.artifacts_dir)
    if before_apply:
        root.mkdir(parents=True, exist_ok=True)
        _sweep_suite_folders(root)
        folder = Path(tempfile.mkdtemp(prefix=f".verify-{os.getpid()}-{_HOST}-", dir=root))
    else:
        folder = apply_mod.new_run_dir(root)
    handle = fleet.handle
    hosts = [handle.host(h) for h in fleet.hosts]
    return folder, start_suite(hosts, folder, open_early=not before_apply)


# `.verify-<pid>-<this machine>-<mkdtemp's 8 characters>`: whose folder it is, so that a later
# run can tell the folder of a process that is gone (SIGKILL: no cleanup ran) from one in use.
_HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "localhost"
_SUITE_FOLDER = re.compile(r"\.verify-(\d+)-(.+)-[a-z0-9_]{8}")


def _sweep_suite_folders(root: Path) -> None:
    """Remove the `.verify-*` folders under `root` that processes of this machine left behind
    when they were killed before cleaning up (their process is gone). Another machine's (a
    shared artifacts folder), a live process's and an unnamed one are left alone."""
    for folder in root.glob(".verify-*"):
        named = _SUITE_FOLDER.fullmatch(folder.name)
        if named is None or named.group(2) != _HOST:
            continue
        try:
            os.kill(int(named.group(1)), 0)  # signal 0: only asks whether it exists
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:  # alive, another user's
            pass


def _drop_suite(early: tuple[Path, SuiteRun] | None, keep_in: Path | None = None) -> None:
    """End an early-started suite (a no-op once it has finished) and remove its folder;
    `keep_in`: its files are moved there first."""
    if early is None:
        return
    early[1].cancel()
    if keep_in is not None and early[0].is_dir():
        for f in early[0].iterdir():
            if not (keep_in / f.name).exists():
                f.replace(keep_in / f.name)
    shutil.rmtree(early[0], ignore_errors=True)


_SSH_LOST = re.compile(r"exit_status=255, .*_stderr=b['\"](ssh: [^'\"\\]*)")
# orchestrator/session.py's SessionLost, as the suite's JUnit carries it (a host lost mid-run)
_SESSION_LOST = re.compile(r"SessionLost: .*?lost the connection during verification: ([^\n]*)")


def _lost(results: Sequence[Any]) -> rep.StageResult | None:
    """A host the suite could not reach: one line (ssh's own words), not one failed check
    per test with testinfra's traceback (issue 27). Lost mid-verify (issue 48: ten failed
    checks), the checks that ran before it are kept and the rest are that one line."""
    said = {
        id(r): m
        for r in results
        if r.status == "fail"
        and (m := _SSH_LOST.search(r.diagnosis) or _SESSION_LOST.search(r.diagnosis))
    }
    if not said:
        return None
    first = next(said[id(r)] for r in results if id(r) in said)
    note = f"unreachable during verification: {first.group(1).strip()}"
    before = tuple(r for r in results if id(r) not in said)
    if all(r.status == "skip" for r in before):  # never reached: nothing ran on the host
        return rep.StageResult("error", note=note)
    ran = sum(r.status != "skip" for r in before)
    return rep.StageResult(
        "error", before, f"{note} (after {ran} check(s); {len(said)} not finished)"
    )


# --- shared steps ----------------------------------------------------------------------


def _console(opts: StageOptions) -> Console:
    # Tables go to stderr when stdout carries JSON.
    if opts.junit:  # bad input before any work
        from .validate.junit import check_path

        check_path(opts.junit)
    console = new_console(stderr=opts.json, highlight=False)
    # off a terminal (a pipe, a file, a CI log) a message is one line whatever the width, so
    # what a script or a log reads does not depend on COLUMNS (report.emit_table's rule too)
    console.soft_wrap = not console.is_terminal
    return console


def _plan(
    facts: Mapping[str, HostFacts],
    hostvars: Mapping[str, Mapping[str, object]],
    catalog: Catalog,
    origins: Mapping[str, Mapping[str, str]] | None = None,
    *,
    today: dt.date | None = None,
    extra_vars: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Policy], dict[str, HostPlan]]:
    """Policies of every host first (all problems at once), then plans; both bad input.
    `today`: the date of end-of-life warnings (None: today's); `extra_vars`: what -e gives,
    above every host's inventory variables (as in Ansible), and final: a planned value -e
    contradicts is bad input (the role would get -e's)."""
    from .plan import plan_fleet
    from .policy import load_policies

    extra = dict(extra_vars or {})
    merged = {h: {**hostvars.get(h, {}), **extra} for h in facts}
    where = {h: {**(origins or {}).get(h, {}), **dict.fromkeys(extra, "-e")} for h in facts}
    with timing.stage("plan", facts):
        policies = load_policies(merged, where)
        plans = plan_fleet(
            facts,
            policies,
            catalog,
            today=today or dt.datetime.now(dt.UTC).date(),
            hostvars=merged,
            extra_vars=extra,
        )
    return policies, plans


def _plan_detected(
    opts: StageOptions, fleet: Fleet, detected: Detected
) -> tuple[dict[str, Policy], dict[str, HostPlan]]:
    """The detected hosts planned with the fleet's policy and -e's values."""
    hostvars, origins = fleet.hostvars, fleet.origins
    return _plan(detected.facts, hostvars, default_catalog(), origins, extra_vars=opts.extra_values)


def _write_outputs(opts: StageOptions, report: rep.RunReport) -> int:
    """The report (--report) and JUnit (--junit) files, each written whole or not at all.
    One that cannot be written (checked before the run; the disk can still fill or vanish)
    is named, an older file at its path removed (a CI job must not read the last run's), and
    the run exits non-zero: EXIT_HOST_FAILED, else EXIT_OK."""
    outputs: list[tuple[str, str, Callable[[str], object]]] = []
    if opts.report:
        doc = rep.report_document(report)
        outputs.append(("report", opts.report, lambda path: rep.write_document(path, doc)))
    if opts.junit and report.command not in ("detect", "plan"):
        from .validate.junit import write_junit

        outputs.append(("JUnit file", opts.junit, lambda path: write_junit(path, report)))
    code = EXIT_OK
    for what, path, write in outputs:
        try:
            write(path)
        except OSError as exc:
            code = EXIT_HOST_FAILED
            gone = _remove_stale(path)
            print(
                f"provision: error: the {what} could not be written to {path}: "
                f"{exc.strerror or exc}{gone} (the hosts' results are above; --json prints "
                "the report on stdout)",
                file=sys.stderr,
            )
    return code


def _remove_stale(path: str) -> str:
    """Remove the file an earlier run left at `path`; what to add to the message."""
    stale = Path(path).expanduser()
    if not stale.is_file():
        return ""
    try:
        stale.unlink()
    except OSError as exc:
        return f"; the older file there could not be removed either ({exc.strerror})"
    return "; the older file there was removed"


def _finish(opts: StageOptions, console: Console, report: rep.RunReport) -> int:
    started = opts.started or report.started
    report = replace(report, started=started, finished=dt.datetime.now(dt.UTC))
    rep.render_report(console, report)
    written = _write_outputs(opts, report)
    if opts.json:
        print(json.dumps(rep.report_document(report), indent=2))
    return report.exit_code or written


def _detect_fleet(opts: StageOptions, console: Console) -> tuple[Fleet, Detected]:
    fleet = _load_inventory(opts.inventory, opts.limit, opts)
    detected = _detect(fleet, console, record=opts.save is not None)
    return fleet, detected


# --- stages ----------------------------------------------------------------------------


def run_detect(opts: StageOptions) -> int:
    console = _console(opts)
    fleet, detected = _detect_fleet(opts, console)
    if opts.save:
        from .factsdir import save_dir

        root = save_dir(opts.save, detected.raw)
        console.print(f"raw outputs of {len(detected.raw)} host(s) saved under {root}")
    names = {i: g.model for g in default_catalog().gpus for i in g.device_ids}
    rep.render_detect(console, detected.facts, detected.errors, names)
    for host, facts in sorted(detected.facts.items()):  # what a stopped run left (issue 48)
        for cause in facts.recovery:
            console.print(f"{escape(host)}: needs_recovery: {escape(cause)}", highlight=False)
        if facts.upgrade is not None and facts.upgrade.drained:
            console.print(f"{escape(host)}: {escape(facts.upgrade.drained_cause)}", highlight=False)
    reports = rep.host_reports(fleet.hosts, facts=detected.facts, detect_errors=detected.errors)
    report = rep.RunReport("detect", reports, finished=dt.datetime.now(dt.UTC))
    written = _write_outputs(opts, report)
    if opts.json:
        print(json.dumps(rep.report_document(report), indent=2))
    return report.exit_code or written


def _limit_saved(
    raw: Mapping[str, RawFacts], limit: str | None, where: str, fleet: Fleet | None
) -> dict[str, RawFacts]:
    """--limit over a saved facts directory: Ansible's host patterns (ansible-core's matcher)
    over its host names, with the groups the inventory (-i) gives them."""
    if not limit:
        return dict(raw)
    from .inventory import Inventory, match_limit

    groups: dict[str, tuple[str, ...]] = {}
    if fleet is not None:
        groups = {h.name: h.groups for h in cast(Inventory, fleet.handle).hosts}
    kept = match_limit(list(raw), groups, limit, where)
    return {h: raw[h] for h in kept}


def _without_facts(fleet: Fleet, saved: Mapping[str, RawFacts], limit: str | None) -> list[str]:
    """The inventory's hosts (its --limit applied) that the saved facts directory lacks."""
    missing = [h for h in fleet.hosts if h not in saved]
    if not missing or not limit:
        return missing
    from .inventory import Inventory, _select

    inv = cast(Inventory, fleet.handle)
    picked = _select(fleet.hosts, {h.name: h.groups for h in inv.hosts}, limit)
    return [h for h in missing if h in picked]


def run_plan(opts: StageOptions) -> int:
    console = _console(opts)
    catalog = default_catalog()
    errors: Mapping[str, str] = {}
    if opts.facts:
        from .factsdir import load_dir
        from .parsers import parse_host

        saved = load_dir(opts.facts)
        inventory = _load_inventory(opts.inventory, None, opts) if opts.inventory else None
        raw = _limit_saved(saved, opts.limit, f"the saved facts in {opts.facts}", inventory)
        hostvars: Mapping[str, Mapping[str, object]] = {h: {} for h in raw}
        origins: Mapping[str, Mapping[str, str]] = {}
        if inventory is not None:  # policy from the inventory for the hosts it names
            from .inventory import Inventory

            fleet = inventory
            for h in sorted(set(raw) - set(fleet.hostvars)):
                console.print(
                    f"[yellow]warning[/] {h}: not in {cast(Inventory, fleet.handle).where}: "
                    "default policy"
                )
            for h in _without_facts(fleet, saved, opts.limit):  # issue 27: named, not planned
                console.print(
                    f"[yellow]warning[/] {escape(h)}: in "
                    f"{escape(cast(Inventory, fleet.handle).where)} but not in "
                    f"{escape(str(opts.facts))}: not planned (run `provision detect --save` for it)"
                )
            hostvars = {h: fleet.hostvars.get(h, {}) for h in raw}
            origins = fleet.origins
        facts = {h: parse_host(h, r) for h, r in raw.items()}
    else:
        fleet, detected = _detect_fleet(opts, console)
        facts, errors, hostvars = dict(detected.facts), detected.errors, fleet.hostvars
        origins = fleet.origins
    plans = _plan(facts, hostvars, catalog, origins, extra_vars=opts.extra_values)[1]
    if opts.json:
        print(json.dumps(rep.plan_document(plans), indent=2))
    else:
        rep.render_plans(console, plans)
    for host, why in sorted(errors.items()):
        console.print(f"[red]unreachable[/] {host}: {escape(why)}", highlight=False)
    report = rep.RunReport(
        "plan",
        rep.host_reports(sorted({*facts, *errors}), facts=facts, detect_errors=errors, plans=plans),
    )
    written = _write_outputs(opts, replace(report, finished=dt.datetime.now(dt.UTC)))
    return report.exit_code or written


@dataclass(frozen=True)
class _Applied:
    fleet: Fleet
    detected: Detected
    policies: Mapping[str, Policy]
    plans: Mapping[str, HostPlan]
    result: apply_mod.ApplyResult | None
    suite: tuple[Path, SuiteRun] | None = None  # started before detection (run_all)


def _routes(fleet: Fleet, hosts: Sequence[str]) -> dict[str, str]:
    """Hosts behind a jump host: the checked route Ansible takes to them (connection.py)."""
    from .connection import ansible_common_args
    from .inventory import Inventory

    if not isinstance(fleet.handle, Inventory):
        return {}
    out: dict[str, str] = {}
    for name in hosts:
        args = ansible_common_args(fleet.handle.host(name))
        if args is not None:
            out[name] = args
    return out


def _apply(opts: StageOptions, console: Console, *, verify: bool = False) -> _Applied:
    """Detect, plan, check every input, then apply to the hosts the plan does not block.
    `verify`: the suite's processes start before detection (`_Applied.suite`), to verify the
    applied hosts afterwards; whatever fails or stops here ends them."""
    apply_mod.check_options(opts.serial, opts.max_fail_percent)
    fleet = _load_inventory(opts.inventory, opts.limit, opts)
    suite = _start_suite(fleet, opts, before_apply=True) if verify else None
    try:
        applied = _apply_fleet(opts, console, fleet)
    except BaseException:  # bad input, Ctrl-C: nothing will be verified
        _drop_suite(suite)
        raise
    return replace(applied, suite=suite)


def _apply_fleet(opts: StageOptions, console: Console, fleet: Fleet) -> _Applied:
    options = opts.ansible  # -K, --ask-vault-pass: asked before detection
    detected = _detect(fleet, console)
    policies, plans = _plan_detected(opts, fleet, detected)
    targets = [h for h in fleet.hosts if h in plans and not plans[h].blocked]
    for host in sorted(h for h in plans if plans[h].blocked):
        console.print(f"[yellow]blocked[/] {host}: {escape('; '.join(plans[host].blockers))}")
    if not targets:
        return _Applied(fleet, detected, policies, plans, None)
    max_unavailable = opts.max_unavailable
    budget = _budget(opts, fleet, detected, console)
    serial = rollout.batch_size(
        opts.serial, max_unavailable, targets, budget.facts, len(budget.fleet), budget.unknown
    )
    if max_unavailable is not None:
        away = rollout.drained_elsewhere(budget.facts, targets)
        console.print(
            f"rollout: batches of {serial} host(s) (--serial {opts.serial or 'all'}, "
            f"--max-unavailable {max_unavailable}"
            + (f"; drained by an unfinished upgrade: {', '.join(away)}" if away else "")
            + ")",
            highlight=False,
        )
    run_dir = apply_mod.new_run_dir(apply_mod.artifacts_root(opts.artifacts_dir))
    assert fleet.inventory_path is not None
    from . import converged
    from .progress import ApplyProgress

    with timing.stage("apply", targets):  # the decision included (Ansible's spans widen it)
        skips = converged.fleet_skips(
            targets,
            plans,
            _document_vars(targets, plans),
            fleet.hostvars,
            detected.raw,
            full=opts.full,
            # -e can override what the plan decided: such a run records no input digest
            trusted=not options.extra_vars,
        )
        if not skips.run:  # every role of every host converged: no playbook at all
            result = rollout.still_drained(skips.result(run_dir, opts.check, None), detected.facts)
    if not skips.run:
        return _Applied(fleet, detected, policies, plans, result)
    from . import hostlock

    reach: dict[str, Any] = {
        "inventories": list(fleet.sources),
        # with a budget, the driver_upgrade role reads every host's drain claim: routes to all
        "routes": _routes(budget.whole, budget.fleet if max_unavailable else skips.run),
    }
    owner = hostlock.owner_of(run_dir)
    interrupt.DRAINED_AT_START.clear()  # what an interrupted report says of resumed upgrades
    interrupt.DRAINED_AT_START.update(
        {
            h: rollout.drained_message(f.upgrade)
            for h, f in detected.facts.items()
            if h in skips.run and f.upgrade is not None and f.upgrade.drained
        }
    )
    try:
        with ApplyProgress(console, tuple(skips.run)) as progress:
            result = apply_mod.run_playbook(
                hosts=skips.run,
                host_vars=skips.host_vars,
                run_dir=run_dir,
                check=opts.check,
                serial=serial,
                max_fail_percent=opts.max_fail_percent,
                verbosity=opts.verbose,
                on_event=progress,
                options=options,
                echo=opts.verbose > 0 and not opts.json,  # stdout carries the JSON report
                extra=None
                if opts.check
                else {**hostlock.lock_vars(owner), **budget.role_vars(max_unavailable)},
                **reach,
            )
    finally:  # hosts that did not reach the end of the playbook still hold this run's lock
        hostlock.release(owner, hostlock.unreleased(run_dir), run_dir, options, **reach)
    done = rollout.still_drained(skips.result(run_dir, opts.check, result), detected.facts)
    return _Applied(fleet, detected, policies, plans, done)


@dataclass(frozen=True)
class _Budget:
    """What --max-unavailable counts over: the whole inventory's hosts (whatever --limit),
    the facts of those detection reached, and those it could not (state unknown)."""

    whole: Fleet
    fleet: tuple[str, ...]
    facts: Mapping[str, HostFacts]
    unknown: tuple[str, ...]

    def role_vars(self, max_unavailable: str | None) -> dict[str, object]:
        """The driver_upgrade role's check at the drain (tasks/claim.yml): the budget and
        every host it counts, so that a concurrent run with another --limit is seen."""
        if max_unavailable is None:
            return {}
        n = rollout.count(max_unavailable, len(self.fleet), "--max-unavailable")
        return {"driver_upgrade_max_unavailable": n, "driver_upgrade_fleet": list(self.fleet)}


def _budget(opts: StageOptions, fleet: Fleet, detected: Detected, console: Console) -> _Budget:
    """With --limit and --max-unavailable, the rest of the inventory is detected too, so a
    host drained (or unreachable) outside the limit still counts."""
    unknown = tuple(sorted(detected.errors))
    if opts.max_unavailable is None or not opts.limit:
        return _Budget(fleet, tuple(fleet.hosts), detected.facts, unknown)
    whole = _load_inventory(opts.inventory, None, opts)
    outside = [h for h in whole.hosts if h not in fleet.hostvars]
    if not outside:
        return _Budget(whole, tuple(whole.hosts), detected.facts, unknown)
    console.print(
        f"rollout: reading the upgrade state of {len(outside)} host(s) outside --limit "
        "(--max-unavailable counts the whole inventory)",
        highlight=False,
    )
    rest = _detect(replace(whole, hostvars={h: whole.hostvars[h] for h in outside}), console)
    for host, why in sorted(rest.errors.items()):
        console.print(
            f"[yellow]warning[/] {escape(host)}: upgrade state unknown, counted as out of "
            f"service: {escape(why)}"
        )
    return _Budget(
        whole,
        tuple(whole.hosts),
        {**rest.facts, **detected.facts},
        tuple(sorted({*unknown, *rest.errors})),
    )


def run_apply(opts: StageOptions) -> int:
    console = _console(opts)
    done = _apply(opts, console)
    reports = rep.host_reports(
        done.fleet.hosts,
        facts=done.detected.facts,
        detect_errors=done.detected.errors,
        plans=done.plans,
        applied=done.result.hosts if done.result else None,
    )
    run_dir = str(done.result.artifact_dir) if done.result else None
    return _finish(opts, console, rep.RunReport("apply", reports, opts.check, run_dir))


def _validation(
    fleet: Fleet,
    hosts: Sequence[str],
    detected: Detected,
    plans: Mapping[str, HostPlan],
    policies: Mapping[str, Policy],
    opts: StageOptions,
) -> dict[str, rep.StageResult]:
    """Every host at once (each one's GPUs are its own), with a line per host as it goes."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    out: dict[str, rep.StageResult] = {}
    console = _console(opts)
    todo = []
    for h in hosts:
        if h not in detected.facts or plans[h].blocked:
            out[h] = rep.StageResult("not_run", note="host not reachable or blocked")
        else:
            todo.append(h)

    from .progress import StageProgress

    stage = StageProgress(console, "validate", len(todo))
    finished = interrupt.stage_started("validate", tuple(todo))  # what Ctrl-C reports

    def one(h: str) -> rep.StageResult:
        def say(msg: str) -> None:
            if stage.quiet:  # many hosts: the stage's line and count instead
                console.print(f"validate {escape(h)}: {escape(msg)}")

        try:
            with timing.stage("validate", [h]):
                result = _validate_host(
                    fleet,
                    h,
                    detected.facts[h],
                    dict(detected.raw[h]),
                    policies[h],
                    opts.runtime,
                    say,
                    opts.image,
                    opts.dcgm_level,
                )
                result = _textfile(fleet, h, result)
        except OSError as exc:  # the connection itself (ssh missing, ...): this host only
            result = rep.StageResult("error", note=str(exc))
        stage.advance(failed=result.failed)
        return result

    with stage, ThreadPoolExecutor(max_workers=max(1, min(len(todo), 32))) as pool:
        futures = {pool.submit(one, h): h for h in todo}
        try:
            # as each ends, not in the inventory's order: a Ctrl-C while the first host
            # hangs keeps the hosts that had finished (issue 48; found by the lab test)
            for future in as_completed(futures):
                h = futures[future]
                out[h] = finished[h] = future.result()
        except KeyboardInterrupt:  # only this thread hears Ctrl-C: stop every host's run
            from .validate.runner import interrupt_running

            for future, h in futures.items():  # what had ended before the signal counts
                if future.done() and not future.cancelled() and future.exception() is None:
                    finished.setdefault(h, future.result())

            interrupt_running()
            raise
    interrupt.stage_ended()
    return {h: out[h] for h in hosts}


def _multinode(
    fleet: Fleet, detected: Detected, validation: dict[str, rep.StageResult], console: Console
) -> dict[str, rep.StageResult]:
    """validate --multinode: one all-reduce across every host validated (orchestrator/
    validate/multinode_launch.py); its results join each host's own."""
    from .validate.multinode_launch import validate_fleet

    hosts = [h for h in fleet.hosts if validation[h].state == "done"]
    if not hosts:
        return validation
    with timing.stage("validate", hosts):
        extra = validate_fleet(
            {h: detected.facts[h] for h in hosts},
            {h: _executor(fleet, h) for h in hosts},
            say=lambda msg: console.print(escape(msg)),
        )
    return {
        h: rep.StageResult("done", (*r.checks, *extra.get(h, ())), r.note) if h in extra else r
        for h, r in validation.items()
    }


def run_validate(opts: StageOptions) -> int:
    console = _console(opts)
    fleet, detected = _detect_fleet(opts, console)
    policies, plans = _plan_detected(opts, fleet, detected)
    interrupt.run_planned(
        interrupt.PartialRun(tuple(fleet.hosts), detected.facts, detected.errors, plans)
    )
    validation = _validation(fleet, fleet.hosts, detected, plans, policies, opts)
    if opts.multinode:
        validation = _multinode(fleet, detected, validation, console)
    reports = rep.host_reports(
        fleet.hosts,
        facts=detected.facts,
        detect_errors=detected.errors,
        plans=plans,
        validation=validation,
    )
    return _finish(opts, console, rep.RunReport("validate", reports))


def run_verify(opts: StageOptions) -> int:
    console = _console(opts)
    fleet = _load_inventory(opts.inventory, opts.limit, opts)
    # The suite's processes start now and collect their tests while detection and planning
    # run; they are told afterwards which hosts to check (detected, not blocked) and the plan.
    early = _start_suite(fleet, opts)
    try:
        detected = _detect(fleet, console)
        policies, plans = _plan_detected(opts, fleet, detected)
    except BaseException:  # bad input, Ctrl-C: the suite ends, nothing was verified
        _drop_suite(early)
        raise
    hosts = [h for h in fleet.hosts if h in plans and not plans[h].blocked]
    if not hosts:  # none detected or all blocked: nothing to verify, no artifacts
        _drop_suite(early)
        early = None
    run_dir = early[0] if early is not None else None
    if hosts and run_dir is None:  # no suite started early (no inventory to reach hosts by)
        run_dir = apply_mod.new_run_dir(apply_mod.artifacts_root(opts.artifacts_dir))
    interrupt.run_planned(
        interrupt.PartialRun(
            tuple(fleet.hosts),
            detected.facts,
            detected.errors,
            plans,
            artifact_dir=str(run_dir) if run_dir else None,
        )
    )
    verification = (
        _verify_hosts(
            fleet,
            hosts,
            plans,
            policies,
            run_dir,
            console=console,
            suite=early[1] if early is not None else None,
        )
        if run_dir
        else {}
    )
    reports = rep.host_reports(
        fleet.hosts,
        facts=detected.facts,
        detect_errors=detected.errors,
        plans=plans,
        verification=verification,
    )
    artifacts = str(run_dir) if run_dir else None  # where verify-junit.xml lies
    return _finish(opts, console, rep.RunReport("verify", reports, artifact_dir=artifacts))


def run_all(opts: StageOptions) -> int:
    """detect -> plan -> apply -> detect again -> validate -> verify -> report."""
    console = _console(opts)
    done = _apply(opts, console, verify=not opts.check)
    applied = done.result.hosts if done.result else {}
    ok = [h for h in done.fleet.hosts if h in applied and applied[h].succeeded]
    # the applied hosts' run folder, where they are verified and the suite's files join
    run = done.result.artifact_dir if done.result and ok and not opts.check else None
    try:
        return _after_apply(opts, console, done, ok, run)
    finally:  # the suite ends (a no-op once it has run); its folder goes
        _drop_suite(done.suite, keep_in=run)


def _after_apply(
    opts: StageOptions, console: Console, done: _Applied, ok: list[str], run: Path | None
) -> int:
    """Validate and verify the hosts `ok` applied into the folder `run` (None: none), then
    report."""
    applied = done.result.hosts if done.result else {}
    validation: dict[str, rep.StageResult] = {}
    verification: dict[str, rep.StageResult] = {}
    if run is not None and done.result is not None:
        # The hosts changed: validate and verify what they are now, not what they were
        # (no playbook ran: every role was converged, the first detection still holds).
        ran = done.result.status != "skipped"
        after = _detect(done.fleet, console) if ran else done.detected
        interrupt.run_planned(
            interrupt.PartialRun(
                tuple(done.fleet.hosts),
                {**done.detected.facts, **after.facts},
                {**done.detected.errors, **after.errors},
                done.plans,
                applied=applied,
                artifact_dir=str(done.result.artifact_dir),
            )
        )
        validation = _validation(done.fleet, ok, after, done.plans, done.policies, opts)
        verification = _verify_hosts(
            done.fleet,
            ok,
            done.plans,
            done.policies,
            run,
            done.result.plan_file,
            console,
            suite=done.suite[1] if done.suite else None,
        )
        detected_facts: Mapping[str, HostFacts] = {**done.detected.facts, **after.facts}
        detect_errors: Mapping[str, str] = {**done.detected.errors, **after.errors}
    else:
        detected_facts, detect_errors = done.detected.facts, done.detected.errors
        note = "check mode: nothing was applied" if opts.check else "no host was applied"
        skipped = rep.StageResult("not_run", note=note)
        validation = {h: skipped for h in done.fleet.hosts}
        verification = dict(validation)
    reports = rep.host_reports(
        done.fleet.hosts,
        facts=detected_facts,
        detect_errors=detect_errors,
        plans=done.plans,
        applied=applied,
        validation=validation,
        verification=verification,
    )
    run_dir = str(done.result.artifact_dir) if done.result else None
    return _finish(opts, console, rep.RunReport("all", reports, opts.check, run_dir))


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_HOST_FAILED",
    "EXIT_OK",
    "StageOptions",
    "run_all",
    "run_apply",
    "run_detect",
    "run_plan",
    "run_validate",
    "run_verify",
]
