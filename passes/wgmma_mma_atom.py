"""The schedule's matrix atom on wgmma (passes/atoms.py, MmaAtom; sm_90a): a warpgroup's m64n64k16, or
m64nNk16 with N dividing 64 for a product whose warpgroup holds columns that are not whole 64-column
blocks (`narrowed`: S^T split along the queries at d256; dK, dV and dQ split along a head dim of 192).

An instruction tile is 64 x n of one warpgroup: its accumulator an !llvm.struct of n / 2 f32 per thread
(wgmma_layouts.accumulator), its groups the n / 4 register pairs that hold two adjacent columns of one row
(group_axis "col", as mma.sync's). Operands are read from shared tiles in wgmma's layout
(passes/wgmma_tiles.py) through matrix descriptors, either major; an A operand taken from accumulators
(P^T, dS^T) is the RS form, since the accumulator's pattern over 16 columns is the A operand's.

A `gemm` is one chain per instruction tile, the first product with scale-d = 0 where the accumulator
starts at zero (zeroed accumulators make ptxas serialise the chain), fenced before and committed after
as one group; the schedule waits for it at once or, to overlap it with other work, later (`complete`).
Shared tiles written by the generic proxy (cp.async, st.shared) are published to wgmma, which reads
through the async proxy, by a proxy fence (`shared_written`).
"""
from __future__ import annotations

from math import gcd

from fmha_mlir import wgmma_layouts
from fmha_mlir.kernel_config import WGMMA_SHAPE
from fmha_mlir.mlir import arith, ir, vector

from . import wgmma_atom
from .atoms import Operand, Registers
from .hopper_sync import fence_proxy_async
from .ir_builders import index, shared_pointer
from .ix import Ix, LaneValues
from .wgmma_tiles import BLOCK, SWIZZLE, WgmmaTile, wgmma_views

M, N, K = WGMMA_SHAPE   # one warpgroup's instruction tile: N, the default n, is one swizzled block (wgmma_tiles.BLOCK)


class WgmmaMmaAtom:
    m, k = M, K
    shape = None
    group_axis, group_width = "col", 2
    asynchronous = True

    def __init__(self, element: "ir.Type", thread: "ir.Value", lanes: LaneValues, n: int = N):
        self.element, self.lanes = element, lanes
        self.n, self.group_count = n, n // 4
        self.thread = Ix.lane(thread, lanes)
        self.ops = wgmma_atom.WgmmaAtom(n, str(element), thread)
        self.c_type = self.ops.acc_type
        with lanes.hoist:
            self.zero = self.ops.zeros()
        self.i64 = ir.IntegerType.get_signless(64)
        self.base_field = self.shared_base = None    # set by shared_tiles, called before any product or store

    def narrowed(self, cols: int) -> "WgmmaMmaAtom":
        """The atom for a unit tile of `cols` columns: where they are not whole swizzled blocks, m64nN with
        N = gcd(cols, 64), so that every product's columns lie inside one block (S^T of a warpgroup that
        holds 32 of a query block's columns; 96 of d192's head-dim columns: m64n32), else this one."""
        if cols % self.n == 0:
            return self
        atom = WgmmaMmaAtom(self.element, self.ops.thread, self.lanes, gcd(cols, self.n))
        atom.base_field, atom.shared_base = self.base_field, self.shared_base
        return atom

    # -- positions -------------------------------------------------------------------------------------

    def position(self, register: int = 0, element: int = 0) -> tuple[Ix, Ix]:
        """(row, col) inside the 64 x n tile of this thread's group `register`, element `element`."""
        return wgmma_layouts.accumulator(self.thread, 2 * register + element)

    def group_offset(self, group: int, element: int) -> tuple[int, int]:
        return wgmma_layouts.accumulator_offset(2 * group + element)

    def groups(self, c: "ir.Value") -> list["ir.Value"]:
        values = self.ops.values(c)
        pair = ir.VectorType.get([2], ir.F32Type.get())
        return [vector.from_elements(pair, values[2 * g:2 * g + 2]) for g in range(self.group_count)]

    # -- shared tiles ----------------------------------------------------------------------------------

    def shared_tiles(self, layout: list, config) -> dict:
        tiles, base = wgmma_views(layout, self.element)
        self.shared_base = base
        # A descriptor's address field: the shared address in 16-byte units (an 18-bit window).
        self.base_field = arith.index_cast(self.i64, arith.divui(arith.remui(base, index(1 << 18)), index(16)))
        return tiles

    def shared_written(self) -> None:
        """This thread's completed copies and stores into the tiles become visible to wgmma's reads."""
        fence_proxy_async()

    def store_groups(self, tile: WgmmaTile, values, row: "ir.Value", col: "ir.Value",
                     after_loop: bool = False) -> None:
        """Each 16 x 16 block of a warp's groups rounded and stored by one stmatrix x4: the accumulator's
        pattern over an 8 x 8 block is stmatrix's fragment (wgmma_layouts.accumulator_store_address), so
        a warp writes 512 bytes an instruction where 4-byte stores of each group wrote 128. The lane's
        addresses are built at the kernel's start, beside the step loop's; `after_loop` stores build them
        where they are, from a thread id pinned there (wgmma_atom.pinned_index), so that they do not live
        across the loop."""
        if self.n % 16:
            raise ValueError(f"an stmatrix x4 stores 16 columns of a warp's rows: m64n{self.n} holds no whole ones")
        thread, lanes = self.ops.thread, self.lanes
        if after_loop:
            thread, lanes = wgmma_atom.pinned_index(thread), LaneValues(ir.InsertionPoint.current)
        lane_row, lane_chunk = wgmma_layouts.accumulator_store_address(Ix.lane(thread, lanes))
        if self.n % BLOCK == 0:   # the unit's first column starts a swizzled block
            chunk_lane = lane_chunk
            chunk_offset = lanes.get(("wgmma_chunks", id(col)), lambda: arith.divui(col, index(8)))
        else:   # a narrow unit's columns lie inside one block (n divides it), from a uniform chunk of it
            chunk_lane = (Ix.lane(col, lanes) // 8) % (BLOCK // 8) + lane_chunk
            chunk_offset = lanes.get(("wgmma_blocks", id(col)),
                                     lambda: arith.muli(arith.divui(col, index(BLOCK)), index(BLOCK // 8)))
        start = arith.addi(self.shared_base, index(tile.offset))
        for mi, tiles in enumerate(values):
            for ni, groups in enumerate(tiles):
                for q in range(0, len(groups), 4):
                    at = tile.element(lanes, lane_row, chunk_lane, row=mi * M, col=ni * self.n + 4 * q,
                                      row_offset=row, chunk_offset=chunk_offset)
                    wgmma_atom.store_matrices(shared_pointer(arith.addi(start, arith.muli(at, index(2)))),
                                              [self.ops.pack(pair) for pair in groups[q:q + 4]])

    # -- products --------------------------------------------------------------------------------------

    def gemm(self, acc: list[list["ir.Value"]], tile, k_extent: int, a: "Operand | Registers",
             b: Operand, wait: bool = True) -> list[list["ir.Value"]]:
        """acc[mi][ni] += A B over k_extent for a warpgroup's tile, one wgmma chain per 64 x n, committed
        as one group (waited for unless `wait` is False: then `complete` waits)."""
        a_base = None if isinstance(a, Registers) else self._operand_base(a)
        pieces = range(tile.cols // self.n)
        if b.k_major or self.n % BLOCK == 0:   # every instruction tile a constant away from the unit's first
            b_base = self._operand_base(b)
            b_at = [(b_base, ni * self.n) for ni in pieces]
        else:   # a narrow tile's columns along MN start anywhere inside a block: each its own base
            b_at = [(self._operand_base(b, ni * self.n), 0) for ni in pieces]
        wgmma_atom.fence()
        out = [list(row) for row in acc]
        for mi in range(tile.rows // M):
            for ni in pieces:
                c = out[mi][ni]
                first = c is self.zero
                for k0 in range(0, k_extent, K):
                    b_desc = self._descriptor(b, *b_at[ni], k0)
                    if isinstance(a, Registers):
                        c = self.ops.mma_rs(c, self._registers(a, mi, k0), b_desc, first,
                                            "K" if b.k_major else "MN")
                    else:
                        c = self.ops.mma(c, self._descriptor(a, a_base, mi * M, k0), b_desc, first,
                                         "K" if a.k_major else "MN", "K" if b.k_major else "MN")
                    first = False
                out[mi][ni] = c
        wgmma_atom.commit()
        if wait:
            wgmma_atom.wait(0)
        return out

    def complete(self, pending: int) -> None:
        wgmma_atom.wait(pending)

    def registers(self, groups: list) -> Registers:
        """Each group rounded into one packed .b32 register (an A element pair, wgmma_layouts.a_fragment)."""
        return Registers([[[self.ops.pack(g) for g in tile] for tile in row] for row in groups])

    def _operand_base(self, operand: Operand, col_offset: "int | None" = None) -> "ir.Value":
        """The descriptor address field of the operand's first element (unit row / column, stage), or of
        its column col_offset columns on, which may lie inside a swizzled block."""
        tile = operand.tile
        if col_offset is None:
            offset = tile.bytes_at(operand.row, operand.col)
        else:
            col = index(col_offset) if operand.col is None else arith.addi(operand.col, index(col_offset))
            offset = tile.bytes_at(operand.row, col, inside_block=True)
        if offset is None:
            return arith.addi(self.base_field, arith.constant(self.i64, tile.offset // 16))
        start = arith.addi(offset, index(tile.offset))
        return arith.addi(self.base_field, arith.index_cast(self.i64, arith.divui(start, index(16))))

    def _descriptor(self, operand: Operand, base: "ir.Value", mn0: int, k0: int) -> "ir.Value":
        """The descriptor of the operand's 64 x 16 (mn x k) slice at (mn0, k0) from its first element."""
        tile: WgmmaTile = operand.tile
        major = "K" if operand.k_major else "MN"
        layout = tile.operand(major)
        offset = layout.offset(mn0, k0)
        constant = wgmma_layouts.descriptor(offset, layout.leading_byte_offset, layout.stride_byte_offset, SWIZZLE)
        return wgmma_atom.offset_descriptor(base, constant)

    def _registers(self, a: Registers, mi: int, k0: int) -> list["ir.Value"]:
        """The RS A operand of k-block k0: the packed groups 4 j .. 4 j + 3 of the tile holding its columns
        (j the k-block inside it)."""
        j = (k0 % self.n) // K
        return a.groups[mi][k0 // self.n][4 * j:4 * j + 4]

