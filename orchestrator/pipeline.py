"""The stages behind `provision`: detect, plan, apply, validate, verify, and all of them.

Each `run_*` takes the parsed options and returns the exit code (0 every host ok, 1 some host
failed, 2 bad input found before any change). Bad input anywhere (inventory, policy of any
host, options, a pinned branch too old for a GPU) raises before any host is touched; a host
the plan blocks is left out and the others go on. The other parts plug in through one small
function each (`_load_inventory`, `_detect`, `_validate_host`, `_verify_hosts`), so a part
that is missing says so plainly instead of pretending to pass.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rich.console import Console
from rich.markup import escape

from orchestrator import apply as apply_mod
from orchestrator import report as rep
from orchestrator import rollout, timing
from orchestrator.catalog import Catalog, default_catalog
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_HOST_FAILED, EXIT_OK, BadInputError
from orchestrator.facts import HostFacts

if TYPE_CHECKING:  # planning is imported where it runs: `provision detect` never plans
    from orchestrator.plan import HostPlan
    from orchestrator.policy import Policy

if TYPE_CHECKING:
    from orchestrator.inventory import VaultOptions

RawFacts = dict[str, str]
GPU_GROUP = "gpu_nodes"


@dataclass(frozen=True)
class Fleet:
    """The hosts of one run: the inventory as loaded, and each host's variables."""

    inventory_path: Path | None
    handle: object  # orchestrator.inventory's Inventory, handed back to detect
    hostvars: Mapping[str, Mapping[str, object]]
    origins: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # host -> var -> file
    vault: VaultOptions | None = None  # the vault secrets the inventory was read with

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(self.hostvars)


@dataclass(frozen=True)
class Detected:
    raw: Mapping[str, RawFacts]
    facts: Mapping[str, HostFacts]
    errors: Mapping[str, str]  # host -> why detection failed (unreachable, host key...)


# --- plug points: one small function per part ----------------------------------------------


def _ansible_options(args: argparse.Namespace) -> apply_mod.AnsibleOptions:
    """The pass-through options, -K and --ask-vault-pass asked once per run."""
    options = getattr(args, "gpuprov_ansible_options", None)
    if not isinstance(options, apply_mod.AnsibleOptions):
        options = apply_mod.ansible_options(args)
        args.gpuprov_ansible_options = options
    return options


def _load_inventory(
    path: str | None, limit: str | None, args: argparse.Namespace | None = None
) -> Fleet:
    """orchestrator.inventory (ansible-core's InventoryManager): hosts and resolved vars,
    vault values decrypted and -K's become password given (from `args`, asked once).

    Only members of `gpu_nodes` (the group the site playbook converges) are provisioned
    when the inventory has that group."""
    from orchestrator.inventory import load_inventory

    if not path:
        raise BadInputError(
            "no inventory given", fix="pass --inventory PATH (INI or YAML, e.g. inventory/p5.ini)"
        )
    options = _ansible_options(args) if args is not None else None
    inv = load_inventory(
        Path(path),
        limit,
        vault=options.vault() if options else None,
        become_password=options.become_password if options else None,
    )
    hosts = [h for h in inv.hosts if GPU_GROUP in h.groups or GPU_GROUP not in inv.groups]
    if not hosts:
        raise BadInputError(
            f"--limit {limit!r} matches no host of group {GPU_GROUP} in {path}",
            fix=f"use a host pattern that selects members of {GPU_GROUP}",
        )
    return Fleet(
        Path(path),
        inv,
        {h.name: dict(h.vars) for h in hosts},
        {h.name: h.origins for h in hosts},
        options.vault() if options else None,
    )


def _detect(fleet: Fleet, console: Console) -> Detected:
    """orchestrator.detect: the fleet's hosts probed in parallel, one SSH round-trip each."""
    from orchestrator.detect import detect_hosts
    from orchestrator.inventory import Inventory
    from orchestrator.parsers import parse_host

    inv = cast(Inventory, fleet.handle)
    start = timing.now()
    result = detect_hosts(
        replace(inv, hosts=tuple(h for h in inv.hosts if h.name in fleet.hostvars)),
        on_host=lambda d: timing.TIMINGS.record(d.host, "detect", start, timing.now()),
    )
    raw = result.raw
    errors = {h: str(e) for h, e in result.failed.items()}
    return Detected(raw, {h: parse_host(h, r) for h, r in raw.items()}, errors)


def _executor(fleet: Fleet, host: str) -> Any:
    """How validation reaches a host: locally, or `ssh` with the inventory's host key files
    (StrictHostKeyChecking: an unknown key is refused, never accepted)."""
    from orchestrator.connection import become_of, ssh_argv  # the same route as detection's
    from orchestrator.inventory import Inventory
    from orchestrator.validate.runner import SubprocessExecutor

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
) -> rep.StageResult:
    """orchestrator.validate (GPU, NCCL and host health checks) for one host."""
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
    )
    return rep.StageResult("done", tuple(checks))


def _document_vars(
    hosts: Sequence[str], plans: Mapping[str, HostPlan]
) -> dict[str, dict[str, object]]:
    """Each host's entry of the plan document: the planner's typed plan (roles, validation)."""
    return {h: plans[h].typed.document_vars() for h in hosts}


def _becomes(fleet: Fleet, hosts: Sequence[str]) -> dict[str, Any]:
    """Hosts whose sudo wants a password: their become (connection.py), for verify."""
    from orchestrator.connection import become_of
    from orchestrator.inventory import Inventory

    if not isinstance(fleet.handle, Inventory):
        return {}
    out = {h: become_of(fleet.handle.host(h)) for h in hosts}
    return {h: b for h, b in out.items() if b is not None and b.password is not None}


def _verify_hosts(
    fleet: Fleet,
    hosts: Sequence[str],
    plans: Mapping[str, HostPlan],
    policies: Mapping[str, Policy],
    workdir: Path,
    plan_file: Path | None = None,
) -> dict[str, rep.StageResult]:
    """orchestrator.verify: the testinfra suite against the planned state, read from the plan
    document the hosts were applied with (`plan_file`), else one written from the plans."""
    from orchestrator.plandoc import write_plan_document
    from orchestrator.verify.runner import routed_inventory, run_suite, workers_for

    if plan_file is None:
        plan_file = write_plan_document(workdir, _document_vars(hosts, plans))
    if fleet.inventory_path is None:
        return {h: rep.StageResult("not_available", note="needs an inventory") for h in hosts}
    vault = fleet.vault
    asked = (
        " (a vault password asked with --ask-vault-pass does not reach the suite's "
        "ansible-inventory: with vault-encrypted vars files, use --vault-password-file)"
        if vault is not None and vault.password is not None and not vault.password_files
        else ""
    )
    with timing.stage("verify", hosts):
        run = run_suite(
            routed_inventory(fleet.inventory_path, _routes(fleet, hosts), workdir),
            # run_suite passes --hosts=ansible://PATTERN; testinfra splits --hosts on commas and
            # matches each with fnmatch, so name every host as its own ansible:// spec.
            ",ansible://".join(hosts),
            workdir,
            plan_file=plan_file,
            workers=workers_for(len(hosts)),
            stream=False,
            become=_becomes(fleet, hosts),
            vault=fleet.vault,
        )
    return {
        h: rep.StageResult("done", tuple(run.results.get(h, ())))
        if h in run.results
        else rep.StageResult("error", note="the suite reported nothing for this host" + asked)
        for h in hosts
    }


# --- shared steps ----------------------------------------------------------------------


def _console(args: argparse.Namespace) -> Console:
    # Tables go to stderr when stdout carries JSON.
    if getattr(args, "junit", None):  # bad input before any work
        from orchestrator.validate.junit import check_path

        check_path(args.junit)
    return Console(stderr=bool(getattr(args, "json", False)), highlight=False)


def _plan(
    facts: Mapping[str, HostFacts],
    hostvars: Mapping[str, Mapping[str, object]],
    catalog: Catalog,
    origins: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[dict[str, Policy], dict[str, HostPlan]]:
    """Policies of every host first (all problems at once), then plans; both bad input."""
    from orchestrator.plan import plan_fleet
    from orchestrator.policy import load_policies

    with timing.stage("plan", facts):
        policies = load_policies({h: hostvars.get(h, {}) for h in facts}, origins)
        plans = plan_fleet(
            facts,
            policies,
            catalog,
            today=dt.datetime.now(dt.UTC).date(),
            imex_nodes={h: hostvars.get(h, {}).get("nvidia_driver_imex_nodes") for h in facts},
        )
    return policies, plans


def _write_report(args: argparse.Namespace, report: rep.RunReport) -> None:
    path = getattr(args, "report", None)
    if path:
        try:
            rep.write_document(path, rep.report_document(report))
        except OSError as exc:  # checked before the run; the disk can still fill or vanish
            print(
                f"provision: error: the report could not be written to {path}: {exc.strerror}"
                " (the hosts' results are above; --json prints the report on stdout)",
                file=sys.stderr,
            )


def _finish(args: argparse.Namespace, console: Console, report: rep.RunReport) -> int:
    started = getattr(args, "started", None) or report.started
    report = replace(report, started=started, finished=dt.datetime.now(dt.UTC))
    rep.render_report(console, report)
    _write_report(args, report)
    if getattr(args, "junit", None):
        from orchestrator.validate.junit import write_junit

        write_junit(args.junit, report)
    if getattr(args, "json", False):
        print(json.dumps(rep.report_document(report), indent=2))
    return report.exit_code


def _detect_fleet(args: argparse.Namespace, console: Console) -> tuple[Fleet, Detected]:
    fleet = _load_inventory(args.inventory, args.limit, args)
    detected = _detect(fleet, console)
    return fleet, detected


# --- stages ----------------------------------------------------------------------------


def run_detect(args: argparse.Namespace) -> int:
    console = _console(args)
    fleet, detected = _detect_fleet(args, console)
    if getattr(args, "save", None):
        from orchestrator.factsdir import save_dir

        root = save_dir(args.save, detected.raw)
        console.print(f"raw outputs of {len(detected.raw)} host(s) saved under {root}")
    names = {i: g.model for g in default_catalog().gpus for i in g.device_ids}
    rep.render_detect(console, detected.facts, detected.errors, names)
    reports = rep.host_reports(fleet.hosts, facts=detected.facts, detect_errors=detected.errors)
    report = rep.RunReport("detect", reports, finished=dt.datetime.now(dt.UTC))
    _write_report(args, report)
    if getattr(args, "json", False):
        print(json.dumps(rep.report_document(report), indent=2))
    return report.exit_code


def _limit_saved(
    raw: Mapping[str, RawFacts], limit: str | None, where: str, fleet: Fleet | None
) -> dict[str, RawFacts]:
    """--limit over a saved facts directory: Ansible's host patterns (ansible-core's matcher)
    over its host names, with the groups the inventory (-i) gives them."""
    if not limit:
        return dict(raw)
    from orchestrator.inventory import Inventory, match_limit

    groups: dict[str, tuple[str, ...]] = {}
    if fleet is not None:
        groups = {h.name: h.groups for h in cast(Inventory, fleet.handle).hosts}
    kept = match_limit(list(raw), groups, limit, where)
    return {h: raw[h] for h in kept}


def run_plan(args: argparse.Namespace) -> int:
    console = _console(args)
    catalog = default_catalog()
    errors: Mapping[str, str] = {}
    if getattr(args, "facts", None):
        from orchestrator.factsdir import load_dir
        from orchestrator.parsers import parse_host

        saved = load_dir(args.facts)
        inventory = _load_inventory(args.inventory, None, args) if args.inventory else None
        raw = _limit_saved(saved, args.limit, f"the saved facts in {args.facts}", inventory)
        hostvars: Mapping[str, Mapping[str, object]] = {h: {} for h in raw}
        origins: Mapping[str, Mapping[str, str]] = {}
        if inventory is not None:  # policy from the inventory for the hosts it names
            fleet = inventory
            for h in sorted(set(raw) - set(fleet.hostvars)):
                console.print(f"[yellow]warning[/] {h}: not in {args.inventory}: default policy")
            hostvars = {h: fleet.hostvars.get(h, {}) for h in raw}
            origins = fleet.origins
        facts = {h: parse_host(h, r) for h, r in raw.items()}
    else:
        fleet, detected = _detect_fleet(args, console)
        facts, errors, hostvars = dict(detected.facts), detected.errors, fleet.hostvars
        origins = fleet.origins
    _, plans = _plan(facts, hostvars, catalog, origins)
    if getattr(args, "json", False):
        print(json.dumps(rep.plan_document(plans), indent=2))
    else:
        rep.render_plans(console, plans)
    for host, why in sorted(errors.items()):
        console.print(f"[red]unreachable[/] {host}: {escape(why)}", highlight=False)
    report = rep.RunReport(
        "plan",
        rep.host_reports(sorted({*facts, *errors}), facts=facts, detect_errors=errors, plans=plans),
    )
    _write_report(args, replace(report, finished=dt.datetime.now(dt.UTC)))
    return report.exit_code


@dataclass(frozen=True)
class _Applied:
    fleet: Fleet
    detected: Detected
    policies: Mapping[str, Policy]
    plans: Mapping[str, HostPlan]
    result: apply_mod.ApplyResult | None


def _routes(fleet: Fleet, hosts: Sequence[str]) -> dict[str, str]:
    """Hosts behind a jump host: the checked route Ansible takes to them (connection.py)."""
    from orchestrator.connection import ansible_common_args
    from orchestrator.inventory import Inventory

    if not isinstance(fleet.handle, Inventory):
        return {}
    out: dict[str, str] = {}
    for name in hosts:
        args = ansible_common_args(fleet.handle.host(name))
        if args is not None:
            out[name] = args
    return out


def _apply(args: argparse.Namespace, console: Console) -> _Applied:
    """Detect, plan, check every input, then apply to the hosts the plan does not block."""
    apply_mod.check_options(args.serial, args.max_fail_percent)
    options = _ansible_options(args)  # -K, --ask-vault-pass: asked before detection
    fleet, detected = _detect_fleet(args, console)
    policies, plans = _plan(detected.facts, fleet.hostvars, default_catalog(), fleet.origins)
    targets = [h for h in fleet.hosts if h in plans and not plans[h].blocked]
    for host in sorted(h for h in plans if plans[h].blocked):
        console.print(f"[yellow]blocked[/] {host}: {escape('; '.join(plans[host].blockers))}")
    if not targets:
        return _Applied(fleet, detected, policies, plans, None)
    max_unavailable = getattr(args, "max_unavailable", None)
    serial = rollout.batch_size(
        args.serial, max_unavailable, targets, detected.facts, len(fleet.hosts)
    )
    if max_unavailable is not None:
        away = rollout.drained_elsewhere(detected.facts, targets)
        console.print(
            f"rollout: batches of {serial} host(s) (--serial {args.serial or 'all'}, "
            f"--max-unavailable {max_unavailable}"
            + (f"; drained by an unfinished upgrade: {', '.join(away)}" if away else "")
            + ")",
            highlight=False,
        )
    run_dir = apply_mod.new_run_dir()
    assert fleet.inventory_path is not None
    from orchestrator import converged
    from orchestrator.progress import ApplyProgress

    with timing.stage("apply", targets):  # the decision included (Ansible's spans widen it)
        skips = converged.fleet_skips(
            targets,
            plans,
            _document_vars(targets, plans),
            fleet.hostvars,
            detected.raw,
            full=bool(getattr(args, "full", False)),
            # -e can override what the plan decided: such a run records no input digest
            trusted=not options.extra_vars,
        )
        if not skips.run:  # every role of every host converged: no playbook at all
            result = skips.result(run_dir, args.check, None)
    if not skips.run:
        return _Applied(fleet, detected, policies, plans, result)
    with ApplyProgress(console, tuple(skips.run)) as progress:
        result = apply_mod.run_playbook(
            inventories=[fleet.inventory_path],
            hosts=skips.run,
            host_vars=skips.host_vars,
            run_dir=run_dir,
            check=args.check,
            serial=serial,
            max_fail_percent=args.max_fail_percent,
            verbosity=args.verbose,
            on_event=progress,
            options=options,
            routes=_routes(fleet, skips.run),
            echo=args.verbose > 0 and not args.json,  # stdout carries the JSON report
        )
    return _Applied(fleet, detected, policies, plans, skips.result(run_dir, args.check, result))


def run_apply(args: argparse.Namespace) -> int:
    console = _console(args)
    done = _apply(args, console)
    reports = rep.host_reports(
        done.fleet.hosts,
        facts=done.detected.facts,
        detect_errors=done.detected.errors,
        plans=done.plans,
        applied=done.result.hosts if done.result else None,
    )
    run_dir = str(done.result.artifact_dir) if done.result else None
    return _finish(args, console, rep.RunReport("apply", reports, args.check, run_dir))


def _validation(
    fleet: Fleet,
    hosts: Sequence[str],
    detected: Detected,
    plans: Mapping[str, HostPlan],
    policies: Mapping[str, Policy],
    args: argparse.Namespace,
) -> dict[str, rep.StageResult]:
    """Every host at once (each one's GPUs are its own), with a line per host as it goes."""
    from concurrent.futures import ThreadPoolExecutor

    out: dict[str, rep.StageResult] = {}
    runtime = getattr(args, "runtime", None)
    console = _console(args)
    todo = []
    for h in hosts:
        if h not in detected.facts or plans[h].blocked:
            out[h] = rep.StageResult("not_run", note="host not reachable or blocked")
        else:
            todo.append(h)

    def one(h: str) -> rep.StageResult:
        def say(msg: str) -> None:
            console.print(f"validate {escape(h)}: {escape(msg)}")

        try:
            with timing.stage("validate", [h]):
                return _validate_host(
                    fleet,
                    h,
                    detected.facts[h],
                    dict(detected.raw[h]),
                    policies[h],
                    runtime,
                    say,
                    getattr(args, "image", None),
                )
        except OSError as exc:  # the connection itself (ssh missing, ...): this host only
            return rep.StageResult("error", note=str(exc))

    with ThreadPoolExecutor(max_workers=max(1, min(len(todo), 32))) as pool:
        futures = [pool.submit(one, h) for h in todo]
        try:
            for h, future in zip(todo, futures, strict=True):
                out[h] = future.result()
        except KeyboardInterrupt:  # only this thread hears Ctrl-C: stop every host's run
            from orchestrator.validate.runner import interrupt_running

            interrupt_running()
            raise
    return {h: out[h] for h in hosts}


def run_validate(args: argparse.Namespace) -> int:
    console = _console(args)
    fleet, detected = _detect_fleet(args, console)
    policies, plans = _plan(detected.facts, fleet.hostvars, default_catalog(), fleet.origins)
    validation = _validation(fleet, fleet.hosts, detected, plans, policies, args)
    reports = rep.host_reports(
        fleet.hosts,
        facts=detected.facts,
        detect_errors=detected.errors,
        plans=plans,
        validation=validation,
    )
    return _finish(args, console, rep.RunReport("validate", reports))


def run_verify(args: argparse.Namespace) -> int:
    console = _console(args)
    fleet, detected = _detect_fleet(args, console)
    policies, plans = _plan(detected.facts, fleet.hostvars, default_catalog(), fleet.origins)
    hosts = [h for h in fleet.hosts if h in plans and not plans[h].blocked]
    run_dir = apply_mod.new_run_dir() if hosts else None
    verification = _verify_hosts(fleet, hosts, plans, policies, run_dir) if run_dir else {}
    reports = rep.host_reports(
        fleet.hosts,
        facts=detected.facts,
        detect_errors=detected.errors,
        plans=plans,
        verification=verification,
    )
    artifacts = str(run_dir) if run_dir else None  # where verify-junit.xml lies
    return _finish(args, console, rep.RunReport("verify", reports, artifact_dir=artifacts))


def run_all(args: argparse.Namespace) -> int:
    """detect -> plan -> apply -> detect again -> validate -> verify -> report."""
    console = _console(args)
    done = _apply(args, console)
    applied = done.result.hosts if done.result else {}
    ok = [h for h in done.fleet.hosts if h in applied and applied[h].succeeded]
    validation: dict[str, rep.StageResult] = {}
    verification: dict[str, rep.StageResult] = {}
    if ok and not args.check:
        # The hosts changed: validate and verify what they are now, not what they were
        # (no playbook ran: every role was converged, the first detection still holds).
        ran = done.result is not None and done.result.status != "skipped"
        after = _detect(done.fleet, console) if ran else done.detected
        validation = _validation(done.fleet, ok, after, done.plans, done.policies, args)
        assert done.result is not None
        verification = _verify_hosts(
            done.fleet,
            ok,
            done.plans,
            done.policies,
            done.result.artifact_dir,
            done.result.plan_file,
        )
        detected_facts: Mapping[str, HostFacts] = {**done.detected.facts, **after.facts}
        detect_errors: Mapping[str, str] = {**done.detected.errors, **after.errors}
    else:
        detected_facts, detect_errors = done.detected.facts, done.detected.errors
        note = "check mode: nothing was applied" if args.check else "no host was applied"
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
    return _finish(args, console, rep.RunReport("all", reports, args.check, run_dir))


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_HOST_FAILED",
    "EXIT_OK",
    "run_all",
    "run_apply",
    "run_detect",
    "run_plan",
    "run_validate",
    "run_verify",
]
