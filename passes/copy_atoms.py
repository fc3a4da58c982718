"""Copy atoms: how a tiled body moves rows of a global tensor into a shared tile on each target.

A copy atom offers what the schedule asks (passes/atoms.py, CopyAtom): `rows` copies a block of rows
[first, first + tile.rows) of source[prefix..., row, :], zero past `limit` (a sequence end) and in the
tile's columns past the source's head dim (a tile wider than it: bodies.tile_hdims), `row_values`
one f32 per query row of a block (LSE, D), a given fill past seqlen_q, `commit` closes what was issued into one
group and `wait(pending)` waits until at most `pending` groups are in flight. Which thread copies what
comes from matrix_layouts.copy_chunk: thread t takes the 16-byte chunks t, t + threads, ...

CpAsyncCopy (NVIDIA): nvgpu.device_async_copy (cp.async) straight into the swizzled tile, zero fill by
the instruction's source size, so copies of the next step overlap this one's products.
BufferLoadCopy (AMD): amdgpu.raw_buffer_load into registers, a select for the zeros, a store into LDS:
synchronous, so commit and wait have nothing to do (the schedule's barrier orders the stores).
"""
from __future__ import annotations

from fmha_mlir.bodies import COPY_ELEMENTS
from fmha_mlir.matrix_layouts import copy_chunk
from fmha_mlir.mlir import arith, ir, memref, scf, vector

from .ir_builders import create_op, index, splat, vector_shape
from .ix import Ix, LaneValues, as_value
from .shared_tiles import Grid, Tile


class CpAsyncCopy:
    """cp.async into swizzled tiles (shared_tiles.Tile); `kernel` is the tiled kernel's frame."""

    def __init__(self, kernel):
        self.kernel = kernel

    def rows(self, source: "ir.Value", prefix: list, first: "ir.Value", limit: "ir.Value", tile: Tile,
             row_offset: "ir.Value") -> None:
        """Async-copy rows [first, first + tile.rows) of source[prefix..., row, :] into the tile from row
        `row_offset` on, 16 bytes per copy; rows at or past `limit` and chunks at or past the source's head
        dim are zero-filled (and read nothing: the copy's source size 0, at a column clamped into the row).
        When a round covers whole rows, a multiple of 8, its shared address is the thread's hoisted one
        plus a constant."""
        kernel = self.kernel
        chunks = tile.chunks_per_row
        total = tile.rows * chunks
        threads = kernel.config.threads
        regular = threads % chunks == 0 and (threads // chunks) % 8 == 0
        if regular:
            lane_row, lane_chunk = copy_chunk(Ix.lane(kernel.tid, kernel.lanes), chunks)
        last = i32(arith.subi(limit, index(1)))
        head_dim = narrower_head_dim(source, tile.cols)
        for start in range(0, total, threads):
            chunk = arith.addi(kernel.tid, index(start))
            if regular:
                row = arith.addi(as_value(lane_row), index(start // chunks))
                dst = tile.element(kernel.lanes, lane_row, lane_chunk, row=start // chunks, row_offset=row_offset)
                col = arith.muli(as_value(lane_chunk), index(COPY_ELEMENTS))
            else:
                row, col8 = copy_chunk(Ix.lane(chunk), chunks)
                dst = tile.element(LaneValues(ir.InsertionPoint.current), row, col8, row_offset=row_offset)
                row, col = as_value(row), as_value(col8 * COPY_ELEMENTS)
            src_row = i32(arith.addi(first, row))   # rows and their bounds fit i32: cheaper compares
            valid = arith.cmpi(arith.CmpIPredicate.sle, src_row, last)
            if head_dim is not None:
                valid, col = inside_columns(valid, col, head_dim)
            clamped = arith.index_cast(ir.IndexType.get(), arith.minsi(src_row, last))
            count = arith.select(valid, index(COPY_ELEMENTS), index(0))
            copy = lambda: async_copy(tile.flat, [dst], source, prefix + [clamped, col], COPY_ELEMENTS, count)
            if total - start >= threads:
                copy()
            else:  # the last round has fewer chunks than threads
                guard = scf.IfOp(arith.cmpi(arith.CmpIPredicate.ult, chunk, index(total)))
                with ir.InsertionPoint(guard.then_block):
                    copy()
                    scf.yield_([])

    def row_values(self, source: "ir.Value", prefix: list, first: "ir.Value", tile: Tile, stage: "ir.Value",
                   offset: int, fill: float = 0.0) -> None:
        """Async-copy source[prefix..., first + i] (f32, i < block_m) into tile row `stage`, 4 bytes each,
        `fill` past seqlen_q (zero: by the copy's own zero fill; anything else: stored instead of copied,
        so that no copy lands on it later). Threads [offset, offset + block_m) do it."""
        kernel = self.kernel

        def copy(mine, clamped, valid):
            at = [arith.addi(arith.muli(stage, index(kernel.bm)), mine)]
            if fill == 0.0:
                async_copy(tile.flat, at, source, prefix + [clamped], 1, arith.select(valid, index(1), index(0)))
                return
            inside = scf.IfOp(valid, has_else=True)
            with ir.InsertionPoint(inside.then_block):
                async_copy(tile.flat, at, source, prefix + [clamped], 1, index(1))
                scf.yield_([])
            with ir.InsertionPoint(inside.else_block):
                memref.store(arith.constant(ir.F32Type.get(), fill), tile.flat, at)
                scf.yield_([])

        kernel.per_query_row(first, offset, copy)

    def commit(self) -> None:
        commit_copies()

    def wait(self, pending: int) -> None:
        wait_copies(pending)


class BufferLoadCopy:
    """16-byte buffer loads through registers into row-major LDS grids (shared_tiles.Grid)."""

    def __init__(self, kernel):
        self.kernel = kernel

    def _load(self, result: "ir.Type", source: "ir.Value", indices: list, valid: "ir.Value",
              fill: float = 0.0) -> "ir.Value":
        """amdgpu.raw_buffer_load of source[indices] (in range by construction), `fill` where not `valid`:
        the buffer's own out-of-range rule only covers the last rows of the whole tensor, not of a head."""
        loaded = create_op("amdgpu.raw_buffer_load", result, [source] + [i32(i) for i in indices],
                           {"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, len(indices), 0])})
        element = result.element_type if isinstance(result, ir.VectorType) else result
        return arith.select(valid, loaded, splat(arith.constant(element, fill), vector_shape(result)))

    def rows(self, source: "ir.Value", prefix: list, first: "ir.Value", limit: "ir.Value", tile: Grid,
             row_offset: "ir.Value | None" = None) -> None:
        """Rows [first, first + tile.rows) of source[prefix..., row, :] into grid rows [0, tile.rows), 16
        bytes per lane and load; rows at or past `limit` and chunks at or past the source's head dim become
        zeros (loaded from a column clamped into the row, then selected away). All of a round's loads are issued
        before its stores, so their latencies overlap. One buffer: `row_offset` must be None."""
        if row_offset is not None:
            raise ValueError("BufferLoadCopy fills one buffer; a row offset names a stage it does not have")
        kernel = self.kernel
        chunks = tile.cols // COPY_ELEMENTS
        total, threads = tile.rows * chunks, kernel.config.threads
        chunk_type = ir.VectorType.get([COPY_ELEMENTS], kernel.element)
        last = arith.subi(limit, index(1))
        head_dim = narrower_head_dim(source, tile.cols)
        pending = []
        for start in range(0, total, threads):
            chunk = arith.addi(kernel.tid, index(start))
            row, chunk8 = copy_chunk(Ix.lane(chunk), chunks)
            row, col = as_value(row), as_value(chunk8 * COPY_ELEMENTS)
            src_row = arith.addi(first, row)
            valid = arith.cmpi(arith.CmpIPredicate.slt, src_row, limit)
            src_col = col   # the grid's column stays the chunk's own
            if head_dim is not None:
                valid, src_col = inside_columns(valid, col, head_dim)
            at = prefix + [arith.minsi(src_row, last), src_col]
            if total - start >= threads:
                pending.append((self._load(chunk_type, source, at, valid), row, col))
            else:  # the last round has fewer chunks than threads
                guard = scf.IfOp(arith.cmpi(arith.CmpIPredicate.ult, chunk, index(total)))
                with ir.InsertionPoint(guard.then_block):
                    vector.store(self._load(chunk_type, source, at, valid), tile.view, [row, col])
                    scf.yield_([])
        for value, row, col in pending:
            vector.store(value, tile.view, [row, col])

    def row_values(self, source: "ir.Value", prefix: list, first: "ir.Value", tile: Grid, stage: "ir.Value",
                   offset: int, fill: float = 0.0) -> None:
        """source[prefix..., first + i] (f32, i < block_m) into grid row `stage`, `fill` past seqlen_q;
        threads [offset, offset + block_m) do it."""
        kernel = self.kernel

        def copy(mine, clamped, valid):
            value = self._load(ir.F32Type.get(), source, prefix + [clamped], valid, fill)
            memref.store(value, tile.view, [stage, mine])

        kernel.per_query_row(first, offset, copy)

    def commit(self) -> None:
        """Nothing in flight: the loads complete in registers."""

    def wait(self, pending: int) -> None:
        """Nothing in flight: the loads complete in registers."""


def narrower_head_dim(source: "ir.Value", tile_cols: int) -> int | None:
    """The source's head dim (its static last dimension) where the tile is wider, else None."""
    head_dim = ir.MemRefType(source.type).shape[-1]
    return head_dim if head_dim < tile_cols else None


def inside_columns(valid: "ir.Value", col: "ir.Value", head_dim: int) -> tuple["ir.Value", "ir.Value"]:
    """(valid and the 16-byte chunk at `col` lies inside the head dim, col clamped to the row's last
    chunk): a chunk past the head dim is zero-filled, and its clamped address reads inside the row."""
    inside = arith.cmpi(arith.CmpIPredicate.ult, col, index(head_dim))
    return arith.andi(valid, inside), arith.minui(col, index(head_dim - COPY_ELEMENTS))


def i32(value: "ir.Value") -> "ir.Value":
    return arith.index_cast(ir.IntegerType.get_signless(32), value)


# -- cp.async as the nvgpu / nvvm dialects spell it --------------------------------------------------


def async_copy(dst, dst_indices, src, src_indices, elements: int, count) -> None:
    """Copy `elements` elements from src[src_indices] to dst[dst_indices] without waiting; only `count`
    (an index value, 0..elements) are read, the rest of the destination is zero-filled. 16-byte copies
    bypass L1 (cp.async.cg); smaller ones cannot (cp.async.ca)."""
    segments = ir.DenseI32ArrayAttr.get([1, len(dst_indices), 1, len(src_indices), 1])
    attributes = {"dstElements": ir.IntegerAttr.get(ir.IndexType.get(), elements), "operandSegmentSizes": segments}
    if elements * ir.MemRefType(dst.type).element_type.width // 8 == 16:
        attributes["bypassL1"] = ir.UnitAttr.get()
    create_op("nvgpu.device_async_copy", ir.Type.parse("!nvgpu.device.async.token"),
              [dst, *dst_indices, src, *src_indices, count], attributes)


def commit_copies() -> None:
    """Close this thread's copies issued since the last commit into one group (cp.async.commit_group)."""
    ir.Operation.create("nvvm.cp.async.commit.group", results=[], operands=[])


def wait_copies(pending: int) -> None:
    """Wait until at most `pending` of this thread's most recent groups are still in flight."""
    ir.Operation.create("nvvm.cp.async.wait.group", results=[], operands=[],
                        attributes={"n": ir.IntegerAttr.get(ir.IntegerType.get_signless(32), pending)})
