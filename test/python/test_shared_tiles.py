"""The XOR swizzle of the tiled body's shared-memory tiles (matrix_layouts.swizzled_chunk, the function
the lowering's addresses evaluate): the 8 rows that one ldmatrix (or one wave of 16-byte cp.async) reads
at the same logical chunk land in 8 different 16-byte bank groups (32 banks x 4 bytes = 8 groups of 16
bytes per 128-byte line), for every row width the head dims 32..256 and the block sizes give."""
import pytest

from fmha_mlir.matrix_layouts import SWIZZLE_ROWS, swizzle_period, swizzled_chunk

BANK_GROUPS = 8   # 16-byte groups in one 128-byte line of banks


def bank_groups(first_row: int, chunk: int, chunks_per_row: int, swizzled: bool = True) -> list[int]:
    """The bank group of logical `chunk` in each of the 8 rows from `first_row` (a multiple of 8)."""
    rows = range(first_row, first_row + SWIZZLE_ROWS)
    stored = [swizzled_chunk(chunk, r, chunks_per_row) if swizzled else chunk for r in rows]
    return [(r * chunks_per_row + c) % BANK_GROUPS for r, c in zip(rows, stored)]


@pytest.mark.parametrize("chunks_per_row", [4, 8, 12, 16, 24, 32])   # rows of 32 .. 256 two-byte elements
def test_eight_rows_at_one_chunk_hit_eight_bank_groups(chunks_per_row):
    for first_row in range(0, 64, SWIZZLE_ROWS):
        for chunk in range(chunks_per_row):
            assert sorted(bank_groups(first_row, chunk, chunks_per_row)) == list(range(BANK_GROUPS)), \
                (chunks_per_row, first_row, chunk)


@pytest.mark.parametrize("chunks_per_row", [4, 8, 12, 16, 24, 32])
def test_the_swizzle_is_a_permutation_of_each_row(chunks_per_row):
    for row in range(64):
        assert sorted(swizzled_chunk(c, row, chunks_per_row) for c in range(chunks_per_row)) == \
            list(range(chunks_per_row))


@pytest.mark.parametrize("chunks_per_row", [8, 16, 32])
def test_without_the_swizzle_the_rows_collide(chunks_per_row):
    """The check can fail: unswizzled rows of a multiple of 128 bytes all start in bank group 0."""
    assert len(set(bank_groups(0, 3, chunks_per_row, swizzled=False))) == 1


def test_period_of_narrow_rows():
    """Rows of 4 chunks (64 bytes): the XOR spans 4 chunks and changes every 2 rows (two rows share a
    128-byte line)."""
    assert swizzle_period(4) == (4, 2) and swizzle_period(12) == (4, 2) and swizzle_period(16) == (8, 1)
