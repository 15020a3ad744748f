"""Run the verification suite with pytest + testinfra and fold its JUnit XML into results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BadInputError, HostError
from ..result import CheckResult, Status

if TYPE_CHECKING:
    from ..connection import Become
    from ..inventory import VaultOptions

SUITE = Path(__file__).resolve().parent / "suite"
MAX_WORKERS = 16


@dataclass(frozen=True)
class VerifyRun:
    """Per-host results of one suite run, and where its JUnit XML lies."""

    results: Mapping[str, tuple[CheckResult, ...]]
    junit: Path
    returncode: int


def workers_for(host_count: int, cpus: int | None = None) -> int:
    """pytest-xdist workers for `host_count` hosts: one per host, at most two per CPU (the
    checks wait on SSH more than they compute) and at most MAX_WORKERS; 1 runs in-process."""
    cpu = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(1, min(host_count, 2 * cpu, MAX_WORKERS))


def suite_command(
    inventory: Path | None,
    pattern: str,
    junit: Path,
    plan_file: Path | None,
    workers: int,
) -> list[str]:
    """The pytest command line; also what a user runs to use the suite directly."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(SUITE),
        "-p",
        "no:cacheprovider",
        "-q",
        "-rfEs",
        f"--hosts=ansible://{pattern}",
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


def routed_inventory(
    inventory: Path | Sequence[Path], routes: Mapping[str, str], workdir: Path
) -> Path | tuple[Path, ...]:
    """The inventory testinfra reads, with the hosts behind a jump host given the checked
    route of orchestrator/connection.py (as `provision apply` gives Ansible): a directory
    holding the user's inventory file, its group_vars/host_vars (links) and a routes file
    read after it. No routes, or an inventory that is a directory itself: `inventory`.
    Several sources (several -i): all of them, then the routes file, as a tuple (run_suite
    hands them to testinfra's ansible-inventory in ANSIBLE_INVENTORY, which merges them as
    ansible-playbook does, each with its own group_vars/host_vars)."""
    import json
    import shutil

    if not isinstance(inventory, Path):
        sources = tuple(Path(p).resolve() for p in inventory)
        if len(sources) == 1:
            return routed_inventory(sources[0], routes, workdir)
        if not routes:
            return sources
        workdir.mkdir(parents=True, exist_ok=True)
        overlay = workdir / "verify-routes.json"
        hosts = {
            h: {"ansible_ssh_common_args": a, "ansible_ssh_extra_args": ""}
            for h, a in routes.items()
        }
        overlay.write_text(json.dumps({"all": {"hosts": hosts}}), "utf-8")
        return (*sources, overlay)
    if not routes or inventory.is_dir():
        return inventory

    folder = workdir / "verify-inventory"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    source = inventory.resolve()
    (folder / f"00-{source.name}").symlink_to(source)
    for sub in ("group_vars", "host_vars"):
        if (source.parent / sub).is_dir():
            (folder / sub).symlink_to(source.parent / sub)
    hosts = {
        h: {"ansible_ssh_common_args": a, "ansible_ssh_extra_args": ""} for h, a in routes.items()
    }
    (folder / "zz-routes.json").write_text(json.dumps({"all": {"hosts": hosts}}), "utf-8")
    return folder


def run_suite(
    inventory: Path | Sequence[Path],
    pattern: str,
    workdir: Path,
    plan_file: Path | None = None,
    workers: int = 1,
    stream: bool = True,
    become: Mapping[str, Become] | None = None,
    vault: VaultOptions | None = None,
) -> VerifyRun:
    """Run the suite against the hosts matching `pattern`; returns results per host.

    `plan_file`: the plan document (orchestrator/plandoc.py) the hosts were applied with;
    None: the inventory's variables alone. `become`: host -> its sudo with a password, handed
    to the suite over an inherited pipe (suite/conftest.py). `vault`: its password files and
    vault ids go to testinfra's ansible-inventory (a password asked with --ask-vault-pass
    cannot: inline `!vault` values need none there, a vault-encrypted vars file does)."""
    workdir.mkdir(parents=True, exist_ok=True)
    junit = workdir / "verify-junit.xml"
    env = dict(os.environ)
    # testinfra calls ansible-inventory: use the one next to this interpreter.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if vault is not None and (vault.ids or vault.password_files):
        env["ANSIBLE_VAULT_IDENTITY_LIST"] = ",".join([*vault.ids, *vault.password_files])
    one: Path | None = inventory if isinstance(inventory, Path) else None
    if not isinstance(inventory, Path):
        # testinfra passes one -i to ansible-inventory; with none, it reads ANSIBLE_INVENTORY
        # (a comma-separated list: a path holding a comma cannot be one of several sources)
        listed = [str(Path(p).resolve()) for p in inventory]
        if any("," in p for p in listed):
            raise BadInputError(
                f"inventory {', '.join(listed)}: a path with a comma in its name cannot be "
                "one of several inventory sources (ANSIBLE_INVENTORY separates them by commas)",
                fix="rename the file or folder, or pass a single -i",
            )
        env["ANSIBLE_INVENTORY"] = ",".join(listed)
    cmd = suite_command(one, pattern, junit, plan_file, workers)
    fds: tuple[int, ...] = ()
    writer: threading.Thread | None = None
    if become:
        read_end, write_end = os.pipe()
        fds = (read_end,)
        env["GPUPROV_BECOME_FD"] = str(read_end)
        data = {
            h: {"user": b.user, "flags": list(b.flags), "password": b.password}
            for h, b in become.items()
        }

        def write() -> None:
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(json.dumps(data).encode())

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
    try:
        proc = subprocess.run(
            cmd,
            env=env,
            stdout=None if stream else subprocess.PIPE,
            stderr=subprocess.STDOUT if not stream else None,
            text=True,
            check=False,
            pass_fds=fds,
        )
    finally:
        for fd in fds:
            os.close(fd)
        if writer is not None:
            writer.join(timeout=5)
    if not junit.exists():
        detail = "" if stream else (proc.stdout or "")[-2000:]
        raise HostError(
            f"the verification suite did not run (pytest exit {proc.returncode}) {detail}",
            fix="run the command by hand to see why: " + " ".join(cmd),
        )
    return VerifyRun(parse_junit(junit.read_text()), junit, proc.returncode)


def _host_and_name(testcase: ET.Element) -> tuple[str, str]:
    """'test_x[ansible://node-1]' -> ('node-1', 'x'); 'test_x[local://]' -> ('local', 'x')."""
    name = testcase.get("name", "")
    base, _, param = name.partition("[")
    param = param.rstrip("]")
    scheme, _, rest = param.partition("://")
    host = rest if _ else param
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
            )
        )
    return {h: tuple(r) for h, r in per_host.items()}


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
