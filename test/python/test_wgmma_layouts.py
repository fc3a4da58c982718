"""fmha_mlir.wgmma_layouts against second sources: the accumulator and register-A fragments against the
mma.m16n8k16 fragments of fmha_mlir.matrix_layouts (checked against the PTX ISA's figures; the PTX ISA's
wgmma figures stack four of them, one per warp), the swizzle against CuTe's bit formula Swizzle<B, 4, 3>,
the tiles against the PTX ISA's canonical layouts written as CuTe (shape, stride) pairs, the descriptor
against its bit-field table and the 128B K-major descriptor verified on the H200 (TENSOR_CORES.md).
Then the same functions on NumPy arrays and on passes.ix.Ix (folded by canonicalize)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fmha_mlir import matrix_layouts, wgmma_layouts as wl
from fmha_mlir.wgmma_layouts import OperandTile

T = 8   # 16-bit elements per 16 bytes


def test_accumulator_is_four_warps_of_mma_c_blocks_covering_64xn_once():
    n = 64
    seen = np.zeros((64, n), int)
    for warp, lane, register in itertools.product(range(4), range(32), range(n // 2)):
        block, r, e = register // 4, (register // 2) % 2, register % 2
        row, col = matrix_layouts.mma_c(lane, r, e)
        assert wl.accumulator(32 * warp + lane, register) == (16 * warp + row, 8 * block + col)
        seen[wl.accumulator(32 * warp + lane, register)] += 1
    assert (seen == 1).all()


def test_register_a_fragment_is_four_warps_of_mma_a():
    seen = np.zeros((64, 16), int)
    for warp, lane, element in itertools.product(range(4), range(32), range(8)):
        row, col = matrix_layouts.mma_a(lane, element // 2, element % 2)
        assert wl.a_fragment(32 * warp + lane, element) == (16 * warp + row, col)
        seen[wl.a_fragment(32 * warp + lane, element)] += 1
    assert (seen == 1).all()


def test_stmatrix_x4_of_a_register_octet_stores_each_accumulator_value_where_it_belongs():
    """stmatrix (PTX ISA: register i of lane l is matrix i's row l / 4, columns 2 (l % 4) + e; lanes 8 i ..
    8 i + 7 give matrix i's row addresses) of registers 8 q .. 8 q + 7, each thread addressing the row of
    accumulator_store_address: every value lands on its accumulator position, every position once."""
    n = 64
    seen = np.zeros((64, n), int)
    for warp, lane, q, i, e in itertools.product(range(4), range(32), range(n // 16), range(4), range(2)):
        row, col = matrix_layouts.ldmatrix(lane, e, transpose=False)
        address_lane = 32 * warp + matrix_layouts.ldmatrix_address_lane(i, row)
        address_row, chunk = wl.accumulator_store_address(address_lane)
        lands = (address_row, 16 * q + 8 * chunk + col)
        assert lands == wl.accumulator(32 * warp + lane, 2 * (4 * q + i) + e)
        seen[lands] += 1
    assert (seen == 1).all()


def _cute_swizzle(x: int, bits: int) -> int:
    """CuTe's Swizzle<bits, 4, 3>: XOR bits [4, 4 + bits) with bits [7, 7 + bits)."""
    mask = ((1 << bits) - 1) << 7
    return x ^ ((x & mask) >> 3)


@pytest.mark.parametrize("swizzle,bits", [(32, 1), (64, 2), (128, 3)])
def test_swizzle_is_cutes_bit_formula_and_permutes_each_period(swizzle, bits):
    offsets = np.arange(4 * wl.SWIZZLE_ALIGNMENT[swizzle])
    physical = wl.swizzle(offsets, swizzle)
    assert [int(p) for p in physical] == [_cute_swizzle(int(x), bits) for x in offsets]
    period = wl.SWIZZLE_ALIGNMENT[swizzle]
    assert (np.sort(physical.reshape(-1, period), axis=1) == offsets.reshape(-1, period)).all()
    assert (physical % 16 == offsets % 16).all()       # 16-byte chunks move whole


def _cute(coord: tuple, shape: tuple, stride: tuple) -> int:
    """A CuTe layout (nested shapes, column-major coordinates) at a flat index per top mode."""
    out = 0
    for index, sub_shape, sub_stride in zip(coord, shape, stride):
        for extent, step in zip(sub_shape, sub_stride):
            out += (index % extent) * step
            index //= extent
    return out


def _ptx_canonical(tile: OperandTile, mn: int, k: int) -> int:
    """The PTX ISA's canonical layout of one k16 slice, in elements, with the tile's LBO / SBO (bytes)."""
    lbo, sbo = tile.leading_byte_offset // 2, tile.stride_byte_offset // 2
    s = tile.swizzle // 16
    if tile.major == "K":
        if s == 0:
            return _cute((mn, k), ((8, 64), (T, 2)), ((T, sbo), (1, lbo)))
        return _cute((mn, k), ((8, 64), (T, 2)), ((s * T, sbo), (1, T)))
    if s == 0:
        return _cute((mn, k), ((T, 1, 64), (8, 2)), ((1, T, sbo), (T, lbo)))
    return _cute((mn, k), ((T, s, 64), (8, 2)), ((1, T, lbo), (s * T, sbo)))


TILES = [OperandTile(mn, k, major, swizzle) for major in ("K", "MN") for swizzle in wl.SWIZZLES
         for mn, k in ((64, 64), (128, 128), (64, 32))
         if (k if major == "K" else mn) % (max(swizzle, 16) // 2) == 0]


@pytest.mark.parametrize("tile", TILES, ids=lambda t: f"{t.major}{t.swizzle}-{t.mn}x{t.k}")
def test_each_k16_slice_is_the_ptx_canonical_layout_at_its_descriptor(tile):
    for k0 in range(0, tile.k, 16):
        start = wl.decode_descriptor(tile.descriptor(0, 0, k0))["address"]
        assert start == tile.offset(0, k0)
        for mn, kk in itertools.product(range(tile.mn), range(16)):
            assert tile.offset(mn, k0 + kk) - start == 2 * _ptx_canonical(tile, mn, kk), (mn, k0 + kk)


@pytest.mark.parametrize("tile", TILES, ids=lambda t: f"{t.major}{t.swizzle}-{t.mn}x{t.k}")
def test_tiles_are_dense_and_their_boxes_cover_them(tile):
    mn, k = np.meshgrid(np.arange(tile.mn), np.arange(tile.k), indexing="ij")
    physical = tile.physical(mn, k)
    assert sorted(physical.reshape(-1).tolist()) == list(range(0, tile.nbytes, 2))
    if tile.swizzle:
        boxes = tile.boxes()
        assert sum(rows * tile.swizzle for _, _, rows in boxes) == tile.nbytes
        for offset, first, rows in boxes:   # a box is rows x swizzle bytes of consecutive elements
            r, c = np.meshgrid(np.arange(rows), np.arange(tile.atom_elements), indexing="ij")
            at = (c + first, r) if tile.major == "MN" else (r, c + first)
            assert (tile.offset(*at) == offset + r * tile.swizzle + 2 * c).all()


def test_descriptor_fields_are_the_documented_bits_and_the_h200_verified_128b_k_major_one():
    address = 0x1_2345_6400   # above the 18-bit shared window: only the low 18 bits count
    tile = OperandTile(64, 64, "K", 128)
    verified = ((address & 0x3FFFF) >> 4) | (1 << 16) | ((1024 >> 4) << 32) | (1 << 62)
    assert tile.descriptor(address) == verified
    assert tile.descriptor(address, 0, 16) - tile.descriptor(address) == 2   # +2 per k16 step
    value = wl.descriptor(0x400, 0x2000, 0x80, 32)
    assert value & 0x3FFF == 0x40 and (value >> 16) & 0x3FFF == 0x200 and (value >> 32) & 0x3FFF == 0x8
    assert value >> 62 == 3 and (value >> 49) & 7 == 0
    assert wl.decode_descriptor(value - (1 << 64)) == {"address": 0x400, "leading_byte_offset": 0x2000,
                                                       "stride_byte_offset": 0x80, "base_offset": 0, "swizzle": 32}


def test_bad_tiles_are_refused():
    with pytest.raises(ValueError, match="swizzle is one of"):
        OperandTile(64, 64, "K", 16)
    with pytest.raises(ValueError, match="does not tile"):
        OperandTile(64, 32, "K", 128)      # 64 bytes of K: half a 128-byte row
    with pytest.raises(ValueError, match="major is"):
        OperandTile(64, 64, "M")


def test_layouts_run_on_arrays_like_on_ints():
    threads, registers = np.meshgrid(np.arange(128), np.arange(32), indexing="ij")
    rows, cols = wl.accumulator(threads, registers)
    assert rows[77, 13] == wl.accumulator(77, 13)[0] and cols[77, 13] == wl.accumulator(77, 13)[1]


def test_swizzle_and_tile_offsets_emitted_through_ix_fold_to_their_int_answers():
    from fmha_mlir.mlir import arith, func, ir, make_context
    from fmha_mlir.passes import ix
    from fmha_mlir.passes.registry import build_pass_manager

    tile = OperandTile(64, 128, "MN", 128)
    cases = [(mn, k) for mn in (0, 7, 63) for k in (0, 9, 127)]
    ctx = make_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        index = ir.IndexType.get()
        with ir.InsertionPoint(module.body):
            function = func.FuncOp("layout", ([], []))
            with ir.InsertionPoint(function.add_entry_block()):
                values = [ix.as_value(tile.physical(ix.Ix(arith.constant(index, mn)), ix.Ix(arith.constant(index, k))))
                          for mn, k in cases]
                func.ReturnOp(values)
            function.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([], [v.type for v in values]))
        build_pass_manager("canonicalize", ctx).run(module.operation)
        returned = list(function.regions[0].blocks[0].operations)[-1].operands
        folded = [ir.IntegerAttr(v.owner.attributes["value"]).value for v in returned]
    assert folded == [tile.physical(mn, k) for mn, k in cases]


def _dq_store_passes(swap: bool) -> list[int]:
    """Shared-memory passes of each of a warp's 64-bit stores of its accumulator into dQ's f32 tile (a
    64-row tile of 32-column boxes; 16 lanes a pass, a pass per distinct dword in the busiest bank)."""
    lanes = np.arange(32)
    row, col = wl.accumulator(lanes, 0)          # warp 0: rows 0..7, columns 0, 2, 4, 6
    counts = []
    for rows in (0, 8):
        for group in range(0, 64, 8):
            column = wl.f32_store_column(group % 32, row) if swap else np.full(32, group % 32)
            offsets = wl.f32_tile_offset(row + rows, 32 * (group // 32) + col + column, 64)
            for half in (offsets[:16], offsets[16:]):
                dwords = {int(o) // 4 + i for o in half for i in range(2)}
                counts.append(max(sum(1 for d in dwords if d % 32 == bank) for bank in range(32)))
    return counts


def test_dq_tile_stores_take_one_pass_a_half_warp():
    """With odd rows storing the column group two over (f32_store_column), every half-warp's 128 bytes
    fall in distinct banks; stored in place, rows r and r ^ 1 share banks (ncu: 4 wavefronts, not 2)."""
    assert set(_dq_store_passes(swap=True)) == {1}
    assert set(_dq_store_passes(swap=False)) == {2}


def test_the_swapped_dq_stores_cover_each_element_once():
    """Every (row, column) of a warp's rows is stored exactly once, at its own swizzled offset."""
    lanes = np.arange(32)
    row, col = wl.accumulator(lanes, 0)
    seen = []
    for rows in (0, 8):
        for group in range(0, 64, 8):
            stored = 32 * (group // 32) + col + wl.f32_store_column(group % 32, row)
            seen += [(int(r), int(c) + e) for r, c in zip(row + rows, stored) for e in (0, 1)]
    assert sorted(seen) == [(r, c) for r in range(16) for c in range(64)]


@pytest.mark.parametrize("hdim", [64, 128, 160, 192, 256])
def test_dq_fragment_order_makes_a_warps_block_one_512_byte_run(hdim):
    """A permutation of every 16-row group, under which the four values a thread's accumulator holds in
    a block of 16 rows x 8 columns (registers 4j .. 4j + 3 of wl.accumulator) lie in one row, in register
    order, at 4 x the thread's lane in its warp from the block's start (a multiple of 128 values from the
    group's first): one aligned v4 atomic a thread, 512 contiguous bytes a warp. Where rows do not hold
    whole blocks (d64, d160, d192), a block's run continues on the next row."""
    for group in (0, 48):
        places = {wl.dq_fragment_position(group + r, c, hdim) for r in range(16) for c in range(hdim)}
        assert places == {(group + r, c) for r in range(16) for c in range(hdim)}
    for thread in range(128):
        for j in range(hdim // 8):   # the 8-column blocks of a 64 x hdim accumulator
            logical = [wl.accumulator(thread, 4 * j + r) for r in range(4)]
            places = [wl.dq_fragment_position(row, 8 * j + col % 8, hdim) for row, col in logical]
            row, col = places[0]
            assert places == [(row, col + r) for r in range(4)]
            from_group = (row - logical[0][0] // 16 * 16) * hdim + col
            assert from_group % 128 == 4 * (thread % 32)


@pytest.mark.parametrize("hdim,tile,unit", [(64, 64, 64), (128, 128, 64), (160, 192, 96), (192, 192, 96),
                                            (256, 256, 128)])
def test_dq_fragment_places_add_up_as_the_body_adds_them(hdim, tile, unit):
    """flash_bwd.add_dq_runs adds the lane's place (its first element, with its unit's first column and the
    run's shift) to each run's constant one (wl.dq_run_place): the sum is the run's own place, for every
    thread of every unit of a `tile`-column tile, on its narrow products too (96 columns a unit: m64n32),
    except the runs of zero columns past the head dim, which it skips. The shifts are dq_run_period's."""
    n = math.gcd(unit, 64)
    shifts = set()
    for col0 in range(0, tile, unit):
        for thread in range(128):
            for piece, register in itertools.product(range(unit // n), range(0, n // 2, 4)):
                row, col = wl.accumulator_offset(register)
                if col0 + piece * n + col >= hdim:   # the tile's zero columns: no run
                    continue
                for mi in range(2):
                    shift, (r, c) = wl.dq_run_place(64 * mi + row, piece * n + col, hdim)
                    shifts.add(shift)
                    first = wl.accumulator(thread, 0)
                    lane_row, lane_col = wl.dq_fragment_position(first[0], col0 + first[1] + shift, hdim)
                    logical = wl.accumulator(thread, register)
                    assert (lane_row + r, lane_col + c) == wl.dq_fragment_position(
                        64 * mi + logical[0], col0 + piece * n + logical[1], hdim)
    assert shifts == {8 * s for s in range(wl.dq_run_period(hdim))}


def test_dq_fragment_order_is_taken_only_where_consumers_add_whole_runs():
    import dataclasses

    from fmha_mlir.bodies import dq_fragment_order
    from fmha_mlir.bodies.wgmma import WGMMA_TABLE
    from fmha_mlir.spec import AttentionBwdSpec

    d256 = WGMMA_TABLE[256]
    assert dq_fragment_order(AttentionBwdSpec("bf16", 256), d256)
    assert not dq_fragment_order(AttentionBwdSpec("bf16", 128), WGMMA_TABLE[128])          # the writer's bulk adds
    assert not dq_fragment_order(AttentionBwdSpec("bf16", 256, deterministic=True), d256)  # partials stored
    assert not dq_fragment_order(AttentionBwdSpec("bf16", 256, grad_accum="bf16"), d256)   # no dq_acc
    assert dq_fragment_order(AttentionBwdSpec("bf16", 192), d256)   # a block's run may continue on the next row
    assert dq_fragment_order(AttentionBwdSpec("bf16", 160), d256)   # five places a lane; on 192-column tiles
    assert not dq_fragment_order(AttentionBwdSpec("bf16", 160), dataclasses.replace(d256, dq_fragment=False))
    assert not dq_fragment_order(AttentionBwdSpec("bf16", 224), d256)   # seven: more than FRAGMENT_PLACES
    assert not dq_fragment_order(AttentionBwdSpec("bf16", 200), d256)   # 25
    # P^T in registers leaves no room for the places of rows that are not whole blocks
    assert not dq_fragment_order(AttentionBwdSpec("bf16", 64), WGMMA_TABLE[64].without_dq_bulk())
    assert dq_fragment_order(AttentionBwdSpec("bf16", 128), WGMMA_TABLE[128].without_dq_bulk())
