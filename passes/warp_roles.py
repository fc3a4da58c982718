"""The schedule of passes/flash_bwd.py with warp specialisation (sm_90a, config.producer): one producer
warpgroup feeds the consumer warpgroups, which run the schedule's steps unchanged.

    producer (setmaxnreg 24):   K, V once by TMA; per step, when the stage is free (its `empty` barrier),
                                Q and dO by TMA and LSE and D by ordinary loads into the stage, then
                                arrive on its `full` barrier (TMA bytes counted by expect-tx)
    consumers (setmaxnreg 240): wait for K, V; per step wait for the stage's `full` phase, compute the
                                step (FlashBackward.step), then release the stage (`empty`)

The consumers sync among themselves with a named barrier over their threads (the producer runs ahead),
twice per step: before they store dS^T (every warpgroup's previous dQ product has read it) and after
(it is published). Q, dO, K and V come through tensor maps (fmha_mlir.bodies.wgmma.tensor_maps, kernel
parameters after the stage's operands) whose boxes stop at the sequence ends, so rows past seqlen_q and
seqlen_k are zero, as the cp.async copies leave them; LSE and D past seqlen_q get the fill
CpAsyncCopy.row_values gives them. Roles are declared on the gpu.func (hopper_sync.declare_roles): the
interpreter runs each as a coroutine.
"""
from __future__ import annotations

from fmha_mlir.bodies.wgmma import PRODUCED_TILES
from fmha_mlir.mlir import arith, gpu, ir, memref, scf

from .flash_bwd import FlashBackward, advance
from .hopper_sync import (MbarrierGroup, MbarrierPipeline, declare_roles, fence_proxy_async, fix_entry_registers,
                          named_barrier, set_max_registers)
from .ir_builders import enclosing_op, if_then, index
from .shared_tiles import dynamic_shared_memory
from .tma_copy import TmaCopy

PRODUCER_REGISTERS, CONSUMER_REGISTERS = 24, 240   # 128 x 24 + 256 x 240 <= 64K registers
CONSUMER_BARRIER = 1                                 # named barrier id over the consumer threads


class ProducerConsumerBackward(FlashBackward):
    """FlashBackward whose copies a producer warpgroup issues (see the module docstring)."""

    def __init__(self, op, spec, config, hardware):
        super().__init__(op, spec, config, hardware)
        function = enclosing_op(op, "gpu.func")
        params = list(function.regions[0].blocks[0].arguments)[len(op.operands):]
        if len(params) != len(PRODUCED_TILES):
            raise ValueError(f"a producer body takes {len(PRODUCED_TILES)} tensor maps after the stage's operands "
                             f"(fmha-stages-to-gpu adds them), the kernel has {len(params)}")
        self.function = function
        self.consumers = config.consumer_threads
        self.smem = dynamic_shared_memory()
        self.maps = {name: TmaCopy.for_tile(param, self.tiles[name].layout, spec.dtype, outer=2)
                     for name, param in zip(PRODUCED_TILES, params)}

    def build(self) -> None:
        first_head, lo, hi, steps = self.walk()
        producer = self.config.threads - self.consumers
        declare_roles(self.function, [(0, self.consumers), (self.consumers, self.config.threads)])
        fix_entry_registers(self.function)
        # full[s]: every producer thread arrives once its LSE and D are stored, plus the TMA issuer's
        # expect-tx arrival; empty[s]: every consumer thread once the step is done.
        self.pipeline = MbarrierPipeline(self.config.stages, self.consumers, producers=producer + 1)
        self.keys_ready = MbarrierGroup(1)
        first = scf.IfOp(arith.cmpi(arith.CmpIPredicate.eq, self.tid, index(0)))
        with ir.InsertionPoint(first.then_block):
            self.pipeline.init()
            self.keys_ready.init(0, 1)
            fence_proxy_async()
            scf.yield_([])
        gpu.barrier()

        role = scf.IfOp(arith.cmpi(arith.CmpIPredicate.ult, self.tid, index(self.consumers)), has_else=True)
        with ir.InsertionPoint(role.then_block):
            set_max_registers(CONSUMER_REGISTERS, True)
            self.keys_ready.wait(0, False)
            results = self.run_steps(first_head, lo, hi, steps, self.zeros(self.dkv), self.zeros(self.dkv_v))
            self.store_gradients(results)
            scf.yield_([])
        with ir.InsertionPoint(role.else_block):
            set_max_registers(PRODUCER_REGISTERS, False)
            self.produce(first_head, lo, hi, steps)
            scf.yield_([])

    # -- the consumers' side of the pipeline ---------------------------------------------------------------

    def stage_of(self, it):
        return arith.remui(it, index(self.config.stages))

    def before_step(self, it, steps, stage, head, m, next_head, next_m) -> None:
        self.pipeline.wait(stage, self.parity(arith.divui(it, index(self.config.stages))))

    def after_step(self, stage) -> None:
        self.pipeline.release(stage)

    def before_shared_stores(self) -> None:
        named_barrier(CONSUMER_BARRIER, self.consumers)

    def step_barrier(self) -> None:
        named_barrier(CONSUMER_BARRIER, self.consumers)

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
        copy_bytes = tile.rows * tile.cols * 2
        offset = (tile.offset + stage * copy_bytes if isinstance(stage, int)
                  else arith.addi(index(tile.offset), arith.muli(stage, index(copy_bytes))))
        self.maps[name].load_tile(self.smem, offset, tile.layout, row, 0, barriers, barrier,
                                  outer=(head, self.batch))

    def load_row_values(self, mine, head, q0, stage) -> None:
        """LSE and D of query rows q0 + mine (mine < block_m) into the stage, with CpAsyncCopy.row_values'
        fills past seqlen_q (ordinary loads: rows of f32 need not meet TMA's 16-byte strides)."""
        with if_then(arith.cmpi(arith.CmpIPredicate.ult, mine, index(self.bm))):
            row = arith.addi(q0, mine)
            valid = arith.cmpi(arith.CmpIPredicate.slt, row, self.seqlen_q)
            clamped = arith.minsi(row, arith.subi(self.seqlen_q, index(1)))
            at = [arith.addi(arith.muli(stage, index(self.bm)), mine)]
            lse_fill = float("inf") if self.split_tail_loop else 0.0
            for name, source, fill in (("lse", self.lse, lse_fill), ("d", self.d, 0.0)):
                value = memref.load(source, [self.batch, head, clamped])
                memref.store(arith.select(valid, value, arith.constant(ir.F32Type.get(), fill)),
                             self.tiles[name].flat, at)
