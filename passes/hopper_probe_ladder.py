"""The ladder's rung kernels (fmha_mlir/hopper_probe_geometry.py says what each does): smaller kernels
built from the same Hopper pieces as the wgmma probe (passes/hopper_probe.py), one piece more per rung,
so that one run on the GPU says which piece fails when the full probe does not. Each rung is its own
module (kernel `probe_<rung>`, the full probe's name for `pipeline` and its warp-specialised variant
`roles`).
"""
from __future__ import annotations

from fmha_mlir.mlir import arith, gpu, ir, memref, scf
from fmha_mlir.hopper_probe_geometry import (BLOCK_K, THREADS, DqReduceRung, ProbeShape, TmaRung, image_layout,
                                             rung)
from fmha_mlir.wgmma_layouts import M

from . import hopper_probe, wgmma_atom
from .hopper_sync import MbarrierGroup, fence_proxy_async
from .ir_builders import if_then, index
from .ix import Ix
from .tma_copy import TmaCopy, TmaWrite, bulk_commit, bulk_wait, tensor_map_params
from .wgmma_atom import WgmmaAtom

WORD = 4
WORKGROUP = "#gpu.address_space<workgroup>"


def rung_module_text(name: str, shape: ProbeShape) -> str:
    """The gpu-stage module of one rung, as text."""
    if rung(name, shape).name in ("pipeline", "roles"):
        return hopper_probe.probe_module_text(shape, roles=name == "roles")
    from fmha_mlir.mlir import make_context

    layout = image_layout(shape)
    params = {
        "mbarrier": (f"%out: memref<{THREADS}xi32>", [], _mbarrier_body),
        "tma": (f"%a: !llvm.ptr, %b: !llvm.ptr, %out: memref<{TmaRung(shape).nbytes // WORD}xi32>", [0, 1], _tma_body),
        "ss": (f"%image: memref<{layout['v'] // WORD}xi32>, %c: memref<{M}x{shape.n}xf32>", [], _ss_body),
        "rs": (f"%image: memref<{layout['end'] // WORD}xi32>, %c: memref<{M}x{shape.n}xf32>, "
               f"%c2: memref<{M}x{shape.n2}xf32>", [], _ss_body),
        "dq_reduce": (f"%dq: !llvm.ptr, %images: memref<{DqReduceRung().groups * DqReduceRung().words}xi32>", [0],
                      _dq_reduce_body),
    }[name]
    ctx = make_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(f"""module attributes {{gpu.container_module}} {{
gpu.module @fmha_kernels {{
gpu.func @{rung(name, shape).kernel}({params[0]}) kernel
    attributes {{known_block_size = array<i32: {THREADS}, 1, 1>}} {{
  gpu.return
}}
}}
}}""")
        function = next(op for op in module.body.operations[0].regions[0].blocks[0].operations
                        if op.operation.name == "gpu.func").operation
        if params[1]:
            tensor_map_params(function, params[1])
        block = function.regions[0].blocks[0]
        with ir.InsertionPoint(list(block.operations)[-1]):
            params[2](shape, *block.arguments)
        module.operation.verify()
        return str(module)


def _shared():
    return gpu.dynamic_shared_memory(ir.MemRefType.get([ir.ShapedType.get_dynamic_size()],
                                                       ir.IntegerType.get_signless(8),
                                                       memory_space=ir.Attribute.parse(WORKGROUP)))


def _words(smem, count: int):
    """The first `count` words of the dynamic shared buffer as an i32 memref."""
    return memref.view(ir.Type.parse(f"memref<{count}xi32, {WORKGROUP}>"), smem, index(0), [])


def _each_word(thread, count: int, body) -> None:
    """body(i) for i = thread, thread + THREADS, ... < count."""
    loop = scf.ForOp(thread, index(count), index(THREADS))
    with ir.InsertionPoint(loop.body):
        body(loop.induction_variable)
        scf.YieldOp([])


def _mbarrier_body(shape, out) -> None:
    thread = gpu.thread_id(gpu.Dimension.x)
    barriers = MbarrierGroup(1)
    with if_then((Ix(thread) == 0).value):
        barriers.init(0, THREADS)
        fence_proxy_async()
    gpu.barrier()
    for parity in (False, True):          # phases 0 and 1: every thread's arrival completes each
        barriers.arrive(0)
        barriers.wait(0, parity)
    memref.store(arith.index_cast(ir.IntegerType.get_signless(32), (Ix(thread) + 1).value), out, [thread])


def _tma_body(shape, a_map, b_map, out) -> None:
    thread = gpu.thread_id(gpu.Dimension.x)
    smem = _shared()
    copies = {"a": (TmaCopy.for_tile(a_map, shape.a_tile, "bf16"), shape.a_tile),
              "b": (TmaCopy.for_tile(b_map, shape.b_tile, "bf16"), shape.b_tile)}
    ready = MbarrierGroup(1)
    with if_then((Ix(thread) == 0).value):
        ready.init(0, 1)
        fence_proxy_async()
    gpu.barrier()
    plan = TmaRung(shape)
    with if_then((Ix(thread) == 0).value):
        ready.arrive_expect_tx(0, plan.nbytes)
        for tensor, offset, column in plan.loads:
            copy, tile = copies[tensor]
            copy.load_tile(smem, offset, tile, 0, column, ready, 0)
    ready.wait(0, False)
    words = _words(smem, plan.nbytes // WORD)
    _each_word(thread, plan.nbytes // WORD, lambda i: memref.store(memref.load(words, [i]), out, [i]))


def _ss_body(shape, image, c, c2=None) -> None:
    """Shared memory from `image` by ordinary stores, the proxy fence, SS over one k-block; with `c2`,
    then RS over V's tile."""
    thread = gpu.thread_id(gpu.Dimension.x)
    smem = _shared()
    layout = image_layout(shape)
    count = (layout["end"] if c2 is not None else layout["v"]) // WORD
    words = _words(smem, count)
    _each_word(thread, count, lambda i: memref.store(memref.load(image, [i]), words, [i]))
    fence_proxy_async()
    gpu.barrier()
    descriptors = wgmma_atom.SharedDescriptors(memref.extract_aligned_pointer_as_index(smem))
    atom = WgmmaAtom(shape.n, "bf16", thread)
    acc = atom.zeros()
    wgmma_atom.fence()
    for k16 in range(BLOCK_K // 16):
        acc = atom.mma(acc, descriptors.descriptor(shape.a_tile, layout["a"], 0, 16 * k16),
                       descriptors.descriptor(shape.b_tile, layout["b"], 0, 16 * k16), first=k16 == 0)
    wgmma_atom.commit()
    wgmma_atom.wait(0)
    outputs = [(c, atom, acc)]
    if c2 is not None:
        rs = WgmmaAtom(shape.n2, "bf16", thread)
        acc2 = rs.zeros()
        operands = [atom.as_operand(acc, kb) for kb in range(shape.n // 16)]   # packed before the fence
        wgmma_atom.fence()
        for kb, operand in enumerate(operands):
            v = descriptors.descriptor(shape.v_tile, layout["v"], 0, 16 * kb)
            acc2 = rs.mma_rs(acc2, operand, v, first=kb == 0, b_major="MN")
        wgmma_atom.commit()
        wgmma_atom.wait(0)
        outputs.append((c2, rs, acc2))
    for out, product, results in outputs:
        for value, row, col in product.elements(results):
            memref.store(value, out, [row.value, index(col) if isinstance(col, int) else col.value])


def _dq_reduce_body(shape, dq_map, images) -> None:
    """Stage this work-group's partial tile (its image's words) by ordinary stores, fence, reduce-add it
    into dq as one box (thread 0), commit, wait for the group's reads; then reuse the tile's memory."""
    plan = DqReduceRung()
    thread = gpu.thread_id(gpu.Dimension.x)
    first = Ix(gpu.block_id(gpu.Dimension.x)) * plan.words
    smem = _shared()
    words = _words(smem, plan.words)
    _each_word(thread, plan.words, lambda i: memref.store(memref.load(images, [(first + Ix(i)).value]), words, [i]))
    fence_proxy_async()
    gpu.barrier()
    with if_then((Ix(thread) == 0).value):
        TmaWrite(dq_map, plan.rows, plan.inner, 128).reduce_add(smem, 0, [0, plan.row])
        bulk_commit()
        bulk_wait(0, read=True)
    gpu.barrier()
    zero = arith.constant(ir.IntegerType.get_signless(32), 0)
    _each_word(thread, plan.words, lambda i: memref.store(zero, words, [i]))
