"""Serve the EFA installer test double over HTTP on a lab's own network gateway (as
tests/lab/aptrepo serves its repositories), for one test module: start, then stop."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aptrepo.serve import gateway_address


@contextmanager
def served(directory: Path, network: str) -> Iterator[str]:
    """Yield the base URL of `directory` served on `network`'s gateway (a free port)."""
    address = gateway_address(network)
    with socket.socket() as probe:
        probe.bind((address, 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "http.server", "--bind", address, "--directory"]
    argv += [str(directory), str(port)]
    process = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
    )
    url = f"http://{address}:{port}"
    try:
        for _ in range(50):
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
