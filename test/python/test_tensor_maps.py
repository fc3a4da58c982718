"""The tensor-map argument kind: packed as a 128-byte by-value field, checked against the kernel's
parameter list, its cuTensorMapEncodeTiled geometry (innermost first, byte strides) and refusals, the
driver call as cuda-bindings receives it, and the cache per address and geometry. NumPy only."""
from __future__ import annotations

import ctypes
import types

import pytest

from fmha_mlir.errors import RuntimeLaunchError
from fmha_mlir.runtime.args import (DeviceBuffer, ScalarArg, TensorMapArg, bind_args, pack_args, pointer_fields,
                                    tensor_map_fields)
from fmha_mlir.runtime.tensor_maps import TensorMapCache, encode_tiled, tiled_encoding

A = DeviceBuffer("a", "bf16", (2, 128, 200), (128 * 256, 256, 1), 0x10000)
MAP = TensorMapArg("a_map", A, (1, 64, 64), 128)
C = DeviceBuffer("c", "f32", (128, 128), (128, 1), 0x20000)


def test_a_tensor_map_is_one_128_byte_field_the_executor_fills():
    packed = pack_args([ScalarArg("n", "i32", 3), MAP, C, MAP])
    fields = packed.fields
    assert [(f.name, f.offset, f.size) for f in fields if f.type == "tmap"] == [("a_map", 128, 128),
                                                                                ("a_map", 384, 128)]
    assert [offset for offset, _ in tensor_map_fields(packed)] == [128, 384]
    assert packed.blob[128:256] == bytes(128)
    assert [name for _, name in pointer_fields(packed)] == ["c", "c"]   # the pointer fast path is unchanged


def test_bind_args_matches_tensor_maps_to_tensor_map_parameters():
    params = [{"tensor_map": "a", "rank": 3, "dtype": "bf16"}, {"buffer": "c", "rank": 2, "dtype": "f32"}]
    assert bind_args("k", params, [MAP, C]) == [MAP, C]
    with pytest.raises(RuntimeLaunchError, match="parameter 0 is .* tensor map 'a_map' over a rank-3 bf16 buffer"):
        bind_args("k", [{**params[0], "dtype": "f16"}, params[1]], [MAP, C])
    with pytest.raises(RuntimeLaunchError, match="parameter 1 is .* the launch passes tensor map 'a_map'"):
        bind_args("k", [params[1], params[1]], [C, MAP])


def test_encoding_lists_dimensions_innermost_first_with_byte_strides():
    encoding = tiled_encoding(MAP, A.address)
    assert encoding.dims == (200, 128, 2) and encoding.box == (64, 64, 1)
    assert encoding.strides == (512, 128 * 256 * 2)
    assert (encoding.data_type, encoding.swizzle) == ("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "CU_TENSOR_MAP_SWIZZLE_128B")


@pytest.mark.parametrize("arg,message", [
    (TensorMapArg("m", DeviceBuffer("t", "bf16", (64, 64), (1, 64), 0), (64, 64)),
     "innermost dimension must be contiguous"),
    (TensorMapArg("m", DeviceBuffer("t", "bf16", (64, 100), (100, 1), 0), (64, 64)), "multiples of 16 bytes"),
    (TensorMapArg("m", A, (1, 64, 128), 128), "at most 128 bytes wide"),
    (TensorMapArg("m", A, (64, 64), 128), "the buffer's rank 3"),
    (TensorMapArg("m", A, (1, 512, 64), 128), "each dimension is 1..256"),
    (TensorMapArg("m", A, (1, 64, 64), 48), "swizzle 48"),
])
def test_maps_tma_cannot_describe_are_refused_by_name(arg, message):
    with pytest.raises(RuntimeLaunchError, match=message):
        tiled_encoding(arg, 0x10000)


def test_the_driver_call_and_its_128_bytes():
    calls, storage = [], ctypes.create_string_buffer(bytes(range(128)), 128)
    enum = lambda *names: types.SimpleNamespace(**{n: n for n in names})  # noqa: E731
    driver = types.SimpleNamespace(
        cuuint64_t=lambda v: ("u64", v), cuuint32_t=lambda v: ("u32", v),
        CUtensorMapDataType=enum("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"),
        CUtensorMapSwizzle=enum("CU_TENSOR_MAP_SWIZZLE_128B"),
        CUtensorMapInterleave=enum("CU_TENSOR_MAP_INTERLEAVE_NONE"),
        CUtensorMapL2promotion=enum("CU_TENSOR_MAP_L2_PROMOTION_L2_128B"),
        CUtensorMapFloatOOBfill=enum("CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"),
        cuTensorMapEncodeTiled=lambda *a: calls.append(a) or (0, types.SimpleNamespace(
            getPtr=lambda: ctypes.addressof(storage))))
    assert encode_tiled(driver, tiled_encoding(MAP, A.address)) == bytes(range(128))
    (call,) = calls
    assert call[:3] == ("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 3, A.address)
    assert call[3] == [("u64", 200), ("u64", 128), ("u64", 2)] and call[4] == [("u64", 512), ("u64", 65536)]
    assert call[5] == [("u32", 64), ("u32", 64), ("u32", 1)] and call[6] == [("u32", 1)] * 3
    assert call[8:] == ("CU_TENSOR_MAP_SWIZZLE_128B", "CU_TENSOR_MAP_L2_PROMOTION_L2_128B",
                        "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE")   # FILL_NONE: out-of-bounds elements read as zero


def test_the_cache_encodes_once_per_address_and_geometry():
    encoded = []
    cache = TensorMapCache(lambda e: encoded.append(e) or e.address.to_bytes(8, "little") * 16)
    assert cache.get(MAP) == cache.get(MAP) and len(encoded) == 1
    cache.get(MAP, 0x30000)
    cache.get(TensorMapArg("a_map", A, (1, 32, 64), 128))
    assert len(encoded) == 3 and len(cache) == 3
