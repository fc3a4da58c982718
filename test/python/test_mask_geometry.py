"""fmha_mlir.mask_geometry against brute force: every pair of Mask.visible (plus the sequence ends),
over every tile position, for offsets seqlen_k - seqlen_q of every residue modulo the block sizes, every
mask kind and window sizes from 0 to unbounded. NumPy only."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from fmha_mlir import mask_geometry
from fmha_mlir.index_math import ceildiv, maximum, minimum, select
from fmha_mlir.spec import Mask

BLOCKS = ((4, 8), (8, 4), (4, 4))   # (block_m, block_n): both orders, and equal
WINDOWS = (0, 1, 5, -1)             # 0, small, larger than a block, unbounded
MASKS = ([Mask("none"), Mask("causal_top_left"), Mask("causal_bottom_right")]
         + [Mask("sliding_window", left, right) for left, right in itertools.product(WINDOWS, WINDOWS)
            if (left, right) != (-1, -1)])
# seqlen_q 0..9 against seqlen_k 0..17: every offset residue modulo 4 and 8, tails of every length,
# sequences shorter than a block, and empty ones.
LENGTHS = [(sq, sk) for sq in range(0, 10) for sk in range(0, 18)]


def shown_matrix(mask: Mask, rows: int, cols: int, seqlen_q: int, seqlen_k: int) -> np.ndarray:
    """The brute force: Mask.visible at every (q, k) of a padded [rows, cols] grid, and inside the problem."""
    q, k = np.arange(rows)[:, None], np.arange(cols)[None, :]
    return np.broadcast_to(mask.visible(q, k, seqlen_q, seqlen_k), (rows, cols)) & (q < seqlen_q) & (k < seqlen_k)


# The rule written out by hand (rows: queries, columns: keys): Mask.visible is the one definition the
# oracle, the interpreter and the lowering share, so only a table like this checks the definition itself.
RULES = {  # (seqlen_q, seqlen_k): {mask: rows}
    (3, 5): {"none": ["11111", "11111", "11111"],
             "causal_top_left": ["10000", "11000", "11100"],
             "causal_bottom_right": ["11100", "11110", "11111"],     # the diagonal shifted by 5 - 3
             "window:1,0": ["01100", "00110", "00011"],
             "window:0,1": ["00110", "00011", "00001"],
             "window:-1,0": ["11100", "11110", "11111"],
             "window:1,-1": ["01111", "00111", "00011"]},
    (4, 2): {"causal_top_left": ["10", "11", "11", "11"],
             "causal_bottom_right": ["00", "00", "10", "11"],        # shifted by 2 - 4: two rows see nothing
             "window:0,0": ["00", "00", "10", "01"]},
}


@pytest.mark.parametrize("lengths", RULES, ids=str)
def test_visible_is_the_rule_written_out(lengths):
    sq, sk = lengths
    q, k = np.arange(sq)[:, None], np.arange(sk)[None, :]
    for mask, rows in RULES[lengths].items():
        expected = np.array([[c == "1" for c in row] for row in rows])
        np.testing.assert_array_equal(np.broadcast_to(Mask.parse(mask).visible(q, k, sq, sk), (sq, sk)), expected,
                                      err_msg=mask)


@pytest.mark.parametrize("mask", MASKS, ids=str)
def test_shown_is_visible_inside_the_problem_on_ints_and_arrays(mask):
    for sq, sk in LENGTHS:
        truth = shown_matrix(mask, sq + 3, sk + 3, sq, sk)
        q, k = np.arange(sq + 3)[:, None], np.arange(sk + 3)[None, :]
        np.testing.assert_array_equal(np.broadcast_to(mask_geometry.shown(mask, q, k, sq, sk), truth.shape), truth)
        assert all(bool(mask_geometry.shown(mask, i, j, sq, sk)) == truth[i, j]
                   for i in range(0, sq + 3, 2) for j in range(0, sk + 3, 3))


@pytest.mark.parametrize("mask", MASKS, ids=str)
def test_key_range_is_exactly_the_keys_a_row_sees(mask):
    for sq, sk in LENGTHS:
        truth = shown_matrix(mask, sq, sk, sq, sk)
        for q in range(sq):
            lo, hi = mask_geometry.key_range(mask, q, sq, sk)
            keys = np.flatnonzero(truth[q])
            assert list(range(lo, hi)) == list(keys), (str(mask), sq, sk, q, lo, hi)


@pytest.mark.parametrize("block_m,block_n", BLOCKS)
@pytest.mark.parametrize("mask", MASKS, ids=str)
def test_tile_cut_is_exactly_a_tile_with_a_hidden_or_padded_pair(mask, block_m, block_n):
    """The bodies skip masking on uncut tiles, so a cut tile taken as uncut is a wrong gradient (e.g. a
    bottom-right causal tile whose last key passes the diagonal by one); the converse only costs time."""
    for sq, sk in LENGTHS:
        blocks_q, blocks_k = ceildiv(sq, block_m), ceildiv(sk, block_n)
        truth = shown_matrix(mask, blocks_q * block_m, blocks_k * block_n, sq, sk)
        for m, n in itertools.product(range(blocks_q), range(blocks_k)):
            q0, k0 = m * block_m, n * block_n
            whole = truth[q0:q0 + block_m, k0:k0 + block_n].all()
            assert bool(mask_geometry.tile_cut(mask, q0, block_m, k0, block_n, sq, sk)) == (not whole), \
                (str(mask), sq, sk, q0, k0)


@pytest.mark.parametrize("block_m,block_n", BLOCKS)
@pytest.mark.parametrize("mask", MASKS, ids=str)
def test_block_ranges_hold_every_shown_pair_and_invert_each_other(mask, block_m, block_n):
    """A key block's query-block range holds every query block with a shown pair in the tile; the
    key-block range of a query block is exactly the key blocks whose range holds it (the partials
    deterministic mode's convert reads)."""
    for sq, sk in LENGTHS:
        blocks_q, blocks_k = ceildiv(sq, block_m), ceildiv(sk, block_n)
        truth = shown_matrix(mask, blocks_q * block_m, blocks_k * block_n, sq, sk)
        visits = np.zeros((blocks_k, blocks_q), bool)
        for n in range(blocks_k):
            lo, hi = mask_geometry.query_block_range(mask, n * block_n, block_n, block_m, sq, sk)
            assert 0 <= lo and hi <= blocks_q or hi <= lo, (str(mask), sq, sk, n, lo, hi)
            visits[n, max(lo, 0):max(hi, 0)] = True
            for m in range(blocks_q):
                if truth[m * block_m:(m + 1) * block_m, n * block_n:(n + 1) * block_n].any():
                    assert lo <= m < hi, (str(mask), sq, sk, n, m, lo, hi)
        for m in range(blocks_q):
            lo, hi = mask_geometry.key_block_range(mask, m * block_m, block_m, block_n, sq, sk)
            assert [n for n in range(max(lo, 0), hi)] == list(np.flatnonzero(visits[:, m])), (str(mask), sq, sk, m)


@pytest.mark.parametrize("mask", MASKS, ids=str)
def test_block_ranges_and_tile_cut_vectorise(mask):
    """The same functions on NumPy arrays of positions give what they give on each int."""
    for sq, sk in LENGTHS[::7]:
        k0, q0 = np.arange(0, sk + 8, 4), np.arange(0, sq + 8, 4)
        for fn, first, other in ((mask_geometry.query_block_range, k0, (4, 8)),
                                 (mask_geometry.key_block_range, q0, (8, 4))):
            lo, hi = fn(mask, first, *other, sq, sk)
            expected = [fn(mask, int(x), *other, sq, sk) for x in first]
            assert list(zip(*(np.broadcast_to(x, first.shape).tolist() for x in (lo, hi)))) == expected
        cut = mask_geometry.tile_cut(mask, q0[:, None], 8, k0[None, :], 4, sq, sk)
        expected = [[bool(mask_geometry.tile_cut(mask, int(a), 8, int(b), 4, sq, sk)) for b in k0] for a in q0]
        np.testing.assert_array_equal(np.broadcast_to(cut, (len(q0), len(k0))), expected)


def test_index_math_floors_alike_on_ints_and_arrays():
    values = np.arange(-9, 10)
    for b in (1, 3, 4):
        assert list(ceildiv(values, b)) == [ceildiv(int(a), b) for a in values] == [-(-int(a) // b) for a in values]
        assert list(values // b) == [int(a) // b for a in values]
    assert (minimum(3, 5), maximum(3, 5), select(True, 1, 2), select(False, 1, 2)) == (3, 5, 1, 2)
    np.testing.assert_array_equal(select(values > 0, values, 0), np.maximum(values, 0))
