"""Apply: run the site playbook through ansible-runner with each host's planned variables.

One typed wrapper (`run_playbook`) owns every ansible-runner call. Per-host plan variables go
in one plan document (`plan.json`, orchestrator/plandoc.py) inside the run's artifact
directory, passed as extra variables (`-e @plan.json`); the site playbook's first pre-task
makes each host's entry host facts, so the plan beats group_vars and host_vars (plain
ansible-playbook users get the inventory's variables instead). Each run keeps its artifacts
under `artifacts/<timestamp>/` (plan document, ansible-runner's job events and stdout) for
post-mortems; `suppress_env_files` keeps variables and secrets out of the runner's env/ files.

The playbooks and roles come from the checkout or the installed wheel (orchestrator/paths.py);
ansible-playbook runs in the user's directory, with gpuprov's Ansible settings layered under
the user's ansible.cfg and ANSIBLE_* environment (orchestrator/ansiblecfg.py). The options
Ansible users reach for (`AnsibleOptions`: --tags, -e, --vault-id, -K, --forks, --diff) pass
through; with -v and more, Ansible's own output is shown at that verbosity.

`provision` owns the signals during a run: SIGINT and SIGTERM go to the run's watchdog
(orchestrator/watchdog.py, the parent of ansible-playbook), which stops Ansible's whole process
tree, fork workers included; then the run raises `Interrupted` (exit 130, the interrupted
report: orchestrator/interrupt.py). ansible-runner's own signal handler is never installed
(a cancel callback is given), so it does not decide the outcome. Secrets never stay in the
artifacts (orchestrator/secrets.py); the last KEEP_RUNS run directories are kept.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import ansiblecfg, paths, watchdog
from .errors import BadInputError, HostError, OutputError
from .plandoc import write_plan_document
from .secrets import is_own_var, scrub_command_file

if TYPE_CHECKING:
    from .inventory import VaultOptions

REPO_ROOT = paths.SOURCE_ROOT  # the checkout, or the wheel's bundle
SITE_PLAYBOOK = paths.SITE_PLAYBOOK
ARTIFACTS = Path("artifacts")  # relative to where provision runs; --artifacts-dir, ARTIFACTS_ENV
ARTIFACTS_ENV = "GPUPROV_ARTIFACTS_DIR"
KEEP_ENV = "GPUPROV_ARTIFACTS_KEEP"  # how many run directories to keep (default KEEP_RUNS)
KEEP_RUNS = 20
# ansible-playbook's prompts (ansible-runner answers them from `passwords`)
BECOME_PROMPT = r"^BECOME password.*:\s*?$"
VAULT_PROMPT = r"^Vault password.*:\s*?$"

Event = Mapping[str, Any]
EventSink = Callable[[Event], None]


@dataclass(frozen=True)
class AnsibleOptions:
    """ansible-playbook's own options, passed through as given (`provision apply --help`)."""

    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()
    extra_vars: tuple[str, ...] = ()  # each as -e takes it: k=v, JSON/YAML, or @file
    vault_ids: tuple[str, ...] = ()
    vault_password_files: tuple[str, ...] = ()
    ask_vault_pass: bool = False
    become_password: str | None = field(default=None, repr=False)  # -K: asked once
    vault_password: str | None = field(default=None, repr=False)  # --ask-vault-pass: once
    forks: int | None = None
    diff: bool = False

    def cmdline(self) -> list[str]:
        out: list[str] = []
        if self.tags:
            out += ["--tags", ",".join(self.tags)]
        if self.skip_tags:
            out += ["--skip-tags", ",".join(self.skip_tags)]
        for ev in self.extra_vars:
            out += ["-e", ev]
        for vid in self.vault_ids:
            out += ["--vault-id", vid]
        for path in self.vault_password_files:
            out += ["--vault-password-file", path]
        if self.ask_vault_pass:
            out.append("--ask-vault-pass")
        if self.become_password is not None:
            out.append("--ask-become-pass")
        if self.forks is not None:
            out += ["--forks", str(self.forks)]
        if self.diff:
            out.append("--diff")
        return out

    def vault(self) -> VaultOptions:
        """The same vault secrets for gpuprov's own reading of the inventory."""
        from .inventory import VaultOptions

        return VaultOptions(self.vault_ids, self.vault_password_files, self.vault_password)

    def passwords(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.become_password is not None:
            out[BECOME_PROMPT] = self.become_password
        if self.vault_password is not None:
            out[VAULT_PROMPT] = self.vault_password
        return out


@dataclass(frozen=True)
class HostApplyStats:
    """What one host went through in a run, from the playbook's job events."""

    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    changed_tasks: tuple[str, ...] = ()
    failed_tasks: tuple[str, ...] = ()  # "task name: message"
    rescued: int = 0  # failures a block's rescue recovered (not counted in `failed`)
    touched: bool = True  # False: the run stopped (max fail percent) before this host's batch
    converged: tuple[str, ...] = ()  # "ROLE skipped: converged, digest ..." (converged.py)
    roles: tuple[str, ...] = ()  # the roles whose tasks ran on this host, in order

    @property
    def succeeded(self) -> bool:
        return self.failed == 0 and self.unreachable == 0


@dataclass(frozen=True)
class ApplyResult:
    hosts: Mapping[str, HostApplyStats]
    status: str  # ansible-runner's: successful | failed | timeout | canceled
    rc: int
    artifact_dir: Path
    check_mode: bool
    plan_file: Path | None = None  # the plan document the playbook was given (plandoc)

    @property
    def failed_hosts(self) -> tuple[str, ...]:
        return tuple(h for h, s in self.hosts.items() if not s.succeeded)


@dataclass
class _Tally:
    """Folds job events into per-host stats (runner_on_* events, task names in order)."""

    ok: dict[str, int] = field(default_factory=dict)
    changed: dict[str, list[str]] = field(default_factory=dict)
    failed: dict[str, list[str]] = field(default_factory=dict)
    unreachable: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    roles: dict[str, list[str]] = field(default_factory=dict)
    lost: dict[str, list[str]] = field(default_factory=dict)  # unreachable: task: cause
    final: dict[str, Mapping[str, int]] = field(default_factory=dict)  # playbook_on_stats

    def add(self, event: Event) -> None:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_stats":
            # Ansible's own recap: the truth on failures (rescued ones are not) and unreachables
            for key in ("failures", "dark", "rescued"):
                value = data.get(key)
                if isinstance(value, Mapping):
                    self.final[key] = {str(h): int(n) for h, n in value.items()}
            return
        host = data.get("host")
        if not isinstance(host, str) or not kind.startswith("runner_on_"):
            return
        self.seen.add(host)
        role = data.get("role")
        if isinstance(role, str) and role and role not in self.roles.setdefault(host, []):
            self.roles[host].append(role)
        task = str(data.get("task") or "")
        res = data.get("res") or {}
        if kind == "runner_on_ok":
            self.ok[host] = self.ok.get(host, 0) + 1
            if isinstance(res, Mapping) and res.get("changed"):
                tasks = self.changed.setdefault(host, [])
                if task not in tasks:
                    tasks.append(task)
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            msg = failure_message(res) if isinstance(res, Mapping) else ""
            self.failed.setdefault(host, []).append(f"{task}: {msg}".rstrip(": "))
        elif kind == "runner_on_unreachable":
            self.unreachable[host] = self.unreachable.get(host, 0) + 1
            msg = str(res.get("msg", "")) if isinstance(res, Mapping) else ""
            self.lost.setdefault(host, []).append(f"{task}: {unreachable_message(msg)}")
        elif kind == "runner_on_skipped":
            self.skipped[host] = self.skipped.get(host, 0) + 1

    def stats(self, hosts: Sequence[str]) -> dict[str, HostApplyStats]:
        out: dict[str, HostApplyStats] = {}
        for h in hosts:
            failed_tasks = tuple(self.failed.get(h, []))
            failed, unreachable = len(failed_tasks), self.unreachable.get(h, 0)
            if "failures" in self.final:
                failed = self.final["failures"].get(h, 0)
                unreachable = self.final.get("dark", {}).get(h, 0)
                if failed == 0:
                    failed_tasks = ()  # every failure was rescued
            if unreachable:
                failed_tasks += tuple(self.lost.get(h, []))
            out[h] = HostApplyStats(
                ok=self.ok.get(h, 0),
                changed=len(self.changed.get(h, [])),
                failed=failed,
                unreachable=unreachable,
                skipped=self.skipped.get(h, 0),
                changed_tasks=tuple(self.changed.get(h, [])),
                failed_tasks=failed_tasks,
                rescued=self.final.get("rescued", {}).get(h, 0),
                touched=h in self.seen,
                roles=tuple(self.roles.get(h, [])),
            )
        return out


def artifacts_root(given: str | Path | None = None) -> Path:
    """Where run directories go: --artifacts-dir, else $GPUPROV_ARTIFACTS_DIR, else
    ./artifacts."""
    if given:
        return Path(given).expanduser()
    env = os.environ.get(ARTIFACTS_ENV)
    return Path(env).expanduser() if env else ARTIFACTS


def _keep() -> int:
    text = os.environ.get(KEEP_ENV, "")
    return int(text) if text.isdigit() and int(text) > 0 else KEEP_RUNS


# Written into every run directory as it is made: rotation removes only folders that hold
# it, so a folder gpuprov did not make is never deleted, whatever its name (issue 48:
# `--artifacts-dir DIR` removed any `YYYYMMDDT...` folder of DIR beyond the newest 20).
RUN_MARKER = ".gpuprov-run"


def rotate(base: Path, keep: int) -> list[Path]:
    """Remove all but the newest `keep` run directories under `base` that gpuprov made (the
    RUN_MARKER file in them; names are UTC timestamps, so name order is age order); returns
    those removed. A link, a plain folder, a folder of an older gpuprov: never touched."""
    runs = sorted(
        (
            d
            for d in base.iterdir()
            if d.name[:8].isdigit()
            and "T" in d.name
            and not d.is_symlink()
            and d.is_dir()
            and (d / RUN_MARKER).is_file()
        ),
        key=lambda d: d.name,
    )
    gone = runs[: max(0, len(runs) - keep)]
    for d in gone:
        shutil.rmtree(d, ignore_errors=True)
    return gone


LAST_RUN_DIR: list[Path] = []  # this process's newest run directory (interrupt.py reads it)


# What apt and dpkg say when another process holds their lock (apt's "Could not get lock
# /var/lib/dpkg/lock-frontend. It is held by process N (apt-get)", dpkg's "dpkg frontend lock
# was locked by another process")
_DPKG_LOCKED = ("Could not get lock", "is locked by another process", "was locked by another")


def failure_message(res: Mapping[str, Any]) -> str:
    """A failed task's message: a loop's first failed item when Ansible says only "One or
    more items failed", and a held package manager lock named as such."""
    msg = str(res.get("msg", ""))
    items = res.get("results")
    if isinstance(items, list) and (not msg or msg.startswith("One or more items failed")):
        failed = [i for i in items if isinstance(i, Mapping) and i.get("failed")]
        if failed:
            first = failed[0]
            said = str(first.get("msg") or "") or str(first.get("stderr") or "")
            item = first.get("item")
            msg = f"item {item}: {said}" if item is not None else said
    text = " ".join(str(res.get(k, "")) for k in ("stderr", "stdout")) + " " + msg
    if any(marker in text for marker in _DPKG_LOCKED):
        line = next(
            (ln.strip() for ln in text.splitlines() if any(m in ln for m in _DPKG_LOCKED)), ""
        )
        return f"the package manager is locked by another process ({line[:200]}): {msg}"
    return msg


# ssh's words when the host went away under a run (a reboot, a crash, the network), and
# ansible-core's own when ssh exited 255 while a pipelined module ran (its ssh connection
# plugin, `_run`): the words a lab host's reboot mid-task gave (tests/lab/test_faults_lab.py)
_GONE = ("Connection refused", "Connection reset", "closed by remote host", "Broken pipe",
         "No route to host", "Connection timed out", "timed out",
         "Data could not be sent to remote host")  # fmt: skip


def unreachable_message(msg: str) -> str:
    first = msg.strip().splitlines()[0] if msg.strip() else "no answer"
    if any(w in msg for w in _GONE):
        return f"unreachable: {first} (the host went away mid-run: rebooting, down, or hung)"
    return f"unreachable: {first}"


def new_run_dir(base: Path | None = None, now: dt.datetime | None = None) -> Path:
    """`artifacts/<UTC timestamp>/` (0700), unique even for two runs in one second; older
    runs beyond the newest KEEP_RUNS ($GPUPROV_ARTIFACTS_KEEP) are removed."""
    base = artifacts_root() if base is None else base
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    run_dir = base / stamp
    n = 1
    while run_dir.exists():
        n += 1
        run_dir = base / f"{stamp}-{n}"
    try:
        run_dir.mkdir(parents=True, mode=0o700)
        (run_dir / RUN_MARKER).write_text(
            f"made by provision (pid {os.getpid()}) at {stamp}; rotation may remove this "
            "folder (GPUPROV_ARTIFACTS_KEEP)\n",
            encoding="utf-8",
        )
    except OSError as exc:  # checked before the run; the disk can still fill or vanish
        raise OutputError(
            f"the run's artifacts folder {run_dir} could not be made: {exc.strerror}",
            fix=f"free space or fix the permissions of {base}, or pass --artifacts-dir DIR",
        ) from exc
    with contextlib.suppress(OSError):
        rotate(base, _keep())
    LAST_RUN_DIR[:] = [run_dir.resolve()]
    return run_dir.resolve()


def _serial_ok(serial: str) -> bool:
    text = serial[:-1] if serial.endswith("%") else serial
    return text.isdigit() and int(text) > 0 and (not serial.endswith("%") or int(text) <= 100)


def check_options(serial: str | None, max_fail_percent: int | None) -> None:
    """Bad rollout options are bad input, found before any host is touched."""
    if serial is not None and not _serial_ok(serial):
        raise BadInputError(
            f"--serial {serial!r} is neither a host count nor a percentage",
            fix="pass --serial 2 or --serial 25%",
        )
    if max_fail_percent is not None and not 0 <= max_fail_percent <= 100:
        raise BadInputError(
            f"--max-fail-percent {max_fail_percent} is not within 0..100",
            fix="pass a percentage, e.g. --max-fail-percent 25",
        )


def ansible_options(args: Any, ask: Callable[[str], str] | None = None) -> AnsibleOptions:
    """The pass-through options of a parsed command line; -K and --ask-vault-pass ask once
    here, before any host is touched (`ask`: getpass by default)."""
    if ask is None:
        import getpass

        ask = getpass.getpass
    asker = ask

    def ask_once(prompt: str) -> str:
        try:
            return asker(prompt)
        except EOFError:  # no terminal and nothing on stdin
            option = "-K/--ask-become-pass" if "BECOME" in prompt else "--ask-vault-pass"
            raise BadInputError(
                f"{option}: no password could be read (no terminal, standard input closed)",
                fix="run it from a terminal, or give the password from a file "
                "(--vault-password-file FILE; the become password as a vault value)",
            ) from None

    def seq(name: str) -> tuple[str, ...]:
        return tuple(v for item in getattr(args, name, None) or () for v in [item] if v)

    forks = getattr(args, "forks", None)
    if forks is not None and forks < 1:
        raise BadInputError(f"--forks {forks} is not a positive number", fix="pass --forks 10")
    ask_vault = bool(getattr(args, "ask_vault_pass", False))
    return AnsibleOptions(
        tags=tuple(t for item in seq("tags") for t in item.split(",") if t),
        skip_tags=tuple(t for item in seq("skip_tags") for t in item.split(",") if t),
        extra_vars=seq("extra_vars"),
        vault_ids=seq("vault_id"),
        vault_password_files=seq("vault_password_file"),
        ask_vault_pass=ask_vault,
        become_password=ask_once("BECOME password: ")
        if getattr(args, "ask_become_pass", False)
        else None,
        vault_password=ask_once("Vault password: ") if ask_vault else None,
        forks=forks,
        diff=bool(getattr(args, "diff", False)),
    )


def run_playbook(
    *,
    inventories: Sequence[Path],
    hosts: Sequence[str],
    host_vars: Mapping[str, Mapping[str, object]],
    run_dir: Path,
    playbook: Path | None = None,  # None: playbooks/site.yml
    check: bool = False,
    serial: str | None = None,
    max_fail_percent: int | None = None,
    verbosity: int = 0,
    on_event: EventSink | None = None,
    tags: Sequence[str] = (),  # only these tags (and `always`); empty: every task
    options: AnsibleOptions | None = None,
    cwd: Path | None = None,  # where ansible-playbook runs (its ansible.cfg); None: here
    routes: Mapping[str, str] | None = None,  # host -> ansible_ssh_common_args (connection.py)
    echo: bool | None = None,  # print Ansible's output; None: with -v (never with --json)
    extra: Mapping[str, object] | None = None,  # provision's own extra variables (is_own_var)
) -> ApplyResult:
    """Run `playbook` on `hosts` (exact names) of `inventories`, each with its `host_vars`
    (the plan) above every variable the inventories set."""
    check_options(serial, max_fail_percent)
    if not hosts:
        raise BadInputError("no host to apply to", fix="check --limit and the plan's blockers")
    # Imported here: loading ansible-runner costs time that `provision plan` does not need.
    import ansible_runner

    plan_file = write_plan_document(run_dir, {h: host_vars[h] for h in hosts if h in host_vars})
    extravars: dict[str, object] = {k: v for k, v in (extra or {}).items() if is_own_var(k)}
    if serial is not None:
        extravars["gpuprov_serial"] = serial
    if max_fail_percent is not None:
        extravars["gpuprov_max_fail_percent"] = max_fail_percent
    cmdline = ["--check", "--diff"] if check else []
    cmdline += ["-e", f"@{plan_file}"]
    if tags:
        cmdline += ["--tags", ",".join(tags)]
    if extravars:
        cmdline += ["-e", json.dumps(extravars)]
    opts = options or AnsibleOptions()
    # the user's own options last: Ansible's -e later wins, as on its command line
    cmdline += [a for a in opts.cmdline() if not (check and a == "--diff")]
    tally = _Tally()

    def handle(event: Event) -> bool:
        tally.add(event)
        if on_event is not None:
            on_event(event)
        return True  # keep the event in the artifacts

    where = (cwd or Path.cwd()).resolve()
    # gpuprov's settings under the user's (ansiblecfg); host key checking always on: an
    # unknown host key is never accepted silently (ansible-runner turns it off otherwise).
    env = ansiblecfg.layered_env(os.environ, ansiblecfg.user_config(where))
    # ansible-runner starts ansible-playbook from PATH: use this environment's.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env[watchdog.PARENT_ENV] = str(os.getpid())
    stop = _Stop()
    try:
        with stop.owning_signals():
            runner = ansible_runner.run(
                private_data_dir=str(run_dir),
                artifact_dir=str(run_dir),
                ident="ansible",
                # relative paths in -e @file, --vault-id, ansible.cfg: as typed
                project_dir=str(where),
                # ansible-playbook under the watchdog, which stops its whole tree with the run
                binary=str(_watchdog_script(run_dir)),
                inventory=[str(Path(p).resolve()) for p in inventories]
                + ([str(_route_overlay(run_dir, routes))] if routes else []),
                limit=",".join(hosts),
                cmdline=shlex.join([*cmdline, str((playbook or SITE_PLAYBOOK).resolve())]),
                verbosity=verbosity or None,
                envvars=env,
                passwords=opts.passwords() or None,
                event_handler=handle,
                cancel_callback=stop.cancel,  # and so no ansible-runner signal handler
                suppress_env_files=True,
                # -v and more: Ansible's own output, at that verbosity (always in the artifacts)
                quiet=not (verbosity > 0 if echo is None else echo),
            )
    finally:
        scrub_command_file(run_dir / "ansible" / "command")
    if stop.signum is not None:
        raise Interrupted(stop.signum, run_dir)
    if runner.status not in ("successful", "failed"):
        raise HostError(
            f"ansible-playbook ended {runner.status} (rc {runner.rc})",
            fix=f"read {run_dir / 'ansible' / 'stdout'}",
        )
    if not tally.seen:  # a syntax error, an unknown role, no host matched
        stdout = run_dir / "ansible" / "stdout"
        tail = stdout.read_text(errors="replace")[-1500:] if stdout.exists() else ""
        raise HostError(
            f"ansible-playbook ran no task (rc {runner.rc}): {tail.strip()}",
            fix=f"read {stdout}",
        )
    return ApplyResult(
        hosts=tally.stats(hosts),
        status=runner.status,
        rc=runner.rc,
        artifact_dir=run_dir,
        check_mode=check,
        plan_file=plan_file,
    )


def _route_overlay(run_dir: Path, routes: Mapping[str, str]) -> Path:
    """An inventory source read after the user's: hosts behind a jump host get the same
    checked ProxyCommand detection uses (orchestrator/connection.py), as host variables, so
    every hop's key is checked against the inventory's known-hosts files here too."""
    overlay = run_dir / "routes.json"
    hosts = {
        h: {"ansible_ssh_common_args": args, "ansible_ssh_extra_args": ""}
        for h, args in routes.items()
    }
    overlay.write_text(json.dumps({"all": {"hosts": hosts}}, indent=1), encoding="utf-8")
    return overlay


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped a run; Ansible's process tree has ended (exit 130)."""

    def __init__(self, signum: int, run_dir: Path) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum, self.run_dir = signum, run_dir


def _watchdog_script(run_dir: Path) -> Path:
    """ansible-runner's `binary`: ansible-playbook under orchestrator/watchdog.py."""
    script = run_dir / "ansible-playbook"
    command = run_dir / "ansible" / "command"
    script.write_text(
        "#!/bin/sh\n"
        f"exec {shlex.quote(sys.executable)} -m orchestrator.watchdog {shlex.quote(str(command))}"
        ' -- ansible-playbook "$@"\n',
        encoding="utf-8",
    )
    script.chmod(0o700)
    return script


def _watchdogs() -> list[int]:
    """This process's children that are a run's watchdog."""
    out = []
    me = str(os.getpid())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(errors="replace").rpartition(")")[2].split()
            ours = len(stat) > 1 and stat[1] == me
            if ours and b"orchestrator.watchdog" in (entry / "cmdline").read_bytes():
                out.append(int(entry.name))
        except OSError:
            continue
    return out


@dataclass
class _Stop:
    """SIGINT/SIGTERM during a run: the watchdog is told at once (SIGTERM: it stops Ansible's
    tree and exits); ansible-runner, polling `cancel`, is told to kill only if the watchdog
    has not ended well after its grace time."""

    signum: int | None = None
    at: float = 0.0
    told: bool = False

    def _tell(self) -> None:
        for pid in _watchdogs():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
                self.told = True

    def handler(self, signum: int, _frame: object) -> None:
        if self.signum is None:
            self.signum, self.at = signum, time.monotonic()
        self._tell()  # a second signal: the watchdog skips its grace time

    def cancel(self) -> bool:
        if self.signum is None:
            return False
        if not self.told:
            self._tell()  # the signal came before the watchdog had started
        return time.monotonic() - self.at > watchdog.GRACE_S + 20

    @contextlib.contextmanager
    def owning_signals(self) -> Any:
        import threading

        if threading.current_thread() is not threading.main_thread():
            yield
            return
        before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in before:
            signal.signal(s, self.handler)
        try:
            yield
        finally:
            for s, h in before.items():
                signal.signal(s, h)
