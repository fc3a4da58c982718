"""The target-neutral kernel ops (fmha.masked_score, fmha.exp2) and the exp2 spellings of the targets."""
import numpy as np
import pytest

from fmha_mlir.spec import Mask

from interp_support import run

SEQLEN_Q, SEQLEN_K = 5, 13


@pytest.mark.parametrize("mask", [Mask(), Mask("causal_top_left"), Mask("causal_bottom_right"),
                                  Mask("sliding_window", 3, 1), Mask("sliding_window", -1, 0),
                                  Mask("sliding_window", 2, -1)])
def test_masked_score_follows_spec_mask(mask):
    # one work-group per query row (two past seqlen_q), one lane per key (three past seqlen_k)
    rows = SEQLEN_Q + 2
    dots = np.random.default_rng(0).standard_normal((rows, 16)).astype(np.float32)
    out = np.zeros((rows, 16), np.float32)
    scale = 0.125
    body = f"""
    %k = gpu.thread_id x
    %q = gpu.block_id x
    %sq = arith.constant {SEQLEN_Q} : index
    %sk = arith.constant {SEQLEN_K} : index
    %dot = memref.load %dots[%q, %k] : memref<{rows}x16xf32>
    %s = "fmha.masked_score"(%dot, %q, %k, %sq, %sk) {{mask = "{mask.kind}", window_left = {mask.window_left} : i64,
        window_right = {mask.window_right} : i64, scale_log2 = {scale} : f32}}
        : (f32, index, index, index, index) -> f32
    memref.store %s, %out[%q, %k] : memref<{rows}x16xf32>"""
    run(body, f"%dots: memref<{rows}x16xf32>, %out: memref<{rows}x16xf32>", [dots, out],
        grid=(rows, 1, 1), block=(16, 1, 1))
    q, k = np.arange(rows)[:, None], np.arange(16)[None, :]
    shown = mask.visible(q, k, SEQLEN_Q, SEQLEN_K) & (q < SEQLEN_Q) & (k < SEQLEN_K)
    np.testing.assert_array_equal(out, np.where(shown, dots * np.float32(scale), -np.inf))
    assert shown.any() and (~shown[:SEQLEN_Q, :SEQLEN_K]).any() or mask.kind == "none"


def ulp_distance(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """How many f32 steps apart (same-sign finite values)."""
    return np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))


# The target spellings model the hardware's approximation (ulps off the correctly rounded 2^x):
# MUFU.EX2 2, v_exp_f32 1; the target-neutral ones are exact.
@pytest.mark.parametrize("spelling,ulps", [
    ('"fmha.exp2"(%x) : (f32) -> f32', 0),
    ("rocdl.exp2 %x f32 -> f32", 1),
    ('llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%x) : (f32) -> f32', 2),
    ("math.exp2 %x : f32", 0),
])
def test_exp2_spellings(spelling, ulps):
    special = np.array([-np.inf, -140.0, -1.5, 0.0, 0.25, 3.0, 20.0, -127.5], np.float32)
    x = np.concatenate([special, np.random.default_rng(0).uniform(-30, 10, 56).astype(np.float32)])
    body = f"""
    %t = gpu.thread_id x
    %x = memref.load %in[%t] : memref<64xf32>
    %e = {spelling}
    memref.store %e, %out[%t] : memref<64xf32>"""
    runs = []
    for _ in range(2):
        out = np.full(64, 7.0, np.float32)
        run(body, "%in: memref<64xf32>, %out: memref<64xf32>", [x, out])
        runs.append(out)
    out = runs[0]
    want = np.exp2(x)
    if "ftz" in spelling:  # flush-to-zero: subnormal results become 0
        want = np.where(np.abs(want) < np.finfo(np.float32).tiny, 0, want).astype(np.float32)
    np.testing.assert_array_equal(runs[0], runs[1])   # the error is a function of the input
    integer = x == np.floor(x)   # -inf, and 2^n: exact on the hardware (P = 1 for a row's only key)
    np.testing.assert_array_equal(out[integer], want[integer])
    distance = ulp_distance(out[~integer], want[~integer])
    assert distance.max() == ulps
    assert out[0] == 0 and (out[1] == 0) == ("ftz" in spelling)


@pytest.mark.parametrize("fastmath,ulps", [("", 0), (" fastmath<afn>", 2), (" fastmath<fast>", 2),
                                           (" fastmath<contract>", 0)])
def test_division_is_approximate_under_afn(fastmath, ulps):
    """arith.divf with afn is div.approx.f32 (sm_90, 2 ulps) or v_rcp_f32 times the numerator (AMD):
    modelled within 2 ulps of the IEEE quotient; without it the quotient is IEEE's."""
    rng = np.random.default_rng(1)
    a, b = (rng.uniform(0.5, 4, 64).astype(np.float32) for _ in range(2))
    out = np.zeros(64, np.float32)
    body = f"""
    %t = gpu.thread_id x
    %a = memref.load %num[%t] : memref<64xf32>
    %b = memref.load %den[%t] : memref<64xf32>
    %q = arith.divf %a, %b{fastmath} : f32
    memref.store %q, %out[%t] : memref<64xf32>"""
    run(body, "%num: memref<64xf32>, %den: memref<64xf32>, %out: memref<64xf32>", [a, b, out])
    assert ulp_distance(out, a / b).max() == ulps


# --- the lowered masked_score, against Mask.visible at every (q, k) ---------------------------------

LOWERINGS = ("convert-fmha-to-nvvm", "convert-fmha-to-rocdl")
# Both corner alignments: more keys than queries (the bottom-right diagonal starts right of the
# top-left one) and more queries than keys (rows above the bottom-right diagonal see no key).
GRIDS = ((5, 13), (13, 5))
MASKS = (Mask(), Mask("causal_top_left"), Mask("causal_bottom_right"), Mask("sliding_window", 3, 1),
         Mask("sliding_window", -1, 0), Mask("sliding_window", 2, -1), Mask("sliding_window", 0, 0))


def lowered_kernel(source: str, lowering: str) -> str:
    """Readable MLIR through one target lowering of the kernel ops; generic text for the interpreter."""
    from fmha_mlir.mlir import ir, make_context
    from fmha_mlir.passes.registry import build_pass_manager

    ctx = make_context()
    with ctx:
        module = ir.Module.parse(source)
        build_pass_manager(f"builtin.module({lowering})", ctx).run(module.operation)
        text = module.operation.get_asm(print_generic_op_form=True)
    assert "fmha.masked_score" not in text
    return text


@pytest.mark.parametrize("lowering", LOWERINGS)
@pytest.mark.parametrize("seqlens", GRIDS, ids=["sq<sk", "sq>sk"])
@pytest.mark.parametrize("mask", MASKS, ids=str)
@pytest.mark.parametrize("width", [1, 2], ids=["scalar", "vector2"])
def test_lowered_masked_score_is_mask_visible_inside_the_problem(lowering, seqlens, mask, width):
    """Work-group q, lane t: keys width*t .. width*t + width - 1, the vector form as the tiled body
    uses it (a vector of key positions against one query). Every (q, k) of the grid, with 2 rows past
    seqlen_q and 3 keys past seqlen_k (hidden: they are padding), is compared with the spec's own
    definition."""
    from fmha_mlir.runtime.interp import Interpreter

    from interp_support import kernel_module

    seqlen_q, seqlen_k = seqlens
    lanes = -(-(seqlen_k + 3) // width)
    keys = lanes * width
    rows = seqlen_q + 2
    dots = np.random.default_rng(1).standard_normal((rows, keys)).astype(np.float32) + 3.0
    out = np.zeros((rows, keys), np.float32)
    scale = 0.375
    attributes = (f'{{mask = "{mask.kind}", window_left = {mask.window_left} : i64, '
                  f'window_right = {mask.window_right} : i64, scale_log2 = {scale} : f32}}')
    if width == 1:
        body = f"""
    %k = gpu.thread_id x
    %q = gpu.block_id x
    %sq = arith.constant {seqlen_q} : index
    %sk = arith.constant {seqlen_k} : index
    %dot = memref.load %dots[%q, %k] : memref<{rows}x{keys}xf32>
    %s = "fmha.masked_score"(%dot, %q, %k, %sq, %sk) {attributes} : (f32, index, index, index, index) -> f32
    memref.store %s, %out[%q, %k] : memref<{rows}x{keys}xf32>"""
    else:
        body = f"""
    %t = gpu.thread_id x
    %q = gpu.block_id x
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %k0 = arith.muli %t, %c2 : index
    %k1 = arith.addi %k0, %c1 : index
    %ks = vector.from_elements %k0, %k1 : vector<2xindex>
    %sq = arith.constant {seqlen_q} : index
    %sk = arith.constant {seqlen_k} : index
    %dot = vector.load %dots[%q, %k0] : memref<{rows}x{keys}xf32>, vector<2xf32>
    %s = "fmha.masked_score"(%dot, %q, %ks, %sq, %sk) {attributes}
        : (vector<2xf32>, index, vector<2xindex>, index, index) -> vector<2xf32>
    vector.store %s, %out[%q, %k0] : memref<{rows}x{keys}xf32>, vector<2xf32>"""
    source = kernel_module(body, f"%dots: memref<{rows}x{keys}xf32>, %out: memref<{rows}x{keys}xf32>")
    wave = 64 if lowering.endswith("rocdl") else 32
    Interpreter(lowered_kernel(source, lowering), wave).run_kernel("k", [dots, out], (rows, 1, 1), (lanes, 1, 1))
    q, k = np.arange(rows)[:, None], np.arange(keys)[None, :]
    shown = mask.visible(q, k, seqlen_q, seqlen_k) & (q < seqlen_q) & (k < seqlen_k)
    np.testing.assert_array_equal(out, np.where(shown, dots * np.float32(scale), -np.inf))
