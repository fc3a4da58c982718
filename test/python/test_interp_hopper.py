"""The Hopper emulation (fmha_mlir/runtime/interp/hopper.py) runs the probe kernel's data path in NumPy:
TMA boxes (swizzled, zero-filled past K) into a shared image, then wgmma SS and RS from the descriptors
the atoms build (wgmma_layouts.OperandTile.descriptor), equal to A B^T and bf16(C) V. Planted mutants:
a wrong swizzle mode, a wrong SBO and a box placed without the swizzle each change the product."""
from __future__ import annotations

import numpy as np
import pytest

from fmha_mlir.dtypes import from_storage, to_storage
from fmha_mlir.runtime.interp import hopper
from fmha_mlir.wgmma_layouts import DESCRIPTOR_MODE, OperandTile

M, N, K, N2, BK = 64, 64, 100, 32, 64
rng = np.random.default_rng(3)
A, B, V = (to_storage(rng.standard_normal(s).astype(np.float32), "bf16") for s in ((M, K), (N, K), (N, N2)))
DECODE = lambda x: from_storage(x, "bf16").astype(np.float32)  # noqa: E731
A_TILE, B_TILE, V_TILE = OperandTile(M, BK, "K", 128), OperandTile(N, BK, "K", 128), OperandTile(N2, N, "MN", 64)


def _load(tile: OperandTile, tensor, row, col, shared, base, swizzle=None):
    for offset, first, rows in tile.boxes():
        hopper.tma_box(shared, base + offset, tensor, row, col + first, rows, tile.atom_elements,
                       tile.swizzle if swizzle is None else swizzle)


def _probe(descriptor_of=lambda tile, base, mn0, k0: tile.descriptor(base, mn0, k0), box_swizzle=None):
    shared = np.zeros(64 * 1024, np.uint8)
    c = np.zeros((M, N), np.float32)
    for kb in range(-(-K // BK)):
        _load(A_TILE, A, 0, kb * BK, shared, 0, box_swizzle)
        _load(B_TILE, B, 0, kb * BK, shared, 8192, box_swizzle)
        for k16 in range(BK // 16):
            c = hopper.wgmma(shared, c, descriptor_of(A_TILE, 0, 0, 16 * k16), descriptor_of(B_TILE, 8192, 0, 16 * k16),
                             N, "K", np.uint16, first=kb == 0 and k16 == 0, decode=DECODE)
    _load(V_TILE, V, 0, 0, shared, 32768, box_swizzle)
    p = DECODE(to_storage(c, "bf16"))
    c2 = np.zeros((M, N2), np.float32)
    for kb in range(N // 16):
        c2 = hopper.wgmma(shared, c2, p[:, 16 * kb:16 * kb + 16], descriptor_of(V_TILE, 32768, 0, 16 * kb), N2, "MN",
                          np.uint16, first=kb == 0, decode=DECODE)
    return c, c2


def test_the_probe_data_path_computes_both_products():
    c, c2 = _probe()
    af, bf, vf = (DECODE(x).astype(np.float64) for x in (A, B, V))
    np.testing.assert_allclose(c, af @ bf.T, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(c2, DECODE(to_storage(c, "bf16")).astype(np.float64) @ vf, rtol=1e-5, atol=1e-4)


def test_boxes_past_the_tensor_read_zero():
    shared = np.full(16384, 0xFF, np.uint8)
    hopper.tma_box(shared, 0, A, 0, 64, 64, 64, 128)           # columns 64..127 of a 100-column tensor
    box = hopper.read_operand(shared, A_TILE.descriptor(0, 0, 48), 64, "K", np.uint16)   # columns 112..127
    assert (box == 0).all()                                       # all past column 100
    assert (hopper.read_operand(shared, A_TILE.descriptor(0, 0, 32), 64, "K", np.uint16)[:, :4] == A[:, 96:100]).all()


@pytest.mark.parametrize("mutant", ["swizzle mode", "stride byte offset", "box without swizzle"])
def test_planted_layout_mutants_change_the_product(mutant):
    good = _probe()
    if mutant == "swizzle mode":
        bad = _probe(lambda t, b, m, k: t.descriptor(b, m, k) - (DESCRIPTOR_MODE[t.swizzle] << 62)
                     + (DESCRIPTOR_MODE[64 if t.swizzle == 128 else 128] << 62))
    elif mutant == "stride byte offset":
        bad = _probe(lambda t, b, m, k: t.descriptor(b, m, k) + (8 << 32))
    else:
        bad = _probe(box_swizzle=0)
    assert not np.allclose(good[0], bad[0]) or not np.allclose(good[1], bad[1])
