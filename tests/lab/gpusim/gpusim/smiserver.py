"""A fork server for the simulated `nvidia-smi` on lab hosts (test code: a speed-up only).

Each `nvidia-smi` call used to start Python and import the simulator: about 55 ms of CPU on a
lab host, where a real H200's `nvidia-smi -L` answers in about 20 ms (docs/device.md). The
probe runs seven views and the validation and verify suites more, and the lab hosts share the
control machine's cores, so the simulator's start-up was most of a lab detection's cost.

`gpusim-smi.socket` (the lab image, orchestrator/lab/images.py) listens on SOCKET; systemd
starts `gpusim smi-server` on the first call. The server imports the simulator once; for each
call it forks a child that takes the caller's standard input, output and error (passed over
the socket), its environment, directory and arguments, and runs the same `smi_cli.main` a
standalone call runs, reading the state afresh. The client (bin/nvidia-smi) answers in-process
whenever the server is absent or refuses (FALLBACK: another user's call, a directory it cannot
enter, its code changed): the server only makes a call cheaper, never different.
GPUSIM_SMI_SOCKET names another socket (unit tests).

Protocol, one connection per call: the client sends its three descriptors (SCM_RIGHTS) and
`cwd NUL argc NUL argv... NUL env...` (each `KEY=VALUE`), then shuts down writing. The server
answers one byte, READY or FALLBACK; after READY, the exit status in ASCII, then closes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import traceback
from pathlib import Path

SOCKET = "/run/gpusim/smi.sock"
READY = b"R"
FALLBACK = b"F"
PACKAGE = Path(__file__).resolve().parent
_SD_LISTEN_FDS_START = 3


def code_fingerprint() -> tuple[tuple[str, int, int], ...]:
    """The simulator's code and data as this process loaded them: a server whose files changed
    since (a lab whose /opt/gpusim is a developer's checkout) hands its calls back and exits."""
    found = []
    for folder in (PACKAGE, PACKAGE.parent / "data"):
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.is_file():
                st = entry.stat()
                found.append((entry.path, st.st_mtime_ns, st.st_size))
    return tuple(found)


def decode_request(blob: bytes) -> tuple[str, list[str], dict[str, str]]:
    """(cwd, argv, environment) of a request; ValueError when it is malformed."""
    fields = [os.fsdecode(f) for f in blob.split(b"\0")]
    if len(fields) < 2:
        raise ValueError("short request")
    argc = int(fields[1])
    if argc < 0 or len(fields) < 2 + argc:
        raise ValueError("bad argument count")
    env = {}
    for item in fields[2 + argc :]:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"bad environment entry {item!r}")
        env[key] = value
    return fields[0], fields[2 : 2 + argc], env


def encode_request(cwd: str, argv: list[str], env: dict[str, str]) -> bytes:
    """The client's side of decode_request (bin/nvidia-smi writes the same bytes inline)."""
    items = [cwd, str(len(argv)), *argv, *(f"{k}={v}" for k, v in env.items())]
    return b"\0".join(os.fsencode(i) for i in items)


def _receive(conn: socket.socket) -> tuple[bytes, list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3)
    chunks = [data]
    while data:
        data = conn.recv(65536)
        chunks.append(data)
    return b"".join(chunks), fds


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[4:8], sys.byteorder)


def _serve_one(conn: socket.socket, stale: bool) -> int:
    """In the forked child: run one call with the caller's descriptors; the exit status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the call's own subprocesses are waited for
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        blob, fds = _receive(conn)
        cwd, argv, env = decode_request(blob)
        if stale or len(fds) != 3 or _peer_uid(conn) != os.getuid():
            raise ValueError("not for this server")
        os.chdir(cwd)
    except (OSError, ValueError):
        conn.sendall(FALLBACK)
        return 0
    for number, fd in enumerate(fds):
        os.dup2(fd, number)
        os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["nvidia-smi", *argv]
    conn.sendall(READY)
    from gpusim import smi_cli

    try:
        code = smi_cli.main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # as a standalone call would end: the traceback, status 1
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a reader gone (nvidia-smi | head)
            stream.flush()
    conn.sendall(str(code).encode())
    return 0


def serve(listener: socket.socket) -> int:
    """Accept calls until the simulator's files change (then hand the caller back, exit)."""
    from gpusim import smi_cli  # noqa: F401 -- imported once here, inherited by every child

    loaded = code_fingerprint()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reap themselves
    while True:
        conn, _ = listener.accept()
        stale = code_fingerprint() != loaded
        pid = os.fork()
        if pid == 0:
            listener.close()
            status = 1
            try:
                status = _serve_one(conn, stale)
            finally:
                os._exit(status)
        conn.close()
        if stale:
            return 0  # systemd starts a fresh server, with the new code, on the next call


def main(path: str = SOCKET) -> int:
    """`gpusim smi-server`: the socket systemd passes (LISTEN_FDS), else one at `path` (mode
    0600: the callers are its owner's processes, as the server checks)."""
    if os.environ.get("LISTEN_PID") == str(os.getpid()) and os.environ.get("LISTEN_FDS") == "1":
        listener = socket.socket(fileno=_SD_LISTEN_FDS_START)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path):
            os.unlink(path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            listener.bind(path)
        finally:
            os.umask(old)
        listener.listen(64)
    return serve(listener)
