"""A standalone sm_90a kernel built from the Hopper pieces alone, the proof that they compose: one
warpgroup per 64-row block computes

    C  = A B^T               A [M x K], B [N x K] bf16, both K-major, K tiled by 64 through a 2-stage
                             TMA + mbarrier pipeline (128-byte swizzle, zero fill past K), wgmma SS
    C2 = bf16(C) V           V [N x N2] bf16 (MN-major B), C as the register A operand: wgmma RS

and stores both (f32). It is the shape of the attention backward's S^T -> P^T -> dV chain. Kernel
parameters: the tensor maps of A, B and V (boxes: ProbeShape.boxes), then C and C2 as memrefs.
"""
from __future__ import annotations

from fmha_mlir.hopper_probe_geometry import BLOCK_K, KERNEL, STAGES, THREADS, ProbeShape
from fmha_mlir.mlir import gpu, ir, memref, scf
from fmha_mlir.wgmma_layouts import M, OperandTile

from . import wgmma_atom
from .hopper_sync import MbarrierGroup, MbarrierPipeline, fence_proxy_async
from .ir_builders import index
from .ix import Ix
from .tma_copy import TmaCopy, tensor_map_params, tile_bytes
from .wgmma_atom import WgmmaAtom


def probe_module_text(shape: ProbeShape) -> str:
    """The gpu-stage module (gpu.module @fmha_kernels with the probe kernel) as text."""
    from fmha_mlir.mlir import make_context

    ctx = make_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(_skeleton(shape))
        function = next(op for op in module.body.operations[0].regions[0].blocks[0].operations
                        if op.operation.name == "gpu.func").operation
        tensor_map_params(function, [0, 1, 2])
        block = function.regions[0].blocks[0]
        with ir.InsertionPoint(list(block.operations)[-1]):
            _body(shape, *block.arguments)
        module.operation.verify()
        return str(module)


def _skeleton(shape: ProbeShape) -> str:
    return f"""module attributes {{gpu.container_module}} {{
gpu.module @fmha_kernels {{
gpu.func @{KERNEL}(%a: !llvm.ptr, %b: !llvm.ptr, %v: !llvm.ptr, %c: memref<{shape.m}x{shape.n}xf32>,
                   %c2: memref<{shape.m}x{shape.n2}xf32>) kernel
    attributes {{known_block_size = array<i32: {THREADS}, 1, 1>}} {{
  gpu.return
}}
}}
}}"""


def if_then(condition):
    """An scf.if without results; build its body inside the returned context."""
    op = scf.IfOp(condition)
    point = ir.InsertionPoint(op.then_block)

    class _Then:
        def __enter__(self):
            point.__enter__()

        def __exit__(self, *exc):
            scf.YieldOp([])
            point.__exit__(*exc)

    return _Then()


def _body(shape: ProbeShape, a_map, b_map, v_map, c, c2) -> None:
    thread = gpu.thread_id(gpu.Dimension.x)
    row0 = Ix(gpu.block_id(gpu.Dimension.x)) * M
    leader = Ix(thread) == 0
    smem = gpu.dynamic_shared_memory(ir.MemRefType.get([ir.ShapedType.get_dynamic_size()],
                                                       ir.IntegerType.get_signless(8),
                                                       memory_space=ir.Attribute.parse("#gpu.address_space<workgroup>")))
    a_copy = TmaCopy.for_tile(a_map, shape.a_tile, "bf16")
    b_copy = TmaCopy.for_tile(b_map, shape.b_tile, "bf16")
    v_copy = TmaCopy.for_tile(v_map, shape.v_tile, "bf16")
    pipeline = MbarrierPipeline(STAGES, consumers=THREADS)
    v_ready = MbarrierGroup(1)
    v_base = STAGES * shape.stage_bytes
    with if_then(leader.value):
        pipeline.init()
        v_ready.init(0, 1)
        fence_proxy_async()
    gpu.barrier()

    def issue(kb: int) -> None:
        stage = kb % STAGES
        base = stage * shape.stage_bytes
        pipeline.commit(stage, shape.stage_bytes)
        a_copy.load_tile(smem, base, shape.a_tile, row0, kb * BLOCK_K, pipeline.barriers, stage)
        b_copy.load_tile(smem, base + shape.a_tile.nbytes, shape.b_tile, 0, kb * BLOCK_K, pipeline.barriers, stage)

    with if_then(leader.value):
        v_ready.arrive_expect_tx(0, tile_bytes(shape.v_tile))
        v_copy.load_tile(smem, v_base, shape.v_tile, 0, 0, v_ready, 0)
        for kb in range(min(STAGES, shape.k_blocks)):
            issue(kb)

    descriptors = wgmma_atom.SharedDescriptors(memref.extract_aligned_pointer_as_index(smem))

    def descriptor(tile: OperandTile, offset: int, mn0: int, k0: int) -> "ir.Value":
        return descriptors.descriptor(tile, offset, mn0, k0)

    atom = WgmmaAtom(shape.n, "bf16", thread)
    acc = atom.zeros()
    for kb in range(shape.k_blocks):
        stage, parity = kb % STAGES, (kb // STAGES) % 2
        base = stage * shape.stage_bytes
        pipeline.wait(stage, parity)
        wgmma_atom.fence()
        for k16 in range(BLOCK_K // 16):
            acc = atom.mma(acc, descriptor(shape.a_tile, base, 0, 16 * k16),
                           descriptor(shape.b_tile, base + shape.a_tile.nbytes, 0, 16 * k16), first=kb == 0 and k16 == 0)
        wgmma_atom.commit()
        wgmma_atom.wait(0)
        pipeline.release(stage)
        if kb + STAGES < shape.k_blocks:
            with if_then(leader.value):
                pipeline.acquire(stage, parity)
                issue(kb + STAGES)

    v_ready.wait(0, False)
    rs = WgmmaAtom(shape.n2, "bf16", thread)
    acc2 = rs.zeros()
    wgmma_atom.fence()
    for kb in range(shape.n // 16):
        acc2 = rs.mma_rs(acc2, atom.as_operand(acc, kb), descriptor(shape.v_tile, v_base, 0, 16 * kb), first=kb == 0,
                         b_major="MN")
    wgmma_atom.commit()
    wgmma_atom.wait(0)
    for out, product, results in ((c, atom, acc), (c2, rs, acc2)):
        for value, row, col in product.elements(results):
            memref.store(value, out, [(row0 + row).value, index(col) if isinstance(col, int) else col.value])
