"""The real kernels: the compiler's "kernel" stage (generic text, as bundles carry it) and its "gpu"
stage (target-neutral fmha kernel ops) run by the interpreter step by step from the launch plan,
judged against the float64 oracle."""
import numpy as np
import pytest

from fmha_mlir import oracle
from fmha_mlir.compiler import compile_spec
from fmha_mlir.dtypes import STORAGE, from_storage, to_storage
from fmha_mlir.runtime.interp import Interpreter
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.tolerance import check_gradients

from interp_support import generic

OUTPUT_LIKE = {"dq": "q", "dk": "k", "dv": "v"}


def run_launch_plan(compiled, ir_text: str, tensors: dict, atomic_order: str = "sequential") -> dict:
    """Allocate outputs and workspaces as the manifest says, then zero / launch step by step."""
    manifest = compiled.manifest
    buffers = dict(tensors)
    for name, info in manifest["buffers"].items():
        if name not in buffers:
            like = buffers[info.get("like") or OUTPUT_LIKE[name]]
            buffers[name] = np.zeros(like.shape, STORAGE[info["dtype"]])
    interp = Interpreter(ir_text, compiled.target.wave_size, atomic_order=atomic_order, seed=1)
    for step in manifest["steps"]:
        if step["op"] == "zero":
            buffers[step["buffer"]][...] = 0
            continue
        assert step["op"] == "launch", step
        grid = tuple(buffers[g["buffer"]].shape[g["dim"]] for g in step["grid"])
        interp.run_kernel(step["kernel"], [buffers[a] for a in step["args"]], grid, tuple(step["block"]))
    return buffers


def bshd_view(x):
    """[B, H, S, D] values stored as [B, S, H, D]: the kernels must honour the strides."""
    return np.ascontiguousarray(np.swapaxes(x, 1, 2)).swapaxes(1, 2)


@pytest.mark.parametrize("arch,dtype,mask,gqa,atomic_order,stage", [
    ("gfx942", "f16", "bottom_right", 2, "sequential", "kernel"),
    ("sm_90", "bf16", "window:5,3", 1, "random", "kernel"),
    ("gfx950", "f32", "top_left", 1, "random", "kernel"),
    ("sm_90", "f16", "window:5,3", 2, "sequential", "gpu"),
])
def test_compiled_kernels_match_the_oracle(arch, dtype, mask, gqa, atomic_order, stage):
    spec = AttentionBwdSpec(dtype=dtype, hdim_q=64, gqa_ratio=gqa, mask=Mask.parse(mask))
    compiled = compile_spec(spec, arch)
    ir_text = compiled.interp_ir if stage == "kernel" else generic(compiled.stages[stage])
    batch, heads_kv, seqlen_q, seqlen_k, hdim = 1, 2, 24, 40, 64
    rng = np.random.default_rng(7)
    shapes = {"q": (batch, heads_kv * gqa, seqlen_q, hdim), "k": (batch, heads_kv, seqlen_k, hdim),
              "v": (batch, heads_kv, seqlen_k, hdim), "do": (batch, heads_kv * gqa, seqlen_q, hdim)}
    values = {n: from_storage(to_storage(rng.standard_normal(s), dtype), dtype).astype(np.float64)
              for n, s in shapes.items()}
    args = dict(mask=spec.mask, scale=spec.scale, gqa_ratio=gqa)
    forward = oracle.forward(values["q"], values["k"], values["v"], **args)
    values["o"] = from_storage(to_storage(forward.o, dtype), dtype).astype(np.float64)
    tensors = {n: bshd_view(to_storage(x, dtype)) for n, x in values.items()}
    tensors["lse"] = forward.lse.astype(np.float32)

    out = run_launch_plan(compiled, ir_text, tensors, atomic_order)

    grads = (values["q"], values["k"], values["v"], values["o"], values["do"], forward.lse)
    exact = oracle.backward(*grads, **args)
    lowp = oracle.lowp_backward(*grads, dtype=dtype, **args)
    checks = check_gradients({n: out[n] for n in ("dq", "dk", "dv")}, exact, lowp, dtype, hdim)
    assert all(c.passed for c in checks), "\n".join(map(str, checks))
    assert np.abs(exact.dq).max() > 0.1  # a real problem, not all-masked zeros
