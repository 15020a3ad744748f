"""The simulated nvidia-smi's fork server (lab test code, gpusim/smiserver.py): a call it
serves answers exactly as a standalone call (output, errors, exit status, state changes), and
every case it cannot serve runs in-process instead."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GPUSIM = REPO / "tests" / "lab" / "gpusim"
SMI = GPUSIM / "bin" / "nvidia-smi"
sys.path.insert(0, str(GPUSIM))
from gpusim import smiserver  # noqa: E402
from gpusim.testing import SMI_CAPTURES, SimHost  # noqa: E402

TIMESTAMP = re.compile(r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9]\d \d\d:\d\d:\d\d \d{4}")


def _start(sock: Path, fingerprint: str = "") -> subprocess.Popen[bytes]:
    """A server on `sock`; `fingerprint`: Python replacing smiserver.code_fingerprint."""
    code = (
        f"import sys; sys.path.insert(0, {str(GPUSIM)!r}); sys.dont_write_bytecode = True\n"
        "from gpusim import smiserver\n"
        f"{fingerprint}\n"
        f"sys.exit(smiserver.main({str(sock)!r}))\n"
    )
    server = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 10
    while not sock.exists():
        assert server.poll() is None, "the server exited before listening"
        assert time.monotonic() < deadline, "the server did not listen within 10 s"
        time.sleep(0.02)
    return server


@pytest.fixture
def sim(tmp_path: Path) -> SimHost:
    host = SimHost.create(tmp_path / "root", "p5.48xlarge")
    host.install_driver()
    host.boot()
    return host


@pytest.fixture
def sock(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "run" / "smi.sock"
    server = _start(path)
    yield path
    server.kill()
    server.wait()


def call(
    sim: SimHost, *argv: str, sock: Path | None = None, importtime: bool = False
) -> tuple[str, str, int]:
    """bin/nvidia-smi as a process (through the server at `sock`, or standalone)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSIM_")}
    env["GPUSIM_ROOT"] = str(sim.root)
    if sock is not None:
        env["GPUSIM_SMI_SOCKET"] = str(sock)
    command = [str(SMI), *argv]
    if importtime:  # as the shebang runs it, plus Python's import log on stderr
        command = ["/usr/bin/python3", "-S", "-X", "importtime", *command]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    return TIMESTAMP.sub("(time)", done.stdout), done.stderr, done.returncode


def test_served_calls_answer_as_standalone_calls(sim: SimHost, sock: Path) -> None:
    cases = [
        *SMI_CAPTURES.values(),
        ["--query-gpu=bogus", "--format=csv"],  # exit 2, the error on stderr
        ["-i", "9", "-L"],  # exit 6: no such GPU
        ["topo"],  # bad arguments
    ]
    for argv in cases:
        served = call(sim, *argv, sock=sock)
        assert served == call(sim, *argv), argv
    assert call(sim, "--query-gpu=bogus", "--format=csv", sock=sock)[2] == 2


def test_a_served_call_runs_in_the_server_not_in_the_caller(sim: SimHost, sock: Path) -> None:
    out, err, code = call(sim, "-L", sock=sock, importtime=True)
    assert code == 0 and out.count("NVIDIA H100 80GB HBM3") == 8
    assert "gpusim.smi_cli" not in err  # the caller imported nothing of the simulator
    assert "_socket" in err
    out, err, code = call(sim, "-L", importtime=True)
    assert code == 0 and "gpusim.smi_cli" in err  # the control: standalone imports it


def test_a_served_change_is_the_hosts_state(sim: SimHost, sock: Path) -> None:
    query = ("--query-gpu=persistence_mode", "--format=csv,noheader", "-i", "0")
    assert call(sim, *query)[0] == "Disabled\n"
    assert call(sim, "-pm", "1", "-i", "0", sock=sock)[2] == 0
    assert call(sim, *query)[0] == "Enabled\n"  # read standalone, from the state file


def test_no_server_behind_the_socket_runs_in_process(sim: SimHost, tmp_path: Path) -> None:
    dead = tmp_path / "dead.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(dead))
    listener.close()  # the file stays, nothing listens: connection refused
    out, _err, code = call(sim, "-L", sock=dead)
    assert code == 0 and out.count("GPU ") == 8
    assert call(sim, "-L", sock=tmp_path / "absent.sock")[:2] == (out, "")


def test_changed_code_hands_the_call_back_and_the_server_exits(
    sim: SimHost, tmp_path: Path
) -> None:
    # the fingerprint changes from the second call on (as when /opt/gpusim is edited)
    path = tmp_path / "smi.sock"
    server = _start(
        path,
        "import itertools; _n = itertools.count()\n"
        "smiserver.code_fingerprint = lambda: (next(_n) >= 2,)",
    )
    try:
        first = call(sim, "-L", sock=path, importtime=True)
        assert "gpusim.smi_cli" not in first[1]  # served
        second = call(sim, "-L", sock=path, importtime=True)
        assert "gpusim.smi_cli" in second[1]  # handed back: run in-process
        assert first[0] == second[0] and second[2] == 0
        assert server.wait(timeout=10) == 0
    finally:
        server.kill()
        server.wait()


def test_request_round_trip_and_malformed_requests() -> None:
    env = {"PATH": "/usr/bin", "EMPTY": "", "EQ": "a=b"}
    blob = smiserver.encode_request("/tmp", ["-i", "0", "", "-L"], env)
    assert smiserver.decode_request(blob) == ("/tmp", ["-i", "0", "", "-L"], env)
    assert smiserver.decode_request(smiserver.encode_request("/", [], {})) == ("/", [], {})
    for bad in (b"/tmp", b"/tmp\0x", b"/tmp\x005\0-L", b"/tmp\0-1", b"/tmp\x000\0NOEQUALS"):
        with pytest.raises(ValueError):
            smiserver.decode_request(bad)
