"""The tiled body on AMD MFMA (gfx942, gfx950; wave64): the sm_90 body's schedule on amdgpu.mfma.

The same work-groups, loop and products as tiled_body.py (one work-group per key block of Bc keys and
kv head; the query blocks of every query head of its GQA group; S^T with keys as rows), with what the
instruction changes (docs/design/tiled-body.md, section 5):

- *Accumulator groups.* A lane's MFMA accumulator is one column and groups of 4 rows, so in S^T a lane
  holds keys of ONE query: LSE and D are one scalar per lane per n-tile, and the mask is applied with
  a vector of keys against a scalar query.
- *Operands from LDS, no ldmatrix.* A and B fragments are read k-contiguous where the tile's rows are
  the operand's m / n (K, V, Q, dO, P^T, dS^T for S^T, dP^T, dV, dK) and element by element where they
  are k (dO, Q for dV / dK; dS^T and K for dQ): passes/mfma_atom.py.
- *Copies through registers* (copy_atoms.BufferLoadCopy): 16-byte `amdgpu.raw_buffer_load` (the buffer
  resource keeps the base in SGPRs), zeros past the sequence end by a select. One Q / dO buffer.
- *dQ* by scalar f32 atomics (`global_atomic_add_f32`; neither chip has a packed f32 add), dK / dV
  stored one element at a time (a lane's four rows are four addresses). With grad_accum = "bf16" dQ is
  computed transposed, so a lane's registers pair along the head dim for `global_atomic_pk_add_bf16`.

P^T and dS^T go through LDS as [keys x queries] tiles, written element by element from the accumulators
so that dV's and dK's A operands read k-contiguous. Tile sizes: bodies.AMD_TILED_TABLE.
"""
from __future__ import annotations

from fmha_mlir.bodies import TiledBody
from fmha_mlir.dialects import fmha
from fmha_mlir.kernel_config import KernelConfig
from fmha_mlir.mlir import arith, gpu, ir, memref, scf, vector
from fmha_mlir.spec import AttentionBwdSpec

from .copy_atoms import BufferLoadCopy
from .ir_builders import f32, index, splat
from .ix import as_value
from .mfma_atom import MfmaAtom
from .score_mods import exp2_argument, lse_operand, masked_lse, natural_units, softcap_grad, softmax_input
from .shared_tiles import Grid, shared_grids
from .tile_schedule import TiledKernel, WarpTile, advance, contract, flatten, unflatten, warp_tile


class _Kernel(TiledKernel):
    """Builds one dq_dk_dv kernel; the helpers read like the loop they emit."""

    def __init__(self, op: "ir.Operation", spec: AttentionBwdSpec, config: KernelConfig):
        super().__init__(op, spec, config)
        self.make_warp_tiles()
        # Row of each accumulator register of this lane inside an M x N tile, and the column of all of them.
        self.rows = [as_value(self.atom.position(r)[0]) for r in range(self.atom.shape.c_registers)]
        self.col = as_value(self.atom.position(0)[1])

    def make_atom(self, lane):
        return MfmaAtom(self.config.mfma, self.element, lane, self.lanes)

    def make_copy(self):
        return BufferLoadCopy(self)

    def make_tiles(self):
        return shared_grids(TiledBody.shared_layout(self.spec, self.config), self.element)

    # -- copies into LDS -----------------------------------------------------------------------------

    def load_step(self, head: "ir.Value", q0: "ir.Value") -> None:
        prefix = [self.batch, head]
        self.copy.rows(self.q, prefix, q0, self.seqlen_q, self.tiles["q"])
        self.copy.rows(self.do, prefix, q0, self.seqlen_q, self.tiles["do"])
        self.copy.row_values(self.lse, prefix, q0, self.tiles["lse"], index(0), 0)
        self.copy.row_values(self.d, prefix, q0, self.tiles["d"], index(0), self.bm)

    # -- the products --------------------------------------------------------------------------------

    def gemm(self, acc: list[list["ir.Value"]], tile: WarpTile, k_extent: int, load_a, load_b) -> list[list]:
        """acc[mi][ni] += A[mi-th M rows] B[ni-th N cols] over k_extent, K at a time (unrolled); each
        fragment is read once per k step and used by every tile of its row or column."""
        atom = self.atom
        m_tiles, n_tiles = tile.rows // atom.m, tile.cols // atom.n
        for k0 in range(0, k_extent, atom.k):
            a = [load_a(arith.addi(tile.row0, index(mi * atom.m)), k0) for mi in range(m_tiles)]
            b = [load_b(arith.addi(tile.col0, index(ni * atom.n)), k0) for ni in range(n_tiles)]
            for mi in range(m_tiles):
                for ni in range(n_tiles):
                    acc[mi][ni] = atom.mma(a[mi], b[ni], acc[mi][ni])
        return acc

    def zeros(self, tile: WarpTile) -> list[list["ir.Value"]]:
        return [[self.atom.zero for _ in range(tile.cols // self.atom.n)] for _ in range(tile.rows // self.atom.m)]

    # -- the loop ------------------------------------------------------------------------------------

    def build(self) -> None:
        spec, tiles = self.spec, self.tiles
        g = spec.gqa_ratio
        lo, hi = self.query_blocks()
        steps = arith.muli(arith.maxsi(arith.subi(hi, lo), index(0)), index(g))   # every query head of the group
        first_head = arith.muli(self.kv_head, index(g))

        kv_prefix = [self.batch, self.kv_head]
        self.copy.rows(self.k, kv_prefix, self.k0, self.seqlen_k, tiles["k"])
        self.copy.rows(self.v, kv_prefix, self.k0, self.seqlen_k, tiles["v"])
        dk0, dv0 = self.zeros(self.dkv), self.zeros(self.dkv_v)
        shapes = [(len(dk0), len(dk0[0])), (len(dv0), len(dv0[0]))]
        split = len(flatten(dk0))

        # (head, m) of the step is carried and advanced with selects: no division in the loop.
        loop = scf.ForOp(index(0), steps, index(1), [first_head, lo] + flatten(dk0) + flatten(dv0))
        with ir.InsertionPoint(loop.body):
            head, m, *carried = list(loop.inner_iter_args)
            dk, dv = unflatten(carried[:split], *shapes[0]), unflatten(carried[split:], *shapes[1])
            next_head, next_m = advance(head, m, lo, hi)
            q0 = arith.muli(m, index(self.bm))
            gpu.barrier()    # the previous step's reads of Q, dO, P^T, dS^T are done
            self.load_step(head, q0)
            gpu.barrier()
            dk, dv = self.step(head, q0, dk, dv)
            scf.yield_([next_head, next_m] + flatten(dk) + flatten(dv))
        results = list(loop.results)[2:]
        self.store_grad(self.dk_out, unflatten(results[:split], *shapes[0]), self.dkv, spec.scale)
        self.store_grad(self.dv_out, unflatten(results[split:], *shapes[1]), self.dkv_v, None)

    def step(self, head, q0, dk, dv):
        """One query block: S^T, P^T, dP^T, dS^T, then dV, dK, dQ."""
        spec, atom, tiles = self.spec, self.atom, self.tiles
        sdp, dkv, dkv_v, dqt = self.sdp, self.dkv, self.dkv_v, self.dq_tile

        # S^T = K Q^T, dP^T = V dO^T: A = K / V rows, B^T = Q / dO rows (all k-contiguous).
        s = self.gemm(self.zeros(sdp), sdp, spec.hdim_q, lambda row, k0: atom.load_a(tiles["k"], row, k0),
                      lambda col, k0: atom.load_b(tiles["q"], col, k0))
        lse, dsum = self.row_values(sdp)
        bias = self.score_bias(head)
        p = self.probabilities(s, lse, q0, bias)
        dp = self.gemm(self.zeros(sdp), sdp, spec.hdim_v, lambda row, k0: atom.load_a(tiles["v"], row, k0),
                       lambda col, k0: atom.load_b(tiles["do"], col, k0))
        ds = [[arith.mulf(p[mi][ni], arith.subf(dp[mi][ni], splat(dsum[ni], [atom.shape.c_registers])))
               for ni in range(len(p[0]))] for mi in range(len(p))]
        if spec.dbias:
            self.add_bias_grad(bias, [(ds[mi][ni], self.query_of(ni, q0), self.keys_of(mi))
                                      for mi in range(len(p)) for ni in range(len(p[0]))])
        ds = [[softcap_grad(ds[mi][ni], s[mi][ni], spec) for ni in range(len(p[0]))] for mi in range(len(p))]
        self.store_transposed(tiles["p"], p, sdp)
        self.store_transposed(tiles["ds"], ds, sdp)
        gpu.barrier()

        # dV += P^T dO, dK += dS^T Q: A = P^T / dS^T rows; B = dO / Q, read down their columns.
        dv = self.gemm(dv, dkv_v, self.bm, lambda row, k0: atom.load_a(tiles["p"], row, k0),
                       lambda col, k0: atom.load_b_transposed(tiles["do"], col, k0))
        dk = self.gemm(dk, dkv, self.bm, lambda row, k0: atom.load_a(tiles["ds"], row, k0),
                       lambda col, k0: atom.load_b_transposed(tiles["q"], col, k0))
        if spec.grad_accum == "bf16":
            self.add_dq_pairs(head, q0)
            return dk, dv
        # dQ = dS K: A = (dS^T)^T and B = K, both read down the columns of their tiles.
        dq = self.gemm(self.zeros(dqt), dqt, self.bn, lambda row, k0: atom.load_a_transposed(tiles["ds"], row, k0),
                       lambda col, k0: atom.load_b_transposed(tiles["k"], col, k0))
        self.add_dq(dq, head, q0, dqt)
        return dk, dv

    def add_dq_pairs(self, head, q0) -> None:
        """dQ for packed bf16 atomics, computed transposed: dQ^T = K^T dS^T (A = K^T, B = dS^T, both read
        down the columns of their tiles, as dQ's operands are), so that a lane's accumulator registers lie
        along the head dim: registers r, r + 1 (r even) are adjacent columns of one query row, one pair."""
        atom, tiles = self.atom, self.tiles
        with self.lanes.hoist:   # dQ's warp layout, transposed with it
            tile = warp_tile(self.warp, self.config.dq_warps[::-1], self.spec.hdim_q, self.bm)
        dqt = self.gemm(self.zeros(tile), tile, self.bn, lambda row, k0: atom.load_a_transposed(tiles["k"], row, k0),
                        lambda col, k0: atom.load_b_transposed(tiles["ds"], col, k0))
        pair_type = ir.VectorType.get([2], ir.F32Type.get())

        def pairs(ni):
            out = []
            for mi, row in enumerate(dqt):
                col_first = arith.addi(tile.row0, index(mi * atom.m))
                for r in range(0, atom.shape.c_registers, 2):
                    pair = vector.from_elements(pair_type, [vector.extract(row[ni], [], [r + e]) for e in range(2)])
                    out.append((pair, arith.addi(col_first, self.rows[r])))
            return out

        for ni in range(len(dqt[0])):   # this lane's query of n-tile ni: one row of dQ
            q = arith.addi(arith.addi(q0, tile.col0), arith.addi(index(ni * atom.n), self.col))
            self.add_dq_row_pairs(head, q, lambda: pairs(ni))

    def row_values(self, sdp: WarpTile):
        """LSE * log2(e) and D of the query this lane holds in each n-tile: one f32 each."""
        lse, dsum = [], []
        lane_col = self.lanes.get(("row_values", id(sdp.col0)), lambda: arith.addi(sdp.col0, self.col))
        for ni in range(sdp.cols // self.atom.n):
            at = [index(0), arith.addi(lane_col, index(ni * self.atom.n))]
            lse.append(lse_operand(memref.load(self.tiles["lse"].view, at), self.spec))
            dsum.append(memref.load(self.tiles["d"].view, at))
        return lse, dsum

    def keys_of(self, mi: int) -> "ir.Value":
        """The keys (vector<c_registers x index>) of this lane's accumulator rows in S^T m-tile mi."""
        first = arith.addi(arith.addi(self.k0, self.sdp.row0), index(self.atom.m * mi))
        return vector.from_elements(ir.VectorType.get([self.atom.shape.c_registers], ir.IndexType.get()),
                                    [arith.addi(first, r) for r in self.rows])

    def query_of(self, ni: int, q0) -> "ir.Value":
        """The query of this lane's accumulator column in S^T n-tile ni."""
        return arith.addi(arith.addi(q0, self.sdp.col0), arith.addi(index(ni * self.atom.n), self.col))

    def probabilities(self, s, lse, q0, bias=None):
        """P^T per accumulator (f32): exp2(S^T scale log2 e - lse log2 e), masked only on cut tiles (the
        mask cuts them or they cross a sequence end); with a bias (score_mods.ScoreBias of this step's
        head) its term is added first."""
        atom, mask = self.atom, self.spec.mask
        width = atom.shape.c_registers

        def compute(masked: bool):
            lse_of = [masked_lse(x, self.spec) for x in lse] if masked else lse
            out = []
            positions = masked or bias is not None
            for mi, row in enumerate(s):
                keys = self.keys_of(mi) if positions else None
                values = []
                for ni, acc in enumerate(row):
                    if positions:
                        query = self.query_of(ni, q0)
                    # (the fast form broadcasts the lse where it subtracts it: the ISA stays as it was)
                    row_lse = splat(lse_of[ni], [width]) if natural_units(self.spec) else None
                    shifted = None if bias is None else bias.shifted(query, keys, acc, row_lse)
                    pre, factor = softmax_input(acc, self.spec, row_lse, shifted)
                    if masked:
                        score = fmha.MaskedScoreOp.build(pre, query, keys, self.seqlen_q, self.seqlen_k, mask, factor)
                    else:
                        score = arith.mulf(pre, splat(f32(factor), [width]), fastmath=contract())
                    row_lse = splat(lse_of[ni], [width]) if row_lse is None else row_lse
                    values.append(fmha.Exp2Op.build(exp2_argument(score, row_lse, self.spec, contract())))
                out.append(values)
            return out

        branch = scf.IfOp(self.tile_cut(q0), [atom.c_type] * (len(s) * len(s[0])), has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.yield_(flatten(compute(True)))
        with ir.InsertionPoint(branch.else_block):
            scf.yield_(flatten(compute(False)))
        return unflatten(list(branch.results), len(s), len(s[0]))

    def store_transposed(self, tile: Grid, values, sdp: WarpTile) -> None:
        """S^T-layout f32 accumulators into `tile` ([keys x queries], element type), one element per
        register: a lane's registers are rows of one column."""
        atom = self.atom
        for mi, row in enumerate(values):
            key0 = arith.addi(sdp.row0, index(mi * atom.m))
            for ni, acc in enumerate(row):
                col = arith.addi(arith.addi(sdp.col0, index(ni * atom.n)), self.col)
                rounded = arith.truncf(ir.VectorType.get([atom.shape.c_registers], self.element), acc)
                for r, key in enumerate(self.rows):
                    memref.store(vector.extract(rounded, [], [r]), tile.view, [arith.addi(key0, key), col])

    def add_dq(self, dq, head, q0, tile: WarpTile) -> None:
        """dq_acc[b, head, q0 + row, col] += dS K, one f32 atomic (deterministic: store) per register
        (rows are padded to whole query blocks; the convert applies the softmax scale)."""
        atom = self.atom
        for mi, row in enumerate(dq):
            q_first = arith.addi(arith.addi(q0, tile.row0), index(mi * atom.m))
            for ni, acc in enumerate(row):
                col = arith.addi(arith.addi(tile.col0, index(ni * atom.n)), self.col)
                for r, offset in enumerate(self.rows):
                    self.add_dq_value(vector.extract(acc, [], [r]), head, arith.addi(q_first, offset), col)

    def store_grad(self, out, acc, tile: WarpTile, scale: float | None) -> None:
        """out[b, kv_head, k0 + row, col] = acc (times scale), rounded; rows past seqlen_k are not stored."""
        atom = self.atom
        width = atom.shape.c_registers
        rounded = [[arith.truncf(ir.VectorType.get([width], self.element),
                                 c if scale is None else arith.mulf(c, splat(f32(scale), [width])))
                    for c in row] for row in acc]
        for mi, row in enumerate(rounded):
            first = arith.addi(arith.addi(self.k0, tile.row0), index(mi * atom.m))
            for r, offset in enumerate(self.rows):
                key = arith.addi(first, offset)
                inside = scf.IfOp(arith.cmpi(arith.CmpIPredicate.slt, key, self.seqlen_k))
                with ir.InsertionPoint(inside.then_block):
                    for ni, c in enumerate(row):
                        col = arith.addi(arith.addi(tile.col0, index(ni * atom.n)), self.col)
                        memref.store(vector.extract(c, [], [r]), out, [self.batch, self.kv_head, key, col])
                    scf.yield_([])


def dq_dk_dv(op: "ir.Operation", spec: AttentionBwdSpec, config: KernelConfig) -> None:
    _Kernel(op, spec, config).build()

