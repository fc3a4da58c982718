"""The runtime without a GPU: bundles, argument packing (also against real hsaco metadata), tensor
validation, the runner on NumPy stand-in kernels, executor selection, the HIP launch path on a fake
hip module, and the CPU executor on real bundles when the interpreter is there."""
from __future__ import annotations

import copy
import dataclasses
import ctypes
import enum
import json
import re
import struct
import sys
import types
import weakref
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # runtime_probe, whatever the import mode

import runtime_probe  # noqa: E402
from fmha_mlir.errors import RuntimeLaunchError  # noqa: E402
from fmha_mlir.kernel_config import WarpConfig  # noqa: E402
from fmha_mlir.runtime import cpu_executor, cuda_executor, hip_executor  # noqa: E402
from fmha_mlir.runtime.args import (DeviceBuffer, ScalarArg, bind_args, check_against_metadata,  # noqa: E402
                                    flatten_args, pack_args, pointer_fields)
from fmha_mlir.runtime.bundle import FORMAT, Bundle, spec_from_json, spec_to_json  # noqa: E402
from fmha_mlir.runtime.cpu_executor import CpuExecutor, device_view  # noqa: E402
from fmha_mlir.runtime.device_array import DeviceArray  # noqa: E402
from fmha_mlir.runtime.executor import Allocation, get_executor  # noqa: E402
from fmha_mlir.runtime.hsaco_metadata import target_arch  # noqa: E402
from fmha_mlir.runtime.kernel_signatures import kernel_signatures  # noqa: E402
from fmha_mlir.runtime.bound_plan import BoundPlan, BoundPlans  # noqa: E402
from fmha_mlir.runtime.runner import Layout, PreparedRun, check_tensors, run_bundle  # noqa: E402
from fmha_mlir.spec import AttentionBwdSpec, Mask  # noqa: E402
from fmha_mlir.target import TARGETS  # noqa: E402

SPEC = AttentionBwdSpec(dtype="f16", hdim_q=64, hdim_v=128, gqa_ratio=2, mask=Mask("sliding_window", 8, 0))
PREFIX = "k"


def attention_manifest(spec: AttentionBwdSpec = SPEC, arch: str = "gfx942") -> dict:
    """A launch plan shaped like the compile side's (docs/ir.md), for kernels named k_<stage>."""
    target = TARGETS[arch]
    dims = {"q": ["batch", "heads_q", "seqlen_q", spec.hdim_q], "k": ["batch", "heads_kv", "seqlen_k", spec.hdim_q],
            "v": ["batch", "heads_kv", "seqlen_k", spec.hdim_v], "o": ["batch", "heads_q", "seqlen_q", spec.hdim_v],
            "do": ["batch", "heads_q", "seqlen_q", spec.hdim_v], "lse": ["batch", "heads_q", "seqlen_q"],
            "dq": ["batch", "heads_q", "seqlen_q", spec.hdim_q], "dk": ["batch", "heads_kv", "seqlen_k", spec.hdim_q],
            "dv": ["batch", "heads_kv", "seqlen_k", spec.hdim_v]}
    like = lambda name, last=None: [{"dim": [name, i]} for i in range(3)] + ([last] if last else [])  # noqa: E731
    buffer = lambda role, dtype, d: {"role": role, "dtype": dtype, "rank": len(d), "dims": d, "align": 1}  # noqa: E731
    buffers = {**{n: buffer("input", spec.dtype, dims[n]) for n in ("q", "k", "v", "o", "do")},
               "lse": buffer("input", "f32", dims["lse"]),
               **{n: buffer("output", spec.dtype, dims[n]) for n in ("dq", "dk", "dv")},
               "d": buffer("workspace", "f32", like("lse")),
               "dk_acc": buffer("workspace", "f32", like("dk", spec.hdim_q)),
               "dv_acc": buffer("workspace", "f32", like("dv", spec.hdim_v))}

    def launch(stage, args, grid_buffer):
        return {"op": "launch", "kernel": f"{PREFIX}_{stage}", "args": [{"buffer": a} for a in args],
                "grid": [{"dim": [grid_buffer, d]} for d in (2, 1, 0)],
                "block": [target.wave_size, 1, 1], "shared_bytes": 0}

    steps = [launch("dot_do_o", ["o", "do", "d"], "o"), {"op": "zero", "buffer": "dk_acc"},
             {"op": "zero", "buffer": "dv_acc"},
             launch("dq_dk_dv", ["q", "k", "v", "do", "lse", "d", "dq", "dk_acc", "dv_acc"], "q"),
             launch("convert_dk", ["dk_acc", "dk"], "dk"), launch("convert_dv", ["dv_acc", "dv"], "dv")]
    # What each kernel writes or adds to; it reads the rest.
    outputs = {"dot_do_o": {"d": "write"}, "dq_dk_dv": {"dq": "write", "dk_acc": "accumulate", "dv_acc": "accumulate"},
               "convert_dk": {"dk": "write"}, "convert_dv": {"dv": "write"}}
    kernels = {s["kernel"]: {"args": [{"buffer": a["buffer"], "rank": buffers[a["buffer"]]["rank"],
                                       "dtype": buffers[a["buffer"]]["dtype"],
                                       "type": memref_type(buffers[a["buffer"]]),
                                       "access": outputs[s["kernel"][len(PREFIX) + 1:]].get(a["buffer"], "read")}
                             for a in s["args"]]}
               for s in steps if s["op"] == "launch"}
    binary = "kernels.hsaco" if target.backend == "rocdl" else "kernels.ptx"
    return {"format": FORMAT, "compiler": {"fmha-mlir": "test"}, "spec": spec_to_json(spec),
            "config": WarpConfig(wave_size=target.wave_size).to_json(),
            "numerics": {"round_p_ds": False, "sum_chunk": 1},
            "target": {"arch": arch, "backend": target.backend, "wave_size": target.wave_size},
            "binary": {"file": binary, "format": binary.rsplit(".", 1)[1]}, "interp_ir": "kernels.interp.mlir",
            "buffers": buffers, "steps": steps, "kernels": kernels}


def memref_type(buf: dict) -> str:
    """The MLIR type of a buffer of the stand-in manifest, as docs/ir.md gives it."""
    shape = "x".join(str(d) if isinstance(d, int) else "?" for d in buf["dims"])
    return f"memref<{shape}x{buf['dtype']}, strided<[{', '.join(['?'] * (buf['rank'] - 1) + ['1'])}]>>"


def interp_ir_of(manifest: dict) -> str:
    """Generic-form kernel IR declaring the manifest's kernels, as the compiler prints it (bodies empty)."""
    funcs = [f'  "gpu.func"() <{{function_type = ({", ".join(p["type"] for p in kernel["args"])}) -> (), kernel}}> '
             f'({{\n  ^bb0:\n    "gpu.return"() : () -> ()\n  }}) {{sym_name = "{name}"}} : () -> ()'
             for name, kernel in manifest["kernels"].items()]
    return '"gpu.module"() <{sym_name = "fmha_kernels"}> ({\n' + "\n".join(funcs) + "\n}) : () -> ()\n"


def binary_of(manifest: dict) -> bytes:
    """A stand-in code object that defines the manifest's kernels (ELF string table entries, PTX .entry)."""
    if manifest["binary"]["format"] == "ptx":
        return "".join(f".visible .entry {name}(\n)\n" for name in manifest["kernels"]).encode()
    return b"\x7fELF fake\0" + b"".join(name.encode() + b"\0" for name in manifest["kernels"])


def attention_bundle(manifest: dict | None = None) -> Bundle:
    manifest = manifest or attention_manifest()
    binary = "kernels.ptx" if manifest["target"]["backend"] == "nvvm" else "kernels.hsaco"
    return Bundle(manifest, {binary: binary_of(manifest),
                             "kernels.interp.mlir": interp_ir_of(manifest).encode()})


# -- bundles ----------------------------------------------------------------------------------------


def test_bundle_round_trip(tmp_path):
    bundle = attention_bundle()
    bundle.save(tmp_path / "b")
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["kernels.hsaco", "kernels.interp.mlir",
                                                                   "manifest.json"]
    loaded = Bundle.load(tmp_path / "b")
    assert loaded.manifest == bundle.manifest and loaded.files == bundle.files
    assert loaded.spec == SPEC
    assert loaded.target is TARGETS["gfx942"]
    assert (loaded.binary, loaded.binary_format) == (binary_of(bundle.manifest), "hsaco")
    assert set(kernel_signatures(loaded.interp_ir)) == set(loaded.kernels)
    assert [s["op"] for s in loaded.steps][:3] == ["launch", "zero", "zero"]
    assert set(loaded.kernels) == {f"{PREFIX}_{s}" for s in ("dot_do_o", "dq_dk_dv", "convert_dk", "convert_dv")}
    assert loaded.buffers["dk_acc"]["dims"][0] == {"dim": ["dk", 0]}
    assert loaded.config == WarpConfig(wave_size=64) and loaded.numerics.sum_chunk == 1


def test_spec_json_round_trip_keeps_the_mask():
    assert spec_from_json(json.loads(json.dumps(spec_to_json(SPEC)))) == SPEC


def _mutate(path: str, value):
    """A manifest with key path 'a.b.0.c' set to value (or deleted when value is DELETE)."""
    manifest = attention_manifest()
    *parents, last = path.split(".")
    node = manifest
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is DELETE:
        del node[last]
    else:
        node[int(last) if isinstance(node, list) else last] = value
    return manifest


DELETE = object()


@pytest.mark.parametrize("path, value, message", [
    ("format", "fmha-bundle/0", "'format' is 'fmha-bundle/0'"),
    ("steps", DELETE, "lacks key(s) 'steps'"),
    ("spec.hdim_q", -8, "'spec' is invalid: hdim_q"),
    ("spec.colour", "red", "'spec' does not describe a spec"),
    ("target.arch", "gfx90a", "'target.arch' is 'gfx90a'"),
    ("target.wave_size", 32, "'target.wave_size' is 32, but gfx942 has 64"),
    ("binary.file", "other.hsaco", "names file 'other.hsaco', which is not in the bundle"),
    ("binary.format", "ptx", "gfx942 takes hsaco"),
    ("compiler", {"flydsl": 5}, "'compiler' must map package names to version strings"),
    ("config.body", "scalar", "'config' is invalid"),
    ("numerics.sum_chunk", 0, "'numerics' is invalid"),
    ("buffers.d.dims.0", {"dim": ["nothing", 0]}, "workspace 'd' is sized by unknown buffer(s) ['nothing']"),
    ("buffers.d.dims.0", {"pow": [1, 2]}, "is not a size expression"),
    ("buffers.q.dims", ["batch"], "buffer 'q' needs 'rank' and 'dims', one entry per dimension"),
    ("buffers.q.dims.3", 0, "dimension 0 must be a dimension name or a positive static size"),
    ("buffers.q.align", 0, "buffer 'q' needs 'align'"),
    ("buffers.q.role", "weights", "buffer 'q' needs a 'role'"),
    ("steps.1.op", "copy", "step 1 has op 'copy'"),
    ("steps.1.buffer", "acc", "step 1 (zero) names unknown buffer 'acc'"),
    ("steps.0.kernel", "k_missing", "launches 'k_missing', which is not under 'kernels'"),
    ("steps.0.args.2", {"buffer": "e"}, "passes unknown buffer 'e'"),
    ("steps.0.args.2", {"buffer": "q"}, "passes buffer 'q' (rank-4 f16) for parameter"),
    ("steps.0.args", "o", "needs 'args': one entry per kernel parameter"),
    ("steps.0.args.0", {"scalar": "i32", "value": 1}, "does not fit parameter"),
    ("steps.0.shared_bytes", -1, "has 'shared_bytes' -1; it must be an integer >= 0"),
    ("steps.0.grid", [{"dim": ["o", 2]}], "needs 'grid' with 3 entries"),
    ("steps.0.grid.0", {"buffer": "o"}, "is not a size expression"),
    ("steps.0.grid.0", {"dim": ["x", 2]}, "grid uses unknown buffer(s) ['x']"),
    ("steps.0.block", [64, 0, 1], "block [64, 0, 1] must be 3 positive integers"),
])
def test_bad_manifest_is_refused_naming_the_key(tmp_path, path, value, message):
    manifest = _mutate(path, value)
    with pytest.raises(RuntimeLaunchError) as caught:
        attention_bundle(manifest)
    assert message in str(caught.value)
    # Loading names the file too.
    directory = tmp_path / "b"
    directory.mkdir()
    (directory / "manifest.json").write_text(json.dumps(manifest))
    for name in ("kernels.hsaco", "kernels.interp.mlir"):
        (directory / name).write_bytes(b"x")
    with pytest.raises(RuntimeLaunchError) as caught:
        Bundle.load(directory)
    assert str(caught.value).startswith(str(directory / "manifest.json")) and message in str(caught.value)


def test_load_without_manifest_or_with_broken_json(tmp_path):
    with pytest.raises(RuntimeLaunchError, match="no bundle manifest here"):
        Bundle.load(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(RuntimeLaunchError, match="manifest.json: not valid JSON"):
        Bundle.load(tmp_path)


def test_bundle_refuses_file_names_with_paths():
    with pytest.raises(RuntimeLaunchError, match="'../x' is not a plain file name"):
        Bundle(attention_manifest(), {**attention_bundle().files, "../x": b""})


# -- argument packing -------------------------------------------------------------------------------


def test_pack_args_natural_alignment_by_hand():
    lse = DeviceBuffer("lse", "f32", (2, 3, 5), (15, 5, 1), 0x1000)
    q = DeviceBuffer("q", "f16", (2, 3, 5, 64), (960, 64, 192, 1), 0x2000)
    args = [ScalarArg("n", "i32", 7), lse, ScalarArg("s", "f32", 0.25), ScalarArg("m", "i32", -2), q,
            ScalarArg("t", "i64", 1 << 40)]
    packed = pack_args(args)
    offsets = {f.name: f.offset for f in packed.fields}
    # i32 at 0, then lse's pointers need 8-byte alignment: 8; lse = 2 ptr + offset + 3 sizes + 3 strides.
    assert offsets["n"] == 0 and offsets["lse.allocated"] == 8 and offsets["lse.strides[2]"] == 8 + 8 * 8
    assert offsets["s"] == 80 and offsets["m"] == 84 and offsets["q.allocated"] == 88
    assert offsets["q.strides[3]"] == 88 + 10 * 8 and offsets["t"] == 176 and packed.size == 184
    assert [name for name, _, _ in flatten_args([q])] == [
        "q.allocated", "q.aligned", "q.offset", *[f"q.sizes[{d}]" for d in range(4)],
        *[f"q.strides[{d}]" for d in range(4)]]
    blob = packed.blob
    assert struct.unpack_from("<i", blob, 0)[0] == 7
    assert struct.unpack_from("<QQq3q3q", blob, 8) == (0x1000, 0x1000, 0, 2, 3, 5, 15, 5, 1)
    assert struct.unpack_from("<fi", blob, 80) == (0.25, -2)
    assert struct.unpack_from("<QQq4q4q", blob, 88) == (0x2000, 0x2000, 0, 2, 3, 5, 64, 960, 64, 192, 1)
    assert struct.unpack_from("<q", blob, 176)[0] == 1 << 40


def test_bind_args_checks_rank_dtype_and_scalar_types():
    q = DeviceBuffer("q", "f16", (1, 1, 1, 64), (64, 64, 64, 1), 0)
    params = [{"buffer": "q", "rank": 4, "dtype": "bf16"}]
    with pytest.raises(RuntimeLaunchError, match="rank-4 bf16 memref, but buffer 'q' is rank-4 f16"):
        bind_args("kern", params, [q])
    with pytest.raises(RuntimeLaunchError, match="takes 1 arguments, its launch gives 2"):
        bind_args("kern", params, [q, q])
    with pytest.raises(RuntimeLaunchError, match="parameter 0 is {'scalar': 'i64'}, the launch passes a i32 scalar"):
        bind_args("kern", [{"scalar": "i64"}], [ScalarArg("n", "i32", 1)])


def _metadata_cases():
    """(kernel name, its code-object metadata, the DeviceBuffers its launch binds) for real hsaco."""
    from fmha_mlir.compiler import compile_spec
    from fmha_mlir.runtime.hsaco_metadata import read_hsaco_metadata

    cases = []
    for arch in ("gfx942", "gfx950"):
        probe = runtime_probe.build_probe_bundle(arch)
        bundles = [probe] + [Bundle(c.manifest, c.bundle_files()) for c in (compile_spec(SPEC, arch, body="warp"),)]
        for bundle in bundles:
            metadata = read_hsaco_metadata(bundle.binary)["kernels"]
            for step in (s for s in bundle.steps if s["op"] == "launch"):
                rank = lambda a: bundle.buffers[a["buffer"]]["rank"]  # noqa: E731
                args = [DeviceBuffer(a["buffer"], bundle.buffers[a["buffer"]]["dtype"], (2,) * rank(a), (1,) * rank(a),
                                     0x1000 * (i + 1)) if "buffer" in a else
                        ScalarArg(f"arg{i}", a["scalar"], a["value"]) for i, a in enumerate(step["args"])]
                args = bind_args(step["kernel"], bundle.kernels[step["kernel"]]["args"], args)
                cases.append((step["kernel"], metadata[step["kernel"]], args))
    return cases


@pytest.fixture(scope="module")
def metadata_cases():
    pytest.importorskip("fmha_mlir.mlir", reason="building hsaco needs MLIR")
    return _metadata_cases()


def test_packing_matches_real_hsaco_metadata(metadata_cases):
    assert len(metadata_cases) == 2 * (1 + 4)  # the probe and 4 attention kernels on each AMD chip
    for kernel, metadata, args in metadata_cases:
        packed = pack_args(args)
        check_against_metadata(kernel, packed, metadata)
        assert [(a["offset"], a["size"]) for a in metadata["args"]] == [(f.offset, f.size) for f in packed.fields]
        assert metadata["kernarg_segment_size"] == packed.size


@pytest.mark.parametrize("change, message", [
    (lambda m: m["args"][3].update(offset=m["args"][3]["offset"] + 4), "expects offset"),
    (lambda m: m["args"][2].update(size=4), "expects offset 16 size 4"),
    (lambda m: m["args"][0].update(value_kind="by_value"), "(global_buffer) but the code object expects"),
    (lambda m: m["args"].pop(), "explicit arguments, the runtime packs"),
    (lambda m: m.update(kernarg_segment_size=m["kernarg_segment_size"] + 8), "kernarg segment is"),
    (lambda m: m.pop("args"), "metadata lacks 'args'"),
])
def test_metadata_mismatch_is_refused(metadata_cases, change, message):
    kernel, metadata, args = metadata_cases[0]
    metadata = copy.deepcopy(metadata)
    change(metadata)
    with pytest.raises(RuntimeLaunchError, match=f"kernel {kernel}: ") as caught:
        check_against_metadata(kernel, pack_args(args), metadata)
    assert message in str(caught.value)


def test_hidden_arguments_may_follow_the_explicit_ones(metadata_cases):
    kernel, metadata, args = metadata_cases[0]
    metadata = copy.deepcopy(metadata)
    end = metadata["kernarg_segment_size"]
    metadata["args"].append({"offset": end, "size": 4, "value_kind": "hidden_block_count_x"})
    metadata["kernarg_segment_size"] = end + 256
    check_against_metadata(kernel, pack_args(args), metadata)


# -- tensor validation ------------------------------------------------------------------------------


def problem_tensors(spec: AttentionBwdSpec = SPEC, batch=2, heads_q=4, seqlen_q=5, seqlen_k=7, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    heads_kv = heads_q // spec.gqa_ratio

    def draw(*shape):
        return rng.standard_normal(shape).astype(np.float16)

    return {"q": draw(batch, heads_q, seqlen_q, spec.hdim_q), "k": draw(batch, heads_kv, seqlen_k, spec.hdim_q),
            "v": draw(batch, heads_kv, seqlen_k, spec.hdim_v), "o": draw(batch, heads_q, seqlen_q, spec.hdim_v),
            "do": draw(batch, heads_q, seqlen_q, spec.hdim_v),
            "lse": rng.standard_normal((batch, heads_q, seqlen_q)).astype(np.float32)}


@pytest.mark.parametrize("change, message", [
    (lambda t: t.pop("lse"), "missing ['lse']"),
    (lambda t: t.update(bias=t["q"]), "unknown ['bias']"),
    (lambda t: t.update(q=t["q"].astype(np.float32)), "tensor 'q' has dtype float32; this bundle's f16 q"),
    (lambda t: t.update(lse=t["lse"].astype(np.float16)), "tensor 'lse' has dtype float16"),
    (lambda t: t.update(k=t["k"][0]), "tensor 'k' has rank 3; expected [batch, heads_kv, seqlen_k, 64]"),
    (lambda t: t.update(v=t["v"][..., :64]), "tensor 'v' has shape (2, 2, 7, 64); dimension 3 must be 128"),
    (lambda t: t.update(o=t["o"][:1]), "its batch is 1, but 'q' says 2"),
    (lambda t: t.update(k=t["k"][:, :1], v=t["v"][:, :1]),
     "q has 4 heads and k has 1, but the bundle's gqa_ratio is 2"),
    (lambda t: t.update(q=t["q"][:, :, ::-1]), "tensor 'q' has byte strides"),
    (lambda t: t.update(q=np.repeat(t["q"], 2, axis=3)[..., ::2]), "tensor 'q': its last dimension must be contiguous"),
    (lambda t: t.update(q=t["q"][:, :, :0], o=t["o"][:, :, :0], do=t["do"][:, :, :0], lse=t["lse"][:, :, :0]),
     "tensor 'q' has size 0 in dimension 2"),
    (lambda t: t.update(q=[[1.0]]), "tensor 'q' must be a NumPy array"),
    (lambda t: t.update(dq=np.lib.stride_tricks.as_strided(t["q"].copy(), strides=(0, 128, 128, 2))),
     "output 'dq' has strides (0, 128, 128, 2) whose elements overlap"),
    (lambda t: t.update(dq=np.broadcast_to(np.zeros_like(t["q"]), t["q"].shape)), "output 'dq' is read-only"),
    # dk and dv have the same shape here only when hdim_q == hdim_v: alias dk with a slice of dv instead.
    (lambda t: t.update(dv=np.zeros_like(t["v"])) or t.update(dk=t["dv"][..., :64]),
     "outputs 'dk' and 'dv' share memory"),
])
def test_bad_tensors_are_refused_naming_the_tensor(change, message):
    tensors = problem_tensors()
    change(tensors)
    with pytest.raises(RuntimeLaunchError) as caught:
        check_tensors(attention_bundle(), tensors)
    assert message in str(caught.value)


def test_alignment_looks_at_the_strides_a_kernel_steps_only():
    manifest = attention_manifest()
    manifest["buffers"]["q"]["align"] = 4   # a kernel loads 4 elements of q as one vector
    bundle = attention_bundle(manifest)
    tensors = problem_tensors()
    padded = np.zeros((2, 4, 5, 66), np.float16)[..., :64]
    with pytest.raises(RuntimeLaunchError, match=r"tensor 'q' has element strides \[1320, 330, 66\].*multiple of 4"):
        check_tensors(bundle, {**tensors, "q": padded})
    single = np.lib.stride_tricks.as_strided(np.zeros(4000, np.float16), (1, 4, 5, 64), (14, 640, 128, 2))
    tensors = problem_tensors(batch=1)
    check_tensors(bundle, {**tensors, "q": single})  # odd strides of the size-1 dims are never used


def test_bf16_dtype_error_explains_the_storage():
    spec = AttentionBwdSpec(dtype="bf16", hdim_q=64)
    with pytest.raises(RuntimeLaunchError, match="stored as uint16 .*bf16_bits"):
        check_tensors(attention_bundle(attention_manifest(spec)), problem_tensors(spec, heads_q=2))


def test_missing_outputs_are_allocated_contiguous_bhsd():
    full = check_tensors(attention_bundle(), problem_tensors())
    assert full["dq"].shape == (2, 4, 5, 64) and full["dq"].flags.c_contiguous and full["dq"].dtype == np.float16
    assert full["dv"].shape == (2, 2, 7, 128)


# -- the runner on NumPy stand-in kernels -----------------------------------------------------------


class NumpyKernels(CpuExecutor):
    """The CPU executor's memory with NumPy stand-ins for the kernels: simple functions of their inputs
    that need every buffer staged, zeroed and read back at the right strides."""

    def load(self, bundle):   # the executor is its own kernel set
        self.check_bundle(bundle)
        self.launches = []
        return self

    def prepare(self, kernel, grid, block, args, shared_bytes=0, stream=None):
        return lambda: self.launch(kernel, grid, block, args, shared_bytes)

    def launch(self, kernel, grid, block, args, shared_bytes=0):
        self.launches.append((kernel, tuple(grid), tuple(block)))
        getattr(self, kernel.removeprefix(PREFIX + "_"))(*(device_view(a) for a in args))

    @staticmethod
    def dot_do_o(o, do, d):
        d[...] = (o.astype(np.float32) * do.astype(np.float32)).sum(-1)

    @staticmethod
    def dq_dk_dv(q, k, v, do, lse, d, dq, dk_acc, dv_acc):
        dq[...] = q.astype(np.float32) + d[..., None] + lse[..., None]
        dk_acc += k
        dv_acc += v

    @staticmethod
    def convert_dk(acc, out):
        out[...] = acc

    convert_dv = convert_dk


def expected_gradients(t: dict) -> dict:
    d = (t["o"].astype(np.float32) * t["do"].astype(np.float32)).sum(-1)
    return {"dq": (t["q"].astype(np.float32) + d[..., None] + t["lse"][..., None]).astype(np.float16),
            "dk": t["k"], "dv": t["v"]}


def bshd(array: np.ndarray) -> np.ndarray:
    """The same values as a view of BSHD storage."""
    return np.ascontiguousarray(array.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)


def test_runner_walks_the_steps_with_grids_from_buffer_dims():
    tensors = problem_tensors()
    device = NumpyKernels()
    result = run_bundle(attention_bundle(), device, tensors)
    for name, want in expected_gradients(tensors).items():
        np.testing.assert_array_equal(result[name], want, err_msg=name)
        assert result[name].flags.c_contiguous
    assert device.launches == [("k_dot_do_o", (5, 4, 2), (64, 1, 1)), ("k_dq_dk_dv", (5, 4, 2), (64, 1, 1)),
                               ("k_convert_dk", (7, 2, 2), (64, 1, 1)), ("k_convert_dv", (7, 2, 2), (64, 1, 1))]


def test_grids_and_workspaces_are_evaluated_from_expressions():
    """ceil(seqlen_k / 4) work-groups and a dk workspace padded to whole blocks of 4 rows."""
    manifest = attention_manifest()
    padded = {"mul": [{"ceildiv": [{"dim": ["dk", 2]}, 4]}, 4]}
    manifest["buffers"]["dk_acc"]["dims"][2] = padded
    manifest["steps"][3]["grid"][0] = {"ceildiv": [{"dim": ["k", 2]}, 4]}
    device = NumpyKernels()
    with pytest.raises(ValueError):   # the stand-in kernel adds a [.., 7, ..] k to an [.., 8, ..] workspace
        run_bundle(attention_bundle(manifest), device, problem_tensors())
    assert device.launches[1] == ("k_dq_dk_dv", (2, 4, 2), (64, 1, 1))


def test_runner_keeps_strides_of_inputs_and_given_outputs():
    tensors = {name: bshd(a) if a.ndim == 4 else a[:, :, ::1] for name, a in problem_tensors().items()}
    tensors["lse"] = np.ascontiguousarray(tensors["lse"].transpose(0, 2, 1)).transpose(0, 2, 1)  # [B, S, H] storage
    with pytest.raises(RuntimeLaunchError, match="tensor 'lse': its last dimension must be contiguous"):
        run_bundle(attention_bundle(), NumpyKernels(), tensors)
    tensors["lse"] = problem_tensors()["lse"][:, :, :]
    outputs = {name: bshd(np.zeros_like(a)) for name, a in expected_gradients(tensors).items()}
    result = run_bundle(attention_bundle(), NumpyKernels(), {**tensors, **outputs})
    for name, want in expected_gradients(tensors).items():
        assert result[name] is outputs[name]
        np.testing.assert_array_equal(result[name], want, err_msg=name)


class ResidentKernels(NumpyKernels):
    """NumpyKernels over "GPU-resident" tensors: NumPy arrays handed over as DeviceArrays at their own
    addresses. Records every call that would allocate, copy or wait, and the stream of each launch."""

    def __init__(self):
        super().__init__()
        self.memory, self.calls = {}, []

    def resident(self, array: np.ndarray) -> DeviceArray:
        array = np.ascontiguousarray(array)
        self.memory[array.ctypes.data] = array.reshape(-1).view(np.uint8)
        return DeviceArray(array.ctypes.data, array.shape, array.strides, array.dtype, owner=array)

    def borrow(self, address, nbytes):
        """The bytes from `address` on, in whichever resident array holds them (a run's workspaces share one)."""
        start = max(a for a in self.memory if a <= address)
        assert address + nbytes <= start + self.memory[start].nbytes, "beyond the resident array"
        return Allocation(address, nbytes, self.memory[start][address - start:address - start + nbytes])

    def prepare(self, kernel, grid, block, args, shared_bytes=0, stream=None):
        self.calls.append(("launch", kernel, stream))
        return super().prepare(kernel, grid, block, args, shared_bytes, stream)

    def packed_launcher(self, kernel, grid, block, packed, blob, shared_bytes=0):
        """Launches on the buffers whose addresses `blob` holds at each call, as a GPU would read them:
        every other field must still be what pack_args wrote (a patch touches the pointers only)."""
        def run(stream):
            addresses = {}
            for offset, name in pointer_fields(packed):
                addresses.setdefault(name, set()).add(int(blob[offset:offset + 8].view(np.uint64)[0]))
            assert all(len(a) == 1 for a in addresses.values()), "allocated and aligned pointers differ"
            args = [dataclasses.replace(a, address=addresses[a.name].pop()) if isinstance(a, DeviceBuffer) else a
                    for a in packed.args]
            assert bytes(blob) == pack_args(args).blob
            nbytes = lambda a: Layout(a.dtype, a.shape, a.strides).nbytes  # noqa: E731
            args = [dataclasses.replace(a, allocation=self.borrow(a.address, nbytes(a)))
                    if isinstance(a, DeviceBuffer) else a for a in args]
            self.prepare(kernel, grid, block, args, shared_bytes, stream)()
        return run

    def zero(self, allocation, stream=None):
        self.calls.append(("zero", allocation.nbytes, stream))
        super().zero(allocation, stream)

    def alloc(self, nbytes):
        self.calls.append(("alloc", nbytes))
        return super().alloc(nbytes)

    def upload(self, allocation, host):
        self.calls.append(("upload", host.nbytes))
        super().upload(allocation, host)

    def download(self, allocation, host):
        self.calls.append(("download", host.nbytes))
        super().download(allocation, host)

    def synchronize(self):
        self.calls.append(("synchronize",))


class CachingAllocator:
    """torch's caching allocator in miniature: a block whose owner is dropped goes back to the pool, and
    the next request it is large enough for gets it again (torch does that at once, stream-ordered)."""

    def __init__(self, device: ResidentKernels):
        self.device, self.free, self.handed_out = device, [], 0

    def __call__(self, nbytes: int) -> DeviceArray:
        fits = [i for i, b in enumerate(self.free) if b.nbytes >= nbytes]
        block = self.free.pop(fits[0]) if fits else np.zeros(max(nbytes, 1 << 16), np.uint8)
        owner = type("Block", (), {})()   # what the run must keep alive while it uses the block
        weakref.finalize(owner, self.free.append, block)
        self.handed_out += 1
        self.device.memory[block.ctypes.data] = block
        return DeviceArray(block.ctypes.data, (nbytes,), (1,), block.dtype, owner=owner)


def _resident_run(poison: bool):
    """One run on resident tensors with a workspace allocator, as fmha_mlir.torch drives it."""
    device, tensors = ResidentKernels(), problem_tensors()
    outputs = {name: np.zeros_like(a) for name, a in expected_gradients(tensors).items()}
    arrays = {name: device.resident(a) for name, a in {**tensors, **outputs}.items()}
    allocator = CachingAllocator(device)
    with PreparedRun(attention_bundle(), device, arrays, stream=7, workspace=allocator, poison=poison) as run:
        run.launch()
        addresses = {buf.address for name, buf in run.buffers.items()}
    assert len(addresses) == len(run.buffers)   # no two buffers share a block while the run holds them
    return device, tensors, arrays, allocator


def test_a_training_loop_run_allocates_copies_and_waits_for_nothing():
    device, tensors, arrays, allocator = _resident_run(poison=False)
    for name, want in expected_gradients(tensors).items():
        np.testing.assert_array_equal(arrays[name].owner, want, err_msg=name)
    assert allocator.handed_out == 3 and len(allocator.free) == 3   # d, dk_acc, dv_acc; back in the pool
    assert not [c for c in device.calls if c[0] not in ("launch", "zero")]
    assert {c[-1] for c in device.calls} == {7}     # every launch and zero fill on the caller's stream


def test_debug_poisoning_of_resident_buffers_waits_and_fills_with_nan():
    device, *_ = _resident_run(poison=True)
    written = 6   # dq, dk, dv and the three workspaces; the inputs are not touched
    assert [c[0] for c in device.calls[:2 * written]] == ["synchronize", "upload"] * written


def _resident_problem(device: ResidentKernels, seed: int = 0, **sizes) -> tuple[dict, dict]:
    """(the host tensors, the same handed over as DeviceArrays, outputs included)."""
    tensors = problem_tensors(seed=seed, **sizes)
    outputs = {name: np.zeros_like(a) for name, a in expected_gradients(tensors).items()}
    return tensors, {name: device.resident(a) for name, a in {**tensors, **outputs}.items()}


def test_a_bound_plan_is_bound_once_per_geometry_and_runs_on_new_addresses():
    device, bundle, plans = ResidentKernels(), attention_bundle(), BoundPlans()
    tensors, arrays = _resident_problem(device)
    plan = plans.plan(bundle, device, arrays)
    plan.run(arrays, CachingAllocator(device), stream=3)
    again, moved = _resident_problem(device, seed=1)          # other values at other addresses
    assert plans.plan(bundle, device, moved) is plan
    plan.run(moved, CachingAllocator(device), stream=3)
    for host, resident in ((tensors, arrays), (again, moved)):
        for name, want in expected_gradients(host).items():
            np.testing.assert_array_equal(resident[name].owner, want, err_msg=name)
    assert not [c for c in device.calls if c[0] not in ("launch", "zero")] and {c[-1] for c in device.calls} == {3}
    _, longer = _resident_problem(device, seqlen_q=6)
    assert plans.plan(bundle, device, longer) is not plan     # another geometry, another plan


def test_a_bound_plan_checks_addresses_on_every_run():
    manifest = attention_manifest()
    manifest["buffers"]["q"]["align"] = 8
    device, bundle = ResidentKernels(), attention_bundle(manifest)
    _, arrays = _resident_problem(device)
    plan = BoundPlan(bundle, device, arrays)
    shifted = dict(arrays, q=dataclasses.replace(arrays["q"], address=arrays["q"].address + 2))
    with pytest.raises(RuntimeLaunchError, match="tensor 'q' starts at GPU address .* not aligned to the 16-byte"):
        plan.run(shifted, CachingAllocator(device))
    with pytest.raises(RuntimeLaunchError, match="outputs 'dk' and 'dq' share GPU memory"):
        plan.run(dict(arrays, dq=dataclasses.replace(arrays["dq"], address=arrays["dk"].address)),
                 CachingAllocator(device))
    with pytest.raises(RuntimeLaunchError, match="a launch plan runs on GPU-resident tensors"):
        BoundPlan(bundle, device, problem_tensors())


def test_bound_plans_drop_the_least_recently_used():
    device, bundle, plans = ResidentKernels(), attention_bundle(), BoundPlans(capacity=2)
    shapes = [_resident_problem(device, seqlen_q=n)[1] for n in (3, 4, 5)]
    first, second = plans.plan(bundle, device, shapes[0]), plans.plan(bundle, device, shapes[1])
    assert plans.plan(bundle, device, shapes[0]) is first     # used again: now the most recent
    plans.plan(bundle, device, shapes[2])                     # evicts the second
    assert plans.plan(bundle, device, shapes[0]) is first and plans.plan(bundle, device, shapes[1]) is not second


def test_a_workspace_allocator_needs_resident_tensors():
    with pytest.raises(RuntimeLaunchError, match="a workspace allocator serves runs on GPU-resident tensors"):
        PreparedRun(attention_bundle(), NumpyKernels(), problem_tensors(), workspace=lambda n: None)
    device, tensors = ResidentKernels(), problem_tensors()
    outputs = {name: np.zeros_like(a) for name, a in expected_gradients(tensors).items()}
    arrays = {name: device.resident(a) for name, a in {**tensors, **outputs}.items()}
    with pytest.raises(RuntimeLaunchError, match="the workspace allocator returned None for workspace 'd'"):
        PreparedRun(attention_bundle(), device, arrays, workspace=lambda n: None)


def _without(steps: list, unwanted) -> list:
    return [s for s in steps if s.get("kernel") != unwanted and s != unwanted]


def _retyped(manifest: dict, kernel: str, index: int, type_text: str) -> None:
    manifest["kernels"][kernel]["args"][index]["type"] = type_text


@pytest.mark.parametrize("edit,message", [
    (lambda m: m.update(steps=_without(m["steps"], "k_convert_dv")),
     "no step writes output(s) ['dv']: they would come back NaN (rebuild the bundle with fmha-compile)"),
    (lambda m: m.update(steps=_without(m["steps"], {"op": "zero", "buffer": "dk_acc"})),
     "manifest step 2 (k_dq_dk_dv) accumulates into 'dk_acc', which is not zero-filled before it: the plan needs "
     'a {"op": "zero", "buffer": "dk_acc"} step earlier (rebuild the bundle with fmha-compile)'),
    (lambda m: m.update(steps=m["steps"][1:4] + m["steps"][:1] + m["steps"][4:]),
     "manifest step 2 (k_dq_dk_dv) reads 'd', which no earlier step writes or zero-fills: the steps are out of "
     "order (rebuild the bundle with fmha-compile)"),
    (lambda m: m.update(steps=[m["steps"][4]] + m["steps"][:4] + m["steps"][5:]),
     "manifest step 0 (k_convert_dk) reads 'dk_acc', which no earlier step writes or zero-fills"),
])
def test_a_manifest_edited_into_an_invalid_launch_plan_is_refused(edit, message):
    """Outputs and workspaces start as NaN and the kernels trust the plan: a step out of order or a
    zero fill dropped would return wrong gradients, so the plan is checked as a program at load."""
    manifest = attention_manifest()
    edit(manifest)
    with pytest.raises(RuntimeLaunchError) as caught:
        attention_bundle(manifest)
    assert str(caught.value).startswith(message)


def test_a_manifest_that_does_not_describe_its_kernels_is_refused():
    """The kernel parameters are checked against the gpu.func signatures of the bundle's interpreter IR
    (read without MLIR) and the kernel names against the binary's symbols."""
    files = attention_bundle().files
    manifest = attention_manifest()
    _retyped(manifest, "k_dot_do_o", 2, "memref<?x?x?xf16, strided<[?, ?, 1]>>")
    with pytest.raises(RuntimeLaunchError, match=re.escape(
            "manifest kernel 'k_dot_do_o' lists 3 parameters, its gpu.func declares 3; parameter 2 is "
            "memref<?x?x?xf16, strided<[?, ?, 1]>> in the manifest, memref<?x?x?xf32, strided<[?, ?, 1]>> in the "
            "kernel: the manifest was written for other kernels")):
        Bundle(manifest, files)
    manifest = attention_manifest()
    manifest["kernels"]["k_convert_dk"]["args"].append({"scalar": "i32", "type": "i32"})
    manifest["steps"][4]["args"].append({"scalar": "i32", "value": 1})
    with pytest.raises(RuntimeLaunchError, match="manifest kernel 'k_convert_dk' lists 3 parameters, its "
                       "gpu.func declares 2; parameter 2 is i32 in the manifest, absent in the kernel"):
        Bundle(manifest, files)
    manifest = attention_manifest()
    manifest["kernels"]["k_other"] = manifest["kernels"].pop("k_convert_dv")
    manifest["steps"][5]["kernel"] = "k_other"
    with pytest.raises(RuntimeLaunchError, match=r"manifest kernel 'k_other' is not in the bundle's interpreter IR, "
                                                 r"whose kernels are \['k_convert_dk', 'k_convert_dv', "):
        Bundle(manifest, files)
    binary = files["kernels.hsaco"].replace(b"k_convert_dv\0", b"k_convert_xx\0")
    with pytest.raises(RuntimeLaunchError, match="manifest kernel 'k_convert_dv' is not defined by the bundle's "
                                                 "hsaco binary 'kernels.hsaco'"):
        Bundle(attention_manifest(), {**files, "kernels.hsaco": binary})
    manifest = attention_manifest()
    del manifest["kernels"]["k_dq_dk_dv"]["args"][7]["access"]
    with pytest.raises(RuntimeLaunchError, match="manifest kernel 'k_dq_dk_dv' parameter 7 \\(dk_acc\\) has 'access' "
                                                 "None; one of read, write, accumulate"):
        Bundle(manifest, files)


def test_runner_refuses_inconsistent_bundles():
    manifest = attention_manifest()
    manifest["steps"][0]["grid"][0] = {"dim": ["o", 5]}
    with pytest.raises(RuntimeLaunchError, match="grid: dim 5 of buffer 'o' does not exist"):
        run_bundle(attention_bundle(manifest), NumpyKernels(), problem_tensors())
    manifest = attention_manifest()
    manifest["steps"][0]["grid"][0] = {"sub": [{"dim": ["o", 2]}, 9]}
    with pytest.raises(RuntimeLaunchError, match=r"grid \[-4, 4, 2\] has an empty dimension"):
        run_bundle(attention_bundle(manifest), NumpyKernels(), problem_tensors())


def test_prepared_run_frees_every_buffer_when_one_free_fails():
    class FailingFree(NumpyKernels):
        freed = []

        def free(self, allocation):
            self.freed.append(allocation)
            if len(self.freed) == 1:
                raise RuntimeLaunchError("free failed")

    device = FailingFree()
    run = PreparedRun(attention_bundle(), device, problem_tensors())
    count = len(run.allocations)
    with pytest.raises(RuntimeLaunchError, match="free failed"):
        run.close()
    assert len(device.freed) == count and run.allocations == {}


def test_a_failing_free_does_not_hide_the_error_that_stopped_the_run():
    class FaultingKernel(NumpyKernels):
        def launch(self, kernel, grid, block, args, shared_bytes=0):
            raise RuntimeLaunchError("kernel faulted")

        def free(self, allocation):
            raise RuntimeLaunchError("free failed")  # as after a real fault: the context is broken

    with pytest.raises(RuntimeLaunchError, match="kernel faulted"):
        run_bundle(attention_bundle(), FaultingKernel(), problem_tensors())


def test_cpu_executor_names_a_kernel_the_bundle_lacks():
    kernels = CpuExecutor().load(runtime_probe.build_probe_bundle("gfx942"))
    with pytest.raises(RuntimeLaunchError, match="the bundle has no kernel 'k'"):
        kernels.launch("k", (1, 1, 1), (1, 1, 1), [])


def test_an_executor_loads_each_bundle_once():
    executor, bundle = CpuExecutor(), runtime_probe.build_probe_bundle("gfx942")
    assert executor.load(bundle) is executor.load(bundle)


# -- executors --------------------------------------------------------------------------------------


def _force_available(monkeypatch, **usable):
    for name, module, cls in (("cuda", cuda_executor, "CudaExecutor"), ("hip", hip_executor, "HipExecutor"),
                              ("cpu", cpu_executor, "CpuExecutor")):
        if name in usable:
            verdict = (usable[name], "forced by the test")
            monkeypatch.setattr(getattr(module, cls), "available", classmethod(lambda c, v=verdict: v))


def test_get_executor_by_name_and_automatically(monkeypatch):
    with pytest.raises(RuntimeLaunchError, match="unknown executor 'tpu'; choose one of cuda, hip, cpu"):
        get_executor("tpu")
    with pytest.raises(RuntimeLaunchError, match="unknown vendor 'intel'"):
        get_executor(vendor="intel")
    _force_available(monkeypatch, cuda=False, hip=False, cpu=True)
    with pytest.raises(RuntimeLaunchError, match="executor 'cuda' is not available: forced by the test"):
        get_executor("cuda")
    assert isinstance(get_executor(vendor="nvidia"), CpuExecutor)
    assert isinstance(get_executor(), CpuExecutor)
    _force_available(monkeypatch, cpu=False)
    with pytest.raises(RuntimeLaunchError, match="no executor is available"):
        get_executor(vendor="amd")


def test_unavailable_gpu_executors_say_why():
    for cls in (cuda_executor.CudaExecutor, hip_executor.HipExecutor):
        usable, reason = cls.available()
        assert isinstance(usable, bool) and reason


def test_gpu_executor_refuses_a_bundle_of_the_other_vendor():
    class AmdOnly(NumpyKernels):
        name, vendor = "hip", "amd"

    with pytest.raises(RuntimeLaunchError, match="is for sm_90 .nvidia.; the hip executor runs amd binaries only: "
                                                 "use executor 'cuda' or 'cpu'"):
        run_bundle(attention_bundle(attention_manifest(arch="sm_90")), AmdOnly(), problem_tensors())


class CUresult(enum.IntEnum):
    CUDA_ERROR_NO_DEVICE = 100


class hipError_t(enum.IntEnum):  # noqa: N801 - hip-python's name
    hipErrorNoDevice = 100


def test_driver_error_codes_make_executors_unavailable_with_their_name(monkeypatch):
    monkeypatch.setattr(cuda_executor, "_driver", lambda: types.SimpleNamespace(
        cuInit=lambda flags: (CUresult.CUDA_ERROR_NO_DEVICE,)))
    assert cuda_executor.CudaExecutor.available() == (
        False, "no usable CUDA driver: cuInit failed: CUDA_ERROR_NO_DEVICE")
    monkeypatch.setattr(hip_executor, "_hip", lambda: types.SimpleNamespace(
        hipGetDeviceCount=lambda: (hipError_t.hipErrorNoDevice, 0)))
    assert hip_executor.HipExecutor.available() == (
        False, "no usable HIP runtime: hipGetDeviceCount failed: hipErrorNoDevice")


def test_cuda_compute_capability_of_arch():
    assert cuda_executor.compute_capability("sm_90") == (9, 0)
    assert cuda_executor.compute_capability("sm_100a") == (10, 0)


class FakeCuda:
    """Enough of cuda-bindings' driver module to make and close a CudaExecutor; `fail` names the one
    call that returns an error. Records the retained / released primary contexts and module unloads."""

    def __init__(self, fail: str = ""):
        self.fail, self.calls = fail, []

    def __getattr__(self, name):
        def call(*args):
            self.calls.append(name)
            status = CUresult.CUDA_ERROR_NO_DEVICE if name == self.fail else 0
            return (status, sum(map(ord, name)))   # a handle: an int, distinct per call name
        return call


def test_cuda_executor_releases_the_primary_context_on_every_path(monkeypatch):
    fake = FakeCuda(fail="cuModuleUnload")
    monkeypatch.setattr(cuda_executor, "_driver", lambda: fake)
    executor = cuda_executor.CudaExecutor()
    executor._kernel_sets["bundle"] = cuda_executor.CudaKernels(executor, "module")  # as if one were loaded
    with pytest.raises(RuntimeLaunchError, match="cuModuleUnload failed"):
        executor.close()
    executor.close()  # a second close releases nothing twice
    assert fake.calls.count("cuDevicePrimaryCtxRelease") == 1 and fake.calls.count("cuModuleUnload") == 1


def test_cuda_executor_pushes_its_context_only_for_its_own_calls(monkeypatch):
    fake = FakeCuda()
    monkeypatch.setattr(cuda_executor, "_driver", lambda: fake)
    executor = cuda_executor.CudaExecutor()
    executor.zero(executor.borrow(0x1000, 64), stream=7)
    # another context was current (torch's device, or none): pushed for the call, popped after it
    assert fake.calls[-4:] == ["cuCtxGetCurrent", "cuCtxPushCurrent", "cuMemsetD32Async", "cuCtxPopCurrent"]


def test_cuda_calls_inside_one_current_block_ask_the_driver_once(monkeypatch):
    fake = FakeCuda()
    monkeypatch.setattr(cuda_executor, "_driver", lambda: fake)
    executor = cuda_executor.CudaExecutor()
    allocation = executor.borrow(0x1000, 64)
    del fake.calls[:]
    with executor.current():      # as BoundPlan.run wraps its launches
        for _ in range(3):
            executor.zero(allocation, stream=7)
    assert fake.calls == ["cuCtxGetCurrent", "cuCtxPushCurrent"] + ["cuMemsetD32Async"] * 3 + ["cuCtxPopCurrent"]
    executor.zero(allocation)     # outside again: its own push and pop
    assert fake.calls[-4:] == ["cuCtxGetCurrent", "cuCtxPushCurrent", "cuMemsetD32Async", "cuCtxPopCurrent"]


def test_cuda_tensor_maps_are_encoded_with_the_context_current_once_per_geometry(monkeypatch):
    from fmha_mlir.runtime import tensor_maps
    from fmha_mlir.runtime.args import TensorMapArg

    fake = FakeCuda()
    monkeypatch.setattr(cuda_executor, "_driver", lambda: fake)
    monkeypatch.setattr(tensor_maps, "encode_tiled", lambda cu, e: fake.calls.append("encode") or bytes(128))
    executor = cuda_executor.CudaExecutor()
    arg = TensorMapArg("a_map", DeviceBuffer("a", "bf16", (128, 64), (64, 1), 0x10000), (64, 64), 128)
    del fake.calls[:]
    assert executor.encode_tensor_map(arg, 0x10000) == bytes(128)
    # a process with no current context (no torch): the driver refuses the encoding unless ours is pushed
    assert fake.calls == ["cuCtxGetCurrent", "cuCtxPushCurrent", "encode", "cuCtxPopCurrent"]
    executor.encode_tensor_map(arg, 0x10000)
    assert fake.calls.count("encode") == 1   # cached: no driver call, no context switch
    assert len(fake.calls) == 4


def test_cuda_launch_passes_a_pointer_to_each_packed_field_on_the_given_stream(monkeypatch):
    seen = []

    class Driver(FakeCuda):
        def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            pointers = (ctypes.c_uint64 * 7).from_address(params)   # x: ptr, ptr, offset, size, stride; n; s
            values = [ctypes.c_uint64.from_address(p).value for p in pointers[:5]]
            values += [ctypes.c_int32.from_address(pointers[5]).value, ctypes.c_float.from_address(pointers[6]).value]
            seen.append(((gx, gy, gz), (bx, by, bz), shared, stream, values))
            return (0,)

    monkeypatch.setattr(cuda_executor, "_driver", lambda: Driver())
    executor = cuda_executor.CudaExecutor()
    kernels = cuda_executor.CudaKernels(executor, "module")
    args = [DeviceBuffer("x", "f32", (9,), (1,), 0xABC000), ScalarArg("n", "i32", 9), ScalarArg("s", "f32", 0.5)]
    run = kernels.prepare("k", (3, 2, 1), (128, 1, 1), args, 0, stream=42)
    run(), run()   # packed once, launched twice
    assert seen == [((3, 2, 1), (128, 1, 1), 0, 42, [0xABC000, 0xABC000, 0, 9, 1, 9, 0.5])] * 2


class FakeHip:
    """Enough of hip-python's `hip` module to drive HipExecutor: records the launch's kernarg buffer."""

    HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END = 1, 2, 3
    hipMemcpyKind = types.SimpleNamespace(hipMemcpyHostToDevice=1, hipMemcpyDeviceToHost=2)

    def __init__(self):
        self.launches = []
        self.memory = {}

    def hipSetDevice(self, index):
        return (0,)

    def hipGetDeviceProperties(self, props, index):
        props.gcnArchName = b"gfx942:sramecc+:xnack-\0\0"
        return (0,)

    def hipDeviceProp_t(self):
        return types.SimpleNamespace()

    def hipModuleLoadData(self, image):
        return 0, "module"

    def hipModuleGetFunction(self, module, name):
        return 0, name.decode()

    def hipModuleLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        config = list(extra)
        assert config[0::2] == [1, 2, 3] and params is None
        size = ctypes.c_size_t.from_address(config[3]).value
        self.launches.append((function, (gx, gy, gz), (bx, by, bz), ctypes.string_at(config[1], size)))
        return (0,)


@pytest.mark.parametrize("target", ["amdgcn-amd-amdhsa--gfx942", "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",
                                    "amdgcn-amd-amdhsa--gfx942:xnack+"])
def test_code_object_arch_ignores_target_features(target):
    assert target_arch(target) == "gfx942"


def test_hip_launch_passes_the_checked_blob_through_extra(monkeypatch, metadata_cases):
    kernel, metadata, args = next(c for c in metadata_cases if c[0] == runtime_probe.KERNEL)
    fake = FakeHip()
    monkeypatch.setattr(hip_executor, "_hip", lambda: fake)
    executor = hip_executor.HipExecutor()
    assert executor.arch == "gfx942"
    executor.load(runtime_probe.build_probe_bundle("gfx942")).launch(kernel, (5, 3, 2), (4, 1, 1), args)
    assert fake.launches == [(kernel, (5, 3, 2), (4, 1, 1), pack_args(args).blob)]
    with pytest.raises(RuntimeLaunchError, match="this GPU is gfx942"):
        executor.load(runtime_probe.build_probe_bundle("gfx950"))


# -- the CPU executor on real bundles (needs the interpreter) ---------------------------------------


@pytest.fixture(scope="module")
def interpreter_ready():
    usable, reason = CpuExecutor.available()
    if not usable:
        pytest.skip(reason)


@pytest.mark.parametrize("arch", ["gfx942", "sm_90"])
def test_cpu_executor_runs_the_probe(interpreter_ready, arch):
    pytest.importorskip("fmha_mlir.mlir", reason="building the probe needs MLIR")
    x = runtime_probe.probe_input()
    got = runtime_probe.run_probe(CpuExecutor(), runtime_probe.build_probe_bundle(arch), x)
    np.testing.assert_array_equal(got, runtime_probe.expected_output(x))


@pytest.mark.parametrize("arch", ["gfx942", "sm_90"])
def test_cpu_executor_runs_an_attention_bundle_within_tolerance(interpreter_ready, arch):
    pytest.importorskip("fmha_mlir.mlir", reason="compiling needs MLIR")
    from fmha_mlir.compiler import compile_spec
    from fmha_mlir.problem import ProblemSize, make_problem

    compiled = compile_spec(SPEC, arch)
    bundle = Bundle(compiled.manifest, compiled.bundle_files())
    problem = make_problem(SPEC, ProblemSize(batch=1, heads_q=2, seqlen_q=9, seqlen_k=13), seed=3, layout="bshd")
    result = run_bundle(bundle, CpuExecutor(atomic_order="random"), problem.tensors)
    checks = problem.check(result, bundle.numerics)
    assert all(c.passed for c in checks), "\n".join(map(str, checks))


def test_runtime_imports_without_mlir_or_vendor_bindings():
    """The GPU machines have no MLIR: the runtime must import (and pick an executor) with NumPy alone."""
    import subprocess

    code = ("import sys\n"
            "for blocked in ('flydsl', 'fmha_mlir.mlir', 'cuda', 'hip', 'elftools', 'msgpack'):\n"
            "    sys.modules[blocked] = None\n"
            "import fmha_mlir.runtime.runner, fmha_mlir.runtime.cpu_executor, fmha_mlir.runtime.cuda_executor\n"
            "import fmha_mlir.runtime.hip_executor, fmha_mlir.runtime.hsaco_metadata, fmha_mlir.runtime.interp\n"
            "import fmha_mlir.oracle, fmha_mlir.tolerance, fmha_mlir.problem\n"
            "from fmha_mlir.runtime.executor import executor_class, get_executor\n"
            "print(executor_class('cuda').available()[1]); print(executor_class('hip').available()[1])\n"
            "print(get_executor().name)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "needs cuda-bindings" in out and "needs hip-python" in out and out.endswith("cpu\n")


def test_strides_that_break_vector_alignment_are_refused():
    """A padded row stride (130 elements for hdim 128) would misalign the per-lane vector loads."""
    from fmha_mlir.api import compile_bundle  # needs MLIR: this test compiles
    from fmha_mlir.problem import ProblemSize, make_problem

    spec = AttentionBwdSpec(dtype="f16", hdim_q=128)
    bundle = compile_bundle(spec, "sm_90", body="warp")
    tensors = {n: a for n, a in make_problem(spec, ProblemSize(1, 1, 3, 3)).tensors.items()}
    padded = np.zeros((1, 1, 3, 130), np.float16)
    padded[..., :128] = tensors["q"]
    tensors["q"] = padded[..., :128]
    with pytest.raises(RuntimeLaunchError, match=r"tensor 'q' has element strides \[390, 390, 130\].*multiple of 4"):
        run_bundle(bundle, CpuExecutor(), tensors)


@pytest.mark.parametrize("shape,message", [
    ((3, 4, 5, 7), "the bias's bias_batch is 3: it must be 1 \\(broadcast over every batch\\) or batch = 2"),
    ((1, 2, 5, 7), "the bias's bias_heads is 2: it must be 1 \\(broadcast over every query head\\) or heads_q = 4"),
    ((1, 4, 5, 6), "tensor 'bias' has shape \\(1, 4, 5, 6\\).*its seqlen_k is 6, but 'k' says 7"),
])
def test_a_bias_that_does_not_broadcast_is_refused(shape, message):
    from fmha_mlir.api import compile_bundle  # needs MLIR: this test compiles
    from fmha_mlir.problem import ProblemSize, make_problem

    spec = AttentionBwdSpec(dtype="f32", hdim_q=32, bias="elementwise", dbias=True)
    bundle = compile_bundle(spec, "sm_90", body="warp")
    tensors = dict(make_problem(spec, ProblemSize(2, 4, 5, 7)).tensors)
    tensors["bias"] = np.zeros(shape, np.float32)
    with pytest.raises(RuntimeLaunchError, match=message):
        run_bundle(bundle, CpuExecutor(), tensors)


@pytest.mark.parametrize("edit", ["steps reordered", "a zero fill repeated", "the binary changed", "no digest"])
def test_a_bundle_edited_after_it_was_written_is_refused(tmp_path, edit):
    """A manifest edited into another launch plan would run and return wrong gradients: save()
    stamps a digest of the manifest and the files; load() refuses a bundle that no longer matches it."""
    directory = attention_bundle().save(tmp_path / "b")
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    if edit == "steps reordered":
        manifest["steps"][0], manifest["steps"][1] = manifest["steps"][1], manifest["steps"][0]
    elif edit == "a zero fill repeated":   # still a valid plan: the digest is what refuses it
        manifest["steps"].insert(1, {"op": "zero", "buffer": "dk_acc"})
    elif edit == "the binary changed":
        binary = directory / manifest["binary"]["file"]
        binary.write_bytes(binary.read_bytes() + b"\0")
    else:
        del manifest["digest"]
    path.write_text(json.dumps(manifest))
    with pytest.raises(RuntimeLaunchError) as caught:
        Bundle.load(directory)
    why = "has no 'digest'" if edit == "no digest" else (
        "does not match its digest: the manifest or a file of the bundle was changed after fmha-compile wrote it")
    assert str(caught.value) == f"{path}: {why}; rebuild the bundle with fmha-compile -o DIR"
