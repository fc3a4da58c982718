"""bf16 gradient atomics (grad_accum="bf16"): the tiled bodies add dQ into dq itself with packed
bf16 atomics, once per key block, and the gate's reference rounds the same way (Numerics.dq_add_block).
The interpreter applies each half of a packed add with round to nearest even, in lane order or in a
seeded random order (CpuExecutor(atomic_order="random"))."""
import dataclasses

import numpy as np
import pytest

from fmha_mlir import oracle
from fmha_mlir.errors import SpecError
from fmha_mlir.numerics import MATRIX_K16
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.runtime.cpu_executor import CpuExecutor
from fmha_mlir.runtime.runner import run_bundle
from fmha_mlir.spec import AttentionBwdSpec, Mask

# GQA 2 with a causal mask; 300 keys are 3 key blocks at block_n 128 (sm_90, gfx950 d64) and 5 at 64
# (gfx942): every dQ element takes several bf16 adds. 70 query rows: the last query block is partial.
SPEC = AttentionBwdSpec("bf16", 64, mask=Mask("causal_bottom_right"), gqa_ratio=2, grad_accum="bf16")
SIZE = ProblemSize(1, 4, 70, 300)


@pytest.fixture(scope="module")
def compiler():
    from fmha_mlir.compiler import Compiler

    return Compiler()


@pytest.fixture(scope="module")
def problem():
    return make_problem(SPEC, SIZE, seed=11)


@pytest.mark.parametrize("arch", ["sm_90", "gfx942", "gfx950"])
def test_bf16_dq_atomics_pass_the_gate_in_any_order(arch, compiler, problem):
    from fmha_mlir.api import compile_bundle

    bundle = compile_bundle(SPEC, arch, compiler, body="tiled")
    assert bundle.numerics.dq_add_block == bundle.config.block_n
    assert "dq_acc" not in bundle.buffers and not any("convert" in s.get("kernel", "") for s in bundle.steps)
    assert {"op": "zero", "buffer": "dq"} in bundle.steps
    assert "vector<2xbf16>" in bundle.interp_ir
    runs = [run_bundle(bundle, CpuExecutor(atomic_order="random", seed=seed), problem.tensors) for seed in (1, 2)]
    for outputs in runs:
        checks = problem.check(outputs, bundle.numerics)
        assert all(c.passed for c in checks), [str(c) for c in checks]
    # bf16 rounding after every add makes the order show: the random order mode reaches these atomics
    assert not np.array_equal(runs[0]["dq"].view(np.uint16), runs[1]["dq"].view(np.uint16))
    assert np.array_equal(runs[0]["dk"].view(np.uint16), runs[1]["dk"].view(np.uint16))


def test_the_gate_needs_the_rounding_per_key_block(compiler, problem):
    """gfx942's 5 key blocks: the kernel's dQ is outside a bound that models f32 accumulation, inside the
    bound of the reference that rounds per key block as the atomics do."""
    from fmha_mlir.api import compile_bundle

    bundle = compile_bundle(SPEC, "gfx942", compiler, body="tiled")
    outputs = run_bundle(bundle, CpuExecutor(), problem.tensors)
    by_name = lambda checks: {c.name: c for c in checks}  # noqa: E731
    assert by_name(problem.check(outputs, bundle.numerics))["dq"].passed
    assert not by_name(problem.check(outputs, dataclasses.replace(bundle.numerics, dq_add_block=0)))["dq"].passed


def test_blockwise_reference_rounds_once_per_key_block(problem):
    """One key block covering every key is f32 accumulation (one rounding of the whole sum); smaller
    blocks round the running sum more often and land farther from the oracle."""
    inputs = [problem.values[n] for n in ("q", "k", "v", "o", "do", "lse")]
    args = dict(dtype="bf16", mask=SPEC.mask, scale=SPEC.scale, gqa_ratio=SPEC.gqa_ratio)
    exact = oracle.backward(*inputs, mask=SPEC.mask, scale=SPEC.scale, gqa_ratio=SPEC.gqa_ratio).dq
    f32 = oracle.lowp_backward(*inputs, numerics=MATRIX_K16, **args).dq
    whole = oracle.lowp_backward(*inputs, numerics=dataclasses.replace(MATRIX_K16, dq_add_block=SIZE.seqlen_k),
                                 **args).dq
    assert np.array_equal(whole, f32)
    errors = [np.max(np.abs(oracle.lowp_backward(*inputs, numerics=dataclasses.replace(MATRIX_K16, dq_add_block=b),
                                                 **args).dq - exact)) for b in (128, 16)]
    assert np.max(np.abs(f32 - exact)) < errors[0] < errors[1]


@pytest.mark.parametrize("change, reason", [
    (dict(dtype="f16"), "bf16 atomics add into a bf16 dQ"),
    (dict(deterministic=True), "deterministic mode forbids exactly that"),
    (dict(grad_accum="f16"), "unknown gradient accumulation dtype"),
])
def test_bf16_accumulation_refusals_name_the_reason(change, reason):
    with pytest.raises(SpecError, match=reason):
        dataclasses.replace(SPEC, **change).check()


def test_the_warp_body_refuses_bf16_accumulation_and_auto_takes_the_tiled_body():
    from fmha_mlir.bodies import choose_config
    from fmha_mlir.target import get_target

    with pytest.raises(SpecError, match="the warp body stores dQ"):
        choose_config(SPEC, get_target("sm_90"), "warp")
    assert choose_config(SPEC, get_target("gfx942")).body == "tiled"
    # gfx942 has no d256 tile: auto falls to the warp body, which says why it cannot
    with pytest.raises(SpecError, match="the warp body stores dQ"):
        choose_config(dataclasses.replace(SPEC, hdim_q=256), get_target("gfx942"))


def test_grad_accum_through_the_api_and_the_main_job(problem, capsys):
    from fmha_mlir import AttentionBackward
    from fmha_mlir.tools import main_job

    t = problem.tensors
    bwd = AttentionBackward(executor="cpu", arch="gfx950")
    grads = bwd(t["q"], t["k"], t["v"], t["o"], t["do"], t["lse"], mask=SPEC.mask, dtype="bf16", grad_accum="bf16")
    bundle = bwd.bundle(SPEC)
    assert bundle.spec.kernel_prefix.endswith("_accbf16") and "dq_acc" not in bundle.buffers
    assert all(c.passed for c in problem.check(dict(zip(("dq", "dk", "dv"), grads)), bundle.numerics))
    assert main_job.main(["--target", "sm_90", "--executor", "cpu", "--dtype", "bf16", "--hdim", "64", "--batch", "1",
                          "--heads", "2", "--seqlen-k", "300", "--grad-accum", "bf16"]) == 0
    out = capsys.readouterr()
    assert "grad-accum bf16" in out.out and out.out.count("PASS") == 3 and "_accbf16" in out.err
