"""What every tiled body shares, whatever its matrix atom: the kernel's frame (operands, lane and
block ids, sequence lengths), which query blocks and tiles a key block meets, how warps split a
product's output, and the loop's (head, query block) walk."""
from __future__ import annotations

from dataclasses import dataclass

from fmha_mlir import mask_geometry
from fmha_mlir.bodies import tiled_block_ids
from fmha_mlir.dialects import fmha
from fmha_mlir.dialects.fmha_types import element_type
from fmha_mlir.kernel_config import KernelConfig
from fmha_mlir.matrix_layouts import warp_block
from fmha_mlir.mlir import arith, gpu, ir, scf
from fmha_mlir.spec import AttentionBwdSpec

from .atoms import CopyAtom, MmaAtom
from .ir_builders import accumulate, dims, f32, index, scalar_elements, splat, vector_shape
from .ix import Ix, LaneValues, as_value
from .score_mods import ScoreBias


class TiledKernel:
    """The frame of one dq_dk_dv kernel of a tiled body; a body supplies its matrix atom, its copy atom
    (passes/atoms.py) and its tiles."""

    def __init__(self, op: "ir.Operation", spec: AttentionBwdSpec, config: KernelConfig):
        self.spec, self.config = spec, config
        self.operands = fmha.DqDkDvOp.named_operands(op, spec)
        self.q, self.k, self.v, self.do, self.lse, self.d = (self.operands[n] for n in ("q", "k", "v", "do", "lse", "d"))
        self.dq_out, self.dk_out, self.dv_out = (self.operands[n] for n in ("dq_out", "dk_out", "dv_out"))
        self.element = element_type(spec.dtype)
        self.bm, self.bn = config.block_m, config.block_n
        self.tid = gpu.thread_id(gpu.Dimension.x)
        warp, lane = divmod(Ix.lane(self.tid), config.wave_size)
        self.warp, self.lane = as_value(warp), as_value(lane)
        # Everything that depends on the lane and warp alone is built before this marker (LaneValues).
        marker = index(0)
        self.lanes = LaneValues(ir.InsertionPoint(marker.owner))
        self.atom = self.make_atom(self.lane)
        self.tiles = self.make_tiles()
        self.copy = self.make_copy()
        self.key_block, self.kv_head, self.batch = tiled_block_ids(
            config, [gpu.block_id(d) for d in (gpu.Dimension.x, gpu.Dimension.y, gpu.Dimension.z)])
        self.heads_q, self.seqlen_q = dims(self.q, [1, 2])
        self.seqlen_k, = dims(self.k, [2])
        self.k0 = arith.muli(self.key_block, index(self.bn))
        # Deterministic mode: this work-group's dQ partial, row batch x key blocks + key block of dq_acc.
        self.dq_batch = self.batch if not spec.deterministic else arith.addi(
            arith.muli(self.batch, arith.ceildivui(self.seqlen_k, index(self.bn))), self.key_block)

    def query_blocks(self) -> tuple["ir.Value", "ir.Value"]:
        """[lo, hi) of the query blocks this key block visits (mask_geometry.query_block_range)."""
        lo, hi = mask_geometry.query_block_range(self.spec.mask, Ix(self.k0), self.bn, self.bm, Ix(self.seqlen_q),
                                                 Ix(self.seqlen_k))
        return as_value(lo), as_value(hi)

    def tile_cut(self, q0: "ir.Value") -> "ir.Value":
        """i1, uniform: the step's tile holds a pair that is not shown (a mask cut or a tail), so its
        scores must be masked (mask_geometry.tile_cut)."""
        cut = mask_geometry.tile_cut(self.spec.mask, Ix(q0), self.bm, Ix(self.k0), self.bn, Ix(self.seqlen_q),
                                     Ix(self.seqlen_k))
        return as_value(cut)

    def add_dq_value(self, value: "ir.Value", head, q, col) -> None:
        """dQ's value (f32 or a vector of adjacent, even-aligned columns) at (head, q, col) for this key
        block: an f32 atomic add into dq_acc, or in deterministic mode a store into this key block's
        partial, which no other work-group writes (each element has one owning lane)."""
        accumulate(value, self.dq_out, [self.dq_batch, head, q, col], stored=self.spec.deterministic)

    def add_dq_row_pairs(self, head, q, pairs) -> None:
        """grad_accum = "bf16": this key block's dQ pairs of query row q, (vector<2xf32>, column) as
        pairs() builds them, each scaled, rounded and added into dq itself by one packed bf16 atomic. dq
        has no padding rows, so a row past seqlen_q adds nothing: one check per row, and the pairs'
        columns built inside it (a check per pair, or columns live across it, make the sm_90 body spill)."""
        inside = scf.IfOp(arith.cmpi(arith.CmpIPredicate.slt, q, self.seqlen_q))
        with ir.InsertionPoint(inside.then_block):
            pair_type = ir.VectorType.get([2], self.element)
            for value, col in pairs():
                scaled = arith.mulf(value, splat(f32(self.spec.scale), [2]))
                fmha.AtomicAddOp.build(arith.truncf(pair_type, scaled), self.dq_out, [self.batch, head, q, col])
            scf.yield_([])

    def make_warp_tiles(self) -> None:
        """Each warp's part of the products (hoisted): S^T / dP^T (keys x queries), dK / dV (keys x head
        dim), dQ (queries x head dim). A body calls it where its lane values are built."""
        config, spec = self.config, self.spec
        with self.lanes.hoist:
            self.sdp = warp_tile(self.warp, config.sdp_warps, self.bn, self.bm)
            self.dkv = warp_tile(self.warp, config.dkv_warps, self.bn, spec.hdim_q)
            self.dkv_v = warp_tile(self.warp, config.dkv_warps, self.bn, spec.hdim_v)
            self.dq_tile = warp_tile(self.warp, config.dq_warps, self.bm, spec.hdim_q)

    def make_atom(self, lane: "ir.Value") -> MmaAtom:
        raise NotImplementedError

    def score_bias(self, head: "ir.Value") -> "ScoreBias | None":
        """The bias of query head `head`'s scores in this work-group's batch (None without one)."""
        return ScoreBias.of(self.spec, self.operands, self.batch, head, self.heads_q, self.seqlen_q, self.seqlen_k)

    def add_bias_grad(self, bias: "ScoreBias", positioned) -> None:
        """Hand each (dS, q_pos, k_pos) of this lane to the bias's gradient: dbias adds them itself; the
        slopes' terms are summed over the lane, then the wave, and its first lane adds the total."""
        terms = [t for t in (bias.grad(ds, q, k) for ds, q, k in positioned) if t is not None]
        if not terms:
            return
        total = None
        for term in terms:
            for element, in scalar_elements(vector_shape(term.type), term):
                total = element if total is None else arith.addf(total, element)
        total = fmha.WaveReduceOp.build(total, self.config.wave_size)
        first = scf.IfOp(arith.cmpi(arith.CmpIPredicate.eq, self.lane, index(0)))
        with ir.InsertionPoint(first.then_block):
            bias.add_slope_grad(total)
            scf.yield_([])

    def per_query_row(self, first: "ir.Value", offset: int, copy) -> None:
        """Threads [offset, offset + block_m) each take query row first + i (i = tid - offset): copy(i,
        the row clamped into the sequence, whether it is inside) builds the copy of its LSE or D value."""
        mine = arith.subi(self.tid, index(offset))
        inside = arith.andi(arith.cmpi(arith.CmpIPredicate.sge, self.tid, index(offset)),
                            arith.cmpi(arith.CmpIPredicate.slt, self.tid, index(offset + self.bm)))
        guard = scf.IfOp(inside)
        with ir.InsertionPoint(guard.then_block):
            row = arith.addi(first, mine)
            valid = arith.cmpi(arith.CmpIPredicate.slt, row, self.seqlen_q)
            clamped = arith.minsi(row, arith.subi(self.seqlen_q, index(1)))
            copy(mine, clamped, valid)
            scf.yield_([])

    def make_tiles(self) -> dict:
        raise NotImplementedError

    def make_copy(self) -> CopyAtom:
        raise NotImplementedError


@dataclass(frozen=True)
class WarpTile:
    """The part of a product's output one warp computes: rows [row0, row0 + rows) x cols [col0, col0 + cols)."""

    row0: "ir.Value"   # index, relative to the product's output
    col0: "ir.Value"
    rows: int
    cols: int


def warp_tile(warp: "ir.Value", layout: tuple[int, int], rows: int, cols: int) -> WarpTile:
    """Warp `warp`'s block of a rows x cols product split over a (along rows, along cols) grid of warps
    (matrix_layouts.warp_block)."""
    row0, col0 = warp_block(Ix.lane(warp), layout, rows, cols)
    return WarpTile(as_value(row0), as_value(col0), rows // layout[0], cols // layout[1])


def advance(head, m, lo, hi):
    """The step after (head, m): the next query block, or the next head's first one."""
    nxt = arith.addi(m, index(1))
    wrap = arith.cmpi(arith.CmpIPredicate.sge, nxt, hi)
    return arith.select(wrap, arith.addi(head, index(1)), head), arith.select(wrap, lo, nxt)


def contract() -> "ir.Attribute":
    """Lets LLVM fuse score * scale - lse into one fma."""
    return ir.Attribute.parse("#arith.fastmath<contract>")


def i32(value: "ir.Value") -> "ir.Value":
    return arith.index_cast(ir.IntegerType.get_signless(32), value)


def flatten(acc):
    return [c for row in acc for c in row]


def unflatten(flat, rows, cols):
    return [list(flat[r * cols:(r + 1) * cols]) for r in range(rows)]


def flatten3(values):
    return [pair for row in values for pairs in row for pair in pairs]
