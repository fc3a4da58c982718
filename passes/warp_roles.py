"""The schedule of passes/flash_bwd.py with warp specialisation (sm_90a, config.producer): one producer
warpgroup feeds the consumer warpgroups, which run the schedule's steps unchanged.

    producer (setmaxnreg down): K, V once by TMA; per step, when the stage is free (its `empty` barrier),
                                Q and dO by TMA and LSE and D by ordinary loads into the stage, then
                                arrive on its `full` barrier (TMA bytes counted by expect-tx)
    consumers (setmaxnreg up):  wait for K, V; per step wait for the stage's `full` phase, compute the
                                step (FlashBackward.step), then release the stage (`empty`)

With config.dq_bulk the producer's last warp is a writer instead (its own role): the consumers store each
step's dQ tile into shared memory and the writer reduce-adds it into dq_acc with bulk tensor reduces
(write_dq), in place of the consumers' per-element atomics; in deterministic mode the key blocks of a
query block take turns at it, on the query block's semaphore (bodies.dq_in_turns).

With config.dkv_tma_store the consumers end by rounding dK and dV into K's and V's tiles (stmatrix), which
every consumer's last products have read by then, and one of them stores the tiles by TMA boxes
(store_gradients), in place of every thread's 4-byte stores of its accumulator pairs.

The consumers sync among themselves with a named barrier over their threads (the producer runs ahead),
twice per step: before they store dS^T (every warpgroup's previous dQ product has read it) and after
(it is published); with dkv_tma_store twice more at the end, around their stores of dK and dV. Q, dO, K
and V come through tensor maps (fmha_mlir.bodies.wgmma.tensor_maps, kernel parameters after the stage's
operands) whose boxes stop at the sequence ends, so rows past seqlen_q and seqlen_k are zero, as the
cp.async copies leave them; LSE and D past seqlen_q get the fill CpAsyncCopy.row_values gives them.
Roles are declared on the gpu.func (hopper_sync.declare_roles): the interpreter runs each as a
coroutine. The budgets are the config's split (bodies.wgmma.register_budgets).
"""
from __future__ import annotations

from fmha_mlir import mask_geometry
from fmha_mlir.bodies import DQ_DONE, DQ_SEMAPHORES, TiledBody, dq_in_turns
from fmha_mlir.bodies.wgmma import (BLOCK_COLUMNS, DQ_BOX_COLUMNS, PRODUCED_TILES, STORED_TILES, SWIZZLE,
                                   register_budgets, tensor_maps)
from fmha_mlir.dialects import fmha
from fmha_mlir.wgmma_layouts import f32_store_column, f32_tile_offset
from fmha_mlir.mlir import arith, gpu, ir, memref, scf, vector

from .flash_bwd import FlashBackward, advance
from .hopper_sync import (MbarrierGroup, MbarrierPipeline, declare_ordered_reduces, declare_roles, fence_proxy_async,
                          fix_entry_registers, named_barrier, set_max_registers)
from .ir_builders import enclosing_op, f32, if_then, index, splat
from .ix import Ix, as_value
from .shared_tiles import dynamic_shared_memory
from .tma_copy import TmaCopy, TmaWrite, bulk_commit, bulk_wait

CONSUMER_BARRIER = 1     # named barrier id over the consumer threads
DQ_FULL, DQ_FREE = 0, 1  # the barriers of dQ's shared tile (dq_bulk)


class ProducerConsumerBackward(FlashBackward):
    """FlashBackward whose copies a producer warpgroup issues (see the module docstring)."""

    def __init__(self, op, spec, config, hardware):
        super().__init__(op, spec, config, hardware)
        function = enclosing_op(op, "gpu.func")
        params = list(function.regions[0].blocks[0].arguments)[len(op.operands):]
        maps = tensor_maps(config)
        if len(params) != len(maps):
            raise ValueError(f"a producer body takes {len(maps)} tensor maps after the stage's operands "
                             f"(fmha-stages-to-gpu adds them), the kernel has {len(params)}")
        self.function = function
        self.consumers = config.consumer_threads
        # The producer warpgroup's threads that load; with dq_bulk its last warp writes dQ instead.
        self.loaders = config.threads - self.consumers - (config.wave_size if config.dq_bulk else 0)
        self.smem = dynamic_shared_memory()
        self.maps = {name: TmaCopy.for_tile(param, self.tiles[name].layout, spec.dtype, outer=2)
                     for name, param in zip(PRODUCED_TILES, params)}
        if config.dq_bulk:
            self.dq_write = TmaWrite(params[len(PRODUCED_TILES)], self.bm, DQ_BOX_COLUMNS, SWIZZLE)
            self.dq_offset = next(t.offset for t in TiledBody.shared_layout(spec, config) if t.name == "dq")
        if config.dkv_tma_store:
            self.dkv_writes = {out: TmaWrite(param, self.bn, BLOCK_COLUMNS, SWIZZLE, spec.dtype)
                               for out, param in zip(STORED_TILES, params[-len(STORED_TILES):])}

    def build(self) -> None:
        first_head, lo, hi, steps = self.walk()
        config = self.config
        writer = self.consumers + self.loaders
        declare_roles(self.function, [(0, self.consumers), (self.consumers, writer)]
                      + ([(writer, config.threads)] if config.dq_bulk else []))
        fix_entry_registers(self.function)
        if dq_in_turns(self.spec, config):
            declare_ordered_reduces(self.function)
        # full[s]: every loader arrives once its LSE and D are stored, plus the TMA issuer's expect-tx
        # arrival; empty[s]: every consumer thread once the step is done.
        self.pipeline = MbarrierPipeline(config.stages, self.consumers, producers=self.loaders + 1)
        self.keys_ready = MbarrierGroup(1)
        # dQ's shared tile: DQ_FULL once every consumer stored its part, DQ_FREE once the writer's reduces
        # have read it.
        self.dq_barriers = MbarrierGroup(2) if config.dq_bulk else None
        with if_then(arith.cmpi(arith.CmpIPredicate.eq, self.tid, index(0))):
            self.pipeline.init()
            self.keys_ready.init(0, 1)
            if self.dq_barriers is not None:
                self.dq_barriers.init(DQ_FULL, self.consumers)
                self.dq_barriers.init(DQ_FREE, 1)
            fence_proxy_async()
        gpu.barrier()

        producer_registers, consumer_registers = register_budgets(config)
        role = scf.IfOp(arith.cmpi(arith.CmpIPredicate.ult, self.tid, index(self.consumers)), has_else=True)
        with ir.InsertionPoint(role.then_block):
            set_max_registers(consumer_registers, True)
            self.keys_ready.wait(0, False)
            results = self.run_steps(first_head, lo, hi, steps, *self.zero_gradients())
            self.store_gradients(results)
            scf.yield_([])
        with ir.InsertionPoint(role.else_block):
            set_max_registers(producer_registers, False)
            if config.dq_bulk:
                loads = scf.IfOp(arith.cmpi(arith.CmpIPredicate.ult, self.tid, index(writer)), has_else=True)
                with ir.InsertionPoint(loads.then_block):
                    self.produce(first_head, lo, hi, steps)
                    scf.yield_([])
                with ir.InsertionPoint(loads.else_block):
                    self.write_dq(first_head, lo, hi, steps)
                    scf.yield_([])
            else:
                self.produce(first_head, lo, hi, steps)
            scf.yield_([])

    # -- the consumers' side of the pipeline ---------------------------------------------------------------

    def stage_of(self, it):
        return arith.remui(it, index(self.config.stages))

    def store_gradients(self, results: list) -> None:
        """With dkv_tma_store: once every consumer's last products have read K and V, dK (scaled) and dV
        rounded into their tiles by stmatrix, published to the async proxy, and stored by one thread's box
        stores (TMA drops rows past seqlen_k and columns past the head dim), whose reads it waits for
        before the work-group ends; else FlashBackward's stores."""
        if not self.config.dkv_tma_store:
            return super().store_gradients(results)
        dk, dv = self.gradients(results[2:])
        self.before_shared_stores()
        for acc, atom, tile, scale, name in ((dk, self.dk_atom, self.dkv, self.spec.scale, "k"),
                                             (dv, self.dv_atom, self.dkv_v, None, "v")):
            factor = None if scale is None else splat(f32(scale), [atom.group_width])
            values = [[[g if factor is None else arith.mulf(g, factor) for g in atom.groups(c)] for c in row]
                      for row in acc]
            atom.store_groups(self.tiles[name], values, tile.row0, tile.col0, after_loop=True)
        fence_proxy_async()
        named_barrier(CONSUMER_BARRIER, self.consumers)
        with if_then(arith.cmpi(arith.CmpIPredicate.eq, self.tid, index(0))):
            for (out, name), head_dim in zip(STORED_TILES.items(), (self.spec.hdim_q, self.spec.hdim_v)):
                write, tile = self.dkv_writes[out], self.tiles[name]
                for b in range(-(-head_dim // BLOCK_COLUMNS)):   # boxes wholly past the head dim store nothing
                    write.store(self.smem, tile.offset + b * write.box_bytes,
                                [index(b * BLOCK_COLUMNS), self.k0, self.kv_head, self.batch])
            bulk_commit()
            bulk_wait(0, read=True)

    def before_step(self, it, steps, stage, head, m, next_head, next_m) -> None:
        self.step_index = it
        self.pipeline.wait(stage, self.parity(arith.divui(it, index(self.config.stages))))

    def after_step(self, stage) -> None:
        self.pipeline.release(stage)

    def before_shared_stores(self) -> None:
        named_barrier(CONSUMER_BARRIER, self.consumers)

    def step_barrier(self) -> None:
        named_barrier(CONSUMER_BARRIER, self.consumers)

    def add_dq(self, dq, head, q0, tile) -> None:
        """With dq_bulk: the step's dQ into the shared tile, for the writer's reduce-adds (once its reduces
        of the previous step's tile have read it); else the atomics of FlashBackward."""
        if not self.config.dq_bulk:
            return super().add_dq(dq, head, q0, tile)
        it = self.step_index
        with if_then(arith.cmpi(arith.CmpIPredicate.uge, it, index(1))):
            self.dq_barriers.wait(DQ_FREE, self.parity(arith.subi(it, index(1))))
        atom, flat = self.dq_atom, self.tiles["dq"].flat
        odd = self.lanes.get(("odd_row",), lambda: as_value(Ix(self.lane_first(0)) % 2 == 1))
        for mi, row in enumerate(dq):
            for ni, c in enumerate(row):
                groups = atom.groups(c)
                pieces = {(rows, cols): pick(groups) for rows, cols, pick in self.row_pieces(atom)}
                for (rows, cols), value in pieces.items():
                    # odd rows store the piece wgmma_layouts.f32_store_column names (no bank conflict)
                    value = arith.select(odd, pieces[rows, f32_store_column(cols, 1)], value)
                    at = self.dq_tile_index(tile, mi * atom.m + rows, ni * atom.n + cols)
                    vector.store(value, flat, [at], alignment=4 * atom.group_width)
        fence_proxy_async()    # the reduce-adds read the tile through the async proxy
        self.dq_barriers.arrive(DQ_FULL)

    def dq_tile_index(self, tile, row: int, col: int) -> "ir.Value":
        """The f32 index in dQ's shared tile (wgmma_layouts.f32_tile_offset) of the piece this lane stores
        for its first accumulator element of warp tile `tile` at (row, col) more (row a multiple of 8):
        at an odd row, the piece of the column group f32_store_column names."""

        def lane_part(column: int) -> "ir.Value":   # column: col modulo 32, a multiple of 8
            r, c = Ix(self.lane_first(0)), Ix(self.lane_first(1))
            stored = Ix(tile.col0) + c + f32_store_column(column, r)
            return as_value(f32_tile_offset(Ix(tile.row0) + r, stored, self.bm) // 4)

        hoisted = self.lanes.get(("dq_tile", id(tile), col % DQ_BOX_COLUMNS), lambda: lane_part(col % DQ_BOX_COLUMNS))
        # row (a multiple of 8) and col's whole boxes do not move the swizzle: their offset adds
        constant = f32_tile_offset(row, col - col % DQ_BOX_COLUMNS, self.bm) // 4
        return arith.addi(hoisted, index(constant)) if constant else hoisted

    @staticmethod
    def parity(use: "ir.Value") -> "ir.Value":
        """The phase parity of a stage's use-th fill (an i1)."""
        return arith.index_cast(ir.IntegerType.get_signless(1), arith.andi(use, index(1)))

    # -- the producer ----------------------------------------------------------------------------------------

    def produce(self, first_head, lo, hi, steps) -> None:
        """K and V, then every step's Q, dO, LSE and D, each into its stage once the consumers freed it."""
        mine = arith.subi(self.tid, index(self.consumers))
        issuer = arith.cmpi(arith.CmpIPredicate.eq, mine, index(0))
        with if_then(issuer):
            self.keys_ready.arrive_expect_tx(0, sum(self.tiles[n].layout.nbytes for n in ("k", "v")))
            for name in ("k", "v"):
                self.load(name, 0, self.k0, self.kv_head, self.keys_ready, 0)
        stages = self.config.stages
        loop = scf.ForOp(index(0), steps, index(1), [first_head, lo])
        with ir.InsertionPoint(loop.body):
            it = loop.induction_variable
            head, m = loop.inner_iter_args
            stage = self.stage_of(it)
            with if_then(arith.cmpi(arith.CmpIPredicate.uge, it, index(stages))):   # its last use released
                self.pipeline.acquire(stage, self.parity(arith.subi(arith.divui(it, index(stages)), index(1))))
            q0 = arith.muli(m, index(self.bm))
            with if_then(issuer):
                self.pipeline.commit(stage, sum(self.tiles[n].layout.nbytes for n in ("q", "do")))
                for name in ("q", "do"):
                    self.load(name, stage, q0, head, self.pipeline.barriers, stage)
            self.load_row_values(mine, head, q0, stage)
            self.pipeline.barriers.arrive(stage)
            scf.yield_(list(advance(head, m, lo, hi)))

    def load(self, name: str, stage, row, head, barriers, barrier) -> None:
        """Tile `name`'s boxes at (row, column 0) of (batch, head) into its copy `stage`."""
        tile = self.tiles[name]
        copy_bytes = tile.layout.nbytes
        offset = (tile.offset + stage * copy_bytes if isinstance(stage, int)
                  else arith.addi(index(tile.offset), arith.muli(stage, index(copy_bytes))))
        self.maps[name].load_tile(self.smem, offset, tile.layout, row, 0, barriers, barrier,
                                  outer=(head, self.batch))

    def load_row_values(self, mine, head, q0, stage) -> None:
        """LSE and D of query rows q0 + mine + i x loaders (< block_m) into the stage, with
        CpAsyncCopy.row_values' fills past seqlen_q (ordinary loads: rows of f32 need not meet TMA's
        16-byte strides)."""
        for first in range(0, self.bm, self.loaders):
            local = arith.addi(mine, index(first)) if first else mine
            with if_then(arith.cmpi(arith.CmpIPredicate.ult, local, index(self.bm))):
                row = arith.addi(q0, local)
                valid = arith.cmpi(arith.CmpIPredicate.slt, row, self.seqlen_q)
                clamped = arith.minsi(row, arith.subi(self.seqlen_q, index(1)))
                at = [arith.addi(arith.muli(stage, index(self.bm)), local)]
                lse_fill = float("inf") if self.split_tail_loop else 0.0
                for name, source, fill in (("lse", self.lse, lse_fill), ("d", self.d, 0.0)):
                    value = memref.load(source, [self.batch, head, clamped])
                    memref.store(arith.select(valid, value, arith.constant(ir.F32Type.get(), fill)),
                                 self.tiles[name].flat, at)

    # -- the dQ writer (dq_bulk) ---------------------------------------------------------------------------

    def write_dq(self, first_head, lo, hi, steps) -> None:
        """The producer's last warp: per step, once the consumers stored the step's dQ tile, its first lane
        reduce-adds it into dq_acc (one box per 32 columns) and frees the tile when the reduces have read
        it; before the work-group ends, every reduce has completed. In deterministic mode (dq_in_turns)
        the lane first waits for this key block's turn at the query block and passes the turn on once its
        reduces completed, so every element of dq_acc sums its key blocks in one order: at once, or with
        config.turn_overlap after the next step's reduces are issued (the loop carries the step's turn).
        With dQ converted in the grid (config.dq_convert_rows) the lane then counts its key block on the kv
        head's dq_done counter, which the convert work-groups wait for (passes/dq_convert_tail.py)."""
        elected = arith.cmpi(arith.CmpIPredicate.eq, self.tid, index(self.consumers + self.loaders))
        in_turns = dq_in_turns(self.spec, self.config)
        overlap = in_turns and self.config.turn_overlap
        loop = scf.ForOp(index(0), steps, index(1), [first_head, lo] * (2 if overlap else 1))
        with ir.InsertionPoint(loop.body):
            it = loop.induction_variable
            head, m, *previous = loop.inner_iter_args
            self.dq_barriers.wait(DQ_FULL, self.parity(it))
            with if_then(elected):
                q0 = arith.muli(m, index(self.bm))
                if in_turns:
                    fmha.SemaphoreWaitOp.build(self.turn_of(q0), self.operands[DQ_SEMAPHORES], [self.batch, head, m])
                # Boxes over the head dim's columns only; TMA drops a box's part past it.
                for b in range(-(-self.spec.hdim_q // DQ_BOX_COLUMNS)):
                    self.dq_write.reduce_add(self.smem, self.dq_offset + b * self.dq_write.box_bytes,
                                             [index(b * DQ_BOX_COLUMNS), q0, head, self.batch])
                bulk_commit()
                bulk_wait(0, read=True)
                self.dq_barriers.arrive(DQ_FREE)
                if overlap:
                    with if_then(arith.cmpi(arith.CmpIPredicate.ugt, it, index(0))):
                        self.pass_turn(previous, pending=1)
                elif in_turns:
                    self.pass_turn([head, m], pending=0)
            scf.yield_(list(advance(head, m, lo, hi)) + ([head, m] if overlap else []))
        with if_then(elected):
            bulk_wait(0, read=False)
            if overlap:
                with if_then(arith.cmpi(arith.CmpIPredicate.ugt, steps, index(0))):
                    self.pass_turn(list(loop.results)[2:], pending=None)
            if DQ_DONE in self.operands:   # dQ converted in the grid: this key block's adds are in
                fmha.SemaphoreSignalOp.build(self.operands[DQ_DONE], [self.batch, self.kv_head])

    def pass_turn(self, turn, pending: int | None) -> None:
        """Signal the next key block's turn at query block (head, m) = `turn` once the reduce-adds into it
        completed: all but this thread's `pending` latest bulk groups (None: already waited for)."""
        if pending is not None:
            bulk_wait(pending, read=False)
        fmha.SemaphoreSignalOp.build(self.operands[DQ_SEMAPHORES], [self.batch, *turn])

    def turn_of(self, q0) -> "ir.Value":
        """i32: this key block's turn at the query block from q0, the key blocks that visit it counted in
        config.turn_order (mask_geometry.key_block_range, the exact inverse of the schedule's walk)."""
        first, last = mask_geometry.key_block_range(self.spec.mask, Ix(q0), self.bm, self.bn, Ix(self.seqlen_q),
                                                    Ix(self.seqlen_k))
        key_block = Ix(self.key_block)
        turn = as_value(last - 1 - key_block if self.config.turn_order == "last_to_first" else key_block - first)
        return arith.index_cast(ir.IntegerType.get_signless(32), turn)
