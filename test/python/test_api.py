"""The user-facing API and the main job: arrays in, gradients out, checked against the oracle."""
from __future__ import annotations

import numpy as np
import pytest

from fmha_mlir import AttentionBackward, AttentionBwdSpec, Mask, SpecError, attention_bwd
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.tools import main_job


def _run(spec, size, layout="bhsd", **kwargs):
    problem = make_problem(spec, size, seed=3, layout=layout)
    t = problem.tensors
    bwd = AttentionBackward(executor="cpu", **kwargs)
    grads = bwd(t["q"], t["k"], t["v"], t["o"], t["do"], t["lse"], mask=spec.mask, dtype=spec.dtype)
    # The gate models the rounding of the body the API picked: the bundle says which.
    return problem.check(dict(zip(("dq", "dk", "dv"), grads)), bwd.bundle(problem.spec).numerics)


@pytest.mark.parametrize("arch", ["gfx942", "sm_90"])
@pytest.mark.parametrize("spec", [
    AttentionBwdSpec(dtype="f32", hdim_q=64, mask=Mask("causal_top_left")),
    AttentionBwdSpec(dtype="bf16", hdim_q=128, hdim_v=64, gqa_ratio=2, mask=Mask("sliding_window", 3, 2)),
], ids=["f32-tl", "bf16-window-gqa2"])
def test_attention_bwd_matches_the_oracle(arch, spec):
    checks = _run(spec, ProblemSize(1, 2, 11, 7), layout="bshd", arch=arch)
    assert [c.name for c in checks] == ["dq", "dk", "dv"]
    assert all(c.passed for c in checks), [str(c) for c in checks]


@pytest.mark.parametrize("arch", ["gfx950", "sm_90"])
def test_softcap_through_the_api_and_the_main_job(arch, capsys):
    """softcap= reaches the kernel (a bundle without it fails the gate on these scores by far)."""
    spec = AttentionBwdSpec(dtype="bf16", hdim_q=64, gqa_ratio=2, mask=Mask("causal_bottom_right"), softcap=2.0)
    problem = make_problem(spec, ProblemSize(1, 4, 13, 29), seed=5)
    t = problem.tensors
    bwd = AttentionBackward(executor="cpu", arch=arch)
    grads = bwd(t["q"], t["k"], t["v"], t["o"], t["do"], t["lse"], mask=spec.mask, dtype="bf16", softcap=2.0)
    assert bwd.bundle(spec).spec.softcap == 2.0
    assert all(c.passed for c in problem.check(dict(zip(("dq", "dk", "dv"), grads)), bwd.bundle(spec).numerics))
    plain = bwd(t["q"], t["k"], t["v"], t["o"], t["do"], t["lse"], mask=spec.mask, dtype="bf16")
    assert not any(c.passed for c in problem.check(dict(zip(("dq", "dk", "dv"), plain)), bwd.bundle(spec).numerics))
    assert main_job.main(["--target", arch, "--executor", "cpu", "--softcap", "2", "--seqlen-q", "13"]) == 0
    assert "softcap 2 |" in capsys.readouterr().out


def test_three_elements_per_lane():
    """hdim 96 on a wave of 32: each lane owns 3 elements, an access that is not a power of two."""
    checks = _run(AttentionBwdSpec(dtype="f16", hdim_q=96), ProblemSize(1, 1, 5, 6), arch="sm_90")
    assert all(c.passed for c in checks), [str(c) for c in checks]


def test_dtype_is_taken_from_the_arrays_and_cached_bundles_are_reused():
    spec = AttentionBwdSpec(dtype="f16", hdim_q=64)
    problem = make_problem(spec, ProblemSize(1, 1, 4, 4))
    t = problem.tensors
    bwd = AttentionBackward(executor="cpu", arch="gfx950")
    first = bwd(t["q"], t["k"], t["v"], t["o"], t["do"], t["lse"])
    bundle = bwd.bundle(spec)
    second = bwd(t["q"], t["k"], t["v"], t["o"], t["do"], t["lse"])
    assert bwd.bundle(spec) is bundle
    assert all(np.array_equal(a, b) for a, b in zip(first, second))
    assert first[0].dtype == np.float16


def test_uint16_arrays_need_an_explicit_bf16_dtype():
    q = np.zeros((1, 1, 2, 64), np.uint16)
    with pytest.raises(SpecError, match="dtype='bf16'"):
        attention_bwd(q, q, q, q, q, np.zeros((1, 1, 2), np.float32), executor="cpu")


def test_ml_dtypes_bfloat16_arrays_in_and_out_equal_the_uint16_bit_patterns():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    spec = AttentionBwdSpec(dtype="bf16", hdim_q=64, mask=Mask("causal_bottom_right"))
    t = make_problem(spec, ProblemSize(1, 2, 6, 9), seed=4).tensors
    bwd = AttentionBackward(executor="cpu", arch="sm_90")
    as_bits = bwd(t["q"], t["k"], t["v"], t["o"], t["do"], t["lse"], mask=spec.mask, dtype="bf16")
    typed = {n: a.view(ml_dtypes.bfloat16) if a.dtype == np.uint16 else a for n, a in t.items()}
    grads = bwd(typed["q"], typed["k"], typed["v"], typed["o"], typed["do"], typed["lse"], mask=spec.mask)
    assert [g.dtype for g in grads] == [np.dtype(ml_dtypes.bfloat16)] * 3     # the dtype told: no dtype= needed
    assert all(np.array_equal(g.view(np.uint16), bits) for g, bits in zip(grads, as_bits))


def test_cuda_tensors_never_fall_back_to_the_cpu():
    torch = pytest.importorskip("torch")
    from fmha_mlir.runtime.cpu_executor import CpuExecutor

    with pytest.raises(SpecError, match="the tensors live on cuda:0 but the executor is 'cpu'"):
        AttentionBackward()._cuda_executor(CpuExecutor(), torch.device("cuda", 0))

    class OtherGpu:
        name, device_index = "cuda", 0

    with pytest.raises(SpecError, match=r"drives cuda:0 .* AttentionBackward\(device_index=1\)"):
        AttentionBackward()._cuda_executor(OtherGpu(), torch.device("cuda", 1))


def test_main_job_prints_pass_rows_and_exits_zero(capsys):
    assert main_job.main(["--target", "sm_90", "--executor", "cpu", "--batch", "1", "--heads", "2",
                          "--seqlen-q", "5", "--seqlen-k", "9"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("sm_90 ")]
    assert [row.split()[5] for row in rows] == ["dq", "dk", "dv"]
    assert all(row.endswith("PASS") for row in rows)


def test_main_job_reports_a_bad_spec_without_a_traceback(capsys):
    assert main_job.main(["--target", "gfx942", "--hdim", "100"]) == 2   # (not whole 16-byte copies either)
    err = capsys.readouterr().err
    assert "hdim_q: 100 is not supported by the warp body on gfx942" in err and "Traceback" not in err


def test_main_job_exits_one_when_a_gradient_fails(capsys, monkeypatch):
    """With a zero tolerance no rounded result can pass: the job must say FAIL and exit 1."""
    from fmha_mlir import tolerance

    monkeypatch.setattr(tolerance, "FACTOR", 0.0)
    monkeypatch.setattr(tolerance, "TINY", 0.0)
    assert main_job.main(["--target", "gfx942", "--executor", "cpu", "--batch", "1", "--heads", "2",
                          "--seqlen-q", "4", "--seqlen-k", "4"]) == 1
    assert "FAIL" in capsys.readouterr().out


@pytest.mark.parametrize("shape", [(13, 29), (4, 13, 29), (1, 4, 13, 29)], ids=["SqxSk", "HxSqxSk", "1xHxSqxSk"])
def test_a_bias_array_and_its_gradient_through_the_api(shape):
    """bias= takes [Sq, Sk], [H, Sq, Sk] and [B, H, Sq, Sk]; dbias comes back fourth, in the bias's own shape."""
    spec = AttentionBwdSpec(dtype="f16", hdim_q=64, gqa_ratio=2, bias="elementwise", dbias=True)
    problem = make_problem(spec, ProblemSize(2, 4, 13, 29), seed=2,
                           broadcast="batch_heads" if len(shape) == 2 else "batch")
    t = problem.tensors
    bias = t["bias"].reshape(shape)
    grads = AttentionBackward(executor="cpu", arch="sm_90")(t["q"], t["k"], t["v"], t["o"], t["do"], t["lse"],
                                                           bias=bias, dbias=True)
    assert len(grads) == 4 and grads[3].shape == shape
    kernel = dict(zip(("dq", "dk", "dv", "dbias"), grads[:3] + (grads[3].reshape(t["bias"].shape),)))
    assert all(c.passed for c in problem.check(kernel, _numerics(spec, "sm_90")))


def test_alibi_slopes_and_their_gradient_through_the_api():
    spec = AttentionBwdSpec(dtype="bf16", hdim_q=64, bias="alibi", alibi_slopes=True, dbias=True)
    problem = make_problem(spec, ProblemSize(1, 4, 9, 17), seed=4)
    t = problem.tensors
    slopes = t["alibi_slopes"].reshape(4)
    grads = attention_bwd(t["q"], t["k"], t["v"], t["o"], t["do"], t["lse"], dtype="bf16", alibi_slopes=slopes,
                          dbias=True, executor="cpu", arch="gfx950")
    assert grads[3].shape == (4,) and grads[3].dtype == np.float32
    kernel = dict(zip(("dq", "dk", "dv", "dalibi_slopes"), grads[:3] + (grads[3].reshape(1, 4),)))
    assert all(c.passed for c in problem.check(kernel, _numerics(spec, "gfx950")))


def test_run_takes_a_spec_and_computes_what_the_keyword_call_computes():
    spec = AttentionBwdSpec(dtype="f16", hdim_q=64, gqa_ratio=2, mask=Mask("causal_bottom_right"), softcap=3.0,
                            bias="elementwise", dbias=True)
    problem = make_problem(spec, ProblemSize(1, 4, 9, 17), seed=6)
    t = problem.tensors
    bwd = AttentionBackward(executor="cpu", arch="sm_90", atomic_order="sequential")
    by_spec = bwd.run(spec, t["q"], t["k"], t["v"], t["o"], t["do"], t["lse"], bias=t["bias"])
    by_options = bwd(t["q"], t["k"], t["v"], t["o"], t["do"], t["lse"], mask=spec.mask, softcap=3.0, bias=t["bias"],
                     dbias=True)
    assert len(by_spec) == 4 and all(np.array_equal(a, b) for a, b in zip(by_spec, by_options))
    assert list(bwd._bundles) == [(spec, "sm_90")]   # one spec, one bundle: the call built the same spec
    assert all(c.passed for c in problem.check(dict(zip(("dq", "dk", "dv", "dbias"), by_spec)),
                                               _numerics(spec, "sm_90")))


def test_run_refuses_tensors_the_spec_does_not_describe_naming_each_field():
    spec = AttentionBwdSpec(dtype="f16", hdim_q=64, bias="elementwise")
    q = np.zeros((1, 2, 4, 32), np.float32)
    lse = np.zeros((1, 2, 4), np.float32)
    with pytest.raises(SpecError) as refused:
        AttentionBackward(executor="cpu", arch="sm_90").run(spec, q, q, q, q, q, lse)
    assert {r.field for r in refused.value.reasons} == {"dtype", "hdim_q", "hdim_v", "bias"}
    assert "the tensors give 'f32', the spec says 'f16'" in str(refused.value)


def test_run_refuses_an_invalid_spec_before_looking_at_the_tensors():
    with pytest.raises(SpecError, match="softcap: must be 0 \\(off\\) or a positive f32 value"):
        AttentionBackward(executor="cpu", arch="sm_90").run(AttentionBwdSpec(softcap=1e-40), None, None, None, None,
                                                            None, None)


@pytest.mark.parametrize("kwargs,match", [
    ({"bias": np.zeros((3,), np.float16)}, "must be 'alibi' or an array of shape"),
    ({"bias": np.zeros((1, 1, 2, 2), np.float16), "alibi_slopes": np.ones(1, np.float32)}, "given with a bias tensor"),
    ({"bias": "elementwise"}, "the API takes the tensor itself"),
    ({"dbias": True}, "dbias asks for the gradient of a bias"),
    ({"bias": "alibi", "dbias": True}, "d\\(slopes\\) is the gradient of a slopes tensor"),
])
def test_bad_bias_arguments_are_refused(kwargs, match):
    q = np.zeros((1, 1, 2, 64), np.float16)
    with pytest.raises(SpecError, match=match):
        attention_bwd(q, q, q, q, q, np.zeros((1, 1, 2), np.float32), executor="cpu", **kwargs)


def test_main_job_runs_a_bias_and_the_slopes(capsys):
    assert main_job.main(["--target", "gfx942", "--executor", "cpu", "--bias", "elementwise", "--dbias",
                          "--bias-broadcast", "none", "--seqlen-q", "9", "--seqlen-k", "11"]) == 0
    out = capsys.readouterr().out
    assert "bias[2x4x9x11] +dbias" in out and "dbias " in out
    assert main_job.main(["--target", "sm_90", "--executor", "cpu", "--bias", "alibi", "--dbias",
                          "--seqlen-q", "9", "--seqlen-k", "11"]) == 0
    assert "alibi_slopes[1x4]" in capsys.readouterr().out


def _numerics(spec, arch):
    from fmha_mlir.api import compile_bundle
    return compile_bundle(spec, arch).numerics


def test_one_instance_serves_several_threads():
    """An AttentionBackward (and its CPU executor) shared by threads that run two specs at once gives
    every call its own spec's gradients (an executor that holds one bundle's kernels at a time fails
    some of the 16 calls)."""
    from concurrent.futures import ThreadPoolExecutor

    runner = AttentionBackward(executor="cpu", arch="sm_90")
    specs = [AttentionBwdSpec("f16", 32, mask=Mask("causal_bottom_right")), AttentionBwdSpec("f16", 64, gqa_ratio=2)]
    problems = [make_problem(spec, ProblemSize(1, 2, 6, 9), seed=n) for n, spec in enumerate(specs)]

    def call(n):
        problem = problems[n % 2]
        t = problem.tensors
        grads = runner(t["q"], t["k"], t["v"], t["o"], t["do"], t["lse"], mask=problem.spec.mask)
        return all(c.passed for c in problem.check(dict(zip(("dq", "dk", "dv"), grads)),
                                                   runner.bundle(problem.spec).numerics))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(call, range(16)))


@pytest.mark.parametrize("seqlen_q, seqlen_k", [(0, 8), (8, 0), (0, 0)])
def test_a_problem_without_a_query_key_pair_has_zero_gradients(seqlen_q, seqlen_k):
    """Empty sequences are legal: zero gradients in each input's shape (and dbias in the bias's), nothing
    launched (a grid with an empty dimension cannot be), and bad options still refused."""
    rng = np.random.default_rng(0)
    shape = lambda s: (1, 2, s, 32)  # noqa: E731
    q, o, do = (rng.standard_normal(shape(seqlen_q)).astype(np.float32) for _ in range(3))
    k, v = (rng.standard_normal(shape(seqlen_k)).astype(np.float32) for _ in range(2))
    lse = np.zeros((1, 2, seqlen_q), np.float32)
    bias = rng.standard_normal((1, 2, seqlen_q, seqlen_k)).astype(np.float32)
    run = AttentionBackward(executor="cpu", arch="sm_90")
    dq, dk, dv, dbias = run(q, k, v, o, do, lse, dtype="f32", bias=bias, dbias=True)
    for grad, like in ((dq, q), (dk, k), (dv, v), (dbias, bias)):
        assert grad.shape == like.shape and grad.dtype == np.float32 and not np.any(grad)
    with pytest.raises(SpecError, match="softcap"):
        run(q, k, v, o, do, lse, dtype="f32", softcap=-1.0)


def test_cuda_chips_compile_for_their_own_target_and_run_generic_prebuilt_bundles(tmp_path):
    """An H100 / H200 (compute capability 9.0) compiles for sm_90a, whose wgmma body runs nowhere else;
    other chips for sm_90. A bundle directory prebuilt for sm_90 still serves an sm_90a chip (its binaries
    run there), and its own sm_90a bundle comes first once there is one."""
    from fmha_mlir.api import bundle_path, compile_bundle
    from fmha_mlir.target import nvidia_arch, prebuilt_archs

    assert [nvidia_arch(c) for c in ((9, 0), (10, 0), (8, 9), (12, 0))] == ["sm_90a", "sm_90", "sm_90", "sm_90"]
    assert prebuilt_archs("sm_90a") == ("sm_90a", "sm_90") and prebuilt_archs("gfx942") == ("gfx942",)
    spec = AttentionBwdSpec("bf16", 64)
    compile_bundle(spec, "sm_90").save(bundle_path(tmp_path, spec, "sm_90"))
    generic = AttentionBackward(executor="cpu", arch="sm_90a", bundle_dir=tmp_path).bundle(spec)
    assert generic.target.arch == "sm_90" and generic.config.instruction == "mma.m16n8k16"
    compile_bundle(spec, "sm_90a").save(bundle_path(tmp_path, spec, "sm_90a"))
    own = AttentionBackward(executor="cpu", arch="sm_90a", bundle_dir=tmp_path).bundle(spec)
    assert own.target.arch == "sm_90a" and own.config.instruction == "wgmma.m64n64k16"
