"""Detection: run the probe on every host in parallel and return each host's raw outputs.

One SSH round-trip per host (Fabric over paramiko): `sh -s` with probe.sh on stdin. Host keys
are checked against the inventory's known-hosts files and an unknown or changed key is a host
error (RejectPolicy: never accepted silently). A host behind a jump host or a proxy command
(ansible_ssh_common_args / ansible_ssh_extra_args, or a ProxyJump in ~/.ssh/config) is probed
through OpenSSH with the command line of orchestrator/connection.py, still in one round-trip,
every hop's key checked the same way (Fabric's own gateway would accept an unknown jump-host
key). `ansible_connection=local` runs the probe here
in a subprocess. A host that fails is reported with the reason and the fix; the others go on.
Nothing is printed except an optional progress bar on a TTY: the caller renders results.

Become (ansible_become): the probe runs through `sudo -n`; with a become password (inventory,
vault or -K) the probe goes through OpenSSH (or the local shell) with sudo's prompt answered on
the channel's standard input (orchestrator/connection.py): still one SSH session per host.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import logging
import os
import shlex
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from . import connection
from .errors import HostError
from .inventory import Inventory, InventoryHost
from .probe import probe_script, split_output

CONNECT_TIMEOUT_S = 10

# paramiko logs a dropped connection with a traceback from its transport thread; the host's
# error (one line, from _ssh_error) is what the user needs. A handler keeps Python's
# last-resort handler from printing those records to stderr.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
PROBE_TIMEOUT_S = 180
MAX_PARALLEL = 64


@dataclass(frozen=True)
class HostDetection:
    host: str
    raw: dict[str, str] | None  # file name -> text; None when detection failed
    error: HostError | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class DetectResult:
    hosts: tuple[HostDetection, ...]  # in inventory order
    seconds: float

    @property
    def raw(self) -> dict[str, dict[str, str]]:
        """Raw outputs of the hosts that answered (what `factsdir.save_dir` takes)."""
        return {h.host: h.raw for h in self.hosts if h.raw is not None}

    @property
    def failed(self) -> dict[str, HostError]:
        return {h.host: h.error for h in self.hosts if h.error is not None}


def probe_command(
    host: InventoryHost, become: connection.Become | None = None, *, record: bool = False
) -> list[str]:
    """The probe's command on the host: `sh -s` (`sh -s record`: also what no parser reads,
    for `detect --save`), through sudo where the host becomes."""
    command = ("sh", "-s", "record") if record else ("sh", "-s")
    return connection.become_words(become or connection.become_of(host), command)


_NO_PASSWORD_FIX = (
    "with ansible_become, give the sudo password (ansible_become_password, from vault, or -K) "
    "or allow passwordless sudo; otherwise run `sh -s < orchestrator/probe.sh` there by hand "
    "to see why"
)


def _probe_become(
    argv: list[str], host: InventoryHost, become: connection.Become, timeout: float
) -> subprocess.CompletedProcess[str]:
    """`argv` with sudo's prompt answered first (connection.become_handshake), then the probe
    on its standard input; one process, one SSH session."""
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = connection.become_handshake(
            proc, become, host.name, min(timeout, connection.BECOME_TIMEOUT_S)
        )
    except connection.ChannelClosed as exc:
        return subprocess.CompletedProcess(argv, 255, "", exc.stderr)
    try:
        more, more_err = proc.communicate(
            probe_script().encode(), timeout=max(1.0, timeout - (time.monotonic() - start))
        )
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.wait()
        raise HostError(
            f"the probe ran longer than {timeout:.0f} s",
            host=host.name,
            fix="look for a hung nvidia-smi (a GPU in a bad state) on the host",
        ) from exc
    text = (out + more).decode(errors="replace")
    return subprocess.CompletedProcess(
        argv, proc.returncode, text, (err + more_err).decode(errors="replace")
    )


def _probe_process(
    argv: list[str], host: InventoryHost, timeout: float, become: connection.Become | None = None
) -> subprocess.CompletedProcess[str]:
    """The probe script fed to `argv`'s standard input (a local shell, or OpenSSH's ssh)."""
    if become is not None and become.password is not None:
        return _probe_become(argv, host, become, timeout)
    try:
        return subprocess.run(
            argv,
            input=probe_script(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise HostError(
            f"the probe ran longer than {timeout:.0f} s",
            host=host.name,
            fix="look for a hung nvidia-smi (a GPU in a bad state) on the host",
        ) from exc


def _run_local(host: InventoryHost, timeout: float, record: bool) -> str:
    become = connection.become_of(host)
    done = _probe_process(probe_command(host, become, record=record), host, timeout, become)
    if done.returncode != 0:
        raise HostError(
            f"the probe exited {done.returncode}: {done.stderr.strip()[:300]}",
            host=host.name,
            fix=_NO_PASSWORD_FIX
            if become
            else "run `sh -s < orchestrator/probe.sh` there by hand to see why",
        )
    return done.stdout


def fingerprint(key: Any) -> str:
    """A host key's fingerprint as `ssh-keygen -l` and ssh's prompts show it (SHA256:...)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class UnknownHostKey(Exception):
    """Raised by the host-key policy: the server offered a key no known-hosts file holds."""

    def __init__(self, hostname: str, key: Any) -> None:
        super().__init__(f"{hostname}: unknown host key {key.get_name()} {fingerprint(key)}")
        self.key = key


def _reject_unknown() -> Any:
    """paramiko's RejectPolicy, keeping the offered key so the message can show it."""
    import paramiko

    class _Reject(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]  # paramiko is untyped
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            raise UnknownHostKey(hostname, key)

    return _Reject()


_SILENT = ("Error reading SSH protocol banner", "No existing session")
_DROPPED = ("SSH session not active", "Connection reset", "Socket is closed", "EOF")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _ssh_error(host: InventoryHost, exc: BaseException) -> HostError:
    import paramiko
    from paramiko.ssh_exception import NoValidConnectionsError

    where = f"{host.address}:{host.port}"
    scan_target = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
    files = ", ".join(host.known_hosts)
    if isinstance(exc, paramiko.BadHostKeyException):
        return HostError(
            f"host key of {where} does not match the one in {files} "
            f"(offered {exc.key.get_name()} {fingerprint(exc.key)}): the host was "
            "reinstalled, or someone is in the middle",
            host=host.name,
            fix=f"verify the new key out of band, then `ssh-keygen -R '{scan_target}'` "
            "and add the new one",
        )
    if isinstance(exc, UnknownHostKey) or (
        isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in str(exc)
    ):
        offered = (
            f" (offered {exc.key.get_name()} {fingerprint(exc.key)})"
            if isinstance(exc, UnknownHostKey)
            else ""
        )
        return HostError(
            f"host key of {where} is unknown{offered}: not in {files}; gpuprov never accepts "
            "an unknown key",
            host=host.name,
            fix=f"verify its fingerprint, then `ssh-keyscan -p {host.port} {host.address} "
            f">> {host.known_hosts[0]}` (or ssh there once by hand)",
        )
    if isinstance(exc, NoValidConnectionsError):
        errnos = {getattr(e, "errno", None) for e in exc.errors.values()}
        if errnos <= {errno.ECONNREFUSED}:
            return HostError(
                f"unreachable: connection refused by {where}: nothing listens on port {host.port}",
                host=host.name,
                fix="check that sshd runs there and ansible_port is its port",
            )
    if isinstance(exc, socket.timeout | TimeoutError):
        return HostError(
            f"unreachable: connecting to {where} timed out",
            host=host.name,
            fix=f"check ansible_host, the route, and that no firewall drops port {host.port}",
        )
    text = str(exc)
    if isinstance(exc, paramiko.SSHException) and any(s in text for s in _SILENT):
        return HostError(
            f"no SSH server answered on {where}: the port accepts connections but sent no "
            "SSH greeting (not sshd, a firewall holding the connection, or sshd overloaded)",
            host=host.name,
            fix=f"check that port {host.port} is sshd's (ansible_port), e.g. `nc {host.address} "
            f"{host.port}` should print SSH-2.0-...",
        )
    if isinstance(exc, EOFError | ConnectionResetError | BrokenPipeError) or (
        isinstance(exc, paramiko.SSHException) and any(s in text for s in _DROPPED)
    ):
        return HostError(
            f"the SSH connection to {where} was dropped ({_first_line(exc)})",
            host=host.name,
            fix="check the host's sshd log (MaxStartups, a crash) and the network; "
            "then run detect again",
        )
    if isinstance(exc, paramiko.AuthenticationException):
        return HostError(
            f"SSH authentication to {where} as {host.user or '(local user)'} failed"
            + (f" with key {host.key_file}" if host.key_file else ""),
            host=host.name,
            fix="check ansible_user and ansible_ssh_private_key_file for this host",
        )
    if isinstance(exc, NoValidConnectionsError | ConnectionError):
        return HostError(
            f"unreachable: {where}: {_first_line(exc)}",
            host=host.name,
            fix="check ansible_host/ansible_port, that sshd runs and that no firewall blocks it",
        )
    if isinstance(exc, socket.gaierror):
        return HostError(
            f"unreachable: cannot resolve {host.address}: {_first_line(exc)}",
            host=host.name,
            fix="fix ansible_host (a resolvable name or an address)",
        )
    return HostError(
        f"SSH to {where} failed: {type(exc).__name__}: {_first_line(exc)}",
        host=host.name,
        fix="try `ssh` to the host by hand with the same user, port and key",
    )


def _exec(conn: Any, command: str, stdin: str, timeout: float) -> tuple[int, str, str]:
    """Run `command` on an open Fabric connection with `stdin` sent in one write.

    (Fabric's `run(in_stream=...)` feeds a StringIO byte by byte with a sleep between
    reads, 80 s for the probe: the channel is used directly instead.)
    """
    channel = conn.client.get_transport().open_session(timeout=timeout)
    try:
        channel.settimeout(timeout)
        channel.exec_command(command)
        channel.sendall(stdin.encode())
        channel.shutdown_write()
        stdout = channel.makefile("rb").read()
        stderr = channel.makefile_stderr("rb").read()
        status = channel.recv_exit_status()
    finally:
        channel.close()
    return status, stdout.decode(errors="replace"), stderr.decode(errors="replace")


def _private_key(host: InventoryHost, path: str) -> Any:
    """Load the key once (paramiko's key_filename path hides an auth failure behind a key
    format error: it retries the file as every key type)."""
    import paramiko

    try:
        return paramiko.PKey.from_path(path)
    except paramiko.PasswordRequiredException as exc:
        raise HostError(
            f"private key {host.key_file} is protected by a passphrase",
            host=host.name,
            fix="load it into ssh-agent and unset ansible_ssh_private_key_file, or use a key "
            "without a passphrase",
        ) from exc
    except (OSError, paramiko.SSHException, ValueError) as exc:
        raise HostError(
            f"private key {host.key_file} cannot be read: {exc}",
            host=host.name,
            fix="check ansible_ssh_private_key_file (path, permissions, OpenSSH/PEM format)",
        ) from exc


def _run_openssh(host: InventoryHost, connect_timeout: float, timeout: float, record: bool) -> str:
    """The probe through OpenSSH (jump hosts, proxy commands): one round-trip, -v so that a
    refused host key is named with its fingerprint."""
    argv = connection.ssh_argv(host, connect_timeout=connect_timeout, verbose=True)
    become = connection.become_of(host)
    try:
        done = _probe_process(
            [*argv, shlex.join(probe_command(host, become, record=record))], host, timeout, become
        )
    except FileNotFoundError as exc:
        raise HostError(
            "the ssh client is not installed here (a jump host needs OpenSSH's ssh)",
            host=host.name,
            fix="install openssh-client on this machine",
        ) from exc
    if done.returncode == 255:
        raise connection.ssh_failure(host, done.stderr)
    if done.returncode != 0:
        raise HostError(
            f"the probe exited {done.returncode}: "
            f"{connection.without_debug(done.stderr).strip()[:300]}",
            host=host.name,
            fix=_NO_PASSWORD_FIX,
        )
    return done.stdout


# One parse of each known-hosts file per version of it, for all the hosts of a run (and the
# runs after it in this process). paramiko's own load checks every line against the lines
# before it (O(lines^2)), and it ran once per connection: 500 fleet hosts with a 500-line
# file took detect_hosts() 57.8 CPU-s, 4.1 with one parse (docs/benchmarks.md).
_KNOWN_FILES: dict[tuple[str, int, int, int], Any] = {}
_KNOWN_LOCK = threading.Lock()


def _known_file(path: str) -> Any | None:
    """paramiko's HostKeys of one file (None: no such regular file); an unreadable file raises the
    reason as ValueError for each host that reads it."""
    import paramiko
    from paramiko.hostkeys import InvalidHostKey

    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):  # as before: only a regular file is read
        return None
    version = (path, st.st_ino, st.st_size, st.st_mtime_ns)
    with _KNOWN_LOCK:
        known = _KNOWN_FILES.get(version)
        if known is None:
            known = paramiko.HostKeys()
            try:
                known.load(path)
            except (OSError, paramiko.SSHException, InvalidHostKey, ValueError) as exc:
                known = ValueError(str(exc) or type(exc).__name__)
            for stale in [v for v in _KNOWN_FILES if v[0] == path]:
                del _KNOWN_FILES[stale]
            _KNOWN_FILES[version] = known
    if isinstance(known, ValueError):
        raise known
    return known


def _trust_known_keys(host: InventoryHost, address: str, port: int, into: Any) -> None:
    """The keys the inventory's known-hosts files hold for the host, added to `into` (the
    client's HostKeys) under the name paramiko's connect looks up: `address`, or
    `[address]:port` off port 22 (as Fabric resolved them: ~/.ssh/config's HostName and
    Port count); the first key of each type in file order, as paramiko's load of all the
    files gives them (its connect prefers the first type listed)."""
    name = address if port == 22 else f"[{address}]:{port}"
    seen: set[str] = set()
    for path in host.known_hosts:
        try:
            known = _known_file(path)
        except ValueError as exc:
            raise HostError(
                f"known-hosts file {path} cannot be read: {exc}",
                host=host.name,
                fix=f"fix or remove the broken line in {path}",
            ) from exc
        found = known.lookup(name) if known is not None else None
        if found is None:
            continue
        for keytype in found:
            if keytype not in seen:
                seen.add(keytype)
                into.add(name, keytype, found[keytype])


def _run_ssh(host: InventoryHost, connect_timeout: float, timeout: float, record: bool) -> str:
    from fabric import Connection

    connect_kwargs: dict[str, Any] = {}
    if host.key_file:
        # like ssh -i with IdentitiesOnly: the inventory's key, not whatever lies in ~/.ssh
        connect_kwargs.update(pkey=_private_key(host, host.key_file), look_for_keys=False)
    # a port that accepts but never greets must fail as fast as one that refuses
    connect_kwargs.update(banner_timeout=connect_timeout, auth_timeout=connect_timeout)
    conn = Connection(
        host=host.address,
        user=host.user,
        port=host.port,
        connect_timeout=int(connect_timeout),
        connect_kwargs=connect_kwargs,
    )
    if conn.gateway:
        # a ProxyJump/ProxyCommand from ~/.ssh/config: Fabric's gateway connection would
        # accept an unknown jump-host key; OpenSSH with every hop checked instead
        return _run_openssh(host, connect_timeout, timeout, record)
    # Fabric accepts unknown keys by default (AutoAddPolicy): gpuprov never does.
    conn.client.set_missing_host_key_policy(_reject_unknown())
    _trust_known_keys(host, conn.host, conn.port, conn.client.get_host_keys())
    try:
        conn.open()
        command = " ".join(probe_command(host, record=record))
        status, stdout, stderr = _exec(conn, command, probe_script(), timeout)
    except TimeoutError as exc:
        if conn.is_connected:
            raise HostError(
                f"the probe ran longer than {timeout:.0f} s",
                host=host.name,
                fix="look for a hung nvidia-smi (a GPU in a bad state) on the host",
            ) from exc
        raise _ssh_error(host, exc) from exc
    except Exception as exc:
        raise _ssh_error(host, exc) from exc
    finally:
        conn.close()
    if status != 0:
        raise HostError(
            f"the probe exited {status}: {stderr.strip()[:300]}",
            host=host.name,
            fix=_NO_PASSWORD_FIX,
        )
    return stdout


def _answers_sudo(host: InventoryHost) -> bool:
    become = connection.become_of(host)
    return become is not None and become.password is not None


def detect_host(
    host: InventoryHost,
    *,
    connect_timeout: float = CONNECT_TIMEOUT_S,
    timeout: float = PROBE_TIMEOUT_S,
    record: bool = False,
) -> HostDetection:
    """`record`: the probe also captures what no parser reads (`detect --save`)."""
    start = time.monotonic()
    try:
        if host.connection == "local":
            stdout = _run_local(host, timeout, record)
        elif connection.proxied(host) or _answers_sudo(host):
            # a jump host, a proxy command, or sudo's prompt to answer: through OpenSSH
            stdout = _run_openssh(host, connect_timeout, timeout, record)
        else:
            stdout = _run_ssh(host, connect_timeout, timeout, record)
        raw = split_output(host.name, stdout)
    except HostError as exc:
        return HostDetection(host.name, None, exc, time.monotonic() - start)
    return HostDetection(host.name, raw, None, time.monotonic() - start)


def detect_hosts(
    inventory: Inventory,
    *,
    parallel: int = MAX_PARALLEL,
    connect_timeout: float = CONNECT_TIMEOUT_S,
    timeout: float = PROBE_TIMEOUT_S,
    progress: bool | None = None,
    on_host: Callable[[HostDetection], None] | None = None,
    record: bool = False,
) -> DetectResult:
    """Probe every host of the inventory at once; `on_host` is called as each one finishes.

    `progress`: show a rich progress bar on stderr; None = only when stderr is a TTY.
    """
    start = time.monotonic()
    hosts = inventory.hosts
    done: dict[str, HostDetection] = {}
    show = sys.stderr.isatty() if progress is None else progress
    progress_bar: Any = None
    if show:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        from .terminal import new_console

        progress_bar = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=new_console(stderr=True),
            transient=True,
        )
        progress_bar.start()
        task = progress_bar.add_task("detecting", total=len(hosts))
    pool = ThreadPoolExecutor(max_workers=max(1, min(parallel, len(hosts))))
    finished = False
    try:
        futures = [
            pool.submit(
                detect_host, h, connect_timeout=connect_timeout, timeout=timeout, record=record
            )
            for h in hosts
        ]
        for future in as_completed(futures):
            result = future.result()
            done[result.host] = result
            if progress_bar is not None:
                progress_bar.update(task, advance=1, description=f"detecting ({result.host})")
            if on_host is not None:
                on_host(result)
        finished = True
    finally:
        # Ctrl-C: do not wait for the probes still running (up to the probe timeout); they
        # only read, and the process is about to exit
        pool.shutdown(wait=finished, cancel_futures=not finished)
        if progress_bar is not None:
            progress_bar.stop()
    return DetectResult(tuple(done[h.name] for h in hosts), time.monotonic() - start)
