"""One shell per host, over one SSH connection, for many commands (what `provision verify` runs).

`open_session(host)` starts the host's shell once: OpenSSH's `ssh` with the command line of
orchestrator/connection.py (the inventory's user, port, key, known-hosts files, jump hosts and
proxy commands, every host key checked strictly), running `sh -s` through the host's become
(`sudo -n`, or `sudo -S` with the password answered once on the channel, as detection does).
`Session.run(command)` then writes the command to that shell and reads its exit status,
standard output and standard error back: no new connection, no new sudo, per command.

The framing: each command runs as `sh -c COMMAND </dev/null` (its own process, so `exit`, `cd`
or `set -e` in it cannot touch the session, and it cannot read the session's input); after it,
the shell prints a line with this session's random token and the exit status on stdout, and a
line with the token on stderr. Output is read until those lines, so commands may print
anything (binary, no final newline); a token is 128 random bits, never guessed by an output.

A host that cannot be reached, or whose sudo refuses, fails `open_session` with one
`HostError` naming the cause and the fix (connection.ssh_failure); a shell that dies later
fails the command with `SessionLost`.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import selectors
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, field

from . import connection
from .errors import HostError
from .inventory import InventoryHost

OPEN_TIMEOUT_S = 30  # connection, authentication and sudo's answer
COMMAND_TIMEOUT_S = 300  # one command (the suite's take well under a second)


class SessionLost(HostError):
    """The host's shell ended or stopped answering while a command ran."""


@dataclass(frozen=True)
class Output:
    rc: int
    stdout: bytes
    stderr: bytes


@dataclass
class Session:
    """A running shell on one host; `run` is safe from one thread at a time per session."""

    host: str
    proc: subprocess.Popen[bytes]
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    _out: bytes = b""
    _err: bytes = b""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _frame(self, command: str) -> bytes:
        t = self.token
        return (
            f"sh -c {shlex.quote(command)} </dev/null; "
            f"printf '\\n{t} %d\\n' $?; printf '\\n{t}\\n' >&2\n"
        ).encode()

    def run(self, command: str, timeout: float = COMMAND_TIMEOUT_S) -> Output:
        """`command` (a shell command line) on the host: its exit status and output."""
        with self._lock:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write(self._frame(command))
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                raise self._lost(f"the connection is gone ({exc.strerror or exc})") from exc
            return self._read(timeout)

    def _read(self, timeout: float) -> Output:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        end_out = re.compile(rb"\n" + self.token.encode() + rb" (\d+)\n")
        end_err = b"\n" + self.token.encode() + b"\n"
        deadline = time.monotonic() + timeout
        out_match: re.Match[bytes] | None = end_out.search(self._out)
        err_at = self._err.find(end_err)
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ, "out")
            selector.register(self.proc.stderr, selectors.EVENT_READ, "err")
            while out_match is None or err_at < 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.close(wait=0)  # the command hangs: the shell would wait for it
                    raise self._lost(f"a command ran longer than {timeout:.0f} s")
                for key, _unused in selector.select(left):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        raise self._lost(self._ended())
                    if key.data == "out":
                        self._out += chunk
                        out_match = out_match or end_out.search(self._out)
                    else:
                        self._err += chunk
                        err_at = err_at if err_at >= 0 else self._err.find(end_err)
        assert out_match is not None
        stdout, self._out = self._out[: out_match.start()], self._out[out_match.end() :]
        stderr, self._err = self._err[:err_at], self._err[err_at + len(end_err) :]
        return Output(int(out_match.group(1)), stdout, stderr)

    def _ended(self) -> str:
        code = self.proc.poll()
        if code is None:
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
        said = connection.without_debug(self._err.decode(errors="replace")).strip()
        last = said.splitlines()[-1][:300] if said else ""
        return f"the shell ended (exit {code})" + (f": {last}" if last else "")

    def _lost(self, why: str) -> SessionLost:
        return SessionLost(
            f"lost the connection during verification: {why}",
            host=self.host,
            fix="check that the host is up and sshd runs (a reboot, a network drop), then "
            "run verify again",
        )

    def close(self, wait: float = 5) -> None:
        """End the shell: its input closed, `wait` seconds for it to end, then killed."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def session_argv(host: InventoryHost, become: connection.Become | None) -> list[str]:
    """The command that starts the host's shell: local, or through `ssh`."""
    shell = connection.become_words(become, ("sh", "-s"))
    if host.connection == "local":
        return shell
    return [*connection.ssh_argv(host), shlex.join(shell)]


def open_session(
    host: InventoryHost,
    become: connection.Become | None = None,
    *,
    timeout: float = OPEN_TIMEOUT_S,
) -> Session:
    """Start the host's shell and check that it answers; HostError (one line) when it cannot
    (unreachable, a host key, authentication, sudo). `become`: default the host's own."""
    become = become if become is not None else connection.become_of(host)
    argv = session_argv(host, become)
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except FileNotFoundError as exc:
        raise HostError(
            "the ssh client is not installed here (verification needs OpenSSH's ssh)",
            host=host.name,
            fix="install openssh-client on this machine",
        ) from exc
    session = Session(host.name, proc)
    try:
        if become is not None and become.password is not None:
            session._out, session._err = connection.become_handshake(
                proc, become, host.name, min(timeout, connection.BECOME_TIMEOUT_S)
            )
        first = session.run("true", timeout=timeout)
    except connection.ChannelClosed:
        session.close()
        raise _diagnosed(host) from None
    except SessionLost as exc:
        session.close()
        raise _open_failure(host, become, proc.returncode, session._err) from exc
    except BaseException:
        session.close()
        raise
    if first.rc != 0:  # the shell ran `true` and it failed: cannot happen in a sane shell
        session.close()
        raise HostError(
            f"the host's shell does not work (`true` exited {first.rc})",
            host=host.name,
            fix="check the login shell of the user on the host",
        )
    return session


def _open_failure(
    host: InventoryHost, become: connection.Become | None, code: int | None, stderr: bytes
) -> HostError:
    text = stderr.decode(errors="replace")
    if code == 255 and host.connection != "local":
        return _diagnosed(host)
    said = connection.without_debug(text).strip()
    last = said.splitlines()[-1][:300] if said else f"exit {code}"
    if become is not None and "sudo" in said:
        return HostError(
            f"sudo to {become.user} failed: {last}",
            host=host.name,
            fix="give the sudo password (ansible_become_password, from vault, or -K) or allow "
            "passwordless sudo for the login user",
        )
    return HostError(
        f"the host's shell did not start: {last}",
        host=host.name,
        fix="try it by hand: " + shlex.join(session_argv(host, become)),
    )


def _diagnosed(host: InventoryHost) -> HostError:
    """ssh's own failure, named: one more connection with -v, so that a refused host key is
    named with the key it was offered (the session itself runs without -v: its debug lines
    would mix with the commands' standard error)."""
    try:
        done = subprocess.run(
            [*connection.ssh_argv(host, verbose=True), "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=OPEN_TIMEOUT_S,
            check=False,
        )
        stderr = done.stderr
    except subprocess.TimeoutExpired:
        stderr = "Connection timed out"
    return connection.ssh_failure(host, stderr)


__all__ = ["Output", "Session", "SessionLost", "open_session", "session_argv"]
