"""Tensors already in GPU memory (DeviceArray): validated like host arrays, used in place, never copied.

The launches themselves need a GPU (test_gpu_executors / tools/bench_bwd.py run them on the H200); here:
the checks that keep a run from touching memory it must not.
"""
from __future__ import annotations

import numpy as np
import pytest

from fmha_mlir.api import compile_bundle
from fmha_mlir.errors import RuntimeLaunchError
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.runtime.cpu_executor import CpuExecutor
from fmha_mlir.runtime.device_array import DeviceArray
from fmha_mlir.runtime.runner import run_bundle
from fmha_mlir.spec import AttentionBwdSpec

SPEC = AttentionBwdSpec(dtype="f16", hdim_q=128)
SHAPES = {"q": (1, 2, 3, 128), "k": (1, 2, 5, 128), "v": (1, 2, 5, 128), "o": (1, 2, 3, 128),
          "do": (1, 2, 3, 128), "lse": (1, 2, 3), "dq": (1, 2, 3, 128), "dk": (1, 2, 5, 128), "dv": (1, 2, 5, 128)}


@pytest.fixture(scope="module")
def bundle():
    return compile_bundle(SPEC, "sm_90")


def device_tensors(**overrides) -> dict:
    """Contiguous fake GPU tensors at well-separated, aligned addresses."""
    out = {}
    for index, (name, shape) in enumerate(SHAPES.items()):
        dtype = np.dtype(np.float32 if name == "lse" else np.float16)
        strides = tuple(int(s) * dtype.itemsize for s in np.cumprod((1,) + shape[:0:-1])[::-1])
        out[name] = DeviceArray(0x10_0000_0000 + index * 0x100_0000, shape, strides, dtype)
    out.update(overrides)
    return out


def test_span_and_density():
    dense = device_tensors()["q"]
    assert dense.dense and dense.span_bytes == 2 * 3 * 128 * 2
    gappy = DeviceArray(0, (2, 3, 128), (2 * 512, 2 * 256, 2), np.dtype(np.float16))  # rows 256 apart, 128 used
    assert not gappy.dense and gappy.span_bytes == 2 * (1 + 512 + 2 * 256 + 127)


def test_host_and_device_tensors_do_not_mix(bundle):
    tensors = device_tensors()
    tensors["q"] = make_problem(SPEC, ProblemSize(1, 2, 3, 5)).tensors["q"]
    with pytest.raises(RuntimeLaunchError, match=r"live in GPU memory but \['q'\] do not"):
        run_bundle(bundle, CpuExecutor(), tensors)


def test_device_outputs_must_be_given(bundle):
    tensors = device_tensors()
    del tensors["dk"]
    with pytest.raises(RuntimeLaunchError, match="pass every input and the dq, dk, dv outputs on the GPU"):
        run_bundle(bundle, CpuExecutor(), tensors)


def test_a_device_output_with_gaps_is_refused(bundle):
    base = device_tensors()["dv"]
    gappy = DeviceArray(base.address, base.shape, (base.strides[0] * 2, base.strides[1] * 2, base.strides[2] * 2, 2),
                        base.dtype)
    with pytest.raises(RuntimeLaunchError, match="output 'dv' on the GPU has gaps"):
        run_bundle(bundle, CpuExecutor(), device_tensors(dv=gappy))


def test_device_outputs_that_overlap_are_refused(bundle):
    tensors = device_tensors()
    with pytest.raises(RuntimeLaunchError, match="outputs 'dk' and 'dv' share GPU memory"):
        run_bundle(bundle, CpuExecutor(), device_tensors(dv=DeviceArray(
            tensors["dk"].address + 256, tensors["dv"].shape, tensors["dv"].strides, tensors["dv"].dtype)))


def test_a_misaligned_start_is_refused(bundle):
    q = device_tensors()["q"]
    with pytest.raises(RuntimeLaunchError, match="tensor 'q' starts at GPU address .* not aligned to the 16-byte"):
        run_bundle(bundle, CpuExecutor(), device_tensors(q=DeviceArray(q.address + 2, q.shape, q.strides, q.dtype)))


def test_the_cpu_executor_cannot_borrow_gpu_memory(bundle):
    with pytest.raises(RuntimeLaunchError, match="the cpu executor cannot use tensors that live in GPU memory"):
        run_bundle(bundle, CpuExecutor(), device_tensors())
