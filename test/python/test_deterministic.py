"""Deterministic mode: the tiled bodies write one dQ partial per key block and the convert
sums them in order, so no result depends on the order in which atomics land. The interpreter applies
atomics in a random order (CpuExecutor(atomic_order="random")): the non-deterministic plan's f32 dQ
workspace differs between two orders, the deterministic plan's workspace and outputs never do."""
import dataclasses

import numpy as np
import pytest

from fmha_mlir.errors import SpecError
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.runtime.cpu_executor import CpuExecutor
from fmha_mlir.runtime.runner import PreparedRun
from fmha_mlir.spec import AttentionBwdSpec, Mask

# GQA 2 with a causal mask: some key blocks meet no query block of a row range (their partials are
# neither written nor read); 300 keys are 3 key blocks at block_n 128 (sm_90) and 5 at 64 (MFMA).
SPEC = AttentionBwdSpec("bf16", 64, mask=Mask("causal_bottom_right"), gqa_ratio=2)
SIZE = ProblemSize(1, 4, 70, 300)
ORDERS = (1, 2, 3)


def _run(bundle, tensors, seed):
    """(outputs, the f32 dQ workspace) with atomics applied in the order `seed` draws."""
    with PreparedRun(bundle, CpuExecutor(atomic_order="random", seed=seed), tensors) as run:
        run.launch()
        outputs = {n: np.array(a) for n, a in run.results().items()}
        workspace = np.empty(run.layouts["dq_acc"].span, np.float32)
        run.device.download(run.allocations["dq_acc"], workspace)
    return outputs, workspace


@pytest.fixture(scope="module")
def compiler():
    from fmha_mlir.compiler import Compiler

    return Compiler()


@pytest.mark.parametrize("arch", ["sm_90", "gfx942", "gfx950"])
def test_deterministic_dq_is_bitwise_under_random_atomic_order(arch, compiler):
    from fmha_mlir.api import compile_bundle

    problem = make_problem(SPEC, SIZE, seed=11)
    plain = compile_bundle(SPEC, arch, compiler, body="tiled")
    deterministic = compile_bundle(dataclasses.replace(SPEC, deterministic=True), arch, compiler, body="tiled")
    assert "atomic" not in deterministic.interp_ir and "atomic" in plain.interp_ir

    plain_runs = [_run(plain, problem.tensors, seed) for seed in ORDERS[:2]]
    assert not np.array_equal(plain_runs[0][1].view(np.uint32), plain_runs[1][1].view(np.uint32)), \
        "the interpreter's random atomic order must be able to show a difference"
    runs = [_run(deterministic, problem.tensors, seed) for seed in ORDERS]
    for outputs, workspace in runs[1:]:
        assert np.array_equal(workspace.view(np.uint32), runs[0][1].view(np.uint32))
        for name in ("dq", "dk", "dv"):
            assert np.array_equal(outputs[name].view(np.uint16), runs[0][0][name].view(np.uint16)), name
    checks = problem.check(runs[0][0], deterministic.numerics)
    assert all(c.passed for c in checks), [str(c) for c in checks]
    # one partial per key block and batch
    key_blocks = -(-SIZE.seqlen_k // deterministic.config.block_n)
    assert runs[0][1].size == key_blocks * plain_runs[0][1].size


@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
@pytest.mark.parametrize("broadcast", ["batch", "heads"])
def test_deterministic_dbias_is_bitwise_and_sums_the_broadcast_dims(arch, broadcast, compiler):
    """dbias of a bias broadcast over the batch ([1, H, Sq, Sk]) or the heads ([B, 1, Sq, Sk]): stored per
    (batch, head) into a [B, Hq, Sq, Sk] workspace, the convert sums the broadcast dim in order."""
    from fmha_mlir.api import compile_bundle

    spec = dataclasses.replace(SPEC, bias="elementwise", dbias=True, deterministic=True)
    bundle = compile_bundle(spec, arch, compiler, body="tiled")
    assert "atomic" not in bundle.interp_ir
    problem = make_problem(spec, ProblemSize(2, 4, 40, 150), seed=6, broadcast=broadcast)
    runs = [_run(bundle, problem.tensors, seed)[0] for seed in ORDERS[:2]]
    for name in ("dq", "dk", "dv", "dbias"):
        assert np.array_equal(runs[0][name].view(np.uint16), runs[1][name].view(np.uint16)), name
    checks = problem.check(runs[0], bundle.numerics)
    assert [c.name for c in checks][-1] == "dbias" and all(c.passed for c in checks), [str(c) for c in checks]


@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
@pytest.mark.parametrize("mask", [Mask(), Mask("causal_top_left"), Mask("causal_bottom_right"),
                                  Mask("sliding_window", 48, 16)], ids=str)
def test_deterministic_reads_only_the_partials_written(arch, mask, compiler):
    """No dQ partial is zero-filled: without a mask every key block writes its whole partial, under one
    the convert sums only the key blocks that visit a row's query block. The runner fills workspaces with
    NaN, so a partial read but never written fails, and one written but skipped misses its keys. With 200
    queries and 330 keys (offset 130) the masks leave key blocks out of either end of the range."""
    from fmha_mlir.api import compile_bundle

    spec = dataclasses.replace(SPEC, mask=mask, deterministic=True)
    bundle = compile_bundle(spec, arch, compiler, body="tiled")
    assert not any(step["op"] == "zero" and step["buffer"] == "dq_acc" for step in bundle.steps)
    problem = make_problem(spec, ProblemSize(1, 2, 200, 330), seed=2)
    outputs, _ = _run(bundle, problem.tensors, 1)
    checks = problem.check(outputs, bundle.numerics)
    assert all(c.passed for c in checks), [str(c) for c in checks]


@pytest.mark.parametrize("fields,message", [
    (dict(dtype="f32"), "the warp body sums dK and dV over query rows by f32 atomics"),
    (dict(bias="alibi", alibi_slopes=True, dbias=True), "d\\(slopes\\) is still summed by f32 atomics"),
])
def test_deterministic_refuses_what_still_adds_by_atomics(fields, message):
    from fmha_mlir.bodies import choose_config
    from fmha_mlir.target import get_target

    spec = dataclasses.replace(SPEC, deterministic=True, **fields)
    with pytest.raises(SpecError, match=message):
        spec.check() if spec.reasons() else choose_config(spec, get_target("sm_90"), "auto")


def test_deterministic_through_the_api_and_the_main_job(capsys):
    """deterministic=True reaches the bundle (its kernels and its plan), and the main job's flag too."""
    from fmha_mlir import AttentionBackward
    from fmha_mlir.tools import main_job

    spec = dataclasses.replace(SPEC, deterministic=True)
    problem = make_problem(spec, ProblemSize(1, 4, 13, 150), seed=4)
    t = problem.tensors
    bwd = AttentionBackward(executor="cpu", arch="gfx942")
    grads = bwd(t["q"], t["k"], t["v"], t["o"], t["do"], t["lse"], mask=spec.mask, dtype="bf16", deterministic=True)
    bundle = bwd.bundle(spec)
    assert bundle.spec.deterministic and "atomic" not in bundle.interp_ir
    assert all(c.passed for c in problem.check(dict(zip(("dq", "dk", "dv"), grads)), bundle.numerics))
    common = ["--target", "sm_90", "--executor", "cpu", "--dtype", "bf16", "--seqlen-k", "300"]
    assert main_job.main(common + ["--deterministic"]) == 0
    out, err = capsys.readouterr()
    assert "deterministic |" in out and "_det on cpu" in err   # the deterministic plan ran
    assert main_job.main(common) == 0
    plain_err = capsys.readouterr().err

    def workspace_mib(text):
        return float(text.split("(workspaces ")[1].split(" MiB")[0])

    # 300 keys are 3 key blocks at block_n 128: dQ's workspace holds 3 partials
    assert workspace_mib(err) > 2 * workspace_mib(plain_err)
    assert main_job.main(["--target", "sm_90", "--executor", "cpu", "--dtype", "f32", "--deterministic"]) == 2
