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
    # one work-group per query row, one lane per key
    dots = np.random.default_rng(0).standard_normal((SEQLEN_Q, 16)).astype(np.float32)
    out = np.zeros((SEQLEN_Q, 16), np.float32)
    scale = 0.125
    body = f"""
    %k = gpu.thread_id x
    %q = gpu.block_id x
    %sq = arith.constant {SEQLEN_Q} : index
    %sk = arith.constant {SEQLEN_K} : index
    %dot = memref.load %dots[%q, %k] : memref<{SEQLEN_Q}x16xf32>
    %s = "fmha.masked_score"(%dot, %q, %k, %sq, %sk) {{mask = "{mask.kind}", window_left = {mask.window_left} : i64,
        window_right = {mask.window_right} : i64, scale_log2 = {scale} : f32}} : (f32, index, index, index, index) -> f32
    memref.store %s, %out[%q, %k] : memref<{SEQLEN_Q}x16xf32>"""
    run(body, f"%dots: memref<{SEQLEN_Q}x16xf32>, %out: memref<{SEQLEN_Q}x16xf32>", [dots, out],
        grid=(SEQLEN_Q, 1, 1), block=(16, 1, 1))
    q, k = np.arange(SEQLEN_Q)[:, None], np.arange(16)[None, :]
    visible = np.broadcast_to(mask.visible(q, k, SEQLEN_Q, SEQLEN_K), out.shape)
    np.testing.assert_array_equal(out, np.where(visible, dots * np.float32(scale), -np.inf))
    assert visible.any() and (~visible).any() or mask.kind == "none"


@pytest.mark.parametrize("spelling", [
    '"fmha.exp2"(%x) : (f32) -> f32',
    "rocdl.exp2 %x f32 -> f32",
    'llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%x) : (f32) -> f32',
    "math.exp2 %x : f32",
])
def test_exp2_spellings(spelling):
    x = np.array([-np.inf, -140.0, -1.5, 0.0, 0.25, 3.0, 20.0, -127.5] * 8, np.float32)
    out = np.full(64, 7.0, np.float32)
    body = f"""
    %t = gpu.thread_id x
    %x = memref.load %in[%t] : memref<64xf32>
    %e = {spelling}
    memref.store %e, %out[%t] : memref<64xf32>"""
    run(body, "%in: memref<64xf32>, %out: memref<64xf32>", [x, out])
    want = np.exp2(x)
    if "ftz" in spelling:  # flush-to-zero: subnormal results become 0
        want = np.where(np.abs(want) < np.finfo(np.float32).tiny, 0, want)
    np.testing.assert_array_equal(out, want)
    assert out[0] == 0 and (out[1] == 0) == ("ftz" in spelling)
