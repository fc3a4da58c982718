"""The MFMA body's padded LDS rows keep its k-contiguous fragment reads free of bank conflicts.

The model (CDNA3 ISA guide, "Local data share": 32 banks of 4 bytes; CDNA4 has at least as many, and a
set of dwords in distinct banks mod 32 is distinct mod 64 too): a wave's read of w bytes per lane is
served 128 / w lanes at a time, and a group costs one pass when its lanes' dwords lie in distinct banks
(lanes reading the same dword share it). The reads checked are the ones the body issues most: A and B
fragments along k (lane l: row l % M, elements KL (l / M) .. + KL) from every 2-byte tile of every
table row. Without the pad, rows a multiple of 128 bytes long put all 16 or 32 rows of a fragment in the
same banks; the test shows that too, so the check can fail.
"""
import dataclasses

import numpy as np
import pytest

from fmha_mlir import matrix_layouts as layouts
from fmha_mlir.bodies import AMD_TILED_TABLE, ELEMENT_BYTES, TiledBody
from fmha_mlir.spec import AttentionBwdSpec

BANKS, BANK_BYTES, BYTES_PER_PASS = 32, 4, 128


def passes(addresses: list[int], width: int) -> int:
    """LDS passes a wave's reads of `width` bytes at byte `addresses` (one per lane) take."""
    lanes = BYTES_PER_PASS // width
    total = 0
    for start in range(0, len(addresses), lanes):
        dwords = {a // BANK_BYTES + i for a in addresses[start:start + lanes] for i in range(width // BANK_BYTES)}
        per_bank = {}
        for dword in dwords:
            per_bank.setdefault(dword % BANKS, set()).add(dword)
        total += max(len(ds) for ds in per_bank.values())
    return total


def fragment_addresses(shape: layouts.MfmaShape, pitch: int, row0: int, k0: int) -> list[int]:
    """Byte address of each lane's A fragment (rows row0.., k k0..) in a tile of `pitch` elements per row."""
    row, k = shape.a(np.arange(layouts.WAVE64), 0, 0)   # every lane at once: the layout on a NumPy array
    return list((((row0 + row) * pitch + k0 + k) * ELEMENT_BYTES).tolist())


ROWS = [(arch, hdim, config) for arch, rows in AMD_TILED_TABLE.items() for hdim, config in rows.items()]


@pytest.mark.parametrize("arch,hdim,config", ROWS, ids=[f"{a}-d{h}" for a, h, _ in ROWS])
def test_fragment_reads_of_every_tile_take_the_fewest_passes(arch, hdim, config):
    spec = AttentionBwdSpec("bf16", hdim)
    shape = config.mfma
    width = shape.k_per_lane * ELEMENT_BYTES
    ideal = layouts.WAVE64 * width // BYTES_PER_PASS
    plain = dataclasses.replace(config, swizzle="none")
    conflicted = 0
    for tile, unpadded in zip(TiledBody.shared_layout(spec, config), TiledBody.shared_layout(spec, plain)):
        if tile.element_bytes != ELEMENT_BYTES:
            continue
        assert tile.pad == shape.k_per_lane and tile.pitch * ELEMENT_BYTES % width == 0   # fragments stay aligned
        for row0 in range(0, tile.rows, shape.m):
            for k0 in range(0, tile.cols, shape.k):
                assert passes(fragment_addresses(shape, tile.pitch, row0, k0), width) == ideal, (tile.name, row0, k0)
        conflicted += passes(fragment_addresses(shape, unpadded.pitch, 0, 0), width) > ideal
    assert conflicted > 0   # the unpadded layout of the same tiles conflicts: the pad is what fixes it
