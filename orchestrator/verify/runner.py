"""Run the verification suite with pytest + testinfra and fold its JUnit XML into results.

`provision verify` runs it over one session per host (orchestrator/verify/backend.py), the
hosts dealt into a few pytest processes; `suite_command` is the command line to run the suite
by hand with testinfra's own ansible backend."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import HostError
from ..inventory import InventoryHost
from ..plandoc import write_plan_document
from ..result import CheckResult, Status

SUITE = Path(__file__).resolve().parent / "suite"
HOSTS_PER_PROCESS = 8
MAX_PROCESSES = 16
VERIFY_FD = "GPUPROV_VERIFY_FD"  # suite/conftest.py reads the hosts from this pipe
SCHEME = "gpuprov"  # the suite's hosts under provision verify (orchestrator/verify/backend.py)


@dataclass(frozen=True)
class VerifyRun:
    """Per-host results of one suite run, and where its JUnit XML lies."""

    results: Mapping[str, tuple[CheckResult, ...]]
    junit: Path
    returncode: int


def suite_command(
    inventory: Path | None,
    pattern: str | Sequence[str],
    junit: Path,
    plan_file: Path | None,
    workers: int,
) -> list[str]:
    """The pytest command line; also what a user runs to use the suite directly. `pattern`:
    an Ansible host pattern, or a list of host names (each its own testinfra host)."""
    names = [pattern] if isinstance(pattern, str) else list(pattern)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(SUITE),
        "-p",
        "no:cacheprovider",
        "-q",
        "-rfEs",
        "--hosts=" + ",".join(f"ansible://{n}" for n in names),
        f"--junitxml={junit}",
        "-o",
        "junit_family=xunit2",
    ]
    if inventory is not None:  # None: several sources, in ANSIBLE_INVENTORY (run_suite)
        cmd.insert(cmd.index(f"--junitxml={junit}"), f"--ansible-inventory={inventory}")
    if plan_file is not None:
        cmd.append(f"--gpuprov-plan={plan_file}")
    if workers > 1:
        cmd += ["-n", str(workers)]
    return cmd


def processes_for(host_count: int, cpus: int | None = None) -> int:
    """pytest processes for `host_count` hosts: one per HOSTS_PER_PROCESS hosts (each host's
    checks wait on its session more than they compute), at most one per CPU, 1 at least."""
    cpu = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(1, min(math.ceil(host_count / HOSTS_PER_PROCESS), cpu, MAX_PROCESSES))


def shards(names: Sequence[str], count: int) -> list[list[str]]:
    """`names` dealt round-robin into `count` non-empty groups (the inventory order kept
    within each)."""
    groups: list[list[str]] = [[] for _round in range(max(1, min(count, len(names))))]
    for i, name in enumerate(names):
        groups[i % len(groups)].append(name)
    return [g for g in groups if g]


def _spec(host: InventoryHost) -> dict[str, Any]:
    return {"host": asdict(host), "vars": dict(host.vars)}


@dataclass
class _Shard:
    hosts: list[str]
    junit: Path
    failed: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    pipe: int = -1  # the write end: the second message (which hosts, which plan) goes here
    writer: threading.Thread | None = None  # the last message's writer


class SuiteRun:
    """The suite's pytest processes, started before the plan is known.

    `start_suite` starts them with the hosts that may be verified: each process starts
    Python, imports pytest, testinfra and the suite and collects its tests while the caller
    detects and plans. `finish` then tells them which of those hosts to verify and with
    which plan document; each opens its hosts' sessions and runs their checks."""

    def __init__(self, junit: Path) -> None:
        self._shards: list[_Shard] = []
        self.junit = junit

    def finish(
        self, keep: Sequence[str], plan: Path | None = None, into: Path | None = None
    ) -> VerifyRun:
        """Verify the hosts of `keep` (the others get no result) against the plan document
        `plan` (None: the inventory's variables); wait for the suite. `into`: the folder for
        the merged `verify-junit.xml` (default: the processes' own)."""
        wanted = set(keep)
        if into is not None:
            self.junit = into / self.junit.name
        try:
            for shard in self._shards:
                message: dict[str, Any] = {"keep": [h for h in shard.hosts if h in wanted]}
                if plan is not None:
                    message["plan"] = str(plan)
                _send(shard, message)
            codes = [s.proc.wait() for s in self._shards if s.proc is not None]
        except BaseException:  # Ctrl-C, a signal: nothing of the suite outlives provision
            for shard in self._shards:
                if shard.proc is not None and shard.proc.poll() is None:
                    shard.proc.kill()
                    shard.proc.wait()
            raise
        for shard in self._shards:
            if shard.writer is not None:
                shard.writer.join(timeout=10)
        return self._results(wanted, codes, plan)

    def cancel(self) -> None:
        """End what still runs: a process told nothing sees its pipe close and ends with no
        host verified; one that does not, within 10 s, is killed."""
        for shard in self._shards:
            _send(shard, None)
        for shard in self._shards:
            if shard.writer is not None:
                shard.writer.join(timeout=10)
            if shard.proc is not None and shard.proc.poll() is None:
                try:
                    shard.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    shard.proc.kill()
                    shard.proc.wait()

    def _results(self, wanted: set[str], codes: list[int], plan: Path | None) -> VerifyRun:
        failed: dict[str, dict[str, str | None]] = {}
        runs = [s for s in self._shards if any(h in wanted for h in s.hosts)]
        for r in runs:
            if r.failed.exists():
                failed.update(json.loads(r.failed.read_text("utf-8") or "{}"))
            kept = [h for h in r.hosts if h in wanted]
            if not r.junit.exists() and not all(h in failed for h in kept):
                tail = r.log.read_text("utf-8", errors="replace")[-2000:] if r.log.exists() else ""
                raise HostError(
                    f"the verification suite did not run for {', '.join(kept[:5])} "
                    f"(pytest exit {r.proc.returncode if r.proc else '?'}): {tail}",
                    fix="run the suite by hand to see why: "
                    + " ".join(suite_command(Path("INVENTORY"), kept[0], r.junit, plan, 1)),
                )
        documents = [r.junit.read_text("utf-8") for r in runs if r.junit.exists()]
        self.junit.write_text(merge_junit(documents))
        results = parse_junit(self.junit.read_text("utf-8"))
        for name, error in failed.items():
            results[name] = (
                CheckResult(
                    name="verify.connection",
                    status="fail",
                    value=None,
                    limit=None,
                    unit="",
                    diagnosis=str(error.get("message") or "")
                    + (f" (fix: {error['fix']})" if error.get("fix") else ""),
                ),
            )
        # pytest exit 5: nothing collected or all deselected (every host of the process
        # unreachable, named above, or none of its hosts kept)
        code = max((c for c in codes if c != 5), default=1 if failed else 0)
        return VerifyRun(results, self.junit, code)


def start_suite(
    hosts: Sequence[InventoryHost],
    workdir: Path,
    processes: int | None = None,
    *,
    open_early: bool = False,
) -> SuiteRun:
    """Start the suite's pytest processes for `hosts` (see `run_suite`); `SuiteRun.finish`
    says which of them to verify. `open_early`: each process opens its hosts' sessions as
    soon as it starts, while the caller detects and plans (`provision verify`: seconds
    before the checks); not before an apply, which may take minutes and reboot a host."""
    workdir.mkdir(parents=True, exist_ok=True)
    by_name = {h.name: h for h in hosts}
    count = processes if processes is not None else processes_for(len(hosts))
    env = dict(os.environ)
    env.pop(VERIFY_FD, None)
    # the suite needs testinfra only: no other installed pytest plugin loads (and costs)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    run = SuiteRun(workdir / "verify-junit.xml")
    try:
        for i, names in enumerate(shards(list(by_name), count)):
            shard = _Shard(
                names,
                workdir / f"verify-junit-{i}.xml",
                workdir / f"verify-failed-{i}.json",
                workdir / f"verify-{i}.log",
            )
            for stale in (shard.junit, shard.failed):
                stale.unlink(missing_ok=True)
            read_end, shard.pipe = os.pipe()
            run._shards.append(shard)  # from here, cancel() closes its pipe whatever fails
            cmd = shard_command(names, shard.junit, shard.failed)
            try:
                with shard.log.open("wb") as log:
                    shard.proc = subprocess.Popen(
                        cmd,
                        env={**env, VERIFY_FD: str(read_end)},
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        pass_fds=(read_end,),
                    )
            finally:
                os.close(read_end)
            first: dict[str, Any] = {"hosts": {n: _spec(by_name[n]) for n in names}}
            if open_early:
                first["open"] = True
            _send(shard, first)
    except BaseException:
        run.cancel()
        raise
    return run


def run_suite(
    hosts: Sequence[InventoryHost],
    workdir: Path,
    plan_file: Path | None = None,
    processes: int | None = None,
) -> VerifyRun:
    """Run the suite against `hosts`; returns results per host.

    Each host is reached as detection and validation reach it (orchestrator/connection.py,
    through orchestrator/session.py: one session per host for all its checks; become with a
    password answered once). The hosts are dealt into `processes` pytest processes (default
    `processes_for`), each opening its hosts' sessions side by side; what each process needs
    (the hosts, their variables, become passwords; then which hosts to check and the plan)
    goes to it over an inherited pipe. Their JUnit files are merged into one,
    `verify-junit.xml`. `plan_file`: the plan document (orchestrator/plandoc.py) the hosts
    were applied with; None: the inventory's variables. A host whose session cannot be
    opened has one result, `verify.connection`, with why."""
    return start_suite(hosts, workdir, processes).finish([h.name for h in hosts], plan_file)


def _send(shard: _Shard, message: Mapping[str, Any] | None) -> None:
    """One JSON line to the shard's pipe, after the ones before it: the first says which
    hosts it may be given, the second (which ends the pipe) which of them to verify and the
    plan; None ends the pipe with nothing more. A process that has ended reads nothing."""
    if shard.pipe < 0:
        return
    last = message is None or "keep" in message
    data = b"" if message is None else json.dumps(message, default=str).encode() + b"\n"
    fd, shard.pipe = shard.pipe, (-1 if last else shard.pipe)
    shard.writer = threading.Thread(target=_write, args=(fd, data, last, shard.writer), daemon=True)
    shard.writer.start()


def _write(fd: int, data: bytes, close: bool, after: threading.Thread | None) -> None:
    if after is not None:
        after.join()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:  # the process ended (it failed, or was told to end): nothing to tell
        pass
    finally:
        if close:
            os.close(fd)


def shard_command(hosts: Sequence[str], junit: Path, failed: Path) -> list[str]:
    """One pytest process of `provision verify`: its hosts on the session backend (the plan
    document comes over its pipe, `SuiteRun.finish`)."""
    return [
        sys.executable,
        "-m",
        "pytest",
        str(SUITE),
        "-p",
        "testinfra.plugin",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rfEs",
        # one line per failure (where, and the check's message): pytest's long form writes
        # each failure's source and looks through every report for its teardown, which grows
        # with failures x tests (cProfile of one process of 400 fleet hosts, 9 failed checks
        # each: 75 s of 171); the JUnit keeps the check's message ("E   AssertionError: ...")
        "--tb=line",
        "--hosts=" + ",".join(f"{SCHEME}://{h}" for h in hosts),
        f"--junitxml={junit}",
        "-o",
        "junit_family=xunit2",
        f"--gpuprov-failed={failed}",
    ]


def merge_junit(documents: Sequence[str]) -> str:
    """Several pytest JUnit documents -> one, their test cases under one test suite (the
    counts and times summed), as one pytest process writes it."""
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name="pytest")
    totals = dict.fromkeys(("errors", "failures", "skipped", "tests"), 0)
    seconds = 0.0
    for text in documents:
        for part in ET.fromstring(text).iter("testsuite"):
            for key in totals:
                totals[key] += int(part.get(key, "0") or 0)
            seconds = max(seconds, float(part.get("time", "0") or 0))
            suite.extend(part.findall("testcase"))
            if "timestamp" in part.attrib and "timestamp" not in suite.attrib:
                suite.set("timestamp", part.attrib["timestamp"])
            if "hostname" in part.attrib:
                suite.set("hostname", part.attrib["hostname"])
    for key, value in totals.items():
        suite.set(key, str(value))
    suite.set("time", f"{seconds:.3f}")
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def _host_and_name(testcase: ET.Element) -> tuple[str, str]:
    """'test_x[ansible://node-1]' -> ('node-1', 'x'); 'test_x[local://]' -> ('local', 'x')."""
    name = testcase.get("name", "")
    base, _sep, param = name.partition("[")
    param = param.rstrip("]")
    scheme, _sep, rest = param.partition("://")
    host = rest if _sep else param
    return host or scheme or "?", base.removeprefix("test_")


def parse_junit(xml_text: str) -> dict[str, tuple[CheckResult, ...]]:
    """JUnit XML of the suite -> {host: (CheckResult, ...)} in test order."""
    root = ET.fromstring(xml_text)
    per_host: dict[str, list[CheckResult]] = {}
    for case in root.iter("testcase"):
        host, name = _host_and_name(case)
        status: Status = "pass"
        diagnosis = ""
        outcomes: tuple[tuple[str, Status], ...] = (
            ("failure", "fail"),
            ("error", "fail"),
            ("skipped", "skip"),
        )
        for tag, mapped in outcomes:
            el = case.find(tag)
            if el is not None:
                status = mapped
                diagnosis = _message(el)
                break
        per_host.setdefault(host, []).append(
            CheckResult(
                name=f"verify.{name}",
                status=status,
                value=None,
                limit=None,
                unit="",
                diagnosis=diagnosis,
                seconds=_seconds(case.get("time")),
            )
        )
    return {h: tuple(r) for h, r in per_host.items()}


def _seconds(text: str | None) -> float | None:
    """pytest's testcase `time` (setup, call and teardown), None when absent or unreadable."""
    try:
        return round(float(text), 3) if text else None
    except ValueError:
        return None


def _message(el: ET.Element) -> str:
    """The assertion's own message: the first 'AssertionError: ...' line, else the summary."""
    message = el.get("message", "") or ""
    text = el.text or ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("E ") and "AssertionError:" in stripped:
            return stripped.split("AssertionError:", 1)[1].strip()
    first = message.splitlines()[0] if message else ""
    for prefix in ("AssertionError: ", "Skipped: ", "Failed: "):
        first = first.removeprefix(prefix)
    return first.strip()


def passed(results: Sequence[CheckResult]) -> bool:
    return all(r.status != "fail" for r in results)


def run_ansible_suites(
    plans: Mapping[str, Mapping[str, Any]],
    env: Mapping[str, str],
    timeout: float,
    processes: int | None = None,
) -> tuple[dict[str, tuple[CheckResult, ...]], str]:
    """The suite through testinfra's Ansible backend (gpuprov.nvidia.verify) for every host of
    `plans` ({host: plan-document entry}) against one plan document, the hosts dealt into
    `processes` pytest processes run side by side (default `processes_for`, as `provision
    verify` deals them); ({host: checks}, the processes' output's tail). `env` carries the
    inventory (ANSIBLE_INVENTORY). A host missing from the result got no test case;
    subprocess.TimeoutExpired past `timeout` seconds (the processes killed)."""
    names = list(plans)
    count = processes if processes is not None else processes_for(len(names))
    with tempfile.TemporaryDirectory(prefix="gpuprov-verify-") as folder:
        work = Path(folder)
        plan = write_plan_document(work, {h: dict(v) for h, v in plans.items()})
        ssh_config = _reused_connections(work)
        running: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
        try:
            for i, group in enumerate(shards(names, count)):
                junit, log = work / f"junit-{i}.xml", work / f"suite-{i}.log"
                with log.open("wb") as out:  # a file, not a pipe: no process waits on a reader
                    proc = subprocess.Popen(
                        [*suite_command(None, group, junit, plan, 1), f"--ssh-config={ssh_config}"],
                        env=dict(env),
                        cwd=work,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                running.append((proc, junit, log))
            deadline = time.monotonic() + timeout
            for proc, _junit, _log in running:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:  # a timeout, a signal: nothing of the suite outlives the task
            for proc, _junit, _log in running:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        documents = [j.read_text("utf-8") for _proc, j, _log in running if j.exists()]
        tail = "".join(
            log.read_text("utf-8", errors="replace") for _proc, _j, log in running if log.exists()
        )[-2000:]
        if not documents:
            return {}, tail
        return parse_junit(merge_junit(documents)), tail


def _reused_connections(work: Path) -> Path:
    """An ssh_config for testinfra's ssh (pytest's --ssh-config: ssh -F) under which each
    host's commands share one connection, as Ansible's ssh connection shares its own
    (ControlPersist). testinfra gives ssh ControlMaster and ControlPersist but a ControlPath
    only from an ansible.cfg's control_path in its working directory, so each command was a
    new SSH handshake (100 fleet hosts: more than 7 minutes for the suite). The user's and the
    system's ssh configuration, which -F would leave out, are included; what they set first
    holds (ssh keeps the first value of an option)."""
    sockets = work / "cp"
    sockets.mkdir(mode=0o700)
    path = work / "ssh_config"
    path.write_text(
        "# gpuprov.nvidia.verify: one connection per host for its checks\n"
        "Include ~/.ssh/config\n"
        "Host *\n"
        "  ControlMaster auto\n"
        f"  ControlPath {sockets}/%C\n"
        "  ControlPersist 15s\n"
        "Include /etc/ssh/ssh_config\n",
        encoding="utf-8",
    )
    return path
