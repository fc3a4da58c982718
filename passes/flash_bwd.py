"""The FlashAttention backward schedule of the tiled bodies (docs/design/tiled-body.md), written once over
a matrix atom and a copy atom (passes/atoms.py): the mma.sync body on sm_90, the wgmma body on sm_90a and
the MFMA body on gfx942 / gfx950 are this module with MmaSyncAtom, WgmmaMmaAtom + CpAsyncCopy or
MfmaAtom + BufferLoadCopy and their config table (fmha_mlir/bodies/); passes/warp_roles.py runs its steps
in the consumer warps of a warp-specialised work-group (the frame's hooks: stage_of, before_step,
after_step, before_shared_stores, step_barrier, add_dq).

One work-group per (key block of Bc keys, kv head, batch) (their block ids: bodies.tiled_grid), `warps`
warps. K and V of the block stay in shared memory and dK, dV in registers; the work-group walks the
query blocks of Br rows that see its keys, for every query head of its GQA group, with `stages` buffers
of Q / dO / LSE / D (two: the next step's copies overlap this one's products). Per step, with S^T (keys
as rows) so that P^T and dS^T come out of the accumulators in the layout the next products take as A:

    S^T = K Q^T;  P^T = exp2(S^T scale log2(e) - LSE log2(e));  dP^T = V dO^T;  dS^T = P^T (dP^T - D)
    dV += P^T dO;  dK += dS^T Q;  dQ += dS K (f32 atomics into dq_acc, scaled)

Rows past seqlen_q and keys past seqlen_k are zero-filled by the copies and hidden by the mask: a tile
that crosses a sequence end is cut like one the mask cuts (fmha_mlir.mask_geometry.tile_cut), and only
cut tiles pay for masked scores.

The schedule computes on the atom's accumulator groups (atoms.py): every position of a score, a bias,
an atomic or a store is the lane's first accumulator position (atom.position(0, 0)) plus the atom's
constant group_offset, offset by the warp's and the tile's first row and column. S^T and dP^T have an
atom of their own (sdp_atom: a narrower wgmma where a unit holds part of a query block's columns).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

from fmha_mlir import mask_geometry
from fmha_mlir.bodies import (TiledBody, dispatch_index, dq_fragment_order, dq_in_turns, section_block_ids,
                              section_heads, tile_hdims, tiled_block_ids)
from fmha_mlir.dialects import fmha
from fmha_mlir.dialects.fmha_types import element_type
from fmha_mlir.index_math import ceildiv
from fmha_mlir.kernel_config import KernelConfig
from fmha_mlir.matrix_layouts import warp_block
from fmha_mlir.mlir import arith, gpu, ir, memref, scf, vector
from fmha_mlir.spec import AttentionBwdSpec
from fmha_mlir.wgmma_layouts import dq_fragment_position, dq_run_place

from .atoms import CopyAtom, MmaAtom, Operand
from .ir_builders import accumulate, dims, f32, if_then, index, scalar_elements, splat, vector_shape, wave_uniform
from .ix import Ix, LaneValues, as_value
from .score_mods import ScoreBias, exp2_argument, lse_operand, masked_lse, softcap_grad, softmax_input


@dataclass(frozen=True)
class Hardware:
    """What a tiled body brings to the schedule: its matrix atom and its copy atom."""

    atom: Callable[[KernelConfig, "ir.Type", "ir.Value", LaneValues], MmaAtom]   # (config, element, lane, lanes)
    copy: Callable[["FlashBackward"], CopyAtom]


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


class FlashBackward:
    """Builds one dq_dk_dv kernel; the methods read like the loop they emit."""

    def __init__(self, op: "ir.Operation", spec: AttentionBwdSpec, config: KernelConfig, hardware: Hardware):
        self.spec, self.config = spec, config
        self.operands = fmha.DqDkDvOp.named_operands(op, spec)
        self.q, self.k, self.v, self.do, self.lse, self.d = (self.operands[n]
                                                              for n in ("q", "k", "v", "do", "lse", "d"))
        self.dq_out, self.dk_out, self.dv_out = (self.operands[n] for n in ("dq_out", "dk_out", "dv_out"))
        self.element = element_type(spec.dtype)
        self.bm, self.bn = config.block_m, config.block_n
        # The tiles' head dims (bodies.tile_hdims): wider than the spec's where its warp layouts need it;
        # the copies zero-fill the columns past the head dim and the gradients skip them.
        self.hdim_q, self.hdim_v = tile_hdims(spec, config)
        self.tid = gpu.thread_id(gpu.Dimension.x)
        # `warp` numbers the units the warp layouts count (warps, or warpgroups for wgmma); `lane` is the
        # thread's index in its unit, `wave_lane` in its wave.
        warp, lane = divmod(Ix.lane(self.tid), config.wave_size * config.warps_per_unit)
        self.warp, self.lane = as_value(warp), as_value(lane)
        if config.warps_per_unit > 1:   # a warpgroup's id feeds its descriptors: uniform, ptxas keeps them so
            self.warp = wave_uniform(self.warp, config.wave_size)
        self.wave_lane = self.lane if config.warps_per_unit == 1 else as_value(Ix.lane(self.tid) % config.wave_size)
        # Everything that depends on the lane and warp alone is built before this marker (LaneValues).
        marker = index(0)
        self.lanes = LaneValues(ir.InsertionPoint(marker.owner))
        self.atom = hardware.atom(config, self.element, self.lane, self.lanes)
        # S^T's and dP^T's contractions over the head dims stop at the last k step that holds one of its
        # columns: the tiles' zero columns past it would only add zeros.
        self.k_hdim_q, self.k_hdim_v = (-(-h // self.atom.k) * self.atom.k for h in (spec.hdim_q, spec.hdim_v))
        self.tiles = self.atom.shared_tiles(TiledBody.shared_layout(spec, config), config)
        self.copy = hardware.copy(self)
        self.heads_q, self.seqlen_q = dims(self.q, [1, 2])
        self.seqlen_k, = dims(self.k, [2])
        key_block, self.kv_head, self.batch = tiled_block_ids(
            config, [gpu.block_id(d) for d in (gpu.Dimension.x, gpu.Dimension.y, gpu.Dimension.z)])
        if config.l2_section_bytes:
            key_block, self.kv_head, self.batch = self.sectioned(key_block, self.kv_head, self.batch)
        in_turns = dq_in_turns(spec, config)
        if in_turns and config.turn_order == "last_to_first":   # the grid dispatches key blocks in turn order
            key_block = arith.subi(arith.subi(arith.ceildivui(self.seqlen_k, index(self.bn)), index(1)), key_block)
        self.key_block = key_block
        self.k0 = arith.muli(self.key_block, index(self.bn))
        # Deterministic mode with partials: this work-group's, row batch x key blocks + key block of dq_acc.
        self.dq_partials = spec.deterministic and not in_turns
        self.dq_batch = self.batch if not self.dq_partials else arith.addi(
            arith.muli(self.batch, arith.ceildivui(self.seqlen_k, index(self.bn))), self.key_block)
        # A mask that hides nothing cuts only tails; the config says whether its loop is split by them.
        self.split_tail_loop = config.split_tail_loop and mask_geometry.hides_nothing(spec.mask)
        with self.lanes.hoist:   # each warp's part of the products
            self.sdp = warp_tile(self.warp, config.sdp_warps, self.bn, self.bm)          # S^T, dP^T
            self.dkv = warp_tile(self.warp, config.dkv_warps, self.bn, self.hdim_q)      # dK
            self.dkv_v = warp_tile(self.warp, config.dkv_warps, self.bn, self.hdim_v)    # dV
            self.dq_tile = warp_tile(self.warp, config.dq_warps, self.bm, self.hdim_q)   # dQ
        # Each product's atom: narrower than the others' where a unit's columns are not whole n-tiles (S^T's
        # queries split over warpgroups at d256; d192's head dim split over them: 96 columns each).
        self.sdp_atom = self.atom.narrowed(self.sdp.cols)
        self.dk_atom, self.dv_atom, self.dq_atom = (self.atom.narrowed(t.cols)
                                                    for t in (self.dkv, self.dkv_v, self.dq_tile))

    def sectioned(self, key_block, kv_head, batch) -> tuple["ir.Value", ...]:
        """(key block, kv head, batch) of the work-group that keys_outer's ids would give, renumbered so
        that the work-groups go in L2 sections of heads (config.l2_section_bytes; bodies.section_block_ids)."""
        batches, kv_heads = (Ix(v, nonnegative=True) for v in dims(self.k, [0, 1]))
        blocks = ceildiv(Ix(self.seqlen_k, nonnegative=True), self.bn)
        linear = dispatch_index(*(Ix(v, nonnegative=True) for v in (kv_head, batch, key_block)), kv_heads, batches)
        section = section_heads(self.spec, self.config, Ix(self.seqlen_q, nonnegative=True))
        block, head = section_block_ids(linear, batches * kv_heads, blocks, section)
        return as_value(block), as_value(head % kv_heads), as_value(head // kv_heads)

    # -- the loop ------------------------------------------------------------------------------------

    def build(self) -> None:
        first_head, lo, hi, steps = self.walk()
        kv_prefix = [self.batch, self.kv_head]
        self.copy.rows(self.k, kv_prefix, self.k0, self.seqlen_k, self.tiles["k"], None)
        self.copy.rows(self.v, kv_prefix, self.k0, self.seqlen_k, self.tiles["v"], None)
        self.copy.commit()

        dk0, dv0 = self.zero_gradients()

        if self.config.stages == 2:
            prologue = scf.IfOp(arith.cmpi(arith.CmpIPredicate.sgt, steps, index(0)))
            with ir.InsertionPoint(prologue.then_block):
                self.load_step(first_head, lo, index(0))
                scf.yield_([])

        results = self.run_steps(first_head, lo, hi, steps, dk0, dv0)
        self.copy.wait(0)
        self.store_gradients(results)

    def walk(self) -> tuple["ir.Value", ...]:
        """(first head, lo, hi, steps): the steps over (head, query block) this work-group takes, every
        query head of its kv head's group over query blocks [lo, hi)."""
        lo, hi = self.query_blocks()
        blocks = arith.maxsi(arith.subi(hi, lo), index(0))
        steps = arith.muli(blocks, index(self.spec.gqa_ratio))
        first_head = arith.muli(self.kv_head, index(self.spec.gqa_ratio))
        return first_head, lo, hi, steps

    def run_steps(self, first_head, lo, hi, steps, dk0, dv0) -> list:
        """The loop from dK = dk0, dV = dv0; its results ([head, m] + dK + dV, flat)."""
        carried = [first_head, lo] + flatten(dk0) + flatten(dv0)
        if self.split_tail_loop:
            # Only the key block's tail is cut (rows past seqlen_q have lse = +inf, so P = 0 there): one
            # decision for the work-group, so the loop is built twice and neither copy branches per step.
            tail = scf.IfOp(as_value(mask_geometry.key_tail(Ix(self.k0), self.bn, Ix(self.seqlen_k))),
                            [c.type for c in carried], has_else=True)
            for block, masked in ((tail.then_block, True), (tail.else_block, False)):
                with ir.InsertionPoint(block):
                    scf.yield_(self.loop(carried, steps, lo, hi, masked))
            return list(tail.results)
        return self.loop(carried, steps, lo, hi, None)

    def zero_gradients(self) -> tuple[list, list]:
        """dK's and dV's accumulator tiles before the first step."""
        return self.zeros(self.dkv, self.dk_atom), self.zeros(self.dkv_v, self.dv_atom)

    def store_gradients(self, results: list) -> None:
        dk, dv = self.gradients(results[2:])
        self.store_grad(self.dk_out, dk, self.dk_atom, self.dkv, self.spec.scale, self.hdim_q)
        self.store_grad(self.dv_out, dv, self.dv_atom, self.dkv_v, None, self.hdim_v)

    def gradients(self, values: list) -> tuple[list, list]:
        """dK's and dV's accumulator tiles from the loop's flat values (dK's first)."""
        (dk_rows, dk_cols), (dv_rows, dv_cols) = ((t.rows // atom.m, t.cols // atom.n)
                                                  for t, atom in ((self.dkv, self.dk_atom), (self.dkv_v, self.dv_atom)))
        split = dk_rows * dk_cols
        return unflatten(values[:split], dk_rows, dk_cols), unflatten(values[split:], dv_rows, dv_cols)

    def loop(self, carried: list, steps, lo, hi, masked: "bool | None") -> list:
        """The steps over (head, query block), carrying dK and dV; the results. `masked`: whether every
        step's scores are masked, or None for the step's own cut test (mask_geometry.tile_cut)."""
        # (head, m) of the step is carried and advanced with selects: no division in the loop.
        loop = scf.ForOp(index(0), steps, index(1), carried)
        with ir.InsertionPoint(loop.body):
            it = loop.induction_variable
            head, m, *values = list(loop.inner_iter_args)
            dk, dv = self.gradients(values)
            next_head, next_m = advance(head, m, lo, hi)
            stage = self.stage_of(it)
            self.before_step(it, steps, stage, head, m, next_head, next_m)
            dk, dv = self.step(head, m, stage, dk, dv, masked)
            self.after_step(stage)
            scf.yield_([next_head, next_m] + flatten(dk) + flatten(dv))
        return list(loop.results)

    def stage_of(self, it: "ir.Value") -> "ir.Value":
        """The Q / dO / LSE / D buffer of step `it`."""
        return arith.andi(it, index(1)) if self.config.stages == 2 else index(0)

    def before_step(self, it, steps, stage, head, m, next_head, next_m) -> None:
        """Make step `it`'s buffer ready: wait for its copies (double-buffered: issued a step ahead, and
        the next step's issued now; else issued now)."""
        if self.config.stages == 2:
            self.copy.wait(0)
            self.atom.shared_written()
            gpu.barrier()
            prefetch = scf.IfOp(arith.cmpi(arith.CmpIPredicate.slt, arith.addi(it, index(1)), steps))
            with ir.InsertionPoint(prefetch.then_block):
                self.load_step(next_head, next_m, arith.xori(stage, index(1)))
                scf.yield_([])
        else:
            gpu.barrier()    # the previous step's reads of the buffers are done
            self.load_step(head, m, stage)
            self.copy.wait(0)
            self.atom.shared_written()
            gpu.barrier()

    def after_step(self, stage) -> None:
        """Hand the step's buffer back (the copies of before_step need nothing: its barrier orders them)."""

    def before_shared_stores(self) -> None:
        """Before a step stores dS^T (and P^T): the previous step's reads of them are done (here: ordered
        by before_step's barrier)."""

    def step_barrier(self) -> None:
        """The barrier that publishes a step's dS^T (and P^T) stores to the warps that read them."""
        gpu.barrier()

    def query_blocks(self) -> tuple["ir.Value", "ir.Value"]:
        """[lo, hi) of the query blocks this key block visits (mask_geometry.query_block_range)."""
        lo, hi = mask_geometry.query_block_range(self.spec.mask, Ix(self.k0), self.bn, self.bm, Ix(self.seqlen_q),
                                                 Ix(self.seqlen_k))
        return as_value(lo), as_value(hi)

    def stage_rows(self, stage: "ir.Value") -> "ir.Value | None":
        """The first row of buffer `stage` in the Q / dO tiles (None: there is one buffer)."""
        return arith.muli(stage, index(self.bm)) if self.config.stages == 2 else None

    def load_step(self, head: "ir.Value", m: "ir.Value", stage: "ir.Value") -> None:
        """Issue the copies of query block m of `head` into buffer `stage`, as one group."""
        q0 = arith.muli(m, index(self.bm))
        rows = self.stage_rows(stage)
        prefix = [self.batch, head]
        self.copy.rows(self.q, prefix, q0, self.seqlen_q, self.tiles["q"], rows)
        self.copy.rows(self.do, prefix, q0, self.seqlen_q, self.tiles["do"], rows)
        # With the tail loop split, an lse of +inf makes P = exp(S - lse) = 0 in rows past seqlen_q, whatever
        # their scores; otherwise such tiles are cut (tile_cut).
        self.copy.row_values(self.lse, prefix, q0, self.tiles["lse"], stage, 0,
                             fill=float("inf") if self.split_tail_loop else 0.0)
        self.copy.row_values(self.d, prefix, q0, self.tiles["d"], stage, self.bm)
        self.copy.commit()

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

    # -- one step --------------------------------------------------------------------------------------

    def step(self, head, m, stage, dk, dv, masked: "bool | None" = None):
        """One query block: S^T, P^T, dP^T, dS^T, then dV, dK, dQ (`masked`: as loop's)."""
        spec, config, atom, sdp_atom, tiles = self.spec, self.config, self.atom, self.sdp_atom, self.tiles
        q0 = arith.muli(m, index(self.bm))
        rows = self.stage_rows(stage)
        sdp, dkv, dkv_v = self.sdp, self.dkv, self.dkv_v
        query_rows = sdp.col0 if rows is None else arith.addi(rows, sdp.col0)   # this warp's queries

        # S^T = K Q^T and dP^T = V dO^T: A = K / V rows, B^T = Q / dO rows (all k-major). An asynchronous
        # atom has dP^T in flight while P^T is computed.
        overlap = atom.asynchronous
        s = sdp_atom.gemm(self.zeros(sdp, sdp_atom), sdp, self.k_hdim_q, Operand(tiles["k"], True, sdp.row0),
                      Operand(tiles["q"], True, query_rows), wait=not overlap)
        if overlap:
            dp = sdp_atom.gemm(self.zeros(sdp, sdp_atom), sdp, self.k_hdim_v, Operand(tiles["v"], True, sdp.row0),
                               Operand(tiles["do"], True, query_rows), wait=False)
            atom.complete(1)
        # With dP^T in flight, each LSE is read where P^T first needs it and D once dS^T does: fewer values
        # live next to the accumulators.
        if overlap:
            lse = lambda ni, c: self.row_value("lse", stage, ni, c)   # noqa: E731
        else:
            preloaded, dsum = self.row_values(stage, ("lse", "d"))
            lse = lambda ni, c: preloaded[ni][c]   # noqa: E731
        bias = self.score_bias(head)
        p = self.probabilities(s, lse, q0, bias, masked)
        if overlap:
            atom.complete(0)
            dsum, = self.row_values(stage, ("d",))
        else:
            dp = sdp_atom.gemm(self.zeros(sdp, sdp_atom), sdp, self.k_hdim_v, Operand(tiles["v"], True, sdp.row0),
                               Operand(tiles["do"], True, query_rows))
        column = self.group_columns
        ds = [[[arith.mulf(p_g, arith.subf(dp_g, self.per_group(dsum[ni][column[g]])))
                for g, (p_g, dp_g) in enumerate(zip(p[mi][ni], sdp_atom.groups(dp[mi][ni])))]
               for ni in range(len(p[0]))] for mi in range(len(p))]
        if spec.dbias:
            self.add_bias_grad(bias, [(ds[mi][ni][g], *self.score_positions(mi, ni, g, q0))
                                      for mi in range(len(p)) for ni in range(len(p[0]))
                                      for g in range(sdp_atom.group_count)])
        ds = [[[softcap_grad(ds_g, s_g, spec) for ds_g, s_g in zip(ds[mi][ni], sdp_atom.groups(s[mi][ni]))]
               for ni in range(len(p[0]))] for mi in range(len(p))]

        # dV += P^T dO, dK += dS^T Q: A = P^T / dS^T (registers or k-major rows); B = dO / Q rows (k). An
        # asynchronous atom with P^T in registers has dV in flight while dS^T is stored.
        early_dv = overlap and config.p_in_registers
        p_t = atom.registers(p) if config.p_in_registers else Operand(tiles["p"], True, dkv_v.row0)
        if early_dv:
            dv = self.dv_atom.gemm(dv, dkv_v, self.bm, p_t, Operand(tiles["do"], False, rows, dkv_v.col0), wait=False)
        self.before_shared_stores()
        sdp_atom.store_groups(tiles["ds"], ds, sdp.row0, sdp.col0)
        if not config.p_in_registers:
            sdp_atom.store_groups(tiles["p"], p, sdp.row0, sdp.col0)
        atom.shared_written()
        self.step_barrier()

        ds_t = atom.registers(ds) if config.p_in_registers else Operand(tiles["ds"], True, dkv.row0)
        if not early_dv:
            dv = self.dv_atom.gemm(dv, dkv_v, self.bm, p_t, Operand(tiles["do"], False, rows, dkv_v.col0),
                                   wait=not overlap)

        def dk_product():
            return self.dk_atom.gemm(dk, dkv, self.bm, ds_t, Operand(tiles["q"], False, rows, dkv.col0),
                                     wait=not overlap)

        if spec.grad_accum == "bf16":
            dk = dk_product()
            if overlap:
                atom.complete(0)
            self.add_dq_pairs(head, q0)
            return dk, dv
        # dQ = dS K: A = (dS^T)^T and B = K, both with k (keys) along the rows of their tiles.
        dqt = self.dq_tile

        def dq_product():
            return self.dq_atom.gemm(self.zeros(dqt, self.dq_atom), dqt, self.bn,
                                     Operand(tiles["ds"], False, None, dqt.row0),
                                     Operand(tiles["k"], False, None, dqt.col0), wait=not overlap)

        if not overlap:   # synchronous products: dK first, so dQ's registers live only for their adds
            dk = dk_product()
            self.add_dq(dq_product(), head, q0, dqt)
            return dk, dv
        # Asynchronous: dQ is issued before dK and waited for alone, so its adds overlap dK's product.
        dq = dq_product()
        dk = dk_product()
        atom.complete(1)
        self.add_dq(dq, head, q0, dqt)
        atom.complete(0)
        return dk, dv

    def zeros(self, tile: WarpTile, atom: "MmaAtom | None" = None) -> list[list["ir.Value"]]:
        atom = atom or self.atom
        return [[atom.zero for _ in range(tile.cols // atom.n)] for _ in range(tile.rows // atom.m)]

    # -- where a lane's accumulator elements lie ---------------------------------------------------------

    def lane_first(self, axis: int) -> "ir.Value":
        """Row (axis 0) or column (axis 1) of this lane's first accumulator element in a tile (hoisted);
        every other element lies a constant away (atom.group_offset)."""
        return as_value(self.atom.position(0, 0)[axis])

    def coordinate(self, base: "ir.Value", constant: int, axis: int) -> "ir.Value":
        """base + constant + this lane's first position along `axis`."""
        if constant:
            base = arith.addi(base, index(constant))
        return arith.addi(base, self.lane_first(axis))

    def along(self, base: "ir.Value", constant: int, group: int, axis: int) -> "ir.Value":
        """The coordinate along `axis` of group `group` of a tile at base + constant: one index where the
        group's elements share it, a vector of one per element where they run along it."""
        atom = self.atom
        if (atom.group_axis == "col") != (axis == 1):
            return self.coordinate(base, constant + atom.group_offset(group, 0)[axis], axis)
        return vector.from_elements(ir.VectorType.get([atom.group_width], ir.IndexType.get()),
                                    [self.coordinate(base, constant + atom.group_offset(group, e)[axis], axis)
                                     for e in range(atom.group_width)])

    def score_positions(self, mi: int, ni: int, g: int, q0) -> tuple["ir.Value", "ir.Value"]:
        """(queries, keys) of group g of S^T tile (mi, ni): an index for the shared one, a vector for the other."""
        atom, sdp = self.sdp_atom, self.sdp
        keys = self.along(arith.addi(self.k0, sdp.row0), mi * atom.m, g, 0)
        queries = self.along(arith.addi(q0, sdp.col0), ni * atom.n, g, 1)
        return queries, keys

    def per_group(self, value: "ir.Value") -> "ir.Value":
        """A query's value (an LSE or a D; one per group column) broadcast over a group that runs along rows."""
        return splat(value, [self.atom.group_width]) if self.atom.group_axis == "row" else value

    @property
    def group_columns(self) -> list[int]:
        """For each group of an accumulator tile, which of the tile's distinct group columns it lies in
        (row_values holds one LSE and D per distinct column: one for mma.sync and MFMA, whose groups of a
        tile share their columns; eight for wgmma's 64-column tile)."""
        offsets = [self.sdp_atom.group_offset(g, 0)[1] for g in range(self.sdp_atom.group_count)]
        distinct = sorted(set(offsets))
        return [distinct.index(o) for o in offsets]

    def row_values(self, stage, names: tuple[str, ...]) -> list:
        """Per name ("lse" or "d"), row_value of every [n-tile][distinct group column] (group_columns)."""
        columns = len(set(self.group_columns))
        out = [[] for _ in names]
        for ni in range(self.sdp.cols // self.sdp_atom.n):
            for values in out:
                values.append([])
            for c in range(columns):
                for name, values in zip(names, out):
                    values[-1].append(self.row_value(name, stage, ni, c))
        return out

    def row_value(self, name: str, stage, ni: int, column: int) -> "ir.Value":
        """LSE (name "lse", as the exponent takes it) or D ("d") of the query columns this lane holds in
        n-tile ni's distinct group column `column`: a vector over a group that runs along columns, else one f32."""
        atom, sdp = self.sdp_atom, self.sdp
        width = atom.group_width if atom.group_axis == "col" else 1
        lane_col = self.lanes.get(("row_values", id(sdp.col0)), lambda: arith.addi(sdp.col0, self.lane_first(1)))
        offset = sorted({atom.group_offset(g, 0)[1] for g in range(atom.group_count)})[column]
        loaded = self.tiles[name].values(stage, arith.addi(lane_col, index(ni * atom.n + offset)), width)
        return lse_operand(loaded, self.spec) if name == "lse" else loaded

    # -- P -----------------------------------------------------------------------------------------------

    def probabilities(self, s, lse, q0, bias=None, masked: "bool | None" = None):
        """P^T per group (f32): exp2(S^T scale log2 e - lse log2 e), masked on cut tiles (the mask cuts
        them or they cross a sequence end: `masked` None tests the tile; True / False is the loop's
        decision for every step); with a bias (score_mods.ScoreBias of this step's head) its term is
        added first. lse(ni, c) gives row_value("lse", ...) of n-tile ni's group column c."""
        atom, spec = self.sdp_atom, self.spec
        m_tiles, n_tiles = len(s), len(s[0])

        def compute(masked: bool):
            column, prepared = self.group_columns, {}

            def row_lse(ni: int, c: int):
                if (ni, c) not in prepared:
                    x = lse(ni, c)
                    prepared[ni, c] = self.per_group(masked_lse(x, spec) if masked else x)
                return prepared[ni, c]

            if not atom.asynchronous:   # every LSE ready before the tiles (mma.sync's, MFMA's measured code)
                for ni, c in sorted({(ni, c) for ni in range(n_tiles) for c in column}):
                    row_lse(ni, c)
            out = []
            for mi in range(m_tiles):
                row = []
                for ni in range(n_tiles):
                    groups = []
                    for g, scores in enumerate(atom.groups(s[mi][ni])):
                        if masked or bias is not None:
                            queries, keys = self.score_positions(mi, ni, g, q0)
                        shifted = None if bias is None else bias.shifted(queries, keys, scores, row_lse(ni, column[g]))
                        pre, factor = softmax_input(scores, spec, row_lse(ni, column[g]), shifted)
                        if masked:
                            score = fmha.MaskedScoreOp.build(pre, queries, keys, self.seqlen_q, self.seqlen_k,
                                                             spec.mask, factor)
                        else:
                            score = arith.mulf(pre, splat(f32(factor), [atom.group_width]), fastmath=contract())
                        groups.append(fmha.Exp2Op.build(exp2_argument(score, row_lse(ni, column[g]), spec, contract())))
                    row.append(groups)
                out.append(row)
            return out

        if masked is not None:
            return compute(masked)
        group_type = ir.VectorType.get([atom.group_width], ir.F32Type.get())
        branch = scf.IfOp(self.tile_cut(q0), [group_type] * (m_tiles * n_tiles * atom.group_count), has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.yield_(flatten3(compute(True)))
        with ir.InsertionPoint(branch.else_block):
            scf.yield_(flatten3(compute(False)))
        flat, count = list(branch.results), atom.group_count
        return [[flat[(mi * n_tiles + ni) * count:(mi * n_tiles + ni + 1) * count] for ni in range(n_tiles)]
                for mi in range(m_tiles)]

    def tile_cut(self, q0: "ir.Value") -> "ir.Value":
        """i1, uniform: the step's tile holds a pair that is not shown (a mask cut or a tail), so its
        scores must be masked (mask_geometry.tile_cut)."""
        cut = mask_geometry.tile_cut(self.spec.mask, Ix(q0), self.bm, Ix(self.k0), self.bn, Ix(self.seqlen_q),
                                     Ix(self.seqlen_k))
        return as_value(cut)

    # -- bias gradients ----------------------------------------------------------------------------------

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
        first = scf.IfOp(arith.cmpi(arith.CmpIPredicate.eq, self.wave_lane, index(0)))
        with ir.InsertionPoint(first.then_block):
            bias.add_slope_grad(total)
            scf.yield_([])

    # -- results -------------------------------------------------------------------------------------------

    @staticmethod
    def row_pieces(atom: MmaAtom):
        """An accumulator tile's pieces, one per (lane, row): (rows, cols, pick), the piece's offsets from
        the lane's first element and pick(groups) the piece: a whole group where it runs along the
        columns, else one element."""
        if atom.group_axis == "col":
            return [(*atom.group_offset(g, 0), lambda groups, g=g: groups[g]) for g in range(atom.group_count)]
        return [(*atom.group_offset(0, e), lambda groups, e=e: vector.extract(groups[0], [], [e]))
                for e in range(atom.group_width)]

    def add_dq(self, dq, head, q0, tile: WarpTile) -> None:
        """dq_acc[b, head, q0 + row, col...] += dS K, one f32 atomic (deterministic: a store) per piece
        (rows are padded to whole query blocks; the convert applies the softmax scale); none at the
        tile's columns past hdim_q. In fragment order (bodies.dq_fragment_order), one per 16-byte run."""
        atom = self.dq_atom
        q_first, col_first = arith.addi(q0, tile.row0), tile.col0
        if dq_fragment_order(self.spec, self.config):
            self.add_dq_runs(dq, head, q_first, col_first)
            return
        for mi, row in enumerate(dq):
            for ni, c in enumerate(row):
                groups = atom.groups(c)
                for rows, cols, pick in self.row_pieces(atom):
                    value, q = pick(groups), self.coordinate(q_first, mi * atom.m + rows, 0)
                    col = self.coordinate(col_first, ni * atom.n + cols, 1)
                    with self.inside_head_dim(col, self.spec.hdim_q, self.hdim_q):
                        self.add_dq_value(value, head, q, col)

    def add_dq_runs(self, dq, head, q_first, col_first) -> None:
        """add_dq into a dq_acc in fragment order: the groups of one column pair 8 rows apart, in a block of
        16 rows x 8 columns, as one vector<4> at the run's place (wgmma_layouts.dq_fragment_position). A
        place is the lane's (with the warpgroup's first column, and the shift of the run's class of blocks)
        plus the run's constant one (wgmma_layouts.dq_run_place). Blocks of the tiles' zero columns past
        hdim_q have no place: none is added."""
        atom, hdim = self.dq_atom, self.spec.hdim_q
        offsets = [atom.group_offset(g, 0) for g in range(atom.group_count)]
        runs = [(g, offsets.index((rows + 8, cols))) for g, (rows, cols) in enumerate(offsets) if rows % 16 == 0]

        def lane_place(shift: int) -> tuple["ir.Value", "ir.Value"]:
            return tuple(self.lanes.get(("dq_run", axis, id(col_first), shift), lambda axis=axis: as_value(
                dq_fragment_position(Ix.lane(self.lane_first(0), self.lanes),
                                     Ix.lane(col_first, self.lanes) + self.lane_first(1) + shift, hdim)[axis]))
                         for axis in (0, 1))

        run_type = ir.VectorType.get([2 * atom.group_width], ir.F32Type.get())
        for mi, row in enumerate(dq):
            for ni, c in enumerate(row):
                groups = atom.groups(c)
                for first, second in runs:
                    rows, cols = offsets[first]
                    value = vector.from_elements(run_type, [vector.extract(groups[g], [], [e])
                                                            for g in (first, second) for e in range(atom.group_width)])
                    block = arith.addi(col_first, index(ni * atom.n + cols)) if hdim != self.hdim_q else None
                    with self.inside_head_dim(block, hdim, self.hdim_q):
                        shift, (at_row, at_col) = dq_run_place(mi * atom.m + rows, ni * atom.n + cols, hdim)
                        lane_row, lane_col = lane_place(shift)
                        q = arith.addi(arith.addi(q_first, index(at_row)), lane_row)
                        self.add_dq_value(value, head, q, arith.addi(lane_col, index(at_col)))

    def add_dq_value(self, value: "ir.Value", head, q, col) -> None:
        """dQ's value (f32 or a vector of adjacent, even-aligned columns) at (head, q, col) for this key
        block: an f32 atomic add into dq_acc, or in deterministic mode a store into this key block's
        partial, which no other work-group writes (each element has one owning lane)."""
        accumulate(value, self.dq_out, [self.dq_batch, head, q, col], stored=self.dq_partials)

    def add_dq_pairs(self, head, q0) -> None:
        """grad_accum = "bf16": dQ by packed bf16 atomics into dq, each on two adjacent head-dim columns
        of one query. A pair must lie inside one group, so the product is oriented for the atom: dQ = dS K
        where groups run along the columns (the head dim), else dQ^T = K^T dS^T (rows: the head dim)."""
        atom, tiles = self.dq_atom, self.tiles
        transposed = atom.group_axis == "row"
        if transposed:
            with self.lanes.hoist:
                tile = warp_tile(self.warp, self.config.dq_warps[::-1], self.hdim_q, self.bm)
            product = atom.gemm(self.zeros(tile), tile, self.bn, Operand(tiles["k"], False, None, tile.row0),
                                Operand(tiles["ds"], False, None, tile.col0))
            by_query = [list(column) for column in zip(*product)]   # [query tile][head-dim tile]
        else:
            tile = self.dq_tile
            by_query = atom.gemm(self.zeros(tile, atom), tile, self.bn, Operand(tiles["ds"], False, None, tile.row0),
                                 Operand(tiles["k"], False, None, tile.col0))
        q_axis, d_axis = (1, 0) if transposed else (0, 1)
        q_start, d_start = (tile.col0, tile.row0) if transposed else (tile.row0, tile.col0)
        q_size, d_size = (atom.n, atom.m) if transposed else (atom.m, atom.n)
        pair_type = ir.VectorType.get([2], ir.F32Type.get())

        def pairs(qt: int, g: int):
            out = []
            for dt, c in enumerate(by_query[qt]):
                group = atom.groups(c)[g]
                for e in range(0, atom.group_width, 2):
                    pair = group if atom.group_width == 2 else vector.from_elements(
                        pair_type, [vector.extract(group, [], [e + i]) for i in range(2)])
                    out.append((pair, self.coordinate(d_start, dt * d_size + atom.group_offset(g, e)[d_axis], d_axis)))
            return out

        first_query = arith.addi(q0, q_start)
        for qt in range(len(by_query)):
            for g in range(atom.group_count):
                query = self.coordinate(first_query, qt * q_size + atom.group_offset(g, 0)[q_axis], q_axis)
                self.add_dq_row_pairs(head, query, lambda qt=qt, g=g: pairs(qt, g))

    def add_dq_row_pairs(self, head, q, pairs) -> None:
        """This key block's dQ pairs of query row q, (vector<2xf32>, column) as pairs() builds them, each
        scaled, rounded and added into dq itself by one packed bf16 atomic. dq has no padding rows, so a
        row past seqlen_q adds nothing: one check per row, and the pairs' columns built inside it (a check
        per pair, or columns live across it, make the sm_90 body spill)."""
        inside = scf.IfOp(arith.cmpi(arith.CmpIPredicate.slt, q, self.seqlen_q))
        with ir.InsertionPoint(inside.then_block):
            pair_type = ir.VectorType.get([2], self.element)
            for value, col in pairs():
                with self.inside_head_dim(col, self.spec.hdim_q, self.hdim_q):
                    scaled = arith.mulf(value, splat(f32(self.spec.scale), [2]))
                    fmha.AtomicAddOp.build(arith.truncf(pair_type, scaled), self.dq_out, [self.batch, head, q, col])
            scf.yield_([])

    def store_grad(self, out, acc, atom: MmaAtom, tile: WarpTile, scale: float | None, tile_head_dim: int) -> None:
        """out[b, kv_head, k0 + row, col...] = acc (atom's tiles; times scale), rounded, one store per piece;
        rows past seqlen_k and the columns of the tile (tile_head_dim wide) past out's head dim are not stored."""
        width = atom.group_width
        rounded = [[[arith.truncf(ir.VectorType.get([width], self.element),
                                  g if scale is None else arith.mulf(g, splat(f32(scale), [width])))
                     for g in atom.groups(c)] for c in row] for row in acc]
        first = arith.addi(self.k0, tile.row0)
        head_dim = ir.MemRefType(out.type).shape[-1]
        for mi, row in enumerate(rounded):
            for rows, cols, pick in self.row_pieces(atom):
                key = self.coordinate(first, mi * atom.m + rows, 0)
                inside = scf.IfOp(arith.cmpi(arith.CmpIPredicate.slt, key, self.seqlen_k))
                with ir.InsertionPoint(inside.then_block):
                    for ni, groups in enumerate(row):
                        piece = pick(groups)
                        col = self.coordinate(tile.col0, ni * atom.n + cols, 1)
                        at = [self.batch, self.kv_head, key, col]
                        with self.inside_head_dim(col, head_dim, tile_head_dim):
                            if isinstance(piece.type, ir.VectorType):   # a group's adjacent columns: one access
                                vector.store(piece, out, at, alignment=2 * width)
                            else:
                                memref.store(piece, out, at)
                    scf.yield_([])

    @staticmethod
    @contextmanager
    def inside_head_dim(col: "ir.Value", head_dim: int, tile_head_dim: int):
        """Build under `scf.if col < head_dim` where the tile is wider than the head dim (col: a piece's
        first column; head dims are multiples of 8, so a piece never straddles it), else in place."""
        if head_dim == tile_head_dim:
            yield
            return
        with if_then(arith.cmpi(arith.CmpIPredicate.ult, col, index(head_dim))):
            yield


def advance(head, m, lo, hi):
    """The step after (head, m): the next query block, or the next head's first one."""
    nxt = arith.addi(m, index(1))
    wrap = arith.cmpi(arith.CmpIPredicate.sge, nxt, hi)
    return arith.select(wrap, arith.addi(head, index(1)), head), arith.select(wrap, lo, nxt)


def contract() -> "ir.Attribute":
    """Lets LLVM fuse score * scale - lse into one fma."""
    return ir.Attribute.parse("#arith.fastmath<contract>")


def flatten(acc):
    return [c for row in acc for c in row]


def unflatten(flat, rows, cols):
    return [list(flat[r * cols:(r + 1) * cols]) for r in range(rows)]


def flatten3(values):
    return [group for row in values for groups in row for group in groups]

