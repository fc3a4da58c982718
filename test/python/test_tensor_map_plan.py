"""Tensor maps through the kernel ABI end to end, without a GPU: the launch plan reads a host
nvgpu.tma.create.descriptor as {"tensor_map": buffer, "box", "swizzle"}, the manifest validates it, the
runner binds a TensorMapArg from the call's buffers, and a bound plan's packed fast path re-encodes a map
(through the executor, cached per address) only when its buffer moves, with no device sync."""
from __future__ import annotations

import dataclasses
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fmha_mlir.errors import CompileError, RuntimeLaunchError  # noqa: E402
from fmha_mlir.runtime.args import DeviceBuffer, TensorMapArg, pointer_fields, tensor_map_fields  # noqa: E402
from fmha_mlir.runtime.bound_plan import BoundPlan  # noqa: E402
from fmha_mlir.runtime.runner import Layout, run_bundle  # noqa: E402
from fmha_mlir.runtime.tensor_maps import TensorMapCache  # noqa: E402
from test_runtime import (CachingAllocator, ResidentKernels, _resident_problem, attention_bundle,  # noqa: E402
                          attention_manifest, expected_gradients, problem_tensors)

DESCRIPTOR = ("!nvgpu.tensormap.descriptor<tensor = memref<{box}xf32, 3>, swizzle = {swizzle}, l2promo = none, "
              "oob = {oob}, interleave = none>")
_HOST = """
module attributes {{gpu.container_module}} {{
  func.func @host(%o: memref<?x?x?x32xf32> {{fmha.operand = "o"}}, %do: memref<?x?x?x32xf32> {{fmha.operand = "do"}}) {{
    %c1 = arith.constant 1 : index
    %c32 = arith.constant 32 : index
    %c64 = arith.constant 64 : index
    %u = memref.cast %do : memref<?x?x?x32xf32> to memref<*xf32>
    %map = nvgpu.tma.create.descriptor %u box[%c1, %c1, {rows}, %c32] : memref<*xf32> -> {descriptor}
    %p = builtin.unrealized_conversion_cast %map : {descriptor} to !llvm.ptr
    gpu.launch_func @fmha_kernels::@k blocks in (%c1, %c1, %c1) threads in (%c64, %c1, %c1)
        args(%o : memref<?x?x?x32xf32>, %p : !llvm.ptr) {{fmha.access = ["read", "read"]}}
    return
  }}
  gpu.module @fmha_kernels {{
    gpu.func @k(%o: memref<?x?x?x32xf32>, %map: !llvm.ptr) kernel {{
      gpu.return
    }}
  }}
}}
"""


def _plan(rows: str = "%c64", box: str = "1x1x64x32", swizzle: str = "swizzle_128b", oob: str = "zero") -> dict:
    from fmha_mlir.launch_plan import read_launch_plan
    from fmha_mlir.mlir import make_context, parse_module

    text = _HOST.format(rows=rows, descriptor=DESCRIPTOR.format(box=box, swizzle=swizzle, oob=oob))
    module = parse_module(text, make_context(), "<host>")
    with module.context:
        return read_launch_plan(module.operation, "<host>")


def test_the_plan_reads_a_host_tensor_map_as_buffer_box_and_swizzle():
    plan = _plan()
    assert plan["steps"][0]["args"] == [{"buffer": "o"}, {"tensor_map": "do", "box": [1, 1, 64, 32], "swizzle": 128}]
    assert plan["kernels"]["k"]["args"][1] == {"tensor_map": "do", "box": [1, 1, 64, 32], "swizzle": 128, "rank": 4,
                                               "dtype": "f32", "type": "!llvm.ptr", "access": "read"}
    assert _plan(swizzle="none")["steps"][0]["args"][1]["swizzle"] == 0


@pytest.mark.parametrize("change,message", [
    (dict(oob="nan"), "cannot be encoded: .* zero-filled out of bounds"),
    (dict(rows="%c32"), r"box \[1, 1, 32, 32\] and type .* must be the type's tensor shape"),
])
def test_a_tensor_map_the_runtime_cannot_encode_is_a_plan_error(change, message):
    with pytest.raises(CompileError, match=message) as caught:
        _plan(**change)
    assert caught.value.stage == "plan"


# -- the runtime: dq_dk_dv takes q as a tensor map ----------------------------------------------------

BOX = [1, 1, 4, 64]


def tensor_map_manifest() -> dict:
    manifest = attention_manifest()
    step = manifest["steps"][3]
    step["args"][0] = {"tensor_map": "q", "box": BOX, "swizzle": 128}
    manifest["kernels"][step["kernel"]]["args"][0] = {**step["args"][0], "rank": 4, "dtype": "f16",
                                                      "type": "!llvm.ptr", "access": "read"}
    return manifest


def fake_encoding(arg: TensorMapArg, address: int) -> bytes:
    """128 bytes naming the address and the geometry, as a stand-in for cuTensorMapEncodeTiled."""
    return struct.pack("<Qq", address, hash(arg.geometry)) + bytes(112)


class MapKernels(ResidentKernels):
    """ResidentKernels whose launches find each tensor map's buffer by the address its bytes encode, as
    the GPU would; encodings go through a TensorMapCache over the stand-in driver call."""

    def __init__(self):
        super().__init__()
        self.encoded = []
        self.cache = TensorMapCache(lambda e: self.encoded.append(e.address) or e)

    def encode_tensor_map(self, arg, address):
        self.cache.get(arg, address)
        return fake_encoding(arg, address)

    def launch(self, kernel, grid, block, args, shared_bytes=0):
        args = [a.buffer if isinstance(a, TensorMapArg) else a for a in args]
        super().launch(kernel, grid, block, args, shared_bytes)

    def packed_launcher(self, kernel, grid, block, packed, blob, shared_bytes=0):
        def run(stream):
            addresses = {name: int(blob[o:o + 8].view(np.uint64)[0]) for o, name in pointer_fields(packed)}
            args = [dataclasses.replace(a, address=addresses[a.name]) if isinstance(a, DeviceBuffer) else a
                    for a in packed.args]
            maps = [i for i, a in enumerate(args) if isinstance(a, TensorMapArg)]
            for i, (offset, arg) in zip(maps, tensor_map_fields(packed)):
                address = int(blob[offset:offset + 8].view(np.uint64)[0])
                assert bytes(blob[offset:offset + 128]) == fake_encoding(arg, address), "a stale or foreign map"
                args[i] = dataclasses.replace(arg, buffer=dataclasses.replace(arg.buffer, address=address))
            self.prepare(kernel, grid, block, [self._on_device(a) for a in args], shared_bytes, stream)()
        return run

    def _on_device(self, arg):
        if isinstance(arg, TensorMapArg):
            return dataclasses.replace(arg, buffer=self._on_device(arg.buffer))
        if isinstance(arg, DeviceBuffer):
            layout = Layout(arg.dtype, arg.shape, arg.strides)
            return dataclasses.replace(arg, allocation=self.borrow(arg.address, layout.nbytes))
        return arg


def test_the_manifest_and_runner_take_a_tensor_map_argument():
    tensors = problem_tensors()
    device = MapKernels()
    result = run_bundle(attention_bundle(tensor_map_manifest()), device, tensors)
    for name, want in expected_gradients(tensors).items():
        np.testing.assert_array_equal(result[name], want, err_msg=name)


@pytest.mark.parametrize("edit,message", [
    (lambda m: m["steps"][3]["args"][0].update(tensor_map="nope"), "tensor map over unknown buffer 'nope'"),
    (lambda m: m["steps"][3]["args"][0].update(box=[1, 4, 64]), "needs 'box': one positive size per dimension"),
    (lambda m: m["steps"][3]["args"][0].update(swizzle=48), r"'swizzle' in \(0, 32, 64, 128\)"),
    (lambda m: m["steps"][3]["args"][0].update(box=[1, 1, 8, 64]), "passes tensor map .* for parameter"),
])
def test_a_manifest_with_a_bad_tensor_map_is_refused(edit, message):
    manifest = tensor_map_manifest()
    edit(manifest)
    with pytest.raises(RuntimeLaunchError, match=message):
        attention_bundle(manifest)


def test_a_tensor_map_tma_cannot_describe_is_refused_when_the_plan_is_bound():
    manifest = tensor_map_manifest()
    for entry in (manifest["steps"][3]["args"][0], manifest["kernels"]["k_dq_dk_dv"]["args"][0]):
        entry["box"] = [1, 1, 4, 128]   # 256 bytes wide under a 128-byte swizzle
    with pytest.raises(RuntimeLaunchError, match=r"manifest step 3 \(k_dq_dk_dv\) argument 0: .* at most 128 bytes"):
        run_bundle(attention_bundle(manifest), MapKernels(), problem_tensors())


def test_a_bound_plan_re_encodes_a_map_only_when_its_buffer_moves():
    device, bundle = MapKernels(), attention_bundle(tensor_map_manifest())
    tensors, arrays = _resident_problem(device)
    plan = BoundPlan(bundle, device, arrays)
    plan.run(arrays, CachingAllocator(device), stream=5)
    plan.run(arrays, CachingAllocator(device), stream=5)
    assert device.encoded == [arrays["q"].address]          # the second run wrote the map it had
    again, moved = _resident_problem(device, seed=1)
    plan.run(moved, CachingAllocator(device), stream=5)
    plan.run(arrays, CachingAllocator(device), stream=5)    # back: the cache has it
    assert device.encoded == [arrays["q"].address, moved["q"].address]
    for host, resident in ((tensors, arrays), (again, moved)):
        for name, want in expected_gradients(host).items():
            np.testing.assert_array_equal(resident[name].owner, want, err_msg=name)
    assert not [c for c in device.calls if c[0] not in ("launch", "zero")]   # no sync, no copy


def test_the_cache_drops_the_least_recently_used_map():
    cache = TensorMapCache(lambda e: e.address.to_bytes(8, "little"), capacity=2)
    arg = TensorMapArg("m", DeviceBuffer("t", "bf16", (64, 64), (64, 1), 0), (64, 64), 128)
    for address in (0x100, 0x200, 0x100, 0x300):
        cache.get(arg, address)
    assert len(cache) == 2 and cache.get(arg, 0x100) == (0x100).to_bytes(8, "little")


def test_other_executors_refuse_to_encode_tensor_maps():
    from fmha_mlir.runtime.cpu_executor import CpuExecutor

    arg = TensorMapArg("q.map", DeviceBuffer("q", "f16", (64, 64), (64, 1), 0), (64, 64), 128)
    with pytest.raises(RuntimeLaunchError, match="the cpu executor cannot encode TMA tensor maps .* 'q.map'"):
        CpuExecutor().encode_tensor_map(arg, 0)
