"""The fmha dialect's builders, readers and verifiers (dialects/fmha.py) and the frontend."""
from __future__ import annotations

import ast
import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest

from fmha_mlir.bodies import TILED_TABLE, body_plan
from fmha_mlir.dialects import fmha
from fmha_mlir.dialects.fmha_types import rows_type, tensor_type
from fmha_mlir.errors import SpecError
from fmha_mlir.frontend import build_problem_module, problem_types
from fmha_mlir.kernel_config import KernelConfig, TiledConfig, WarpConfig
from fmha_mlir.mlir import func, ir, make_context
from fmha_mlir.spec import DTYPES, AttentionBwdSpec, Mask

WARP64 = WarpConfig(wave_size=64)

MASKS = (Mask(), Mask("causal_top_left"), Mask("causal_bottom_right"), Mask("sliding_window", 16, 0),
         Mask("sliding_window", -1, 3))


@pytest.fixture
def ctx():
    context = make_context()
    with context, ir.Location.unknown():
        yield context


def _function(arg_types, result_types=()):
    """A module holding one function with `arg_types`; returns (module, entry block)."""
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        function = func.FuncOp("f", (list(arg_types), list(result_types)))
        entry = function.add_entry_block()
    return module, entry


def _stage_types(spec):
    t = lambda element, hdim: tensor_type(element, hdim)  # noqa: E731
    return {
        "q": t(spec.dtype, spec.hdim_q), "k": t(spec.dtype, spec.hdim_q), "v": t(spec.dtype, spec.hdim_v),
        "o": t(spec.dtype, spec.hdim_v), "do": t(spec.dtype, spec.hdim_v), "lse": rows_type(), "d": rows_type(),
        "dq": t(spec.dtype, spec.hdim_q), "dk": t(spec.dtype, spec.hdim_q), "dv": t(spec.dtype, spec.hdim_v),
        "dq_out": t(spec.dtype, spec.hdim_q), "dk_out": t("f32", spec.hdim_q), "dv_out": t("f32", spec.hdim_v),
        "acc": t("f32", spec.hdim_v), "out": t(spec.dtype, spec.hdim_v),
    }


def _build_stage(op_class, spec, config=WARP64, **kwargs):
    types = _stage_types(spec)
    module, entry = _function([types[name] for name in op_class.OPERANDS])
    with ir.InsertionPoint(entry):
        op = op_class.build(spec, list(entry.arguments), config, **kwargs)
        func.ReturnOp([])
    return module, op


@pytest.mark.parametrize("dtype,mask", itertools.product(DTYPES, MASKS))
def test_spec_round_trips_through_attributes(ctx, dtype, mask):
    spec = AttentionBwdSpec(dtype=dtype, hdim_q=64, hdim_v=128, gqa_ratio=4, mask=mask)
    _, op = _build_stage(fmha.AttentionBwdOp, spec)
    # The scale attribute is an f32: it comes back rounded.
    assert fmha.spec_from_op(op) == dataclasses.replace(spec, scale=float(np.float32(spec.scale)))
    assert fmha.AttentionBwdOp.spec(op).kernel_prefix == spec.kernel_prefix


@pytest.mark.parametrize("op_class,kwargs", [
    (fmha.AttentionBwdOp, {}), (fmha.DotDoOOp, {}), (fmha.DqDkDvOp, {}), (fmha.ConvertGradOp, {"grad": "dv"}),
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_stage_builders_make_ops_that_verify(ctx, op_class, kwargs, dtype):
    spec = AttentionBwdSpec(dtype=dtype, hdim_q=64, hdim_v=128, mask=Mask("causal_bottom_right"))
    module, op = _build_stage(op_class, spec, **kwargs)
    assert op.name == op_class.NAME
    assert fmha.verify_module(module.operation) == []
    assert module.operation.verify()
    # The printed module parses back into ops that still verify.
    reparsed = ir.Module.parse(str(module))
    assert fmha.verify_module(reparsed.operation) == []


def test_operand_accessor_names_operands(ctx):
    spec = AttentionBwdSpec(hdim_q=64, hdim_v=128)
    module, op = _build_stage(fmha.DqDkDvOp, spec)
    entry = module.body.operations[0].regions[0].blocks[0]
    for index, name in enumerate(fmha.DqDkDvOp.OPERANDS):
        assert fmha.DqDkDvOp.operand(op, name) == entry.arguments[index]
    with pytest.raises(fmha.VerifyError, match="has no operand 'dx'; its operands: q, k, v"):
        fmha.DqDkDvOp.operand(op, "dx")


def test_convert_grad_reads_its_grad(ctx):
    _, op = _build_stage(fmha.ConvertGradOp, AttentionBwdSpec(hdim_q=128), grad="dk")
    assert fmha.ConvertGradOp.grad_of(op) == "dk"


def test_convert_grad_needs_a_known_grad(ctx):
    with pytest.raises(fmha.VerifyError, match="needs grad= one of dq, dk, dv"):
        _build_stage(fmha.ConvertGradOp, AttentionBwdSpec(hdim_q=128), grad="dlse")


def test_builder_rejects_bad_operands_and_leaves_nothing_behind(ctx):
    spec = AttentionBwdSpec(dtype="bf16", hdim_q=64)
    wrong = tensor_type("f16", 64)
    module, entry = _function([wrong, rows_type()])
    args = [entry.arguments[0]] * 5 + [entry.arguments[1]] + [entry.arguments[0]] * 3
    with ir.InsertionPoint(entry):
        with pytest.raises(fmha.VerifyError, match=r"'fmha.attention_bwd' op operand #0 \('q'\): expected element "
                                                   r"type bf16, got f16"):
            fmha.AttentionBwdOp.build(spec, args)
        with pytest.raises(fmha.VerifyError, match="takes 9 operands"):
            fmha.AttentionBwdOp.build(spec, args[:8])
    assert len(entry.operations) == 0


def test_builder_rejects_an_invalid_spec(ctx):
    module, entry = _function([])
    with ir.InsertionPoint(entry), pytest.raises(fmha.VerifyError, match=r"d\(slopes\) is still summed by f32 atomics"):
        fmha.DotDoOOp.build(AttentionBwdSpec(bias="alibi", alibi_slopes=True, dbias=True, deterministic=True), [])
    assert len(entry.operations) == 0


def test_kernel_op_builders_and_readers(ctx):
    f32, index = ir.F32Type.get(), ir.IndexType.get()
    buffer = ir.MemRefType(ir.Type.parse("memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>"))
    module, entry = _function([f32, index, buffer])
    x, i, buf = entry.arguments
    mask = Mask("sliding_window", 8, 0)
    with ir.InsertionPoint(entry):
        reduced = fmha.WaveReduceOp.build(x, 32)
        exp = fmha.Exp2Op.build(reduced)
        score = fmha.MaskedScoreOp.build(exp, i, i, i, i, mask, 0.25)
        atomic = fmha.AtomicAddOp.build(score, buf, [i, i, i, i])
        func.ReturnOp([])
    assert fmha.verify_module(module.operation) == []
    assert fmha.WaveReduceOp.width_of(reduced.owner) == 32
    assert fmha.WaveReduceOp.kind_of(reduced.owner) == "add"
    assert fmha.MaskedScoreOp.mask_of(score.owner) == mask
    assert fmha.MaskedScoreOp.scale_log2_of(score.owner) == 0.25
    assert atomic.name == "fmha.atomic_add" and len(atomic.results) == 0
    assert [str(v.type) for v in (reduced, exp, score)] == ["f32"] * 3


@pytest.mark.parametrize("width", [0, 1, 3, 48, 128])
def test_wave_reduce_width_must_be_a_power_of_two_up_to_64(ctx, width):
    module, entry = _function([ir.F32Type.get()])
    with ir.InsertionPoint(entry), pytest.raises(fmha.VerifyError, match=f"power of two from 2 to 64, got {width}"):
        fmha.WaveReduceOp.build(entry.arguments[0], width)


def test_atomic_add_needs_one_index_per_dim(ctx):
    module, entry = _function([ir.F32Type.get(), ir.Type.parse("memref<?x?xf32>"), ir.IndexType.get()])
    value, buffer, i = entry.arguments
    with ir.InsertionPoint(entry), pytest.raises(fmha.VerifyError,
                                                 match="needs 2 indices for memref<\\?x\\?xf32>, got 1"):
        fmha.AtomicAddOp.build(value, buffer, [i])


def _parse_op(text: str):
    module = ir.Module.parse(text)
    return module, next(op for op in module.body.operations)


def test_verify_op_reports_every_problem_naming_op_and_operand(ctx):
    _, op = _parse_op(
        'func.func @f(%x: f16, %i: index) {\n'
        '  "fmha.masked_score"(%x, %i, %x, %i, %i) {mask = "causal", window_left = -1 : i64, window_right = -1 : i64}'
        ' : (f16, index, f16, index, index) -> f32\n  return\n}')
    # (the operand types are judged from the first one, so a bad score type hides the rest)
    inner = op.regions[0].blocks[0].operations[0]
    assert fmha.verify_op(inner) == [
        "'fmha.masked_score' op operand #0 ('dot') must be f32 or a 1-D vector of it, got f16",
        "'fmha.masked_score' op mask.kind: unknown mask kind 'causal' (use one of none, causal_top_left, "
        "causal_bottom_right, sliding_window)",
        "'fmha.masked_score' op missing attribute 'scale_log2' (an f32 float)",
    ]


def test_verify_op_ignores_other_dialects(ctx):
    _, op = _parse_op("func.func @f() {\n  return\n}")
    assert fmha.verify_op(op) == []


def test_spec_from_op_rejects_malformed_and_invalid_attributes(ctx):
    attributes = fmha.spec_attributes(AttentionBwdSpec())
    missing = ir.Operation.create("fmha.dot_do_o", attributes={k: v for k, v in attributes.items() if k != "hdim_q"})
    with pytest.raises(fmha.VerifyError, match="missing attribute 'hdim_q' \\(an i64 integer\\)"):
        fmha.spec_from_op(missing)
    dbias = ir.Operation.create("fmha.dot_do_o", attributes={**attributes, "dbias": ir.BoolAttr.get(True)})
    with pytest.raises(fmha.VerifyError, match="dbias asks for the gradient of a bias, but bias is 'none'"):
        fmha.spec_from_op(dbias)
    slopes = {**attributes, "bias": ir.StringAttr.get("alibi"), "alibi_slopes": ir.BoolAttr.get(True)}
    assert fmha.spec_from_op(ir.Operation.create("fmha.dot_do_o", attributes=slopes)).alibi_slopes
    alibi = ir.Operation.create("fmha.dot_do_o", attributes={**attributes, "bias": ir.StringAttr.get("alibi")})
    assert fmha.spec_from_op(alibi).bias == "alibi"


def test_verify_module_walks_nested_ops_and_emits_located_errors(ctx):
    module = ir.Module.parse(
        'gpu.module @kernels {\n'
        '  gpu.func @k(%x: f32) kernel {\n'
        '    %r = "fmha.wave_reduce"(%x) {kind = "add", width = 5 : i32} : (f32) -> f32\n'
        '    gpu.return\n'
        '  }\n'
        '}')
    found = fmha.verify_module(module.operation)
    assert [(op.name, message) for op, message in found] == [
        ("fmha.wave_reduce", "'fmha.wave_reduce' op attribute 'width' must be a power of two from 2 to 64, got 5")]
    diagnostics = []

    def handler(diag):
        diagnostics.append((str(diag.location), diag.message))
        return True

    handle = ctx.attach_diagnostic_handler(handler)
    try:
        assert fmha.emit_verification_errors(module.operation) is False
    finally:
        handle.detach()
    assert diagnostics == [('loc("-":3:10)', found[0][1])]


def test_frontend_builds_the_problem_function(ctx):
    spec = AttentionBwdSpec(dtype="bf16", hdim_q=64, hdim_v=128, gqa_ratio=2, mask=Mask("causal_top_left"))
    module = build_problem_module(spec, ctx)
    assert module.operation.verify() and fmha.verify_module(module.operation) == []
    function = module.body.operations[0]
    assert function.attributes["sym_name"].value == spec.kernel_prefix
    entry = function.regions[0].blocks[0]
    types = problem_types(spec, ctx)
    assert list(types) == list(fmha.OPERAND_NAMES)
    assert [str(a.type) for a in entry.arguments] == [str(t) for t in types.values()]
    assert str(types["v"]) == "memref<?x?x?x128xbf16, strided<[?, ?, ?, 1]>>"
    assert str(types["lse"]) == "memref<?x?x?xf32, strided<[?, ?, 1]>>"
    assert [str(a.location) for a in entry.arguments] == [f'loc("{n}")' for n in fmha.OPERAND_NAMES]
    ops = [op.name for op in entry.operations]
    assert ops == ["fmha.attention_bwd", "func.return"]
    assert fmha.spec_from_op(entry.operations[0]).mask == spec.mask


def test_frontend_checks_the_spec_before_building(ctx):
    with pytest.raises(SpecError, match="gqa_ratio: must be a positive integer"):
        build_problem_module(AttentionBwdSpec(gqa_ratio=0), ctx)


@pytest.mark.parametrize("config", [WARP64, TILED_TABLE[64]], ids=["warp", "tiled"])
def test_config_round_trips_through_the_attribute(ctx, config):
    spec = AttentionBwdSpec(dtype="bf16", hdim_q=64, hdim_v=64)
    module, op = _build_stage(fmha.DqDkDvOp, spec, config)
    assert fmha.config_of(op) == config
    reparsed = ir.Module.parse(str(module))
    function = reparsed.body.operations[0].operation
    assert fmha.config_of(function.regions[0].blocks[0].operations[0]) == config


def test_the_config_attribute_is_one_dictionary_whose_body_picks_the_class(ctx):
    spec = AttentionBwdSpec(dtype="bf16", hdim_q=64, hdim_v=64)
    _, warp = _build_stage(fmha.DqDkDvOp, spec, WARP64)
    assert str(warp.attributes["config"]) == '{body = "warp", wave_size = 64 : i64}'
    _, tiled = _build_stage(fmha.DqDkDvOp, spec, TILED_TABLE[64])
    assert str(tiled.attributes["config"]).startswith('{block_m = 128 : i64, block_n = 128 : i64, body = "tiled"')
    assert isinstance(fmha.config_of(tiled), TiledConfig) and TILED_TABLE[64].to_json()["body"] == "tiled"
    with pytest.raises(SpecError, match="unknown field\\(s\\) block_m for the warp body"):
        KernelConfig.from_json({"body": "warp", "wave_size": 32, "block_m": 64})


def test_body_limits_are_not_ir_rules_the_body_plan_refuses_them(ctx):
    spec = AttentionBwdSpec(dtype="f32", hdim_q=64, hdim_v=64)
    module, _ = _build_stage(fmha.DotDoOOp, spec, TILED_TABLE[64])
    assert fmha.verify_module(module.operation) == []
    with pytest.raises(SpecError, match="dtype: the tiled body computes f16 and bf16"):
        body_plan(spec, TILED_TABLE[64])


def test_the_dialect_does_not_import_the_body_layer():
    """IR validity is the dialect's own rule: no dialect module imports fmha_mlir.bodies (the package
    itself does, through the API, so the check reads the modules' imports)."""
    imported = set()
    for path in (Path(fmha.__file__).parent).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                imported.add((path.name, node.module or ""))
            elif isinstance(node, ast.Import):
                imported.update((path.name, alias.name) for alias in node.names)
    assert any(module == "fmha_mlir.spec" for _, module in imported)   # the walk sees the imports
    assert [entry for entry in imported if "bodies" in entry[1]] == []


def test_the_problem_op_may_lack_a_config_but_stage_ops_may_not(ctx):
    spec = AttentionBwdSpec(hdim_q=64, hdim_v=128)
    module, op = _build_stage(fmha.AttentionBwdOp, spec, None)
    assert fmha.verify_module(module.operation) == [] and "config" not in op.attributes
    with pytest.raises(fmha.VerifyError, match="missing attribute 'config'"):
        _build_stage(fmha.DotDoOOp, spec, None)


def test_frontend_names_every_argument_by_its_operand(ctx):
    module = build_problem_module(AttentionBwdSpec(hdim_q=64), ctx, WARP64)
    function = module.body.operations[0]
    names = [ir.StringAttr(ir.DictAttr(a)["fmha.operand"]).value for a in function.attributes["arg_attrs"]]
    assert names == list(fmha.OPERAND_NAMES)
    assert fmha.config_of(function.regions[0].blocks[0].operations[0]) == WARP64
