"""A standalone sm_90a kernel built from the Hopper pieces alone, the proof that they compose: one
warpgroup per 64-row block computes

    C  = A B^T               A [M x K], B [N x K] bf16, both K-major, K tiled by 64 through a 2-stage
                             TMA + mbarrier pipeline (128-byte swizzle, zero fill past K), wgmma SS
    C2 = bf16(C) V           V [N x N2] bf16 (MN-major B), C as the register A operand: wgmma RS

and stores both (f32). It is the shape of the attention backward's S^T -> P^T -> dV chain. Kernel
parameters: the tensor maps of A, B and V (boxes: ProbeShape.boxes), then C and C2 as memrefs.
"""
from __future__ import annotations

from fmha_mlir.hopper_probe_geometry import BLOCK_K, KERNEL, ROLE_THREADS, STAGES, THREADS, ProbeShape
from fmha_mlir.mlir import arith, gpu, ir, memref
from fmha_mlir.wgmma_layouts import M

from . import wgmma_atom
from .hopper_sync import (MbarrierGroup, MbarrierPipeline, declare_roles, fence_proxy_async, fix_entry_registers,
                          set_max_registers)
from .ir_builders import if_then, index
from .ix import Ix
from .tma_copy import TmaCopy, tensor_map_params, tile_bytes
from .wgmma_atom import WgmmaAtom


def probe_module_text(shape: ProbeShape, roles: bool = False) -> str:
    """The gpu-stage module (gpu.module @fmha_kernels with the probe kernel) as text; `roles`: the
    warp-specialised variant (ROLE_THREADS, a producer and a consumer warpgroup)."""
    from fmha_mlir.mlir import make_context

    ctx = make_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(_skeleton(shape, ROLE_THREADS if roles else THREADS))
        function = next(op for op in module.body.operations[0].regions[0].blocks[0].operations
                        if op.operation.name == "gpu.func").operation
        tensor_map_params(function, [0, 1, 2])
        if roles:
            declare_roles(function, [(0, THREADS), (THREADS, ROLE_THREADS)])
            fix_entry_registers(function)
        block = function.regions[0].blocks[0]
        with ir.InsertionPoint(list(block.operations)[-1]):
            (_role_body if roles else _body)(shape, *block.arguments)
        module.operation.verify()
        return str(module)


def _skeleton(shape: ProbeShape, threads: int) -> str:
    return f"""module attributes {{gpu.container_module}} {{
gpu.module @fmha_kernels {{
gpu.func @{KERNEL}(%a: !llvm.ptr, %b: !llvm.ptr, %v: !llvm.ptr, %c: memref<{shape.m}x{shape.n}xf32>,
                   %c2: memref<{shape.m}x{shape.n2}xf32>) kernel
    attributes {{known_block_size = array<i32: {threads}, 1, 1>}} {{
  gpu.return
}}
}}
}}"""


class _Probe:
    """The probe's shared memory, copies and barriers, and its steps, for either frame."""

    def __init__(self, shape: ProbeShape, a_map, b_map, v_map, consumers: int):
        self.shape = shape
        self.smem = gpu.dynamic_shared_memory(ir.MemRefType.get(
            [ir.ShapedType.get_dynamic_size()], ir.IntegerType.get_signless(8),
            memory_space=ir.Attribute.parse("#gpu.address_space<workgroup>")))
        self.a_copy = TmaCopy.for_tile(a_map, shape.a_tile, "bf16")
        self.b_copy = TmaCopy.for_tile(b_map, shape.b_tile, "bf16")
        self.v_copy = TmaCopy.for_tile(v_map, shape.v_tile, "bf16")
        self.pipeline = MbarrierPipeline(STAGES, consumers=consumers)
        self.v_ready = MbarrierGroup(1)
        self.v_base = STAGES * shape.stage_bytes

    def init(self, leader) -> None:
        with if_then(leader.value):
            self.pipeline.init()
            self.v_ready.init(0, 1)
            fence_proxy_async()
        gpu.barrier()

    def issue(self, kb: int, row0) -> None:
        shape, stage = self.shape, kb % STAGES
        base = stage * shape.stage_bytes
        self.pipeline.commit(stage, shape.stage_bytes)
        self.a_copy.load_tile(self.smem, base, shape.a_tile, row0, kb * BLOCK_K, self.pipeline.barriers, stage)
        self.b_copy.load_tile(self.smem, base + shape.a_tile.nbytes, shape.b_tile, 0, kb * BLOCK_K,
                              self.pipeline.barriers, stage)

    def load_v(self) -> None:
        self.v_ready.arrive_expect_tx(0, tile_bytes(self.shape.v_tile))
        self.v_copy.load_tile(self.smem, self.v_base, self.shape.v_tile, 0, 0, self.v_ready, 0)

    def consume(self, thread, row0, c, c2, refill) -> None:
        """The consumer warpgroup (`thread` 0..127 in it): C by wgmma SS over the pipeline's stages,
        `refill(kb, stage, parity)` after releasing block kb's stage, then C2 by wgmma RS, then the stores."""
        shape = self.shape
        descriptors = wgmma_atom.SharedDescriptors(memref.extract_aligned_pointer_as_index(self.smem))
        atom = WgmmaAtom(shape.n, "bf16", thread)
        acc = atom.zeros()
        for kb in range(shape.k_blocks):
            stage, parity = kb % STAGES, (kb // STAGES) % 2
            base = stage * shape.stage_bytes
            self.pipeline.wait(stage, parity)
            wgmma_atom.fence()
            for k16 in range(BLOCK_K // 16):
                acc = atom.mma(acc, descriptors.descriptor(shape.a_tile, base, 0, 16 * k16),
                               descriptors.descriptor(shape.b_tile, base + shape.a_tile.nbytes, 0, 16 * k16),
                               first=kb == 0 and k16 == 0)
            wgmma_atom.commit()
            wgmma_atom.wait(0)
            self.pipeline.release(stage)
            refill(kb, stage, parity)
        self.v_ready.wait(0, False)
        rs = WgmmaAtom(shape.n2, "bf16", thread)
        acc2 = rs.zeros()
        # C's A fragments are packed before the fence: registers a product reads are written before it.
        operands = [atom.as_operand(acc, kb) for kb in range(shape.n // 16)]
        wgmma_atom.fence()
        for kb, operand in enumerate(operands):
            acc2 = rs.mma_rs(acc2, operand, descriptors.descriptor(shape.v_tile, self.v_base, 0, 16 * kb),
                             first=kb == 0, b_major="MN")
        wgmma_atom.commit()
        wgmma_atom.wait(0)
        for out, product, results in ((c, atom, acc), (c2, rs, acc2)):
            for value, row, col in product.elements(results):
                memref.store(value, out, [(row0 + row).value, index(col) if isinstance(col, int) else col.value])


def _body(shape: ProbeShape, a_map, b_map, v_map, c, c2) -> None:
    """One warpgroup: its thread 0 issues the loads between its own products."""
    thread = gpu.thread_id(gpu.Dimension.x)
    row0 = Ix(gpu.block_id(gpu.Dimension.x)) * M
    leader = Ix(thread) == 0
    probe = _Probe(shape, a_map, b_map, v_map, THREADS)
    probe.init(leader)
    with if_then(leader.value):
        probe.load_v()
        for kb in range(min(STAGES, shape.k_blocks)):
            probe.issue(kb, row0)

    def refill(kb: int, stage: int, parity: int) -> None:
        if kb + STAGES < shape.k_blocks:
            with if_then(leader.value):
                probe.pipeline.acquire(stage, parity)
                probe.issue(kb + STAGES, row0)

    probe.consume(thread, row0, c, c2, refill)


def _role_body(shape: ProbeShape, a_map, b_map, v_map, c, c2) -> None:
    """Warp-specialised: warpgroup 0 produces (its thread 0 issues every load, waiting for free stages
    with 24 registers), warpgroup 1 consumes (240 registers); in lockstep the producer's first wait for
    a free stage could never pass."""
    thread = gpu.thread_id(gpu.Dimension.x)
    row0 = Ix(gpu.block_id(gpu.Dimension.x)) * M
    probe = _Probe(shape, a_map, b_map, v_map, THREADS)
    probe.init(Ix(thread) == 0)
    with if_then((Ix(thread) < THREADS).value):
        set_max_registers(24, increase=False)
        with if_then((Ix(thread) == 0).value):
            probe.load_v()
            for kb in range(shape.k_blocks):
                if kb >= STAGES:
                    probe.pipeline.acquire(kb % STAGES, (kb // STAGES - 1) % 2)
                probe.issue(kb, row0)
    with if_then((Ix(thread) >= THREADS).value):
        set_max_registers(240, increase=True)
        probe.consume(arith.subi(thread, index(THREADS)), row0, c, c2, lambda kb, stage, parity: None)
