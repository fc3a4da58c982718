"""The wgmma body (sm_90a): the FlashAttention backward schedule on a warpgroup's m64n64k16
(passes/wgmma_mma_atom.py) with tiles in wgmma's 128-byte swizzle (passes/wgmma_tiles.py), run by the
interpreter (wgmma from its descriptors, the async-proxy rules of hopper_sync) through the one gate, over
the features the schedule has; and its limits, refused with the reason."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fmha_mlir.bodies import check_config
from fmha_mlir.bodies.wgmma import WGMMA_TABLE
from fmha_mlir.compiler import compile_spec
from fmha_mlir.errors import SpecError
from fmha_mlir.kernel_config import WGMMA, TiledConfig
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.runtime.bundle import Bundle
from fmha_mlir.runtime.cpu_executor import CpuExecutor
from fmha_mlir.runtime.runner import run_bundle
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import TARGETS

# One warpgroup, 64 x 64 tiles: the smallest the instruction allows, so the problems cross several.
ONE_WARPGROUP = TiledConfig(wave_size=32, instruction=WGMMA, swizzle="sw128", block_m=64, block_n=64, warps=4,
                            stages=2, sdp_warps=(1, 1), dkv_warps=(1, 1), dq_warps=(1, 1), p_in_registers=True)
P_IN_SHARED = dataclasses.replace(ONE_WARPGROUP, stages=1, p_in_registers=False)
TABLE_128 = WGMMA_TABLE[128]     # two warpgroups; dQ's side by side along the head dim
# Two warpgroups that split S^T's queries (m64n32 each), dK / dV's and dQ's head dim; P^T and dS^T in shared memory.
TABLE_256 = WGMMA_TABLE[256]
D256_BULK = dataclasses.replace(TABLE_256, stages=1, dq_bulk=True)   # dQ by the writer's reduce-adds


def compiled_variant(spec: AttentionBwdSpec, size: ProblemSize, config: TiledConfig, seed: int = 5, **problem):
    """The variant compiled for sm_90a, its bundle and its problem."""
    compiled = compile_spec(spec, "sm_90a", body="tiled", config=config)
    return (compiled, Bundle(compiled.manifest, compiled.bundle_files()),
            make_problem(spec, size, seed=seed, layout="bshd", **problem))


def run_variant(spec: AttentionBwdSpec, size: ProblemSize, config: TiledConfig, seed: int = 5, **problem):
    compiled, bundle, data = compiled_variant(spec, size, config, seed, **problem)
    grads = run_bundle(bundle, CpuExecutor(atomic_order="random", seed=seed), data.tensors)
    checks = data.check(grads, bundle.numerics)
    assert all(c.passed for c in checks), "\n".join(map(str, checks))
    assert max(c.scale for c in checks) > 0.1   # a real problem, not all-masked zeros
    return compiled


@pytest.mark.parametrize("spec,size,config", [
    (AttentionBwdSpec("bf16", 64), ProblemSize(1, 1, 100, 150), ONE_WARPGROUP),
    (AttentionBwdSpec("f16", 64, mask=Mask("causal_bottom_right"), gqa_ratio=2), ProblemSize(1, 4, 150, 100),
     ONE_WARPGROUP),
    (AttentionBwdSpec("bf16", 64, mask=Mask("sliding_window", 20, 7)), ProblemSize(2, 1, 90, 170), P_IN_SHARED),
    (AttentionBwdSpec("f16", 128, hdim_v=64, mask=Mask("causal_top_left")), ProblemSize(1, 2, 130, 130),
     ONE_WARPGROUP),
    (AttentionBwdSpec("bf16", 128, mask=Mask("causal_top_left"), gqa_ratio=4), ProblemSize(1, 4, 70, 200), TABLE_128),
    (AttentionBwdSpec("bf16", 64, softcap=30.0), ProblemSize(1, 1, 90, 130), ONE_WARPGROUP),
    (AttentionBwdSpec("f16", 64, bias="elementwise", dbias=True), ProblemSize(1, 2, 70, 100), ONE_WARPGROUP),
    (AttentionBwdSpec("bf16", 64, bias="alibi", alibi_slopes=True, dbias=True), ProblemSize(1, 2, 70, 100),
     ONE_WARPGROUP),
    (AttentionBwdSpec("bf16", 64, mask=Mask("causal_bottom_right"), deterministic=True), ProblemSize(1, 1, 90, 140),
     ONE_WARPGROUP),
    (AttentionBwdSpec("bf16", 64, gqa_ratio=2, grad_accum="bf16"), ProblemSize(1, 2, 80, 150), ONE_WARPGROUP),
    (AttentionBwdSpec("f16", 64, gqa_ratio=2, mask=Mask("causal_bottom_right"), sinks=True, lse_grad=True),
     ProblemSize(2, 4, 90, 70), ONE_WARPGROUP),
    (AttentionBwdSpec("bf16", 256, mask=Mask("causal_bottom_right"), gqa_ratio=2), ProblemSize(1, 2, 100, 130),
     TABLE_256),
    (AttentionBwdSpec("f16", 256, hdim_v=128, softcap=20.0), ProblemSize(1, 1, 70, 150), D256_BULK),
    (AttentionBwdSpec("bf16", 200, mask=Mask("sliding_window", 30, 10), deterministic=True),
     ProblemSize(1, 1, 130, 90), TABLE_256),
    (AttentionBwdSpec("bf16", 256, gqa_ratio=2, grad_accum="bf16"), ProblemSize(1, 2, 80, 100), TABLE_256),
    (AttentionBwdSpec("bf16", 192, mask=Mask("causal_bottom_right"), gqa_ratio=2), ProblemSize(1, 2, 100, 130),
     TABLE_256),
    (AttentionBwdSpec("f16", 160, mask=Mask("sliding_window", 30, 10)), ProblemSize(1, 1, 90, 110), TABLE_256),
    (AttentionBwdSpec("f16", 192, hdim_v=128, softcap=20.0), ProblemSize(1, 1, 70, 150), D256_BULK),
    (AttentionBwdSpec("bf16", 192, gqa_ratio=2, grad_accum="bf16"), ProblemSize(1, 2, 80, 100), TABLE_256),
    (AttentionBwdSpec("bf16", 160, gqa_ratio=2), ProblemSize(1, 2, 90, 110),
     dataclasses.replace(TABLE_256, producer=False, dq_fragment=False, dkv_tma_store=False)),
], ids=["none-bf16", "br-gqa-f16", "window-p-shared-batch2", "tl-dv64", "table-d128-gqa4", "softcap",
        "bias-dbias", "alibi-dslopes", "deterministic", "bf16-dq-atomics", "sinks-dlse", "table-d256-br-gqa2",
        "d256-bulk-dv128-softcap", "d200-padded-window-deterministic", "d256-bf16-dq-atomics",
        "d192-split-96-br-gqa2", "d160-on-192-window", "d192-bulk-dv128-softcap", "d192-bf16-dq-atomics",
        "d160-table-logical-dq"])
def test_wgmma_body_matches_the_oracle(spec, size, config):
    compiled = run_variant(spec, size, config)
    assert "wgmma.mma_async" in compiled.isa and "fence.proxy.async" in compiled.isa


@pytest.mark.parametrize("hdim", [64, 128])
def test_wgmma_body_takes_packed_sequences(hdim):
    """varlen: sequences of 0, 1, 70 and 150 queries against 130, 0, 70 and 1 keys, several tiles each; d128
    on the table's choice (no producer: dQ by v4 atomics into a dq_acc in fragment order)."""
    from fmha_mlir.bodies import choose_config, dq_fragment_order
    from fmha_mlir.varlen_problem import make_varlen_problem

    spec = AttentionBwdSpec("bf16", hdim, mask=Mask("causal_bottom_right"), varlen=True)
    config = ONE_WARPGROUP if hdim == 64 else choose_config(spec, TARGETS["sm_90a"])
    assert hdim == 64 or dq_fragment_order(spec, config)
    compiled = compile_spec(spec, "sm_90a", body="tiled", config=config)
    bundle = Bundle(compiled.manifest, compiled.bundle_files())
    problem = make_varlen_problem(spec, (0, 1, 70, 150), (130, 0, 70, 1), heads_q=2, seed=4)
    outputs = run_bundle(bundle, CpuExecutor(atomic_order="random", seed=4), problem.tensors, problem.scalars)
    checks = problem.check(outputs, bundle.numerics)
    assert all(c.passed for c in checks), [str(c) for c in checks]


def test_p_in_registers_is_the_rs_form_and_p_in_shared_is_not():
    spec = AttentionBwdSpec("bf16", 64)
    registers = compile_spec(spec, "sm_90a", body="tiled", config=ONE_WARPGROUP).isa
    shared = compile_spec(spec, "sm_90a", body="tiled", config=P_IN_SHARED).isa
    rs = r"wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
    assert registers.count("wgmma.mma_async") == shared.count("wgmma.mma_async")
    # dV and dK read P^T and dS^T from registers: their operand list is a register list, not a descriptor
    assert _register_a_products(registers) == 2 * (64 // 16) and _register_a_products(shared) == 0
    assert rs in registers


def _register_a_products(ptx: str) -> int:
    import re

    return len(re.findall(r"wgmma\.mma_async[^;]*\},\s*\{%r", ptx))


@pytest.mark.parametrize("change,field,words", [
    (dict(), "config.instruction", "needs an arch-specific chip (sm_90a)"),
])
def test_wgmma_needs_sm_90a(change, field, words):
    with pytest.raises(SpecError) as caught:
        check_config(AttentionBwdSpec("bf16", 64), TARGETS["sm_90"], dataclasses.replace(ONE_WARPGROUP, **change))
    assert any(r.field == field and words in r.message for r in caught.value.reasons), caught.value.reasons


@pytest.mark.parametrize("spec,config,field,words", [
    (AttentionBwdSpec("bf16", 64), dataclasses.replace(ONE_WARPGROUP, block_m=32), "config.block_m",
     "64-column swizzled blocks"),
    (AttentionBwdSpec("bf16", 64), dataclasses.replace(ONE_WARPGROUP, swizzle="xor"), "config.swizzle", "128-byte"),
    (AttentionBwdSpec("bf16", 64), dataclasses.replace(ONE_WARPGROUP, warps=6), "config.warps", "4 warps together"),
    (AttentionBwdSpec("bf16", 64), dataclasses.replace(ONE_WARPGROUP, warps=8), "config.sdp_warps", "warpgroups"),
    (AttentionBwdSpec("bf16", 256), dataclasses.replace(TABLE_256, block_m=192), "config.sdp_warps",
     "96 S^T columns are neither whole 64-column tiles nor one narrower tile"),
    (AttentionBwdSpec("f32", 64), ONE_WARPGROUP, "dtype", "f16 and bf16"),
])
def test_wgmma_limits_are_refused_with_the_reason(spec, config, field, words):
    with pytest.raises(SpecError) as caught:
        check_config(spec, TARGETS["sm_90a"], config)
    assert any(r.field == field and words in r.message for r in caught.value.reasons), caught.value.reasons


@pytest.mark.parametrize("spec,instruction", [
    (AttentionBwdSpec("bf16", 64), WGMMA),
    (AttentionBwdSpec("f16", 128, mask=Mask("causal_top_left")), WGMMA),
    (AttentionBwdSpec("bf16", 96), WGMMA),                # on tiles padded to 128 columns (measured 1.39x)
    (AttentionBwdSpec("bf16", 256), WGMMA),
    (AttentionBwdSpec("bf16", 200, mask=Mask("causal_top_left")), WGMMA),   # on tiles padded to 256 columns
    (AttentionBwdSpec("bf16", 160), WGMMA),               # the d256 row's 192-column tiles: 1.12x (measured)
    (AttentionBwdSpec("bf16", 192), WGMMA),               # 1.16x (measured)
    (AttentionBwdSpec("bf16", 136), "mma.m16n8k16"),      # on 192-column tiles: 0.85x (estimated)
])
def test_sm_90a_takes_the_wgmma_rows_where_they_take_the_spec(spec, instruction):
    from fmha_mlir.bodies import choose_config

    assert choose_config(spec, TARGETS["sm_90a"]).instruction == instruction
    assert choose_config(spec, TARGETS["sm_90"]).instruction == "mma.m16n8k16"


def test_d256_splits_s_t_over_narrow_products():
    """Each warpgroup's S^T and dP^T are m64n32 (half a query block), the other products m64n64; no RS form."""
    import re

    ptx = compile_spec(AttentionBwdSpec("bf16", 256), "sm_90a", body="tiled", config=TABLE_256).isa
    shapes = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx)
    # per step: S^T and dP^T 256 / 16 k steps each; dV, dK, dQ 2 n-tiles x 64 / 16 k steps each
    assert shapes.count("m64n32k16") == 2 * 256 // 16 and shapes.count("m64n64k16") == 3 * 2 * 64 // 16
    assert _register_a_products(ptx) == 0


def test_d192_splits_the_head_dim_over_narrow_products():
    """On the d256 row's config, d192's warpgroups hold 96 head-dim columns each: dV, dK and dQ are three
    m64n32 a k step (the second warpgroup's first inside a swizzled block), S^T and dP^T m64n32 as at d256;
    dQ's atomics are v4 runs (fragment order: a block's run may continue on the next row of dq_acc)."""
    import re

    ptx = compile_spec(AttentionBwdSpec("bf16", 192), "sm_90a", body="tiled", config=TABLE_256).isa
    shapes = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx)
    # per step: S^T and dP^T 192 / 16 k steps each; dV, dK, dQ 3 n-tiles x 64 / 16 k steps each
    assert shapes.count("m64n32k16") == 2 * 192 // 16 + 3 * 3 * 64 // 16 and "m64n64k16" not in shapes
    assert len(re.findall(r"red\.[a-z.]*global\.add\.v4\.f32", ptx)) == 64 * 96 // 128 // 4


def test_tiles_start_on_the_swizzle_period():
    from fmha_mlir.bodies import TiledBody

    layout = TiledBody.shared_layout(AttentionBwdSpec("bf16", 128), TABLE_128)
    assert all(t.offset % 1024 == 0 for t in layout)
    assert all(t.copy_bytes % 1024 == 0 for t in layout if t.element_bytes == 2)
    assert np.all([t.end <= TARGETS["sm_90a"].max_shared_bytes for t in layout])


@pytest.mark.parametrize("planted,words", [
    ("complete", "whose wgmma is still in flight"),
    ("shared_written", "no fence.proxy.async since"),
], ids=["products-read-before-their-wait", "tiles-read-without-a-proxy-fence"])
def test_the_interpreter_reports_a_planted_synchronisation_bug(monkeypatch, planted, words):
    """The body with its waits for in-flight products, or its proxy fences after ordinary shared-memory
    writes, left out: the interpreter names the op instead of computing what the hardware may not."""
    from fmha_mlir.runtime.interp.errors import InterpreterError
    from fmha_mlir.passes.wgmma_mma_atom import WgmmaMmaAtom

    monkeypatch.setattr(WgmmaMmaAtom, planted, lambda self, *args: None)
    with pytest.raises(InterpreterError, match=words):
        run_variant(AttentionBwdSpec("bf16", 64), ProblemSize(1, 1, 70, 70), ONE_WARPGROUP)


def test_the_interpreter_reports_a_planted_missing_wgmma_fence(monkeypatch):
    """The atom's wgmma.fence before each chain left out: the first product reads an accumulator (zeros)
    and later ones packed A fragments written with no fence by their warpgroup since (PTX ISA, wgmma.fence)."""
    from fmha_mlir.passes import wgmma_atom
    from fmha_mlir.runtime.interp.errors import InterpreterError

    monkeypatch.setattr(wgmma_atom, "fence", lambda: None)
    with pytest.raises(InterpreterError, match="written after the last wgmma.fence"):
        run_variant(AttentionBwdSpec("bf16", 64), ProblemSize(1, 1, 70, 70), ONE_WARPGROUP)
