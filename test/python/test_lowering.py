"""The lowering passes up to the kernels: fmha-select-kernel-config, fmha-decompose-bwd,
fmha-stages-to-gpu, fmha-expand-warp-body / fmha-expand-tiled-body.

Modules come from the frontend (level 1), go through the passes by name as fmha-opt runs them, and are
checked by reading the resulting IR back: op order, operands, types, attributes and counts.
"""
from __future__ import annotations


import pytest

from fmha_mlir.bodies import ROW_KERNEL_WAVES, row_lanes, row_stage_hdim
from fmha_mlir.dialects import fmha
from fmha_mlir.dtypes import BYTES
from fmha_mlir.errors import PipelineError
from fmha_mlir.frontend import build_problem_module
from fmha_mlir import mask_geometry
from fmha_mlir.mlir import arith, func, ir, make_context
from fmha_mlir.passes import ix
from fmha_mlir.passes.ix import Ix
from fmha_mlir.passes.registry import build_pass_manager, make_pass
from fmha_mlir.spec import AttentionBwdSpec, Mask

F16_GQA = AttentionBwdSpec(dtype="f16", hdim_q=128, hdim_v=64, gqa_ratio=2, mask=Mask("causal_bottom_right"))
F32_TOP_LEFT = AttentionBwdSpec(dtype="f32", hdim_q=64, hdim_v=64, mask=Mask("causal_top_left"))
BF16_WINDOW = AttentionBwdSpec(dtype="bf16", hdim_q=256, hdim_v=256, mask=Mask("sliding_window", 8, 0))
STAGE_NAMES = [op.NAME for op in fmha.STAGE_OPS]


WAVE_TARGETS = {64: "gfx942", 32: "sm_90"}


def lowered(spec: AttentionBwdSpec, pipeline: str, wave: int = 64, body: str = "warp"):
    """`spec` through fmha-select-kernel-config for the target of `wave`, then `pipeline`."""
    ctx = make_context()
    module = build_problem_module(spec, ctx)
    with ctx:
        build_pass_manager(f"fmha-select-kernel-config{{target={WAVE_TARGETS[wave]} body={body}}},{pipeline}",
                           ctx).run(module.operation)
    return module


def host_ops(module) -> list:
    """The ops of the host function's body, in order."""
    function = module.body.operations[0]
    return [op.operation for op in function.regions[0].blocks[0].operations]


def kernels(module) -> dict:
    """gpu.func name -> op, in the one gpu.module."""
    (gpu_module,) = [op for op in module.body.operations if op.operation.name == "gpu.module"]
    return {ir.StringAttr(op.attributes["sym_name"]).value: op.operation
            for op in gpu_module.regions[0].blocks[0].operations}


def walk_names(op) -> list[str]:
    names = []

    def visit(inner):
        names.append(inner.name)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return names


def row_geometry(spec: AttentionBwdSpec, kernel_name: str, wave: int) -> tuple[int, int]:
    """(lanes per row, threads per work-group) of a row kernel, as the bodies launch it."""
    stage = kernel_name.rsplit("_warp", 1)[1].split("_", 1)[1]
    return row_lanes(row_stage_hdim(stage, spec), wave, BYTES[spec.dtype]), wave * ROW_KERNEL_WAVES


def defining(value):
    return value.owner.operation if isinstance(value.owner, ir.OpView) else value.owner


# --- fmha-decompose-bwd -------------------------------------------------------------------------------


def test_decompose_f16_allocates_zeroes_and_converts_accumulators():
    module = lowered(F16_GQA, "fmha-decompose-bwd")
    ops = [op for op in host_ops(module) if op.name not in ("arith.constant", "memref.dim")]
    assert [op.name for op in ops] == [
        "memref.alloc", "memref.cast", "memref.alloc", "memref.cast", "memref.alloc", "memref.cast",
        "fmha.dot_do_o", "gpu.memset", "gpu.memset",
        "fmha.dq_dk_dv", "fmha.convert_grad", "fmha.convert_grad",
        "memref.dealloc", "memref.dealloc", "memref.dealloc", "func.return"]
    args = list(module.body.operations[0].regions[0].blocks[0].arguments)
    q, k, v, o, do, lse, dq, dk, dv = args
    d_alloc, d, dk_alloc, dk_acc, dv_alloc, dv_acc, dot, zero_dk, zero_dv, main, conv_dk, conv_dv = ops[:12]
    assert [ir.StringAttr(a.attributes["fmha.workspace"]).value for a in (d_alloc, dk_alloc, dv_alloc)] == [
        "d", "dk_acc", "dv_acc"]
    assert list(dot.operands) == [o, do, d.result]
    assert list(main.operands) == [q, k, v, do, lse, d.result, dq, dk_acc.result, dv_acc.result]
    assert str(dk_alloc.result.type) == "memref<?x?x?x128xf32>"
    assert str(dv_acc.result.type) == "memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>"
    assert [zero_dk.operands[0], zero_dv.operands[0]] == [dk_acc.result, dv_acc.result]
    assert list(conv_dk.operands) == [dk_acc.result, dk] and fmha.ConvertGradOp.grad_of(conv_dk) == "dk"
    assert list(conv_dv.operands) == [dv_acc.result, dv] and fmha.ConvertGradOp.grad_of(conv_dv) == "dv"
    # The workspaces take their sizes from lse (d) and from dk / dv.
    assert [defining(s).operands[0] for s in d_alloc.operands] == [lse] * 3
    assert [defining(s).operands[0] for s in dk_alloc.operands] == [dk] * 3
    assert all(fmha.spec_from_op(op) == fmha.spec_from_op(dot) for op in (main, conv_dk, conv_dv))
    assert not fmha.verify_module(module.operation)


def test_decompose_f32_zero_fills_the_outputs_and_skips_the_converts():
    module = lowered(F32_TOP_LEFT, "fmha-decompose-bwd")
    ops = host_ops(module)
    names = [op.name for op in ops]
    assert names.count("memref.alloc") == 1 and "fmha.convert_grad" not in names
    dk, dv = list(module.body.operations[0].regions[0].blocks[0].arguments)[7:]
    memsets = [op for op in ops if op.name == "gpu.memset"]
    assert [m.operands[0] for m in memsets] == [dk, dv]
    (main,) = [op for op in ops if op.name == "fmha.dq_dk_dv"]
    assert list(main.operands)[7:] == [dk, dv]
    assert names.index("gpu.memset") < names.index("fmha.dq_dk_dv")


# --- fmha-stages-to-gpu -------------------------------------------------------------------------------


@pytest.mark.parametrize("wave", [64, 32])
def test_stages_become_kernels_and_launches(wave):
    module = lowered(F16_GQA, "fmha-decompose-bwd,fmha-stages-to-gpu", wave)
    assert "gpu.container_module" in module.operation.attributes
    prefix = F16_GQA.kernel_prefix
    found = kernels(module)
    assert list(found) == [f"{prefix}_warp{wave}_{s}" for s in ("dot_do_o", "dq_dk_dv", "convert_dk", "convert_dv")]
    threads = {name: wave if name.endswith("dq_dk_dv") else row_geometry(F16_GQA, name, wave)[1] for name in found}
    for name, kernel in found.items():
        assert "kernel" in kernel.attributes
        assert list(ir.DenseI32ArrayAttr(kernel.attributes["known_block_size"])) == [threads[name], 1, 1]
        body = [op.name for op in kernel.regions[0].blocks[0].operations]
        assert len(body) == 2 and body[0] in STAGE_NAMES and body[1] == "gpu.return"
        inner = kernel.regions[0].blocks[0].operations[0].operation
        assert list(inner.operands) == list(kernel.regions[0].blocks[0].arguments)

    launches = [op for op in host_ops(module) if op.name == "gpu.launch_func"]
    assert len(launches) == 4
    assert not any(name in STAGE_NAMES for name in walk_names(module.body.operations[0]))
    for launch, name in zip(launches, found):
        assert str(launch.attributes["kernel"]) == f"@fmha_kernels::@{name}"
        grid, block, args = list(launch.operands)[:3], list(launch.operands)[3:6], list(launch.operands)[6:]
        # The grid is (row blocks, heads, batch) of the rows the stage walks: o, q, or a convert's
        # output. dq_dk_dv takes one row per work-group, a row kernel threads / lanes rows.
        rows = args[1] if name.split("_")[-2] == "convert" else args[0]
        dims = [defining(g) for g in grid]
        if not name.endswith("dq_dk_dv"):
            lanes, _ = row_geometry(F16_GQA, name, wave)
            assert dims[0].name == "arith.ceildivui" and _constant(dims[0].operands[1]) == threads[name] // lanes
            dims[0] = defining(dims[0].operands[0])
        assert [d.name for d in dims] == ["memref.dim"] * 3
        assert [d.operands[0] for d in dims] == [rows] * 3
        assert [_constant(d.operands[1]) for d in dims] == [2, 1, 0]
        assert [_constant(b) for b in block] == [threads[name], 1, 1]
        assert [a.type for a in args] == list(ir.FunctionType(
            ir.TypeAttr(found[name].attributes["function_type"]).value).inputs)


def test_identical_stages_share_one_kernel():
    ctx = make_context()
    module = build_problem_module(F32_TOP_LEFT, ctx)
    other = build_problem_module(F32_TOP_LEFT, ctx)  # kept alive: it owns `second` until the move
    second = other.body.operations[0]
    with ctx:
        second.attributes["sym_name"] = ir.StringAttr.get("second")
        second.operation.move_after(module.body.operations[0])
        build_pass_manager("fmha-select-kernel-config,fmha-decompose-bwd,fmha-stages-to-gpu", ctx).run(module.operation)
    names = walk_names(module.operation)
    assert names.count("gpu.module") == 1 and names.count("gpu.func") == 2
    assert names.count("gpu.launch_func") == 4


def test_select_kernel_config_options_are_checked():
    assert make_pass("fmha-select-kernel-config", {"target": "sm_90", "body": "tiled"}).body == "tiled"
    with pytest.raises(PipelineError, match="unknown target 'sm_80'"):
        make_pass("fmha-select-kernel-config", {"target": "sm_80"})
    with pytest.raises(PipelineError, match="unknown body 'scalar'; use one of auto, warp, tiled"):
        make_pass("fmha-select-kernel-config", {"body": "scalar"})


@pytest.mark.parametrize("spec,target,body,expected", [
    (F16_GQA, "sm_90", "auto", "tiled"), (F32_TOP_LEFT, "sm_90", "auto", "warp"),
    (F16_GQA, "gfx942", "auto", "tiled"), (F32_TOP_LEFT, "gfx950", "auto", "warp"), (F16_GQA, "sm_90", "warp", "warp"),
])
def test_select_kernel_config_picks_the_fastest_body_that_supports_the_spec(spec, target, body, expected):
    ctx = make_context()
    module = build_problem_module(spec, ctx)
    with ctx:
        build_pass_manager(f"fmha-select-kernel-config{{target={target} body={body}}}", ctx).run(module.operation)
    (op,) = [o for o in host_ops(module) if o.name == fmha.AttentionBwdOp.NAME]
    config = fmha.config_of(op)
    assert config.body == expected and config.wave_size == (32 if target == "sm_90" else 64)


def test_select_kernel_config_names_every_reason_a_body_refuses():
    text = str(build_problem_module(F32_TOP_LEFT, make_context()))
    message = _failure(text, "fmha-select-kernel-config{target=sm_90 body=tiled}")
    assert "no kernel config for sm_90: dtype: the tiled body computes f16 and bf16" in message
    message = _failure(text, "fmha-select-kernel-config{target=gfx942 body=tiled}")
    assert "no kernel config for gfx942: dtype: the tiled body computes f16 and bf16" in message
    d256 = str(build_problem_module(AttentionBwdSpec("bf16", 256), make_context()))
    message = _failure(d256, "fmha-select-kernel-config{target=gfx942 body=tiled}")
    assert "config: the tiles need 109312 bytes of shared memory, gfx942 has 65536" in message


# --- fmha-expand-warp-body ----------------------------------------------------------------------------


@pytest.mark.parametrize("spec,wave", [(F16_GQA, 64), (F16_GQA, 32), (F32_TOP_LEFT, 64), (BF16_WINDOW, 32)])
def test_expanded_bodies(spec, wave):
    module = lowered(spec, "fmha-decompose-bwd,fmha-stages-to-gpu,fmha-expand-warp-body", wave)
    assert module.operation.verify() and not fmha.verify_module(module.operation)
    e_q, e_v = spec.hdim_q // wave, spec.hdim_v // wave
    for name, kernel in kernels(module).items():
        names = walk_names(kernel)
        assert not set(names) & set(STAGE_NAMES)
        assert "gpu.block_dim" not in names and "gpu.grid_dim" not in names and "math.exp2" not in names
        reductions = _reductions(kernel)
        lanes = wave if name.endswith("dq_dk_dv") else row_geometry(spec, name, wave)[0]
        assert all(width == lanes for width in reductions)
        if name.endswith("dot_do_o"):
            assert len(reductions) == 1 and names.count("scf.if") == 1
        elif name.endswith("dq_dk_dv"):
            (loop,) = _ops_named(kernel, "scf.for")
            assert len(loop.results) == e_q  # the lane's dQ partials
            assert len(reductions) == 2
            assert names.count("fmha.masked_score") == names.count("fmha.exp2") == 1
            assert names.count("fmha.atomic_add") == e_q + e_v
            assert all(_enclosing_loop(op) == loop for op in _ops_named(kernel, "fmha.atomic_add"))
            assert ("arith.truncf" in names) == (spec.dtype != "f32")
            assert ("arith.divui" in names) == (spec.gqa_ratio > 1)
        else:
            assert not reductions and "scf.for" not in names and "arith.truncf" in names
        loads = _ops_named(kernel, "vector.load") + _ops_named(kernel, "memref.load")
        slice_loads = [op for op in loads if len(op.operands) == 5]
        per_lane = (e_q, e_v) if name.endswith("dq_dk_dv") else (
            row_stage_hdim(name.rsplit("_warp", 1)[1].split("_", 1)[1], spec) // lanes,)
        assert slice_loads and all(_loaded_elements(op) in per_lane for op in slice_loads)


def _reductions(kernel) -> list[int]:
    return [ir.IntegerAttr(op.attributes["width"]).value for op in _ops_named(kernel, "fmha.wave_reduce")]


def _ops_named(root, name: str) -> list:
    found = []

    def visit(op):
        if op.name == name:
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return found


def _enclosing_loop(op):
    parent = op.parent
    while parent is not None and parent.name != "scf.for":
        parent = parent.parent
    return parent


def _loaded_elements(op) -> int:
    result_type = op.results[0].type
    return ir.VectorType(result_type).shape[0] if isinstance(result_type, ir.VectorType) else 1


def _constant(value) -> int:
    return ir.IntegerAttr(defining(value).attributes["value"]).value


# --- the mask geometry through Ix ------------------------------------------------------------------------

MASKS = [Mask("none"), Mask("causal_top_left"), Mask("causal_bottom_right"),
         Mask("sliding_window", 2, 0), Mask("sliding_window", 0, 3), Mask("sliding_window", -1, 1),
         Mask("sliding_window", 1, -1)]
SHAPES = [(5, 5), (3, 7), (7, 3), (1, 4), (6, 1), (9, 2)]
BLOCK_M, BLOCK_N = 4, 2


def _geometry(mask: Mask, q, k, sq, sk) -> list:
    """Every mask_geometry answer at (q, k): positions and block starts alike, flattened."""
    q0, k0 = q * BLOCK_M, k * BLOCK_N
    return [*mask_geometry.key_range(mask, q, sq, sk), mask_geometry.shown(mask, q, k, sq, sk),
            *mask_geometry.query_block_range(mask, k0, BLOCK_N, BLOCK_M, sq, sk),
            *mask_geometry.key_block_range(mask, q0, BLOCK_M, BLOCK_N, sq, sk),
            mask_geometry.tile_cut(mask, q0, BLOCK_M, k0, BLOCK_N, sq, sk)]


@pytest.mark.parametrize("mask", MASKS, ids=str)
def test_mask_geometry_emitted_through_ix_folds_to_its_int_answers(mask):
    """The arith IR Ix emits for each mask_geometry function, folded by canonicalize, gives what the
    same function gives on Python ints (floor division and signed compares alike)."""
    cases = [(q, k, sq, sk) for sq, sk in SHAPES for q in range(sq + 1) for k in range(0, sk + 2, 2)]
    assert _folded_geometry(mask, cases) == [[int(x) for x in _geometry(mask, *case)] for case in cases]


def _folded_geometry(mask: Mask, cases) -> list[list[int]]:
    ctx = make_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        index = ir.IndexType.get()
        with ir.InsertionPoint(module.body):
            function = func.FuncOp("geometry", ([], []))
            with ir.InsertionPoint(function.add_entry_block()):
                answers = [[ix.as_value(x) for x in _geometry(mask, *(Ix(arith.constant(index, n)) for n in case))]
                           for case in cases]
                flat = [v for row in answers for v in row]
                func.ReturnOp(flat)
            function.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([], [v.type for v in flat]))
        build_pass_manager("canonicalize", ctx).run(module.operation)
        returned = list(function.regions[0].blocks[0].operations)[-1].operands
        i1 = ir.IntegerType.get_signless(1)
        values = [int(bool(_constant(v))) if v.type == i1 else _constant(v) for v in returned]
    width = len(answers[0])
    return [values[i:i + width] for i in range(0, len(values), width)]


# --- failures -------------------------------------------------------------------------------------------


def _failure(text: str, pipeline: str) -> str:
    """The error messages running `pipeline` on `text` fails with."""
    ctx = make_context()
    with ctx:
        module = ir.Module.parse(text)
        with pytest.raises(ir.MLIRError) as failure:
            build_pass_manager(pipeline, ctx).run(module.operation)
    return "\n".join(d.message for d in failure.value.error_diagnostics)


INVALID_PROBLEM = """
!t = memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>
func.func @f(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %dq: !t, %dk: !t, %dv: !t) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "f16", hdim_q = 128 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false} : (!t, !t, !t, !t, !t, !rows, !t, !t, !t) -> ()
  return
}
"""


def test_passes_reject_an_op_the_fmha_verifier_rejects():
    message = _failure(INVALID_PROBLEM, "fmha-decompose-bwd")
    assert "fmha-decompose-bwd: invalid op" in message and "expected a static innermost dim of 128" in message


def test_expand_rejects_a_stage_outside_a_kernel():
    text = str(lowered(F32_TOP_LEFT, "fmha-decompose-bwd"))
    message = _failure(text, "fmha-expand-warp-body")
    assert "'fmha.dot_do_o' is outside a gpu.func; run fmha-stages-to-gpu first" in message


def test_a_head_dim_the_wave_cannot_split_gets_no_warp_config():
    spec = AttentionBwdSpec(dtype="f16", hdim_q=96, hdim_v=96)
    text = str(build_problem_module(spec, make_context()))
    message = _failure(text, "fmha-select-kernel-config{target=gfx942 body=warp}")
    assert "hdim_q: 96 is not supported by the warp body on gfx942 (wave size 64)" in message


# --- through the target pipelines ------------------------------------------------------------------------


@pytest.mark.parametrize("arch,body,kernels", [("gfx942", "warp", 4), ("sm_90", "warp", 4), ("sm_90", "tiled", 3)])
def test_bodies_compile_to_target_assembly(arch, body, kernels):
    """The expanded IR goes through the target passes and LLVM with no library call left."""
    from fmha_mlir.compiler import compile_spec

    compiled = compile_spec(AttentionBwdSpec(dtype="bf16", hdim_q=64, hdim_v=64, gqa_ratio=2,
                                             mask=Mask("sliding_window", 4, 1)), arch, body=body)
    assert all(name in compiled.isa for name in compiled.kernel_names) and len(compiled.kernel_names) == kernels
    assert "__ocml" not in compiled.isa and "__nv_" not in compiled.isa
