"""How gpuprov reaches a host over SSH: one OpenSSH command line from the inventory's variables.

`ssh_argv(host)` is the `ssh` command line that detection (for hosts behind a jump host or a
proxy command), validation and the errors' hints use (`ansible_common_args` gives Ansible, in
`provision apply`, the same route as host variables), built from the same inventory variables
Ansible's ssh connection reads: ansible_host/port/user, ansible_ssh_private_key_file,
ansible_ssh_common_args and ansible_ssh_extra_args (ProxyJump, ProxyCommand, -F, any -o).
OpenSSH reads ~/.ssh/config and the agent as it does for Ansible.

Host keys, on every hop: gpuprov's own options come first on the command line (OpenSSH keeps
the first value of an option), so StrictHostKeyChecking=yes and the inventory's known-hosts
files hold for the target whatever the inventory adds. OpenSSH starts a ProxyJump hop as a new
`ssh` that keeps none of the `-o` options, so a hop would be checked against other files, or
not strictly; gpuprov turns each ProxyJump hop into the equivalent ProxyCommand
(`ssh ... -W [%h]:%p hop`) carrying the same strict checking and known-hosts files (and `-F`,
as OpenSSH does). An unknown or changed key on any hop stops the connection; `-v` makes ssh
name the key it was offered (`host_key_problem` reads it back). A ProxyCommand the inventory
gives is the user's own command and is kept as written.

Become (`become_words`, `become_handshake`), as Ansible's sudo become does it: with no
password, `sudo -n` (never waits); with one (ansible_become_password, vault or -K), `sudo -S`
with a prompt of gpuprov's own, answered over the channel's standard input only when sudo
shows it, then the script once the become'd shell says it runs. The password is never on a
command line here or on the host, never in a log; a wrong one (sudo asks again) or sudo's
refusal fails the host at once with sudo's own words, and the whole exchange has a deadline.
"""

from __future__ import annotations

import itertools
import os
import re
import secrets
import selectors
import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from .errors import HostError, InventoryError
from .inventory import InventoryHost

_ARG_VARS = ("ansible_ssh_common_args", "ansible_ssh_extra_args")


def _words(host: InventoryHost) -> list[str]:
    words: list[str] = []
    for key in _ARG_VARS:
        text = str(host.vars.get(key) or "")
        try:
            words += shlex.split(text)
        except ValueError as exc:
            raise InventoryError(
                f"{key}={text!r} has unbalanced quotes",
                host=host.name,
                fix=f"quote the value of {key} properly in the inventory",
            ) from exc
    return words


def _option(word: str) -> tuple[str, str]:
    """'Key=Value' or 'Key Value' -> ('key', 'Value')."""
    match = re.match(r"\s*([A-Za-z]+)\s*(?:=|\s)\s*(.*)$", word)
    if not match:
        return word.strip().lower(), ""
    return match.group(1).lower(), match.group(2).strip()


@dataclass(frozen=True)
class _Args:
    passed: tuple[str, ...]  # the inventory's arguments, ProxyJump taken out
    jumps: tuple[str, ...]  # ProxyJump hops, nearest first
    config: str | None  # -F FILE, passed on to every hop as OpenSSH does


def _parse(words: Sequence[str]) -> _Args:
    passed: list[str] = []
    jumps: list[str] = []
    config: str | None = None
    i = 0
    while i < len(words):
        word = words[i]
        value: str | None = None
        if word in ("-o", "-J", "-F") and i + 1 < len(words):
            value, i = words[i + 1], i + 2
        elif word.startswith(("-o", "-J", "-F")) and len(word) > 2:
            value, i = word[2:], i + 1
        else:
            passed.append(word)
            i += 1
            continue
        flag = word[:2]
        if flag == "-J" or (flag == "-o" and _option(value)[0] == "proxyjump"):
            hops = value if flag == "-J" else _option(value)[1]
            if hops.lower() != "none" and not jumps:  # the first one given wins, as in ssh
                jumps = [h for h in hops.split(",") if h]
            continue
        if flag == "-F":
            config = value
        passed += [flag, value]
    return _Args(tuple(passed), tuple(jumps), config)


def _hop(spec: str) -> tuple[str | None, str, str | None]:
    """'[user@]host[:port]' or 'ssh://[user@]host[:port]' -> (user, host, port)."""
    spec = spec.removeprefix("ssh://")
    user, _sep, rest = spec.rpartition("@")
    if rest.startswith("["):
        name, _sep, port = rest[1:].partition("]")
        port = port.removeprefix(":")
    else:
        name, _sep, port = rest.partition(":")
    return user or None, name, port or None


# A host that stops answering mid-run (a hang, a dropped route) ends the connection after
# about a minute instead of never (issue 27): OpenSSH's keepalives on its encrypted channel.
# The inventory's own values, where it gives them, are kept.
KEEPALIVE = (("ServerAliveInterval", "15"), ("ServerAliveCountMax", "4"))


def _keepalive(passed: Sequence[str]) -> list[str]:
    given = {_option(b)[0] for a, b in itertools.pairwise(passed) if a == "-o"}
    out: list[str] = []
    for key, value in KEEPALIVE:
        if key.lower() not in given:
            out += ["-o", f"{key}={value}"]
    return out


def _checking(host: InventoryHost, connect_timeout: float, verbose: bool) -> list[str]:
    argv = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]
    if host.known_hosts:
        argv += ["-o", "UserKnownHostsFile=" + " ".join(host.known_hosts)]
    argv += ["-o", f"ConnectTimeout={max(1, int(connect_timeout))}"]
    return [*argv, "-v"] if verbose else argv


def _proxy_command(
    host: InventoryHost, jumps: Sequence[str], config: str | None, timeout: float, verbose: bool
) -> str:
    """ProxyCommand reaching the next host through `jumps` (nearest first), each hop's key
    checked as the target's. Nested commands escape `%` once per level (ssh expands `%%`)."""
    *before, last = jumps
    user, name, port = _hop(last)
    argv = ["ssh", *_checking(host, timeout, verbose), *_keepalive(())]
    if config:
        argv += ["-F", config]
    if before:
        inner = _proxy_command(host, before, config, timeout, verbose).replace("%", "%%")
        argv += ["-o", f"ProxyCommand={inner}"]
    if user:
        argv += ["-l", user]
    if port:
        argv += ["-p", port]
    argv += ["-W", "[%h]:%p", name]
    return shlex.join(argv)


def jump_hosts(host: InventoryHost) -> tuple[str, ...]:
    """The ProxyJump hops the inventory gives this host (nearest first)."""
    return _parse(_words(host)).jumps


def proxied(host: InventoryHost) -> bool:
    """True when the host is reached through a jump host or a proxy command."""
    args = _parse(_words(host))
    options = [b for a, b in zip(args.passed, args.passed[1:], strict=False) if a == "-o"]
    return bool(args.jumps) or any(_option(o)[0] == "proxycommand" for o in options)


def ssh_argv(
    host: InventoryHost, *, connect_timeout: float = 10, verbose: bool = False
) -> list[str]:
    """`ssh ... [user@]address` for `host` (append the remote command)."""
    args = _parse(_words(host))
    argv = ["ssh", *_checking(host, connect_timeout, verbose), "-p", str(host.port)]
    if host.key_file:
        # like Ansible: the inventory's key (IdentitiesOnly, as ssh -i alone does not)
        argv += ["-i", host.key_file, "-o", "IdentitiesOnly=yes"]
    if args.jumps:
        pc = _proxy_command(host, args.jumps, args.config, connect_timeout, verbose)
        argv += ["-o", f"ProxyCommand={pc}"]
    argv += [*_keepalive(args.passed), *args.passed]
    if host.user:
        argv += ["-l", host.user]
    argv += ["--", host.address]
    return argv


def ansible_common_args(host: InventoryHost, *, connect_timeout: float = 10) -> str | None:
    """For a host behind ProxyJump hops: the ansible_ssh_common_args that reach it through
    the same checked ProxyCommand as `ssh_argv` (the inventory's other arguments kept; its
    extra args folded in, to be set empty). None: nothing to change for Ansible."""
    args = _parse(_words(host))
    if not args.jumps:
        return None
    pc = _proxy_command(host, args.jumps, args.config, connect_timeout, verbose=False)
    return shlex.join([*args.passed, "-o", f"ProxyCommand={pc}"])


@dataclass(frozen=True)
class HostKeyProblem:
    where: str  # as ssh names it: "[127.0.0.1]:2222", "bastion.example"
    kind: str  # "unknown" | "changed"
    key: str | None  # "ssh-ed25519 SHA256:..." when ssh said it (with -v)


_CONNECTING = re.compile(r"Connecting to (\S+) \[[^\]]*\] port (\d+)")
_SERVER_KEY = re.compile(r"Server host key: (\S+) (SHA256:\S+)")
_UNKNOWN = re.compile(r"No (\S+) host key is known for (\S+) and you have requested strict")
_CHANGED = re.compile(r"Host key for (\S+) has changed and you have requested strict")
_CHANGED_FP = re.compile(r"The fingerprint for the (\S+) key sent by the remote host is")


def host_key_problem(stderr: str) -> HostKeyProblem | None:
    """The hop whose host key ssh refused, and the key it was offered, from ssh's stderr."""
    if "Host key verification failed" not in stderr:
        return None
    lines = stderr.splitlines()
    offered: str | None = None
    for i, line in enumerate(lines):
        if m := _SERVER_KEY.search(line):
            offered = f"{m.group(1)} {m.group(2)}"
        if m := _CHANGED_FP.search(line):
            following = lines[i + 1].strip() if i + 1 < len(lines) else ""
            offered = f"{m.group(1)} {following}" if following.startswith("SHA256:") else offered
        if m := _UNKNOWN.search(line):
            return HostKeyProblem(m.group(2).rstrip("."), "unknown", offered)
        if m := _CHANGED.search(line):
            return HostKeyProblem(m.group(1).rstrip("."), "changed", offered)
    return HostKeyProblem("?", "unknown", offered)


def without_debug(stderr: str) -> str:
    """ssh's stderr without its -v lines (what the remote command and ssh's errors said)."""
    return "\n".join(
        line for line in stderr.splitlines() if not line.startswith(("debug1:", "debug2:"))
    )


def ssh_failure(host: InventoryHost, stderr: str) -> HostError:
    """ssh's own failure (exit 255) -> a host error naming the hop, the key and the fix."""
    problem = host_key_problem(stderr)
    files = ", ".join(host.known_hosts)
    jumps = jump_hosts(host)
    if problem is not None:
        offered = f" (offered {problem.key})" if problem.key else ""
        hop = "" if not jumps else f" (on the way through {', '.join(jumps)})"
        if problem.kind == "changed":
            return HostError(
                f"host key of {problem.where}{hop} does not match the one in {files}{offered}: "
                "the host was reinstalled, or someone is in the middle",
                host=host.name,
                fix=f"verify the new key out of band, then `ssh-keygen -R '{problem.where}'` "
                "and add the new one",
            )
        return HostError(
            f"host key of {problem.where}{hop} is unknown{offered}: not in {files}; gpuprov "
            "never accepts an unknown key",
            host=host.name,
            fix=f"verify its fingerprint, then add the key of {problem.where} to "
            f"{host.known_hosts[0] if host.known_hosts else '~/.ssh/known_hosts'} "
            "(ssh-keyscan, or ssh there once by hand)",
        )
    text = without_debug(stderr).strip()
    last = text.splitlines()[-1][:300] if text else "ssh exited 255"
    where = f"{host.address}:{host.port}" + (f" via {', '.join(jumps)}" if jumps else "")
    if "Permission denied" in text:
        return HostError(
            f"SSH authentication to {where} as {host.user or '(local user)'} failed: {last}",
            host=host.name,
            fix="check ansible_user and the key (ansible_ssh_private_key_file; a jump host "
            "takes its user and key from ~/.ssh/config or the agent, as with Ansible)",
        )
    if "Connection refused" in text or "timed out" in text or "resolve" in text:
        return HostError(
            f"unreachable: {where}: {last}",
            host=host.name,
            fix="check ansible_host/ansible_port and the jump host or proxy command in "
            "ansible_ssh_common_args",
        )
    return HostError(
        f"SSH to {where} failed: {last}",
        host=host.name,
        fix="try it by hand: " + shlex.join(ssh_argv(host)) + " true",
    )


# --- become ---------------------------------------------------------------------------------

BECOME_TIMEOUT_S = 30  # sudo's answer to the password (PAM waits about 2 s after a wrong one)


@dataclass(frozen=True)
class Become:
    """How gpuprov's commands become `user` on a host (sudo); `token` names this exchange's
    prompt and the line the become'd shell prints first."""

    user: str
    flags: tuple[str, ...] = ()
    password: str | None = field(default=None, repr=False)
    token: str = field(default_factory=lambda: secrets.token_hex(8))

    @property
    def prompt(self) -> str:
        return f"[gpuprov become {self.token}] password:"

    @property
    def marker(self) -> bytes:
        return f"GPUPROV-BECOME-OK-{self.token}".encode()


def become_of(host: InventoryHost) -> Become | None:
    """The host's become, None when gpuprov's commands need none (no ansible_become, or the
    login user is already the one to become)."""
    if not host.become:
        return None
    local_root = host.connection == "local" and os.geteuid() == 0
    if host.become_user == "root" and (host.user == "root" or local_root):
        return None
    return Become(host.become_user, host.become_flags, host.become_password)


def become_words(become: Become | None, command: Sequence[str] = ("sh", "-s")) -> list[str]:
    """`command` run as the become user: `sudo -n ...` without a password; with one, `sudo -S`
    with gpuprov's prompt, the shell printing the marker before it runs `command`."""
    if become is None:
        return list(command)
    user = [] if become.user == "root" else ["-u", become.user]
    if become.password is None:
        return ["sudo", "-n", *become.flags, *user, *command]
    inner = f"echo {become.marker.decode()} && exec {shlex.join(command)}"
    return ["sudo", "-S", "-p", become.prompt, *become.flags, *user, "sh", "-c", inner]


class BecomeFailed(HostError):
    """sudo refused (a wrong password, not allowed) or did not answer in time."""


class ChannelClosed(Exception):
    """The command ended before sudo answered, with ssh's exit status 255: ssh's own failure
    (unreachable, a host key), for the caller to name."""

    def __init__(self, stderr: str) -> None:
        super().__init__("ssh exited 255")
        self.stderr = stderr


def _fail(host: str, become: Become, what: str, said: str) -> BecomeFailed:
    said = said.replace(become.prompt, "").strip()
    last = said.splitlines()[-1][:300] if said else ""
    return BecomeFailed(
        f"sudo to {become.user} {what}" + (f": {last}" if last else ""),
        host=host,
        fix="check ansible_become_password (or the one given with -K) and the sudo rule for "
        "the login user on this host",
    )


def become_handshake(
    proc: subprocess.Popen[bytes], become: Become, host: str, timeout: float = BECOME_TIMEOUT_S
) -> tuple[bytes, bytes]:
    """Answer sudo's prompt with the password, once, on `proc`'s standard input; returns what
    came on stdout after the marker and on stderr so far, once the become'd shell runs. The
    script is then the caller's to send. Raises BecomeFailed (the process killed) on a wrong
    password, sudo's refusal, the process ending, or no answer within `timeout`."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    if become.password is None:
        return b"", b""
    out, err = b"", b""
    answered = False
    deadline = time.monotonic() + timeout
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ, "out")
    selector.register(proc.stderr, selectors.EVENT_READ, "err")
    prompt = become.prompt.encode()
    try:
        while True:
            marker = out.find(become.marker + b"\n")
            if marker >= 0:
                return out[marker + len(become.marker) + 1 :], err.replace(prompt, b"")
            # ssh -v logs the command it sends (the prompt in it): only sudo's own words count
            said = b"\n".join(ln for ln in err.split(b"\n") if not ln.startswith(b"debug"))
            prompts = said.count(prompt)
            if prompts > 1 or b"Sorry, try again" in said:
                raise _fail(host, become, "failed: the password was not accepted", "")
            if prompts == 1 and not answered:
                answered = True
                try:
                    proc.stdin.write(become.password.encode() + b"\n")
                    proc.stdin.flush()
                except BrokenPipeError:  # gone meanwhile: its streams close, said below
                    pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise _fail(host, become, f"did not answer within {timeout:.0f} s", "")
            events = selector.select(left)
            if not selector.get_map():
                break
            for key, _unused in events:
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                elif key.data == "out":
                    out += chunk
                else:
                    err += chunk
            if not selector.get_map():
                break
        # both streams closed before the marker: sudo refused, or the connection failed
        code = proc.wait(timeout=5)
        text = err.decode(errors="replace")
        if code == 255 and not answered:  # ssh's own failure: the caller names it
            raise ChannelClosed(text)
        raise _fail(host, become, f"failed (exit {code})", without_debug(text))
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise
    finally:
        selector.close()
