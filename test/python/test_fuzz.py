"""Property-based tests, bounded for CI and derandomized (the same examples every run):

- random specs, valid or not: validation answers with reasons or a config, never another exception,
  and never needs MLIR to do it;
- random valid specs at small shapes: compiled, run in the interpreter, and passed by the gate;
- random mutations of the lit inputs through fmha-opt: a clean error or success, never a traceback or
  a signal (fmha-opt turns MLIR's own crashes into located errors).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fmha_mlir.bodies import choose_config
from fmha_mlir.errors import SpecError
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import TARGETS, get_target
from fmha_mlir.tools.fuzz_opt import (LINE_MUTATIONS, NUMBERS, OK_STATUSES, lit_inputs, mutate_lines,
                                     pipeline_args)

ROOT = Path(__file__).resolve().parents[2]
BOUNDED = dict(derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])

anything = st.one_of(st.none(), st.booleans(), st.integers(-3, 1000), st.floats(allow_nan=True),
                     st.text(max_size=8), st.lists(st.integers(), max_size=2))
masks = st.one_of(st.builds(Mask, st.sampled_from(["none", "causal_top_left", "causal_bottom_right", "sliding_window"]),
                            st.integers(-2, 70), st.integers(-2, 70)),
                  st.builds(Mask, anything, anything, anything))


@settings(max_examples=300, **BOUNDED)
@given(dtype=st.one_of(st.sampled_from(["f16", "bf16", "f32"]), anything),
       hdim=st.one_of(st.sampled_from([32, 64, 96, 128, 256, 320]), anything),
       gqa=st.one_of(st.integers(1, 8), anything), mask=masks,
       scale=st.one_of(st.floats(0, 2), anything), softcap=st.one_of(st.floats(0, 60), anything),
       bias=st.one_of(st.sampled_from(["none", "elementwise", "alibi"]), anything), dbias=anything,
       deterministic=anything, grad_accum=st.one_of(st.sampled_from(["f32", "bf16"]), anything),
       arch=st.sampled_from(sorted(TARGETS)), body=st.sampled_from(["auto", "warp", "tiled"]))
def test_validation_answers_every_spec_with_reasons_or_a_config(dtype, hdim, gqa, mask, scale, softcap, bias, dbias,
                                                                 deterministic, grad_accum, arch, body):
    try:
        spec = AttentionBwdSpec(dtype=dtype, hdim_q=hdim, gqa_ratio=gqa, mask=mask, scale=scale, softcap=softcap,
                                bias=bias, dbias=dbias, deterministic=deterministic, grad_accum=grad_accum)
    except SpecError:
        return
    reasons = spec.reasons()
    try:
        config = choose_config(spec, get_target(arch), body)
    except SpecError as exc:
        assert exc.reasons and all(r.field and r.message for r in exc.reasons)
        return
    assert not reasons and config.body in ("warp", "tiled")


@settings(max_examples=12, **BOUNDED)
@given(text=st.text(alphabet="window:sliding_topbrigh,0123456789- ", max_size=24))
def test_any_mask_text_parses_or_is_refused_with_a_reason(text):
    try:
        mask = Mask.parse(text)
    except SpecError as exc:
        assert exc.reasons[0].field == "mask"
        return
    assert not mask.reasons()


@pytest.fixture(scope="module")
def compiler():
    from fmha_mlir.compiler import Compiler

    return Compiler()


@settings(max_examples=8, **BOUNDED)
@given(data=st.data())
def test_random_valid_specs_pass_the_gate_in_the_interpreter(compiler, data):
    from fmha_mlir.api import compile_bundle
    from fmha_mlir.problem import ProblemSize, make_problem
    from fmha_mlir.runtime.cpu_executor import CpuExecutor
    from fmha_mlir.runtime.runner import run_bundle

    arch = data.draw(st.sampled_from(sorted(TARGETS)), "arch")
    body = data.draw(st.sampled_from(["warp", "tiled"]), "body")
    dtype = data.draw(st.sampled_from(["f16", "bf16"] if body == "tiled" else ["f16", "bf16", "f32"]), "dtype")
    wave = get_target(arch).wave_size
    hdim = data.draw(st.sampled_from([wave, 2 * wave]), "hdim")
    gqa = data.draw(st.sampled_from([1, 2]), "gqa")
    mask = data.draw(st.sampled_from([Mask(), Mask("causal_top_left"), Mask("causal_bottom_right"),
                                      Mask("sliding_window", 3, 1)]), "mask")
    softcap = data.draw(st.sampled_from([0.0, 3.0]), "softcap")
    bias = data.draw(st.sampled_from(["none", "alibi"]), "bias")
    spec = AttentionBwdSpec(dtype, hdim, gqa_ratio=gqa, mask=mask, softcap=softcap, bias=bias, scale=0.5)
    try:
        choose_config(spec, get_target(arch), body)
    except SpecError:
        event("refused by the body")   # not every combination exists on every body (the first test covers it)
        return
    event("compiled and run")
    size = ProblemSize(1, 2, data.draw(st.integers(1, 9), "seqlen_q"), data.draw(st.integers(1, 9), "seqlen_k"))
    problem = make_problem(spec, size, seed=data.draw(st.integers(0, 99), "seed"))
    bundle = compile_bundle(spec, arch, compiler, body=body)
    grads = run_bundle(bundle, CpuExecutor(atomic_order="random"), problem.tensors)
    checks = problem.check(grads, bundle.numerics)
    assert all(c.passed for c in checks), [str(c) for c in checks]


LIT_INPUTS = lit_inputs(ROOT)


@settings(max_examples=16, **BOUNDED)
@given(source=st.sampled_from(LIT_INPUTS), how=st.sampled_from(LINE_MUTATIONS),
       at=st.integers(0, 10**6), value=st.sampled_from(NUMBERS))
def test_mutated_lit_inputs_get_an_error_or_a_result_never_a_crash(tmp_path_factory, source, how, at, value):
    text = source.read_text()
    mutated = "\n".join(mutate_lines(text.splitlines(), how, at, value)) + "\n"
    path = tmp_path_factory.mktemp("fuzz") / source.name
    path.write_text(mutated)
    done = subprocess.run([sys.executable, "-m", "fmha_mlir.tools.fmha_opt", str(path), "--split-input-file",
                           *pipeline_args(text)], capture_output=True, text=True, timeout=300)
    assert done.returncode in OK_STATUSES, (how, at, value, done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0 or "error" in done.stderr
