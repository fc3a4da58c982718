"""The HIP executor packs the tiled body's launch plan as the code object expects, without an AMD GPU.

hip-python is replaced by a recorder (device memory is host memory here, kernels do nothing): the
runner walks the plan, the executor checks every launch's kernarg blob against the code object's own
metadata (offsets, sizes, kinds, segment size) before "launching", and the recorder keeps what
hipModuleLaunchKernel was given. The test then compares that with the launch plan: the dynamic LDS
size, grid and block of each kernel, and that it fits the chip with the code object's static LDS.
"""
from __future__ import annotations

import ctypes
import sys
import types

import numpy as np
import pytest

from fmha_mlir.api import compile_bundle
from fmha_mlir.bodies import AMD_TILED_TABLE
from fmha_mlir.compiler import Compiler
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.runtime.hip_executor import HipExecutor, code_object_kernels
from fmha_mlir.runtime.runner import run_bundle
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import get_target


class RecordingHip:
    """The hip-python calls HipExecutor makes, each returning (hipSuccess, value)."""

    class hipMemcpyKind:
        hipMemcpyHostToDevice, hipMemcpyDeviceToHost = 1, 2

    def __init__(self, arch: str):
        self.arch, self.launches, self.buffers = arch, [], {}

    def hipSetDevice(self, index):
        return (0,)

    def hipDeviceProp_t(self):
        return types.SimpleNamespace(gcnArchName=f"{self.arch}:sramecc+:xnack-".encode() + b"\0")

    def hipGetDeviceProperties(self, props, index):
        return (0,)

    def hipModuleLoadData(self, binary):
        return 0, "module"

    def hipModuleGetFunction(self, module, name):
        return 0, name.decode()

    def hipModuleUnload(self, module):
        return (0,)

    def hipMalloc(self, nbytes):
        buffer = ctypes.create_string_buffer(nbytes)
        self.buffers[ctypes.addressof(buffer)] = buffer
        return 0, ctypes.addressof(buffer)

    def hipMemcpy(self, dst, src, nbytes, kind):
        ctypes.memmove(dst, src, nbytes)
        return (0,)

    def hipMemsetAsync(self, pointer, value, nbytes, stream):
        ctypes.memset(pointer, value, nbytes)
        return (0,)

    def hipFree(self, pointer):
        self.buffers.pop(int(pointer))
        return (0,)

    def hipDeviceSynchronize(self):
        return (0,)

    def hipModuleLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params, extra):
        self.launches.append({"kernel": function, "grid": [gx, gy, gz], "block": [bx, by, bz],
                              "shared_bytes": shared_bytes})
        return (0,)


@pytest.fixture
def recording_hip(monkeypatch):
    def install(arch: str) -> RecordingHip:
        hip = RecordingHip(arch)
        package = types.ModuleType("hip")
        package.hip = hip
        monkeypatch.setitem(sys.modules, "hip", package)
        return hip
    return install


@pytest.mark.parametrize("arch,hdim", [(arch, h) for arch, rows in AMD_TILED_TABLE.items() for h in rows])
def test_the_hip_executor_launches_the_tiled_plan_as_the_code_object_expects(recording_hip, arch, hdim):
    spec = AttentionBwdSpec("bf16", hdim, gqa_ratio=2, mask=Mask("causal_bottom_right"))
    bundle = compile_bundle(spec, arch, Compiler())
    assert bundle.config == AMD_TILED_TABLE[arch][hdim]
    hip = recording_hip(arch)
    problem = make_problem(spec, ProblemSize(2, 4, 100, 130), seed=0)
    run_bundle(bundle, HipExecutor(), {n: problem.tensors[n] for n in ("q", "k", "v", "o", "do", "lse")})
    metadata = code_object_kernels(bundle)
    launched = [s for s in bundle.manifest["steps"] if s["op"] == "launch"]
    assert [call["kernel"] for call in hip.launches] == [s["kernel"] for s in launched]
    for launch in hip.launches:
        kernel = launch["kernel"]
        planned = next(s for s in launched if s["kernel"] == kernel)
        assert launch["block"] == planned["block"] == [metadata[kernel]["max_flat_workgroup_size"], 1, 1]
        assert launch["shared_bytes"] == planned.get("shared_bytes", 0)
        assert (metadata[kernel]["group_segment_fixed_size"] + launch["shared_bytes"]
                <= get_target(arch).max_shared_bytes)
    main = next(call for call in hip.launches if call["kernel"].endswith("dq_dk_dv"))
    config = bundle.config
    assert main["shared_bytes"] > 0 and main["block"][0] == config.threads
    # keys_outer: (kv heads, batch, key blocks)
    assert main["grid"] == [4 // 2, 2, int(np.ceil(130 / config.block_n))]
