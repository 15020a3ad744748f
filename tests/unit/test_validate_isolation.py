"""Pairwise isolation (orchestrator/validate/isolation.py): the bad or slow node is named,
never "the cluster". The pair runs are a fake fed with each host's health and speed, the
outcomes derived from them as a real pair run reports (fails when a member is bad; busbw of
the slower member)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from orchestrator.validate.isolation import (
    Pair,
    PairResult,
    first_pairs,
    isolate,
    slow_pairs,
)


class Fleet:
    """Pair runs on hosts with a known fault: `bad` fail with anyone, `speed` in GB/s."""

    def __init__(self, bad: Sequence[str] = (), speed: Mapping[str, float] | None = None) -> None:
        self.bad = set(bad)
        self.speed = dict(speed or {})
        self.rounds: list[list[Pair]] = []

    def __call__(self, pairs: Sequence[Pair]) -> dict[Pair, PairResult]:
        members = [h for p in pairs for h in p]
        assert len(members) == len(set(members)), f"pairs of one round overlap: {pairs}"
        self.rounds.append(list(pairs))
        out = {}
        for a, b in pairs:
            broken = sorted({a, b} & self.bad)
            out[(a, b)] = PairResult(
                (a, b),
                not broken,
                None if broken else min(self.speed.get(a, 400.0), self.speed.get(b, 400.0)),
                f"{broken[0]} stopped in rendezvous" if broken else "",
            )
        return out


def test_first_pairs_in_order_and_the_odd_one_waits() -> None:
    assert first_pairs(["a", "b", "c", "d"]) == ([("a", "b"), ("c", "d")], [])
    assert first_pairs(["a", "b", "c"]) == ([("a", "b")], ["c"])


def test_one_bad_node_of_four_is_named_and_the_others_cleared() -> None:
    fleet = Fleet(bad=["d"])
    iso = isolate(["a", "b", "c", "d"], fleet, 0.5)
    assert set(iso.bad) == {"d"}
    assert "failed with" in iso.bad["d"] and "d stopped in rendezvous" in iso.bad["d"]
    assert set(iso.cleared) == {"a", "b", "c"}
    assert not iso.unresolved and not iso.slow
    assert fleet.rounds[0] == [("a", "b"), ("c", "d")]
    assert len(fleet.rounds) == 2  # c and d each with a cleared host, at once


def test_the_odd_host_out_is_run_with_a_cleared_one() -> None:
    fleet = Fleet(bad=["c"])
    iso = isolate(["a", "b", "c"], fleet, 0.5)
    assert set(iso.bad) == {"c"} and set(iso.cleared) == {"a", "b"}
    assert fleet.rounds[1] == [("c", "a")]


def test_two_hosts_that_fail_together_stay_unresolved_by_name() -> None:
    iso = isolate(["a", "b"], Fleet(bad=["b"]), 0.5)
    assert not iso.bad and not iso.cleared
    assert set(iso.unresolved) == {"a", "b"}
    assert "no host passed to compare" in iso.unresolved["a"]
    assert "a+b: failed" in iso.unresolved["a"]


def test_a_slow_node_is_named_relative_to_the_other_pairs() -> None:
    fleet = Fleet(speed={"a": 420, "b": 430, "c": 410, "d": 90})
    iso = isolate(["a", "b", "c", "d"], fleet, 0.5)
    assert set(iso.slow) == {"d"} and not iso.bad
    assert "90" in iso.slow["d"] and "below 0.5 x" in iso.slow["d"]
    assert set(iso.cleared) == {"a", "b", "c"}


def test_slow_pairs_need_two_pairs_to_compare() -> None:
    one = [PairResult(("a", "b"), True, 10.0)]
    assert slow_pairs(one, 0.5) == set()
    two = [*one, PairResult(("c", "d"), True, 400.0)]
    assert slow_pairs(two, 0.5) == {("a", "b")}


def test_a_healthy_fleet_is_all_cleared_in_one_round() -> None:
    fleet = Fleet()
    iso = isolate(["a", "b", "c", "d"], fleet, 0.5)
    assert set(iso.cleared) == {"a", "b", "c", "d"} and not iso.bad and not iso.unresolved
    assert len(fleet.rounds) == 1


def test_more_suspects_than_cleared_hosts_take_more_rounds() -> None:
    fleet = Fleet(bad=["a", "e"])
    iso = isolate(["a", "b", "c", "d", "e"], fleet, 0.5)
    assert set(iso.bad) == {"a", "e"}
    assert set(iso.cleared) == {"b", "c", "d"}
    assert len(fleet.rounds) == 3  # (a,b)(c,d); then a, b with c, d; then e


def test_two_bad_nodes_in_one_pair_are_both_named() -> None:
    iso = isolate(["a", "b", "c", "d"], Fleet(bad=["c", "d"]), 0.5)
    assert set(iso.bad) == {"c", "d"} and set(iso.cleared) == {"a", "b"}


@pytest.mark.parametrize("hosts", [[], ["a"]])
def test_fewer_than_two_hosts_cannot_be_paired(hosts: list[str]) -> None:
    iso = isolate(hosts, Fleet(), 0.5)
    assert set(iso.unresolved) == set(hosts) and not iso.pairs
