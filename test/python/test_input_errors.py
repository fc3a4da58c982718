"""Bad input gets a clear error naming what is wrong and how to fix it; valid input is not refused.
One test per class of bad input, each with the exact message (fmha-opt's classes are in
test_fmha_opt.py, the AMD head dims that aborted LLVM in test_interp_matrix.py)."""
import numpy as np
import pytest

from fmha_mlir.api import attention_bwd
from fmha_mlir.errors import EXIT_ERROR, SpecError
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.spec import AttentionBwdSpec
from fmha_mlir.tools import main_job

Q = np.zeros((1, 2, 5, 64), np.float16)
LSE = np.zeros((1, 2, 5), np.float32)
MASK_FIX = "(use none, top_left, bottom_right or window:LEFT,RIGHT)"


def _reason(call) -> str:
    with pytest.raises(SpecError) as caught:
        call()
    return str(caught.value).splitlines()[-1].strip()


@pytest.mark.parametrize("mask,message", [
    (None, f"- mask: must be a mask name or a Mask (got NoneType None) {MASK_FIX}"),
    (123, f"- mask: must be a mask name or a Mask (got int 123) {MASK_FIX}"),
    (["none"], f"- mask: must be a mask name or a Mask (got list ['none']) {MASK_FIX}"),
    ("windowfoo:3,4", f"- mask: unknown mask 'windowfoo:3,4' {MASK_FIX}"),
    ("window", f"- mask: unknown mask 'window' {MASK_FIX}"),
])
def test_a_mask_that_is_not_one_is_named(mask, message):
    assert _reason(lambda: attention_bwd(Q, Q, Q, Q, Q, LSE, mask=mask)) == message


@pytest.mark.parametrize("position,value,message", [
    (0, np.float16(1), "- q: has shape (); it must be [batch, heads, seq, dim]"),
    (0, [[1.0]], "- q: must be a NumPy array or a torch tensor (got list) (pass np.asarray(...) of the right dtype)"),
    (5, np.float32(0), "- lse: has shape (); it must be [batch, heads, seq]"),
    (2, Q[0], "- v: has shape (2, 5, 64); it must be [batch, heads, seq, dim]"),
])
def test_an_input_of_the_wrong_kind_or_rank_is_named(position, value, message):
    args = [Q, Q, Q, Q, Q, LSE]
    args[position] = value
    assert _reason(lambda: attention_bwd(*args)) == message


def test_numpy_scalars_are_valid_scales_and_caps():
    spec = AttentionBwdSpec("f16", 64, scale=np.float32(0.125), softcap=np.float64(30))
    assert spec.reasons() == [] and type(spec.scale) is float and spec.kernel_prefix.endswith("_cap30")
    assert spec == AttentionBwdSpec("f16", 64, softcap=30.0)   # 0.125 is hdim 64's default scale


def test_scales_that_compile_to_different_f32_values_get_different_symbols():
    """Scales are compiled in as f32: two that differ there must not share a kernel symbol (they did at
    6 digits), two that round to one f32 value may."""
    a, b = (AttentionBwdSpec("f16", 64, scale=s).kernel_prefix for s in (0.1234567, 0.1234568))
    assert a != b and a.endswith("_s0p1234567")
    near_default = AttentionBwdSpec("f16", 64, scale=0.125 * (1 + 3e-7)).kernel_prefix
    assert near_default != AttentionBwdSpec("f16", 64).kernel_prefix
    near_enough = AttentionBwdSpec("f16", 64, scale=0.125 * (1 + 1e-9)).kernel_prefix
    assert near_enough == AttentionBwdSpec("f16", 64).kernel_prefix


def test_head_dim_0_is_named_once_not_as_a_bad_scale_too():
    q = np.zeros((1, 1, 4, 0), np.float16)
    with pytest.raises(SpecError) as caught:
        attention_bwd(q, q, q, q, q, np.zeros((1, 1, 4), np.float32), executor="cpu")
    assert [r.field for r in caught.value.reasons] == ["hdim_q", "hdim_v"]


def test_a_problem_too_large_for_the_oracle_is_refused_before_allocating():
    assert _reason(lambda: make_problem(AttentionBwdSpec("f16", 64), ProblemSize(2, 4, 10**9, 53))) == (
        "- size: B2 Hq4 Sq1000000000 Sk53: the float64 oracle would hold ~25272 GiB of score matrices (the limit "
        "is 16 GiB) (use smaller sizes (a problem is checked against a float64 oracle on the host))")


@pytest.mark.parametrize("argv,message", [
    (["--seqlen-q", "1000000000"], "the float64 oracle would hold ~25272 GiB of score matrices"),
    (["--seed", "-1"], "- seed: must be an integer >= 0 (got -1)"),
    (["--mask", "windowfoo:3,4"], "- mask: unknown mask 'windowfoo:3,4'"),
    (["--gqa", "0"], "- gqa_ratio: must be a positive integer (got 0)"),
    (["--gqa", "0", "--varlen", "3,4"], "- gqa_ratio: must be a positive integer (got 0)"),
])
def test_fmha_bwd_reports_bad_arguments_with_exit_status_2(capsys, argv, message):
    assert main_job.main(["--target", "sm_90", *argv]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("fmha-bwd: error: ") and message in err and "Traceback" not in err


def _fmha_compile(*argv, stdin: bytes = b""):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "fmha_mlir.tools.fmha_compile", *argv], input=stdin,
                          capture_output=True, text=False)


def test_fmha_compile_survives_an_mlir_crash_on_its_input(tmp_path):
    """A restart from arbitrary IR compiles in a child process: a stack overflow in MLIR's parser is an
    error with the command that reproduces it, not the death of fmha-compile."""
    source = tmp_path / "deep.mlir"
    source.write_text("scf.execute_region {" * 10000 + "}" * 10000)
    done = _fmha_compile(str(source), "--from-stage", "fmha", "--target", "gfx942", "--emit", "isa")
    assert done.returncode == EXIT_ERROR
    assert done.stderr.decode().strip().endswith(
        f"fmha-compile: error: MLIR crashed compiling {source} (SIGSEGV); reproduce with: fmha-compile --in-process "
        f"{source} --from-stage fmha --target gfx942 --emit isa")


def test_fmha_compile_refuses_binary_input():
    done = _fmha_compile("-", "--from-stage", "kernel", "--target", "gfx942", "--emit", "isa", stdin=b"\xf6\x00")
    assert done.returncode == 2 and done.stderr.decode().startswith("fmha-compile: -: not MLIR text ('utf-8' codec")


def test_a_stage_lowered_for_one_vendor_is_not_restarted_for_the_other(tmp_path):
    """sm_90's kernel stage holds nvgpu / nvvm ops; restarted for gfx942, LLVM used to abort selecting
    them ("Cannot select: intrinsic llvm.nvvm..."): the compiler names the op and the fix first."""
    from fmha_mlir.compiler import Compiler
    from fmha_mlir.errors import CompileError

    kernel_stage = Compiler().compile_spec(AttentionBwdSpec("f16", 64), "sm_90", tmp_path).stages["kernel"]
    with pytest.raises(CompileError) as caught:
        Compiler().compile_module(kernel_stage, "kernel", "gfx942", source_name="k.mlir")
    text = str(caught.value)
    assert "the input was lowered for another chip than gfx942" in text
    assert "is another vendor's op: this input was lowered for the other vendor's chips; restart it with a " \
           "matching --target or from a stage before the kernel stage" in text


def test_a_grid_beyond_the_hardware_limit_is_refused_before_the_launch():
    """batch > 65535 puts more than 65535 work-groups on sm_90's grid z: the driver would fail
    with an opaque status. The runner refuses it with the limit and the way out."""
    from fmha_mlir.api import compile_bundle
    from fmha_mlir.errors import RuntimeLaunchError
    from fmha_mlir.runtime.cpu_executor import CpuExecutor
    from fmha_mlir.runtime.runner import run_bundle

    spec = AttentionBwdSpec("f16", 32)
    bundle = compile_bundle(spec, "sm_90", body="warp")
    x = np.zeros((65536, 1, 1, 32), np.float16)
    tensors = {"q": x, "k": x, "v": x, "o": x, "do": x, "lse": np.zeros((65536, 1, 1), np.float32)}
    with pytest.raises(RuntimeLaunchError) as caught:
        run_bundle(bundle, CpuExecutor(), tensors)
    assert "grid dimension z needs 65536 work-groups; sm_90 launches at most 65535" in str(caught.value)
    assert str(caught.value).endswith("split the problem into several calls, e.g. by batch (grid z) or heads (grid y)")


STATIC_PROBLEM = """func.func @static(%q: memref<1x4x8x64xf16>, %k: memref<1x2x5x64xf16>, %v: memref<1x2x5x64xf16>,
    %o: memref<1x4x8x64xf16>, %do: memref<1x4x8x64xf16>, %l: memref<1x4x8xf32>, %dq: memref<1x4x8x64xf16>,
    %dk: memref<1x2x5x64xf16>, %dv: memref<1x2x5x64xf16>) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %l, %dq, %dk, %dv) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64,
      gqa_ratio = 2 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false}
      : (memref<1x4x8x64xf16>, memref<1x2x5x64xf16>, memref<1x2x5x64xf16>, memref<1x4x8x64xf16>,
         memref<1x4x8x64xf16>, memref<1x4x8xf32>, memref<1x4x8x64xf16>, memref<1x2x5x64xf16>,
         memref<1x2x5x64xf16>) -> ()
  return
}
"""


def test_a_hand_written_static_problem_compiles_to_a_bundle_that_passes_the_gate():
    """A level-1 function with static shapes and no fmha.operand names is not refused at the launch plan:
    its arguments are named after the problem op's operands they are."""
    from fmha_mlir.compiler import Compiler
    from fmha_mlir.runtime.bundle import Bundle
    from fmha_mlir.runtime.cpu_executor import CpuExecutor
    from fmha_mlir.runtime.runner import run_bundle

    result = Compiler().compile_module(STATIC_PROBLEM, "fmha", "sm_90", source_name="static.mlir")
    bundle = Bundle(result.manifest, result.bundle_files())
    problem = make_problem(bundle.spec, ProblemSize(1, 4, 8, 5), seed=1)
    checks = problem.check(run_bundle(bundle, CpuExecutor(), problem.tensors), bundle.numerics)
    assert bundle.spec.gqa_ratio == 2 and all(c.passed for c in checks), [str(c) for c in checks]


# -- one exit status per kind of outcome, the same in every tool (fmha_mlir/errors.py) -------------------

def _tool(module: str, *argv: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", f"fmha_mlir.tools.{module}", *argv], capture_output=True, text=True)


@pytest.mark.parametrize("module,argv,message", [
    ("fmha_opt", ["no-such-file.mlir"], "fmha-opt: error: cannot read no-such-file.mlir: No such file or directory"),
    ("fmha_opt", ["-", "--pass-pipeline=builtin.module(no-such-pass)"], "fmha-opt: error: invalid --pass-pipeline"),
    ("fmha_compile", ["--dtype", "f16", "--hdim", "100", "--emit", "isa"],
     "hdim_q: 100 is not supported by the warp body on gfx942 (wave size 64) (use a multiple of 64 from 64 to 512)"),
    ("fmha_compile", ["-", "--from-stage", "gpu", "--emit", "isa"],   # a compile failure, once status 1
     "fmha-compile: [kernel] the kernel stage has 0 gpu.module ops; the bundle needs exactly one"),
    ("main_job", ["--target", "sm_91"],
     "- target: unknown target 'sm_91' (use gfx942, gfx950, sm_90, sm_90a, all or auto)"),
    ("main_job", ["--bundle-dir", "no-such-dir"],
     "argument --bundle-dir: 'no-such-dir' is not a folder: give the -o DIR of fmha-compile runs"),
])
def test_every_tool_exits_2_on_an_error_with_the_problem_and_the_fix(module, argv, message):
    """Bad input or usage is status 2 in each tool, as argparse's own errors (status 1 is kept for
    fmha-bwd's FAIL verdict, test_api.py); the message says what is wrong."""
    done = _tool(module, *argv)
    status, stderr = done.returncode, done.stderr
    assert status == EXIT_ERROR, stderr
    assert message in stderr and "Traceback" not in stderr, stderr


@pytest.mark.parametrize("module,fail", [("fmha_opt", ""), ("fmha_compile", ""),
                                         ("main_job", "1 a gradient failed the gate")])
def test_every_tool_documents_its_exit_statuses_in_its_help(module, fail):
    done = _tool(module, "--help")
    text = " ".join(done.stdout.split())
    assert done.returncode == 0 and "Exit status: 0 success" in text and "2 an error" in text
    assert (fail in text) if fail else ", 1 " not in text
