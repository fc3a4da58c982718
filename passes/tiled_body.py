"""The tiled body's dq_dk_dv (docs/design/tiled-body.md): FlashAttention-2's shape on a matrix atom.

One work-group per (key block of Bc keys, kv head, batch) (their block ids: bodies.tiled_grid), `warps`
warps. K and V of the block stay in shared memory and dK, dV in registers; the work-group walks the
query blocks of Br rows that see its keys, for every query head of its GQA group, double-buffering
Q / dO / LSE / D with async copies. Per step, with S^T (keys as rows) so that P^T and dS^T come out of
the accumulators in the layout the next products take as A:

    S^T = K Q^T;  P^T = exp2(S^T scale log2(e) - LSE log2(e));  dP^T = V dO^T;  dS^T = P^T (dP^T - D)
    dV += P^T dO;  dK += dS^T Q;  dQ += dS K (f32 atomics into dq_acc, scaled)

Rows past seqlen_q and keys past seqlen_k are zero-filled by the copies and hidden by the mask: a tile
that crosses a sequence end is cut like one the mask cuts (fmha_mlir.mask_geometry.tile_cut), and only
cut tiles pay for masked scores (docs/design/tiled-body.md, "Masks").
"""
from __future__ import annotations

from fmha_mlir.bodies import COPY_ELEMENTS, TiledBody
from fmha_mlir.dialects import fmha
from fmha_mlir.kernel_config import KernelConfig
from fmha_mlir.mlir import arith, gpu, ir, scf, vector
from fmha_mlir.spec import AttentionBwdSpec

from .copy_atoms import CpAsyncCopy
from .ir_builders import f32, index, splat
from .ix import as_value
from .mma_atoms import MmaSyncAtom
from .score_mods import exp2_argument, lse_operand, masked_lse, softcap_grad, softmax_input
from .shared_tiles import Tile, shared_views
from .tile_schedule import TiledKernel, WarpTile, advance, contract, flatten, flatten3, unflatten


class _Kernel(TiledKernel):
    """Builds one dq_dk_dv kernel; the helpers read like the loop they emit."""

    def make_atom(self, lane):
        return MmaSyncAtom(self.element, lane, self.lanes)

    def make_copy(self):
        return CpAsyncCopy(self)

    def make_tiles(self):
        return shared_views(TiledBody.shared_layout(self.spec, self.config), self.element, self.config.swizzle == "xor")

    # -- copies into shared memory ------------------------------------------------------------------

    def load_step(self, head: "ir.Value", m: "ir.Value", stage: "ir.Value") -> None:
        """Issue the copies of query block m of `head` into buffer `stage`, as one group."""
        q0 = arith.muli(m, index(self.bm))
        row0 = arith.muli(stage, index(self.bm))
        prefix = [self.batch, head]
        self.copy.rows(self.q, prefix, q0, self.seqlen_q, self.tiles["q"], row0)
        self.copy.rows(self.do, prefix, q0, self.seqlen_q, self.tiles["do"], row0)
        self.copy.row_values(self.lse, prefix, q0, self.tiles["lse"], stage, 0)
        self.copy.row_values(self.d, prefix, q0, self.tiles["d"], stage, self.bm)
        self.copy.commit()

    # -- the products --------------------------------------------------------------------------------

    def gemm(self, acc: list[list["ir.Value"]], tile: WarpTile, k_extent: int, load_a, load_b_pair) -> list[list]:
        """acc[mi][ni] += A[mi-th 16 rows] B[ni-th 8 cols] over k_extent, 16 at a time (unrolled)."""
        atom = self.atom
        m_tiles, n_tiles = tile.rows // atom.m, tile.cols // atom.n
        for k0 in range(0, k_extent, atom.k):
            a = [load_a(mi, k0) for mi in range(m_tiles)]
            for ni in range(0, n_tiles, 2):
                b = load_b_pair(ni, k0)
                for nj, fragment in zip((ni, ni + 1), b):
                    if nj < n_tiles:
                        for mi in range(m_tiles):
                            acc[mi][nj] = atom.mma(a[mi], fragment, acc[mi][nj])
        return acc

    def b_pair_loader(self, tile: Tile, n_major: bool, n_tiles: int, row_offset=None, chunk_offset=None,
                      row_base: int = 0):
        """load_b_pair(ni, k0) for B from `tile`: ldmatrix x4 for two n-tiles, x2 for a last odd one.
        n_major: the tile's rows are n (from row_base + row_offset), its columns k; else rows k, columns n
        (from chunk_offset)."""
        atom = self.atom

        def load(ni, k0):
            n0 = ni * atom.n
            row, col = (row_base + n0, k0) if n_major else (k0, n0)
            if ni + 1 < n_tiles:
                return atom.load_b_pair(tile, row, col, n_major, row_offset, chunk_offset)
            return (atom.load_b(tile, row, col, n_major, row_offset, chunk_offset),)

        return load

    def zeros(self, tile: WarpTile) -> list[list["ir.Value"]]:
        return [[self.atom.zero for _ in range(tile.cols // self.atom.n)] for _ in range(tile.rows // self.atom.m)]

    # -- the loop ------------------------------------------------------------------------------------

    def build(self) -> None:
        spec, config, atom = self.spec, self.config, self.atom
        tiles = self.tiles
        g = spec.gqa_ratio
        lo, hi = self.query_blocks()
        blocks = arith.maxsi(arith.subi(hi, lo), index(0))
        steps = arith.muli(blocks, index(g))   # every query head of the kv head's group
        first_head = arith.muli(self.kv_head, index(g))

        kv_prefix = [self.batch, self.kv_head]
        self.copy.rows(self.k, kv_prefix, self.k0, self.seqlen_k, tiles["k"], index(0))
        self.copy.rows(self.v, kv_prefix, self.k0, self.seqlen_k, tiles["v"], index(0))
        self.copy.commit()

        self.make_warp_tiles()
        dk0, dv0 = self.zeros(self.dkv), self.zeros(self.dkv_v)
        shapes = [(len(dk0), len(dk0[0])), (len(dv0), len(dv0[0]))]

        has_steps = arith.cmpi(arith.CmpIPredicate.sgt, steps, index(0))
        if config.stages == 2:
            prologue = scf.IfOp(has_steps)
            with ir.InsertionPoint(prologue.then_block):
                self.load_step(first_head, lo, index(0))
                scf.yield_([])

        # (head, m) of the step is carried and advanced with selects: no division in the loop.
        loop = scf.ForOp(index(0), steps, index(1), [first_head, lo] + flatten(dk0) + flatten(dv0))
        with ir.InsertionPoint(loop.body):
            it = loop.induction_variable
            head, m, *carried = list(loop.inner_iter_args)
            dk = unflatten(carried[:len(flatten(dk0))], *shapes[0])
            dv = unflatten(carried[len(flatten(dk0)):], *shapes[1])
            next_head, next_m = advance(head, m, lo, hi)
            stage = arith.andi(it, index(1)) if config.stages == 2 else index(0)
            if config.stages == 2:
                self.copy.wait(0)
                gpu.barrier()
                prefetch = scf.IfOp(arith.cmpi(arith.CmpIPredicate.slt, arith.addi(it, index(1)), steps))
                with ir.InsertionPoint(prefetch.then_block):
                    self.load_step(next_head, next_m, arith.xori(stage, index(1)))
                    scf.yield_([])
            else:
                gpu.barrier()    # the previous step's reads of the buffers are done
                self.load_step(head, m, stage)
                self.copy.wait(0)
                gpu.barrier()
            dk, dv = self.step(head, m, stage, dk, dv)
            scf.yield_([next_head, next_m] + flatten(dk) + flatten(dv))
        self.copy.wait(0)
        results = list(loop.results)[2:]
        self.store_grad(self.dk_out, unflatten(results[:len(flatten(dk0))], *shapes[0]), self.dkv, spec.scale)
        self.store_grad(self.dv_out, unflatten(results[len(flatten(dk0)):], *shapes[1]), self.dkv_v, None)

    def step(self, head, m, stage, dk, dv):
        """One query block: S^T, P^T, dP^T, dS^T, then dV, dK, dQ."""
        spec, config, atom, tiles = self.spec, self.config, self.atom, self.tiles
        q0 = arith.muli(m, index(self.bm))
        stage_rows = arith.muli(stage, index(self.bm))
        sdp, dkv, dkv_v, dqt = self.sdp, self.dkv, self.dkv_v, self.dq_tile
        m_tiles, n_tiles = sdp.rows // atom.m, sdp.cols // atom.n
        query_rows = arith.addi(stage_rows, sdp.col0)   # this warp's queries in the Q / dO buffers

        # S^T = K Q^T and dP^T = V dO^T: A = K / V rows (plain ldmatrix), B = Q / dO rows (n-major).
        s = self.gemm(self.zeros(sdp), sdp, spec.hdim_q,
                      lambda mi, k0: atom.load_a(tiles["k"], mi * atom.m, k0, False, sdp.row0),
                      self.b_pair_loader(tiles["q"], True, n_tiles, query_rows))
        lse, dsum = self.row_values(stage, sdp, n_tiles)
        bias = self.score_bias(head)
        p = self.probabilities(s, lse, q0, sdp, bias)
        dp = self.gemm(self.zeros(sdp), sdp, spec.hdim_v,
                       lambda mi, k0: atom.load_a(tiles["v"], mi * atom.m, k0, False, sdp.row0),
                       self.b_pair_loader(tiles["do"], True, n_tiles, query_rows))
        ds = [[[arith.mulf(p[mi][ni][r], arith.subf(dp_r, dsum[ni])) for r, dp_r in enumerate(atom.rows_of(dp[mi][ni]))]
               for ni in range(n_tiles)] for mi in range(m_tiles)]
        if spec.dbias:
            self.add_bias_grad(bias, [(ds[mi][ni][r], *self.pair_positions(mi, ni, r, q0, sdp))
                                      for mi in range(m_tiles) for ni in range(n_tiles) for r in range(2)])
        ds = [[[softcap_grad(ds_r, s_r, spec) for ds_r, s_r in zip(ds[mi][ni], atom.rows_of(s[mi][ni]))]
               for ni in range(n_tiles)] for mi in range(m_tiles)]
        self.store_transposed(tiles["ds"], ds, sdp)
        if not config.p_in_registers:
            self.store_transposed(tiles["p"], p, sdp)
        gpu.barrier()

        # dV += P^T dO, dK += dS^T Q: A = P^T / dS^T (registers or smem), B = dO / Q rows (k-major: .trans).
        if config.p_in_registers:
            load_p = lambda mi, k0: atom.a_from_accumulators(p[mi][k0 // atom.n], p[mi][k0 // atom.n + 1])
            load_ds = lambda mi, k0: atom.a_from_accumulators(ds[mi][k0 // atom.n], ds[mi][k0 // atom.n + 1])
        else:
            load_p = lambda mi, k0: atom.load_a(tiles["p"], mi * atom.m, k0, False, dkv.row0)
            load_ds = lambda mi, k0: atom.load_a(tiles["ds"], mi * atom.m, k0, False, dkv.row0)
        dv = self.gemm(dv, dkv_v, self.bm, load_p,
                       self.b_pair_loader(tiles["do"], False, dkv_v.cols // atom.n, stage_rows, self.chunks(dkv_v.col0)))
        dk = self.gemm(dk, dkv, self.bm, load_ds,
                       self.b_pair_loader(tiles["q"], False, dkv.cols // atom.n, stage_rows, self.chunks(dkv.col0)))

        # dQ = dS K: A = dS = (dS^T)^T (.trans of the stored dS^T), B = K rows (k-major: .trans).
        dq = self.gemm(self.zeros(dqt), dqt, self.bn,
                       lambda mi, k0: atom.load_a(tiles["ds"], k0, mi * atom.m, True, None, self.chunks(dqt.row0)),
                       self.b_pair_loader(tiles["k"], False, dqt.cols // atom.n, None, self.chunks(dqt.col0)))
        self.add_dq(dq, head, q0, dqt)
        return dk, dv

    def chunks(self, column: "ir.Value") -> "ir.Value":
        """A warp's first column in 16-byte chunks (hoisted)."""
        return self.lanes.get(("chunks", id(column)), lambda: arith.divui(column, index(COPY_ELEMENTS)))

    def c_row(self, register: int) -> "ir.Value":
        """Row inside the 16x8 accumulator tile of this lane's register `register` (both elements)."""
        return as_value(self.atom.position(register, 0)[0])

    def c_col(self) -> "ir.Value":
        """Column inside the 16x8 accumulator tile of the first element of every register of this lane."""
        return as_value(self.atom.position(0, 0)[1])

    def row_values(self, stage, sdp: WarpTile, n_tiles: int):
        """LSE * log2(e) and D of the query columns this lane holds: one vector<2xf32> per n-tile."""
        lse, dsum = [], []
        lane_col = self.lanes.get(("row_values", id(sdp.col0)), lambda: arith.addi(sdp.col0, self.c_col()))
        base = arith.addi(arith.muli(stage, index(self.bm)), lane_col)
        pair = ir.VectorType.get([2], ir.F32Type.get())
        for ni in range(n_tiles):
            at = arith.addi(base, index(ni * self.atom.n))
            lse.append(lse_operand(vector.load(pair, self.tiles["lse"].flat, [at], alignment=8), self.spec))
            dsum.append(vector.load(pair, self.tiles["d"].flat, [at], alignment=8))
        return lse, dsum

    def pair_positions(self, mi: int, ni: int, r: int, q0, sdp: WarpTile):
        """(queries, key) of accumulator row pair r of S^T tile (mi, ni): vector<2 x index>, index."""
        atom = self.atom
        key = arith.addi(arith.addi(self.k0, sdp.row0), arith.addi(index(mi * atom.m), self.c_row(r)))
        qcol = arith.addi(arith.addi(q0, sdp.col0), arith.addi(index(ni * atom.n), self.c_col()))
        step = atom.shape.c.offset(r, 1)[1] - atom.shape.c.offset(r, 0)[1]   # the pair's second column
        queries = vector.from_elements(ir.VectorType.get([2], ir.IndexType.get()), [qcol, arith.addi(qcol, index(step))])
        return queries, key

    def probabilities(self, s, lse, q0, sdp: WarpTile, bias=None):
        """P^T per accumulator row pair (f32): exp2(S^T scale log2 e - lse log2 e), masked only on cut
        tiles (the mask cuts them or they cross a sequence end); with a bias (score_mods.ScoreBias of
        this step's head) its term is added first."""
        atom, mask = self.atom, self.spec.mask
        m_tiles, n_tiles = len(s), len(s[0])

        def compute(masked: bool):
            row_lse = [masked_lse(x, self.spec) for x in lse] if masked else lse
            out = []
            for mi in range(m_tiles):
                row = []
                for ni in range(n_tiles):
                    pairs = []
                    for r, pair in enumerate(atom.rows_of(s[mi][ni])):
                        if masked or bias is not None:
                            queries, key = self.pair_positions(mi, ni, r, q0, sdp)
                        shifted = None if bias is None else bias.shifted(queries, key, pair, row_lse[ni])
                        pre, factor = softmax_input(pair, self.spec, row_lse[ni], shifted)
                        if masked:
                            score = fmha.MaskedScoreOp.build(pre, queries, key, self.seqlen_q, self.seqlen_k, mask,
                                                             factor)
                        else:
                            score = arith.mulf(pre, splat(f32(factor), [2]), fastmath=contract())
                        pairs.append(fmha.Exp2Op.build(exp2_argument(score, row_lse[ni], self.spec, contract())))
                    row.append(pairs)
                out.append(row)
            return out

        pair_type = ir.VectorType.get([2], ir.F32Type.get())
        branch = scf.IfOp(self.tile_cut(q0), [pair_type] * (m_tiles * n_tiles * 2), has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.yield_(flatten3(compute(True)))
        with ir.InsertionPoint(branch.else_block):
            scf.yield_(flatten3(compute(False)))
        flat = list(branch.results)
        return [[flat[(mi * n_tiles + ni) * 2:(mi * n_tiles + ni) * 2 + 2] for ni in range(n_tiles)]
                for mi in range(m_tiles)]

    def store_transposed(self, tile: Tile, values, sdp: WarpTile) -> None:
        """Store per-pair f32 values of the S^T layout into `tile` ([keys x queries], element type): each
        lane writes its two adjacent query columns of one key row as one 4-byte store."""
        atom = self.atom
        lane_row, pair_col = atom.position(0, 0)    # rows < 8: register r lies a constant number of rows on
        for mi, row in enumerate(values):
            for ni, pairs in enumerate(row):
                for r, pair in enumerate(pairs):
                    at = tile.element(self.lanes, lane_row, 0, row=mi * atom.m + atom.shape.c.offset(r)[0],
                                      col=ni * atom.n, row_offset=sdp.row0, chunk_offset=self.chunks(sdp.col0))
                    vector.store(atom.to_element(pair), tile.flat, [arith.addi(at, as_value(pair_col))], alignment=4)

    def add_dq(self, dq, head, q0, tile: WarpTile) -> None:
        """dq_acc[b, head, q0 + row, col:col + 2] += dS K: one vector<2xf32> atomic (deterministic: store)
        per accumulator pair (adjacent columns; rows are padded; the convert applies the softmax scale),
        or with grad_accum = "bf16" one packed bf16 atomic per pair into dq itself."""
        atom = self.atom
        column = lambda ni: arith.addi(arith.addi(tile.col0, index(ni * atom.n)), self.c_col())  # noqa: E731
        query = lambda mi, r: arith.addi(arith.addi(q0, tile.row0), arith.addi(index(mi * atom.m),  # noqa: E731
                                                                               self.c_row(r)))
        for mi, row in enumerate(dq):
            if self.spec.grad_accum == "bf16":   # pairs grouped by row: one bounds check each
                for r in range(2):
                    self.add_dq_row_pairs(head, query(mi, r), lambda: [(atom.rows_of(c)[r], column(ni))
                                                                      for ni, c in enumerate(row)])
                continue
            for ni, c in enumerate(row):
                col = column(ni)
                for r, pair in enumerate(atom.rows_of(c)):
                    self.add_dq_value(pair, head, query(mi, r), col)

    def store_grad(self, out, acc, tile: WarpTile, scale: float | None) -> None:
        """out[b, kv_head, k0 + row, col] = acc (times scale), rounded; rows past seqlen_k are not stored."""
        atom = self.atom
        for mi, row in enumerate(acc):
            for r in range(2):
                key = arith.addi(arith.addi(self.k0, tile.row0), arith.addi(index(mi * atom.m), self.c_row(r)))
                inside = scf.IfOp(arith.cmpi(arith.CmpIPredicate.slt, key, self.seqlen_k))
                with ir.InsertionPoint(inside.then_block):
                    for ni, c in enumerate(row):
                        pair = atom.rows_of(c)[r]
                        if scale is not None:
                            pair = arith.mulf(pair, splat(f32(scale), [2]))
                        col = arith.addi(arith.addi(tile.col0, index(ni * atom.n)), self.c_col())
                        vector.store(atom.to_element(pair), out, [self.batch, self.kv_head, key, col], alignment=4)
                    scf.yield_([])


def dq_dk_dv(op: "ir.Operation", spec: AttentionBwdSpec, config: KernelConfig) -> None:
    _Kernel(op, spec, config).build()
