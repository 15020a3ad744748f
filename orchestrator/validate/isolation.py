"""Pairwise isolation: when the whole-fleet all-reduce fails or one pair is slow, name the host.

A collective across N hosts fails as a whole: every rank waits for the slowest or the dead
one. Runs of two hosts at a time say which: hosts are paired in order, (1, 2), (3, 4), ...;
a pair that passes at a normal speed clears both; each member of a pair that failed (or was
slow, or an odd one out) is then run with a host already cleared, a different one each where
there are enough. A suspect that fails with a cleared partner is the bad node; one that
passes is cleared. With no cleared host at all, the suspects stay unresolved, each named with
the partners it failed with: never "the cluster".

Slow is relative: a pair whose busbw is below `slow_fraction` of the median of the passing
pairs' (no multi-node floor exists in any source read, so nothing absolute).

Pure: `run_round(pairs)` runs disjoint pairs (at the same time, in the launcher) and returns
each pair's outcome; tests feed it recorded or derived outcomes.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

Pair = tuple[str, str]


@dataclass(frozen=True)
class PairResult:
    pair: Pair
    ok: bool  # finished, values exact
    busbw: float | None  # GB/s at the pair's largest size
    detail: str = ""  # what failed, in words


RunRound = Callable[[Sequence[Pair]], Mapping[Pair, PairResult]]


@dataclass(frozen=True)
class Isolation:
    bad: Mapping[str, str] = field(default_factory=dict)  # host -> why (failed with a cleared host)
    slow: Mapping[str, str] = field(default_factory=dict)  # host -> why (slow with a cleared host)
    cleared: Mapping[str, str] = field(default_factory=dict)  # host -> the pair that cleared it
    unresolved: Mapping[str, str] = field(default_factory=dict)  # host -> the pairs it failed in
    pairs: tuple[PairResult, ...] = ()


def first_pairs(hosts: Sequence[str]) -> tuple[list[Pair], list[str]]:
    """Hosts in order, two by two; the odd one out waits for a cleared partner."""
    pairs = [(hosts[i], hosts[i + 1]) for i in range(0, len(hosts) - 1, 2)]
    rest = [hosts[-1]] if len(hosts) % 2 else []
    return pairs, rest


def slow_pairs(results: Sequence[PairResult], fraction: float) -> set[Pair]:
    """Passing pairs below `fraction` of the median passing pair (needs two to compare)."""
    speeds = [r.busbw for r in results if r.ok and r.busbw is not None]
    if len(speeds) < 2:
        return set()
    median = statistics.median(speeds)
    return {r.pair for r in results if r.ok and r.busbw is not None and r.busbw < fraction * median}


def _why(r: PairResult) -> str:
    speed = f"{r.busbw} GB/s" if r.busbw is not None else "no figure"
    return f"{r.pair[0]}+{r.pair[1]}: " + ("passed, " + speed if r.ok else f"failed ({r.detail})")


def isolate(hosts: Sequence[str], run_round: RunRound, slow_fraction: float) -> Isolation:
    """Run pairs until every host is cleared, named bad or slow, or left unresolved."""
    if len(hosts) < 2:
        return Isolation(unresolved={h: "no other host to pair it with" for h in hosts})
    pairs, waiting = first_pairs(hosts)
    all_results: list[PairResult] = []
    got = dict(run_round(pairs))
    all_results += got.values()
    slow = slow_pairs(list(got.values()), slow_fraction)
    cleared: dict[str, str] = {}
    suspects: dict[str, list[str]] = {h: [] for h in waiting}
    for pair in pairs:
        r = got[pair]
        if r.ok and pair not in slow:
            for h in pair:
                cleared[h] = _why(r)
        else:
            for h in pair:
                suspects.setdefault(h, []).append(_why(r) + (" (slow)" if pair in slow else ""))
    bad: dict[str, str] = {}
    slow_hosts: dict[str, str] = {}
    reference = [r.busbw for r in got.values() if r.ok and r.pair not in slow and r.busbw]
    while suspects and cleared:
        partners = list(cleared)
        todo = list(suspects)
        # disjoint pairs: each cleared host with one suspect per round
        round_pairs = [(s, partners[i]) for i, s in enumerate(todo[: len(partners)])]
        got = dict(run_round(round_pairs))
        all_results += got.values()
        for pair in round_pairs:
            suspect, partner = pair
            r = got[pair]
            seen = suspects.pop(suspect)
            median = statistics.median(reference) if reference else None
            if not r.ok:
                bad[suspect] = f"failed with {partner}, a host that passed ({_why(r)})" + (
                    f"; before: {'; '.join(seen)}" if seen else ""
                )
            elif median is not None and r.busbw is not None and r.busbw < slow_fraction * median:
                slow_hosts[suspect] = (
                    f"slow with {partner}, a host that passed: {r.busbw} GB/s against "
                    f"{median:g} GB/s for the other pairs (below {slow_fraction:g} x)"
                )
            else:
                cleared[suspect] = _why(r)
                if r.busbw:
                    reference.append(r.busbw)
    unresolved = {
        h: "no host passed to compare it with; " + ("; ".join(seen) or "not run")
        for h, seen in suspects.items()
    }
    return Isolation(bad, slow_hosts, cleared, unresolved, tuple(all_results))
