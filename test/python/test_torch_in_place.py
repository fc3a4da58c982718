"""AttentionBackward's bound calls on torch CUDA tensors, without a GPU: the real code down to
cuLaunchKernel against tools/cuda_stand_in.py's driver and CPU tensors that say they are on cuda:0.

What a fast path could get wrong, checked: every launch's kernarg blob must be what pack_args makes of
THIS call's tensors (addresses, sizes, strides), byte for byte, on every call; a call whose strides,
dtype, options or device differ must not run a plan bound for another; an address the kernels cannot
load from must still be refused on every call.
"""
from __future__ import annotations

import cProfile
import ctypes
import pstats
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))   # the stand-ins live beside the benchmark

import cuda_stand_in  # noqa: E402
from fmha_mlir import AttentionBackward, SpecError  # noqa: E402
from fmha_mlir.api import bundle_path, compile_bundle  # noqa: E402
from fmha_mlir.torch_in_place import torch_device_array  # noqa: E402
from fmha_mlir.errors import RuntimeLaunchError  # noqa: E402
from fmha_mlir.runtime.args import DeviceBuffer, ScalarArg, pack_args, pointer_fields  # noqa: E402
from fmha_mlir.runtime.bound_plan import WORKSPACE_ALIGN  # noqa: E402
from fmha_mlir.runtime.runner import plan_layouts, scalar_value  # noqa: E402

SHAPE = (2, 2, 40, 64)   # B H S D: bf16, causal top-left
MASK = "top_left"
PROBLEM = ("q", "k", "v", "o", "do", "lse", "dq", "dk", "dv")


def _tensors(seed=0, bshd=False, offset=0):
    """q, k, v, o, do, lse as stand-in CUDA tensors at fresh addresses (in BSHD storage, or `offset`
    elements into their storage, when asked)."""
    g = torch.Generator().manual_seed(seed)
    b, h, s, d = SHAPE

    def make(shape, dtype):
        if bshd and len(shape) == 4:
            return torch.randn((b, s, h, d), generator=g).to(dtype).transpose(1, 2)
        flat = torch.randn(int(np.prod(shape)) + offset, generator=g).to(dtype)
        return flat[offset:].view(shape)

    xs = [make(SHAPE, torch.bfloat16) for _ in range(5)] + [make(SHAPE[:3], torch.float32)]
    return [cuda_stand_in.cuda_like(x) for x in xs]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(the bundle directory, the sm_90 bundle these calls ask for) (needs MLIR)."""
    directory = tmp_path_factory.mktemp("bundles")
    spec = AttentionBackward().spec_for(*_tensors()[:3], mask=MASK)
    bundle = compile_bundle(spec, "sm_90")
    bundle.save(bundle_path(directory, spec, "sm_90"))
    return str(directory), bundle


class Recorder:
    """What the stand-in driver was asked to do: each launch's kernel, stream, parameter pointers and
    kernarg bytes (read at the launch: the driver copies them then; `bundle`'s kernels only), and each
    zero fill."""

    def __init__(self, bundle):
        self.launches, self.fills = [], []
        self.layouts = {name: _layout(kernel["args"]) for name, kernel in bundle.kernels.items()}
        self.driver = cuda_stand_in.StandInDriver(on_launch=self.launch, on_fill=self.fill)

    def launch(self, function, grid, block, shared, stream, params):
        if function not in self.layouts:   # another bundle's kernel: counted only
            self.launches.append((function, stream, None, None))
            return
        offsets, size = self.layouts[function]
        pointers = list((ctypes.c_uint64 * len(offsets)).from_address(params))
        self.launches.append((function, stream, pointers, ctypes.string_at(pointers[0], size)))

    def fill(self, pointer, nbytes, stream):
        self.fills.append((int(pointer), nbytes, stream))


def _layout(params: list[dict]) -> tuple[tuple[int, ...], int]:
    """(field offsets, blob bytes) of a kernel's arguments, from its manifest parameters alone."""
    args = [DeviceBuffer(f"arg{i}", p["dtype"], (1,) * p["rank"], (1,) * p["rank"], 0) if "buffer" in p
            else ScalarArg(f"arg{i}", p["scalar"], 0) for i, p in enumerate(params)]
    packed = pack_args(args)
    return packed.offsets, packed.size


@pytest.fixture
def recorder(built):
    record = Recorder(built[1])
    with cuda_stand_in.torch_cuda_stand_ins(record.driver):
        yield record


def _check_launches(bundle, tensors, grads, record: Recorder) -> None:
    """Each launch's blob is pack_args of its step's arguments on THIS call's tensors (addresses, sizes
    and strides read from the tensors themselves), byte for byte. The workspaces' addresses, which only
    the run knows, are read from the blobs: each must lie apart from every other buffer."""
    arrays = {name: torch_device_array(t) for name, t in zip(PROBLEM, (*tensors, *grads))}
    layouts = plan_layouts(bundle, arrays)
    addresses = {name: a.address for name, a in arrays.items()}
    shapes = {name: layout.shape for name, layout in layouts.items()}
    steps = [s for s in bundle.steps if s["op"] == "launch"]
    assert [launch[0] for launch in record.launches] == [s["kernel"] for s in steps]
    for step, (kernel, stream, pointers, blob) in zip(steps, record.launches):
        args = [ScalarArg(f"arg{i}", arg["scalar"], scalar_value(arg, shapes, kernel, {})) if "buffer" not in arg
                else DeviceBuffer(arg["buffer"], layouts[arg["buffer"]].dtype, layouts[arg["buffer"]].shape,
                                  layouts[arg["buffer"]].strides, addresses.get(arg["buffer"], 0))
                for i, arg in enumerate(step["args"])]
        packed = pack_args(args)
        assert [p - pointers[0] for p in pointers] == list(packed.offsets) and stream == cuda_stand_in.STREAM
        for offset, name in pointer_fields(packed):   # a workspace's address: this run's
            addresses.setdefault(name, int(np.frombuffer(blob[offset:offset + 8], np.uint64)[0]))
        args = [DeviceBuffer(a.name, a.dtype, a.shape, a.strides, addresses[a.name]) if isinstance(a, DeviceBuffer)
                else a for a in args]
        assert blob == pack_args(args).blob, kernel
    # what the kernels write (gradients, workspaces) lies apart from every other buffer (inputs may share
    # memory: views of one fused projection)
    spans = {name: (address, address + layouts[name].nbytes) for name, address in addresses.items()}
    for written in (name for name in spans if name not in PROBLEM[:6]):
        assert all(spans[written][1] <= start or end <= spans[written][0]
                   for other, (start, end) in spans.items() if other != written), (written, spans)
    workspaces = [addresses[name] for name in layouts if name not in arrays]   # one allocation, aligned parts
    assert all((a - min(workspaces)) % WORKSPACE_ALIGN == 0 for a in workspaces)
    zeroed = [s["buffer"] for s in bundle.steps if s["op"] == "zero"]
    assert record.fills == [(addresses[n], layouts[n].nbytes, cuda_stand_in.STREAM) for n in zeroed]


def test_every_launch_carries_this_calls_tensors_byte_for_byte(built, recorder):
    ours = AttentionBackward(executor="cuda", bundle_dir=built[0])
    for seed in range(3):   # the first call binds; the next two run the bound call
        del recorder.launches[:], recorder.fills[:]
        tensors = _tensors(seed)
        grads = ours(*tensors, mask=MASK)
        assert len(ours._calls._plans) == 1
        _check_launches(built[1], tensors, grads, recorder)


def test_a_repeat_call_skips_the_spec_and_its_checks(built, recorder, monkeypatch):
    ours = AttentionBackward(executor="cuda", bundle_dir=built[0])
    ours(*_tensors(0), mask=MASK)
    monkeypatch.setattr(AttentionBackward, "spec_for", lambda *a, **k: pytest.fail("the repeat call made a spec"))
    tensors = _tensors(1)
    ours(*tensors, mask=MASK)
    profiler = cProfile.Profile()
    profiler.runcall(ours, *tensors, mask=MASK)
    # ~100 (reports/bench_host_path.md); the unbound path takes ~900
    assert pstats.Stats(profiler).prim_calls < 200


class OtherGpu(cuda_stand_in.CudaLike):
    __module__ = cuda_stand_in.CudaLike.__module__   # a torch tensor's, as fmha_mlir tells them
    device = torch.device("cuda", 1)


@pytest.mark.parametrize("change", ["bshd strides", "mask", "lse dtype", "k on the cpu", "another gpu"])
def test_a_call_of_another_kind_does_not_run_the_bound_one(built, recorder, change):
    ours = AttentionBackward(executor="cuda", bundle_dir=built[0])
    ours(*_tensors(0), mask=MASK)
    tensors, mask = _tensors(1, bshd=change == "bshd strides"), MASK
    if change == "mask":
        mask = "bottom_right"   # another spec: not in the directory, so compiled here
    if change == "lse dtype":
        tensors[5] = cuda_stand_in.cuda_like(tensors[5].half())
    if change == "k on the cpu":
        tensors[1] = torch.Tensor._make_subclass(torch.Tensor, tensors[1])
    if change == "another gpu":
        tensors = [torch.Tensor._make_subclass(OtherGpu, t) for t in tensors]
    errors = {"lse dtype": (RuntimeLaunchError, "tensor 'lse' has dtype float16"),
              "k on the cpu": (SpecError, "k: lives on cpu and q on cuda:0"),
              "another gpu": (SpecError, r"the tensors live on cuda:1 but this AttentionBackward drives cuda:0")}
    del recorder.launches[:], recorder.fills[:]
    if change in errors:
        with pytest.raises(errors[change][0], match=errors[change][1]):
            ours(*tensors, mask=mask)
        assert not recorder.launches and len(ours._calls._plans) == 1
        return
    grads = ours(*tensors, mask=mask)
    assert len(ours._calls._plans) == 2
    if change == "bshd strides":   # the launches carry the BSHD strides, and the gradients keep them
        _check_launches(built[1], tensors, grads, recorder)
        assert grads[0].stride() == tensors[0].stride() != _tensors(0)[0].stride()


def test_a_misaligned_address_is_refused_on_every_call(built, recorder):
    """One element into its storage: the same shape, strides and dtype as an aligned q (the same key),
    at an address the kernels' 16-byte loads cannot start from."""
    ours = AttentionBackward(executor="cuda", bundle_dir=built[0])
    ours(*_tensors(0), mask=MASK)
    shifted = _tensors(1, offset=1)
    del recorder.launches[:]
    for _ in range(2):
        with pytest.raises(RuntimeLaunchError, match="tensor 'q' starts at GPU address .* not aligned to the 16-byte"):
            ours(*shifted, mask=MASK)
    assert not recorder.launches and len(ours._calls._plans) == 1
    ours(*_tensors(2), mask=MASK)   # and the bound call still serves aligned tensors
    assert len(recorder.launches) == 3


def test_debug_calls_poison_and_are_never_bound(built, recorder):
    ours = AttentionBackward(executor="cuda", bundle_dir=built[0], debug=True)
    for _ in range(2):
        ours(*_tensors(0), mask=MASK)
    assert not ours._calls._plans and recorder.driver.synchronizations > 0 and len(recorder.launches) == 6


def test_varlen_calls_are_bound_by_their_max_lengths_and_only_when_given(tmp_path, recorder):
    """The max lengths size the grids: a call with other ones is another kind; without them they are read
    from cu_seqlens on the host at every call, so such a call is never bound."""
    g = torch.Generator().manual_seed(0)
    total, heads, dim = 21, 2, 64
    q, k, v, o, do = (cuda_stand_in.cuda_like(torch.randn(total, heads, dim, generator=g).to(torch.bfloat16))
                      for _ in range(5))
    lse = cuda_stand_in.cuda_like(torch.randn(heads, total, generator=g))
    cu = cuda_stand_in.cuda_like(torch.tensor([0, 9, 21], dtype=torch.int32))
    ours = AttentionBackward(executor="cuda", bundle_dir=str(tmp_path))
    spec = ours.spec_for(q, k, v, mask=MASK, varlen=True)
    compile_bundle(spec, "sm_90").save(bundle_path(tmp_path, spec, "sm_90"))

    def call(**lengths):
        del recorder.launches[:]
        ours(q, k, v, o, do, lse, mask=MASK, cu_seqlens_q=cu, cu_seqlens_k=cu, **lengths)
        return [launch[1:] for launch in recorder.launches]

    call(max_seqlen_q=12, max_seqlen_k=12)
    call(max_seqlen_q=12, max_seqlen_k=12)
    assert len(ours._calls._plans) == 1
    call(max_seqlen_q=16, max_seqlen_k=16)
    assert len(ours._calls._plans) == 2
    call()
    assert len(ours._calls._plans) == 2


def test_the_host_path_benchmark_runs_here(built):
    """tools/bench_host_path.py on the same bundle (its shape differs, its spec does not)."""
    import bench_host_path

    rows = bench_host_path.run(Path(built[0]), calls=3, repeats=1)
    assert [r["entry"] for r in rows] == ["AttentionBackward", "backward op", "forward", "step"]
    assert all(0 < r["stand_in_calls"] < r["calls"] for r in rows)
    assert rows[0]["calls"] < 200    # bound: ~100 (bench_host_path.md)


def _fused_qkv(seed=0):
    """q, k, v, o, do, lse with q, k, v [B, H, S, D] views of one fused [B, S, 3, H, D] projection (a
    GPT's attention inputs: no tensor of them is dense)."""
    b, h, s, d = SHAPE
    fused = torch.randn((b, s, 3, h, d), generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)
    q, k, v = (cuda_stand_in.cuda_like(fused[:, :, i].transpose(1, 2)) for i in range(3))
    return [q, k, v] + _tensors(seed)[3:]


def test_the_ops_cuda_backward_runs_its_own_bound_call_on_this_calls_tensors(built, recorder, monkeypatch):
    """fmha_mlir::attention_backward on CUDA tensors binds a BoundBackward on its Call, once per strides, and
    never goes through AttentionBackward's call; the launches carry this call's tensors, in both layouts and
    on a fused projection's views, and write the gradients it returns (contiguous: nothing copies them)."""
    from fmha_mlir.spec import Mask
    from fmha_mlir.torch import ops
    from fmha_mlir.torch import backward, call
    from fmha_mlir.torch.call import checked_call
    from fmha_mlir.torch.options import AttentionOptions

    backward.backward_runner.cache_clear()   # executors (and the Calls' bindings) of this test's driver
    call._checked.cache_clear()
    monkeypatch.setattr(AttentionBackward, "__call__", lambda *a, **k: pytest.fail("went through __call__"))
    for storage in ("bhsd", "bshd", "qkv"):
        layout = "bshd" if storage == "bshd" else "bhsd"
        text = AttentionOptions(mask=Mask.parse(MASK), layout=layout, bundle_dir=built[0]).text()
        for seed in range(3):   # the first call binds; the next two run the bound call
            del recorder.launches[:], recorder.fills[:]
            tensors = _fused_qkv(seed) if storage == "qkv" else _tensors(seed, bshd=layout == "bshd")
            q, k, v, o, do, lse = (t.transpose(1, 2) if layout == "bshd" and t.dim() == 4 else t for t in tensors)
            with cuda_stand_in.every_tensor_on_cuda():   # the op's views of stand-ins are plain tensors
                grads = ops.attention_backward(do, q, k, v, o, lse, None, None, None, None, text)
                # bound once, then reused (the fused views: the bhsd Call's second strides)
                assert len(checked_call(text, q, k, v, None, None).bound) == (2 if storage == "qkv" else 1)
            assert all(g.is_contiguous() for g in grads) and q.is_contiguous() == (storage != "qkv")
            logical = [g.transpose(1, 2) if layout == "bshd" else g for g in grads]
            _check_launches(built[1], tensors, logical, recorder)


def test_a_9_0_chip_compiles_for_sm_90a_and_runs_a_prebuilt_sm_90_bundle(built, recorder):
    """The stand-in driver says compute capability 9.0 (an H100 / H200): the backward's target is sm_90a
    (the wgmma body), and the directory's sm_90 bundle serves it, since sm_90 binaries run there too."""
    runner = AttentionBackward(executor="cuda", bundle_dir=built[0])
    assert runner.device().capability == (9, 0) and runner.target_arch() == "sm_90a"
    assert runner.bundle(runner.spec_for(*_tensors()[:3], mask=MASK)).target.arch == "sm_90"
