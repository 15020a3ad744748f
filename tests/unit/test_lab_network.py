"""Lab networks: a /24 per lab that overlaps no Docker network and no route."""

from __future__ import annotations

import ipaddress

import pytest

from orchestrator.errors import LabError
from orchestrator.lab import labnetwork

# `ip -4 route show` of the machine the lab was built on, with Docker's networks.
ROUTES = """\
default via 192.0.2.1 dev eth0
172.17.0.0/16 dev docker0 proto kernel scope link src 172.17.0.1
192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2
192.168.32.0/20 dev br-d7e51cd273d0 proto kernel scope link src 192.168.32.1
"""


def net(text: str) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(text)


def test_routes_and_docker_subnets_parse_default_skipped() -> None:
    found = labnetwork.parse_networks([*ROUTES.splitlines(), "10.213.0.0/24", "fd00::/64", ""])
    assert found == [
        net("172.17.0.0/16"),
        net("192.0.2.0/24"),
        net("192.168.32.0/20"),
        net("10.213.0.0/24"),
    ]


def test_first_free_24_of_the_pool() -> None:
    pool = net("10.213.0.0/16")
    assert labnetwork.pick([], pool) == net("10.213.0.0/24")
    taken = [net("10.213.0.0/24"), net("10.213.1.0/24")]
    assert labnetwork.pick(taken, pool) == net("10.213.2.0/24")


def test_a_route_covering_part_of_the_pool_is_skipped() -> None:
    assert labnetwork.pick([net("10.213.0.0/23")], net("10.213.0.0/16")) == net("10.213.2.0/24")
    with pytest.raises(LabError):
        labnetwork.pick([net("10.0.0.0/8")], net("10.213.0.0/22"))


def test_a_full_pool_says_how_to_free_it() -> None:
    pool = net("10.213.0.0/23")
    with pytest.raises(LabError, match=r"no free /24 left in 10\.213\.0\.0/23") as err:
        labnetwork.pick([net("10.213.0.0/24"), net("10.213.1.0/24")], pool)
    assert err.value.fix is not None and "lab down" in err.value.fix


def test_pool_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUPROV_LAB_SUBNETS", raising=False)
    assert labnetwork.pool() == net("10.213.0.0/16")
    monkeypatch.setenv("GPUPROV_LAB_SUBNETS", "10.99.0.0/20")
    assert labnetwork.pool() == net("10.99.0.0/20")
    for bad in ("not-a-net", "10.99.0.0/28"):
        monkeypatch.setenv("GPUPROV_LAB_SUBNETS", bad)
        with pytest.raises(LabError, match="GPUPROV_LAB_SUBNETS"):
            labnetwork.pool()
