"""Exact, position-dependent all-reduce values (the payload's pattern, like nccl-tests -c).

The pattern functions work on plain Python ints exactly as on torch int64 tensors (no value
ever wraps), so the decisions are checked here element by element without a GPU.
"""

from __future__ import annotations

import pytest
from payloadpkg import load_payload

g = load_payload()
N = 20000


def reduced(ranks: int, offset: int = 0, stale_rank: int | None = None) -> list[float]:
    """What an all-reduce delivers: the fp32 sum of every rank's buffer; `offset` simulates a
    rank read from a wrong position, `stale_rank` a rank whose buffer was never refilled
    (it still holds the previous size's reduced data, here: zeros)."""
    out = []
    for i in range(N):
        total = 0.0
        for r in range(ranks):
            if r == stale_rank:
                continue
            idx = i + offset if r == ranks - 1 else i
            total += float(g.allreduce.pattern(idx, r))
        out.append(total)
    return out


def wrong(got: list[float], ranks: int) -> int:
    return sum(1 for i, v in enumerate(got) if v != float(g.allreduce.expected_sum(i, ranks)))


@pytest.mark.parametrize("ranks", [2, 8])
def test_a_correct_reduction_matches_exactly(ranks: int) -> None:
    assert wrong(reduced(ranks), ranks) == 0


@pytest.mark.parametrize("ranks", [2, 8])
def test_data_from_a_wrong_offset_is_caught_where_a_constant_fill_is_blind(ranks: int) -> None:
    got = reduced(ranks, offset=256)
    assert wrong(got, ranks) > 0.99 * N
    # the old check (every element = rank + 1) sums to the same value from any offset
    constant = [float(sum(r + 1 for r in range(ranks)))] * N
    assert all(v == ranks * (ranks + 1) / 2 for v in constant)


def test_a_stale_buffer_of_one_rank_is_caught() -> None:
    assert wrong(reduced(8, stale_rank=3), 8) > 0.99 * N


def test_values_stay_exact_in_fp32_even_for_large_rank_counts() -> None:
    # 12-bit values: the sum of 4096 ranks is below 2^24, fp32's exact-integer limit
    assert g.allreduce.PATTERN_MASK * 4096 < 2**24
    # index x multiplier never wraps int64 for buffers up to 16 GiB of fp32 (2^32 elements)
    assert (2**32) * g.allreduce.PATTERN_MUL < 2**63


def test_the_pattern_depends_on_position_and_rank() -> None:
    values = {g.allreduce.pattern(i, 0) for i in range(4096)}
    assert len(values) > 2000  # not periodic in any small stride
    assert all(g.allreduce.pattern(i, 0) != g.allreduce.pattern(i, 1) for i in range(1000))
    assert g.allreduce.expected_sum(12345, 3) == sum(
        g.allreduce.pattern(12345, r) for r in range(3)
    )
