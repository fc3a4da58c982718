"""The NVIDIA matrix atom (passes/atoms.py, MmaAtom): how mma.sync and its operand loads are spelled.

The atom loads operand fragments of one instruction tile from a shared tile, issues the product, turns
accumulators into the next product's A operand, and says which matrix element each accumulator
register holds: every position is a function of fmha_mlir/matrix_layouts.py evaluated on the lane, the
same function the CPU interpreter evaluates.

MmaSyncAtom: NVIDIA mma.sync.m16n8k16 (f16 / bf16 operands, f32 accumulators), operands through ldmatrix.
"""
from __future__ import annotations

from fmha_mlir import matrix_layouts
from fmha_mlir.bodies import COPY_ELEMENTS
from fmha_mlir.mlir import arith, ir, vector

from .atoms import Operand, Registers, SynchronousAtom
from .ir_builders import create_op, index
from .ix import Ix, LaneValues, as_value
from .shared_tiles import Tile, shared_views

LAYOUT = matrix_layouts.MMA_M16N8K16
M, N, K = LAYOUT.m, LAYOUT.n, LAYOUT.k


class MmaSyncAtom(SynchronousAtom):
    """mma.sync.m16n8k16: A 16x16 (vector<4x2xT>), B 16x8 (vector<2x2xT>), C 16x8 (vector<2x2xf32>).

    Operands come from shared tiles through ldmatrix: lanes 8i..8i+7 address the rows of matrix i, and
    matrix i of an x4 covers rows +8 (i % 2) or +8 (i // 2) and columns +8 (i // 2) or +8 (i % 2) of
    the 16x16 block, depending on which of A, B and .trans it feeds (matrix_layouts.ldmatrix_address).
    Each lane's part of every address and position is built once (shared_tiles.LaneValues)."""

    m, n, k = M, N, K
    shape = LAYOUT
    group_axis, group_count, group_width = "col", LAYOUT.c_registers, 2   # a register: one row, two columns

    def __init__(self, element: "ir.Type", lane: "ir.Value", lanes: LaneValues):
        self.element = element
        self.lanes = lanes
        self.lane = Ix.lane(lane, lanes)
        self._address(4, rows_first=True)    # the x4 loads' lane addresses first: every product uses them
        self._address(4, rows_first=False)
        with lanes.hoist:
            self.zero = arith.constant(ir.VectorType.get([2, 2], ir.F32Type.get()), ir.DenseElementsAttr.get_splat(
                ir.VectorType.get([2, 2], ir.F32Type.get()), ir.FloatAttr.get_f32(0.0)))
        self.a_type = ir.VectorType.get([4, 2], element)
        self.b_type = ir.VectorType.get([2, 2], element)
        self.c_type = ir.VectorType.get([2, 2], ir.F32Type.get())

    def position(self, register: int = 0, element: int = 0) -> tuple[Ix, Ix]:
        """(row, col) inside the 16x8 accumulator tile of this lane's (register, element) (LAYOUT.c)."""
        return LAYOUT.c(self.lane, register, element)

    def group_offset(self, group: int, element: int) -> tuple[int, int]:
        return LAYOUT.c.offset(group, element)

    def groups(self, c: "ir.Value") -> list["ir.Value"]:
        """The registers of an accumulator, each a vector<2xf32> of two elements of one row (LAYOUT.c)."""
        return [vector.extract(c, [], [r]) for r in range(LAYOUT.c_registers)]

    def shared_tiles(self, layout: list, config) -> dict:
        """Flat views, xor-swizzled when the config asks (ldmatrix reads 8 rows of one chunk at once)."""
        return shared_views(layout, self.element, config.swizzle == "xor")

    def chunks(self, column: "ir.Value | None") -> "ir.Value | None":
        """A warp's first column in 16-byte chunks (hoisted), as Tile.element takes it."""
        if column is None:
            return None
        return self.lanes.get(("chunks", id(column)), lambda: arith.divui(column, index(COPY_ELEMENTS)))

    # -- a warp's tile of a product ---------------------------------------------------------------------

    def gemm(self, acc: list[list["ir.Value"]], tile, k_extent: int, a: "Operand | Registers",
             b: Operand, wait: bool = True) -> list[list["ir.Value"]]:
        """acc[mi][ni] += A[mi-th 16 rows] B[ni-th 8 cols] over k_extent, 16 at a time; B fragments come
        two n-tiles per ldmatrix x4."""
        m_tiles, n_tiles = tile.rows // M, tile.cols // N
        for k0 in range(0, k_extent, K):
            fragments = [self._a_fragment(a, mi, k0) for mi in range(m_tiles)]
            for ni in range(0, n_tiles, 2):
                for nj, fragment in zip((ni, ni + 1), self._b_fragments(b, ni, k0, n_tiles)):
                    for mi in range(m_tiles):
                        acc[mi][nj] = self.mma(fragments[mi], fragment, acc[mi][nj])
        return acc

    def _a_fragment(self, a: "Operand | Registers", mi: int, k0: int) -> "ir.Value":
        if isinstance(a, Registers):
            return self.a_from_accumulators(a.groups[mi][k0 // N], a.groups[mi][k0 // N + 1])
        row, col = (mi * M, k0) if a.k_major else (k0, mi * M)
        return self.load_a(a.tile, row, col, not a.k_major, a.row, self.chunks(a.col))

    def _b_fragments(self, b: Operand, ni: int, k0: int, n_tiles: int) -> tuple["ir.Value", ...]:
        """The B fragments of n-tiles ni and ni + 1 (x4), or of a last odd one (x2)."""
        row, col = (ni * N, k0) if b.k_major else (k0, ni * N)
        if ni + 1 < n_tiles:
            return self.load_b_pair(b.tile, row, col, b.k_major, b.row, self.chunks(b.col))
        return (self.load_b(b.tile, row, col, b.k_major, b.row, self.chunks(b.col)),)

    def store_groups(self, tile: Tile, values, row: "ir.Value", col: "ir.Value") -> None:
        """Each register's two adjacent columns of one row as one 4-byte store."""
        lane_row, pair_col = self.position(0, 0)   # rows < 8: register r lies a constant number of rows on
        for mi, tiles in enumerate(values):
            for ni, pairs in enumerate(tiles):
                for r, pair in enumerate(pairs):
                    at = tile.element(self.lanes, lane_row, 0, row=mi * M + LAYOUT.c.offset(r)[0], col=ni * N,
                                      row_offset=row, chunk_offset=self.chunks(col))
                    vector.store(self.to_element(pair), tile.flat, [arith.addi(at, as_value(pair_col))], alignment=4)

    def _address(self, matrices: int, rows_first: bool) -> tuple[Ix, "Ix | int"]:
        return matrix_layouts.ldmatrix_address(self.lane, matrices, rows_first)

    # -- operand fragments ------------------------------------------------------------------------
    # `row` / `col` are the tile coordinates of the 16x16 (16x8) block's first element: constants, plus
    # `row_offset` (a stage's or warp's first row) and `chunk_offset` (a warp's first column / 8).

    def load_a(self, tile: Tile, row: int, col: int, transposed: bool, row_offset=None,
               chunk_offset=None) -> "ir.Value":
        """A fragment of the 16x16 block at tile (row, col): A = the block (rows m, plain ldmatrix x4;
        matrix i at rows +8 (i % 2), cols +8 (i // 2)) or, `transposed`, A = its transpose (the tile holds
        rows k; .trans; matrix i at rows +8 (i // 2), cols +8 (i % 2))."""
        rows, chunk = self._address(4, rows_first=not transposed)
        return self._ldmatrix(tile, rows, chunk, row, col, row_offset, chunk_offset, 4, transposed, self.a_type)

    def load_b_pair(self, tile: Tile, row: int, col: int, n_major: bool, row_offset=None,
                    chunk_offset=None) -> tuple["ir.Value", "ir.Value"]:
        """B fragments of two n-tiles (one ldmatrix x4). `n_major`: the tile holds rows n (B^T row-major:
        rows n0..n0+15 at (row, col), cols k; plain ldmatrix, matrix i at rows +8 (i // 2), cols +8 (i % 2));
        else rows k (.trans; matrix i at rows +8 (i % 2), cols +8 (i // 2))."""
        rows, chunk = self._address(4, rows_first=not n_major)
        fragments = self._ldmatrix(tile, rows, chunk, row, col, row_offset, chunk_offset, 4, not n_major,
                                   ir.VectorType.get([4, 2], self.element))
        return self._b_from(fragments, 0), self._b_from(fragments, 2)

    def load_b(self, tile: Tile, row: int, col: int, n_major: bool, row_offset=None, chunk_offset=None) -> "ir.Value":
        """The B fragment of one n-tile (ldmatrix x2; lanes 16-31 repeat lanes 0-15's addresses)."""
        rows, chunk = self._address(2, rows_first=not n_major)   # n_major: matrix i at cols k0 + 8 i
        return self._ldmatrix(tile, rows, chunk, row, col, row_offset, chunk_offset, 2, not n_major, self.b_type)

    def _b_from(self, fragments: "ir.Value", first: int) -> "ir.Value":
        rows = [vector.extract(fragments, [], [first + r]) for r in range(2)]
        return vector.from_elements(self.b_type, [vector.extract(row, [], [e]) for row in rows for e in range(2)])

    def _ldmatrix(self, tile: Tile, rows, chunk, row: int, col: int, row_offset, chunk_offset, tiles: int,
                  transpose: bool, result: "ir.Type") -> "ir.Value":
        position = tile.element(self.lanes, rows, chunk, row, col, row_offset, chunk_offset)
        attributes = {"numTiles": ir.IntegerAttr.get(ir.IntegerType.get_signless(32), tiles),
                      "transpose": ir.BoolAttr.get(transpose)}
        return create_op("nvgpu.ldmatrix", result, [tile.flat, position], attributes)

    # -- products and accumulators ------------------------------------------------------------------

    def mma(self, a: "ir.Value", b: "ir.Value", c: "ir.Value") -> "ir.Value":
        attributes = {"mmaShape": ir.ArrayAttr.get([ir.IntegerAttr.get(ir.IntegerType.get_signless(64), x)
                                                    for x in (M, N, K)])}
        return create_op("nvgpu.mma.sync", self.c_type, [a, b, c], attributes)

    def a_from_accumulators(self, low: list["ir.Value"], high: list["ir.Value"]) -> "ir.Value":
        """The A fragment of a 16x16 k-block whose columns 0-7 are accumulator tile `low` and 8-15 `high`
        (each given as its registers, already in the element type's range): A register r holds what C
        register r % 2 of tile r // 2 holds (LAYOUT.a's positions, 8 (r // 2) columns on)."""
        rows = [self.to_element((low, high)[r // 2][r % 2]) for r in range(LAYOUT.a_registers)]
        return vector.from_elements(self.a_type, [vector.extract(row, [], [e]) for row in rows for e in range(2)])

    def to_element(self, pair: "ir.Value") -> "ir.Value":
        """vector<2xf32> -> vector<2xT>, rounded to nearest even."""
        return arith.truncf(ir.VectorType.get([2], self.element), pair)
