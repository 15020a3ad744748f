"""Lab networks: one Docker network per lab, on a small /24 from a pool of the lab's own.

Docker's default pools hold about 30 networks (/16s and /20s); with a lab per person and
per test run that runs out. Each lab takes a /24 of GPUPROV_LAB_SUBNETS (default
10.213.0.0/16: 256 labs), skipping what any Docker network or a route of this machine
already covers.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from collections.abc import Iterable

from ..errors import LabError
from . import engine

DEFAULT_POOL = "10.213.0.0/16"
PREFIX = 24

Net = ipaddress.IPv4Network


def pool() -> Net:
    text = os.environ.get("GPUPROV_LAB_SUBNETS") or DEFAULT_POOL
    try:
        net = ipaddress.IPv4Network(text)
    except ValueError as exc:
        raise LabError(
            f"GPUPROV_LAB_SUBNETS={text!r} is not an IPv4 network",
            fix="give a private range such as 10.213.0.0/16",
        ) from exc
    if net.prefixlen > PREFIX:
        raise LabError(
            f"GPUPROV_LAB_SUBNETS={text} is smaller than one /{PREFIX}",
            fix="give a /16 to /24 private range",
        )
    return net


def parse_networks(lines: Iterable[str]) -> list[Net]:
    """IPv4 networks from `ip -4 route` lines or Docker subnet strings; others are skipped."""
    found: list[Net] = []
    for line in lines:
        fields = line.split()
        if not fields or fields[0] == "default":
            continue
        try:
            found.append(ipaddress.IPv4Network(fields[0], strict=False))
        except ValueError:
            continue
    return found


def pick(taken: Iterable[Net], within: Net) -> Net:
    """The first /24 of `within` that overlaps nothing in `taken`."""
    used = list(taken)
    for candidate in within.subnets(new_prefix=PREFIX):
        if not any(candidate.overlaps(net) for net in used):
            return candidate
    raise LabError(
        f"no free /{PREFIX} left in {within} for another lab network",
        fix="remove labs you no longer need (`provision lab down --name ...`) "
        "or set GPUPROV_LAB_SUBNETS to a larger range",
    )


def ensure(lab: str, label: str, attempts: int = 5) -> str:
    """The lab's network, on a /24 of the lab's own pool . Another lab
    created at the same moment may take the same /24: then the next free one is tried."""
    name = f"gpuprov-lab-{lab}"
    if name in engine.networks({label: lab}):
        return name
    try:
        routes = subprocess.run(
            ["ip", "-4", "route", "show"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise LabError(
            f"cannot read this machine's routes to place the lab network: {exc}",
            fix="install iproute2 (./scripts/engine.sh does)",
        ) from exc
    taken = parse_networks(engine.network_subnets() + routes)
    within = pool()
    for attempt in range(1, attempts + 1):
        subnet = pick(taken, within)
        try:
            engine.docker(
                [
                    "network",
                    "create",
                    "--subnet",
                    str(subnet),
                    # Given, so that `docker network inspect` reports it (lab.yml's gateway).
                    "--gateway",
                    str(next(subnet.hosts())),
                    "--label",
                    f"{label}={lab}",
                    name,
                ]
            )
            return name
        except LabError as exc:
            if "overlap" not in str(exc) or attempt == attempts:
                raise
            taken.append(subnet)
    return name
