"""An in-process SSH server on 127.0.0.1 (paramiko) that runs the commands it is sent with
/bin/sh here: a target host (public-key login as root) or a jump host (user `jump`, auth
none) that forwards connections."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from dataclasses import dataclass, field

import paramiko


@dataclass
class Server:
    port: int
    host_key: paramiko.PKey
    client_key: paramiko.PKey | None  # None: a jump host letting user `jump` in (auth none)
    commands: list[str] = field(default_factory=list)
    forwarded: list[tuple[str, int]] = field(default_factory=list)


class _Handler(paramiko.ServerInterface):  # type: ignore[misc]  # paramiko is untyped
    def __init__(self, server: Server) -> None:
        self.server = server
        self.destinations: dict[int, tuple[str, int]] = {}

    def get_allowed_auths(self, username: str) -> str:
        return "none" if self.server.client_key is None else "publickey"

    def check_auth_none(self, username: str) -> int:
        ok = self.server.client_key is None and username == "jump"
        return int(paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED)

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        ok = username == "root" and key == self.server.client_key
        return int(paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED)

    def check_channel_request(self, kind: str, chanid: int) -> int:
        ok = kind == "session" and self.server.client_key is not None
        return int(
            paramiko.OPEN_SUCCEEDED if ok else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED
        )

    def check_channel_direct_tcpip_request(
        self, chanid: int, origin: tuple[str, int], destination: tuple[str, int]
    ) -> int:
        if self.server.client_key is not None:  # only the jump host forwards
            return int(paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED)
        self.destinations[chanid] = destination
        self.server.forwarded.append(destination)
        return int(paramiko.OPEN_SUCCEEDED)

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        self.server.commands.append(command.decode())
        threading.Thread(target=_execute, args=(channel, command.decode()), daemon=True).start()
        return True


def _execute(channel: paramiko.Channel, command: str) -> None:
    stdin = b""
    while chunk := channel.recv(65536):
        stdin += chunk
    done = subprocess.run(command, shell=True, input=stdin, capture_output=True, check=False)
    channel.sendall(done.stdout)
    channel.sendall_stderr(done.stderr)
    channel.send_exit_status(done.returncode)
    channel.close()


def _pump(a: paramiko.Channel, b: socket.socket) -> None:
    def one_way(read: object, write: object) -> None:
        try:
            while data := read():  # type: ignore[operator]
                write(data)  # type: ignore[operator]
        except (OSError, EOFError):
            pass
        finally:
            with contextlib.suppress(OSError, EOFError):  # the other side may be gone
                a.close()
                b.close()

    threading.Thread(target=one_way, args=(lambda: a.recv(65536), b.sendall), daemon=True).start()
    threading.Thread(target=one_way, args=(lambda: b.recv(65536), a.sendall), daemon=True).start()


def _session(sock: socket.socket, server: Server) -> None:
    transport = paramiko.Transport(sock)
    transport.add_server_key(server.host_key)
    handler = _Handler(server)
    try:
        transport.start_server(server=handler)
    except (paramiko.SSHException, EOFError):
        return
    while transport.is_active():
        channel = transport.accept(timeout=1)
        if channel is None:
            continue
        destination = handler.destinations.get(channel.get_id())
        if destination is not None:
            _pump(channel, socket.create_connection(destination))


def _serve(listener: socket.socket, server: Server) -> None:
    while True:
        try:
            sock, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_session, args=(sock, server), daemon=True).start()


def start(client_key: paramiko.PKey | None) -> tuple[Server, socket.socket]:
    """A server with a fresh host key, and its listening socket (close it to stop)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    server = Server(listener.getsockname()[1], paramiko.ECDSAKey.generate(), client_key)
    threading.Thread(target=_serve, args=(listener, server), daemon=True).start()
    return server, listener


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then closed)."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port: int = closed.getsockname()[1]
    closed.close()
    return port
