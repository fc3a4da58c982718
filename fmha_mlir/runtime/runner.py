"""Run a bundle's launch plan on an executor: check the tensors, stage buffers, walk the steps.

Tensors keep their strides on the device (BHSD and BSHD are both just strides), so a strided host view
is copied into a staging array that covers its memory span with the same strides. Buffers the plan
writes (outputs, workspaces) start out as NaN: an element no kernel writes shows up as NaN, not as a
plausible zero.

DeviceArrays (tensors already in GPU memory) are used in place: no copies, so then every tensor,
outputs included, must be one, and outputs must be dense (their zero fill covers their whole span).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..dtypes import STORAGE, to_storage
from ..errors import RuntimeLaunchError
from ..spec import AttentionBwdSpec
from .args import DeviceBuffer, bind_args, strided_view
from .bundle import Bundle
from .device_array import DeviceArray
from .executor import Allocation, Executor

# The logical dimension order of every problem tensor (docs/ir.md, "Tensors and layouts").
TENSOR_DIMS = {
    "q": ("batch", "heads_q", "seqlen_q", "hdim_q"),
    "k": ("batch", "heads_kv", "seqlen_k", "hdim_q"),
    "v": ("batch", "heads_kv", "seqlen_k", "hdim_v"),
    "o": ("batch", "heads_q", "seqlen_q", "hdim_v"),
    "do": ("batch", "heads_q", "seqlen_q", "hdim_v"),
    "lse": ("batch", "heads_q", "seqlen_q"),
    "dq": ("batch", "heads_q", "seqlen_q", "hdim_q"),
    "dk": ("batch", "heads_kv", "seqlen_k", "hdim_q"),
    "dv": ("batch", "heads_kv", "seqlen_k", "hdim_v"),
}
INPUTS = ("q", "k", "v", "o", "do", "lse")
OUTPUTS = ("dq", "dk", "dv")


@dataclass(frozen=True)
class Layout:
    """Where a buffer's elements sit in its allocation: strides in elements, element 0 first."""

    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @classmethod
    def contiguous(cls, dtype: str, shape: tuple[int, ...]) -> "Layout":
        """Row-major in the logical order."""
        strides, step = [], 1
        for n in reversed(shape):
            strides.append(step)
            step *= n
        return cls(dtype, tuple(shape), tuple(reversed(strides)))

    @classmethod
    def of(cls, dtype: str, array: np.ndarray) -> "Layout":
        """The layout of a host array (byte strides that are whole elements)."""
        return cls(dtype, array.shape, tuple(s // array.itemsize for s in array.strides))

    @property
    def storage(self) -> np.dtype:
        return STORAGE[self.dtype]

    @property
    def span(self) -> int:
        """Elements from the first to one past the last one the layout reaches."""
        return 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides))

    def view(self, flat: np.ndarray) -> np.ndarray:
        """`flat` (span elements) seen as the logical tensor."""
        return strided_view(flat, self.shape, self.strides)

    def stage(self, host: np.ndarray) -> np.ndarray:
        flat = np.zeros(self.span, self.storage)
        self.view(flat)[...] = host
        return flat


def tensor_dtype(spec: AttentionBwdSpec, name: str) -> str:
    return "f32" if name == "lse" else spec.dtype


def check_tensors(spec: AttentionBwdSpec, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Validate the problem tensors against the spec; returns them with missing outputs allocated
    (contiguous BHSD). Raises RuntimeLaunchError naming the tensor at fault."""
    unknown = sorted(set(tensors) - set(TENSOR_DIMS))
    missing = [name for name in INPUTS if name not in tensors]
    if unknown or missing:
        raise RuntimeLaunchError(f"tensors: unknown {unknown}, missing {missing}; give {', '.join(INPUTS)} "
                                 f"and optionally {', '.join(OUTPUTS)}")
    for name, array in tensors.items():
        _check_array(spec, name, array)
    _check_residency(tensors)
    sizes = {"batch": tensors["q"].shape[0], "heads_q": tensors["q"].shape[1], "seqlen_q": tensors["q"].shape[2],
             "heads_kv": tensors["k"].shape[1], "seqlen_k": tensors["k"].shape[2],
             "hdim_q": spec.hdim_q, "hdim_v": spec.hdim_v}
    for name, value in sizes.items():
        if value < 1:
            raise RuntimeLaunchError(f"tensors: {name} is {value}; every size must be at least 1")
    if sizes["heads_q"] != spec.gqa_ratio * sizes["heads_kv"]:
        raise RuntimeLaunchError(f"tensors: q has {sizes['heads_q']} heads and k has {sizes['heads_kv']}, but the "
                                 f"bundle's gqa_ratio is {spec.gqa_ratio} (heads_q must be gqa_ratio x heads_kv)")
    for name, array in tensors.items():
        expected = tuple(sizes[d] for d in TENSOR_DIMS[name])
        if array.shape != expected:
            raise RuntimeLaunchError(f"tensor {name!r} has shape {array.shape}; expected {expected} = "
                                     f"[{', '.join(TENSOR_DIMS[name])}]")
    given = [name for name in OUTPUTS if name in tensors]
    for name in given:
        _check_output(name, tensors[name], [(other, tensors[other]) for other in given if other < name])
    full = dict(tensors)
    for name in OUTPUTS:
        if name not in full:
            full[name] = np.empty(tuple(sizes[d] for d in TENSOR_DIMS[name]), STORAGE[spec.dtype])
    return full


def _check_residency(tensors: Mapping[str, np.ndarray]) -> None:
    """Host arrays are staged on the device, DeviceArrays used in place: a run takes one kind only."""
    on_device = {name for name, array in tensors.items() if isinstance(array, DeviceArray)}
    if not on_device:
        return
    if on_device != set(tensors) or any(name not in tensors for name in OUTPUTS):
        raise RuntimeLaunchError(
            f"tensors {sorted(on_device)} live in GPU memory but {sorted(set(INPUTS + OUTPUTS) - on_device)} do "
            "not: with GPU-resident tensors pass every input and the dq, dk, dv outputs on the GPU")
    for name in OUTPUTS:
        if not tensors[name].dense:
            raise RuntimeLaunchError(f"output {name!r} on the GPU has gaps between its elements (strides "
                                     f"{tensors[name].strides}); zero-filling it would overwrite them: pass a "
                                     "dense output")


def _check_output(name: str, array: np.ndarray, others: list[tuple[str, np.ndarray]]) -> None:
    """An output array the results are written into must take every element, distinctly, in place."""
    if isinstance(array, DeviceArray):
        for other, other_array in others:
            if _ranges_meet(array, other_array):
                raise RuntimeLaunchError(f"outputs {other!r} and {name!r} share GPU memory, so one would "
                                         "overwrite the other; pass separate tensors")
        return
    if not array.flags.writeable:
        raise RuntimeLaunchError(f"output {name!r} is read-only; pass a writeable array (or none)")
    if _may_overlap(array):
        raise RuntimeLaunchError(f"output {name!r} has strides {array.strides} whose elements overlap; "
                                 "pass an array whose elements are distinct (or none)")
    for other, other_array in others:
        if _shares_memory(array, other_array):
            raise RuntimeLaunchError(f"outputs {other!r} and {name!r} share memory, so one would overwrite "
                                     "the other; pass separate arrays (or none)")


def _ranges_meet(a: DeviceArray, b: DeviceArray) -> bool:
    return a.address < b.address + b.span_bytes and b.address < a.address + a.span_bytes


def _shares_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Exact overlap test, bounded in effort; an undecided case counts as shared (the safe answer)."""
    try:
        return bool(np.shares_memory(a, b, max_work=100_000))
    except np.exceptions.TooHardError:
        return True


def _check_array(spec: AttentionBwdSpec, name: str, array) -> None:
    if not isinstance(array, (np.ndarray, DeviceArray)):
        raise RuntimeLaunchError(f"tensor {name!r} must be a NumPy array (or a DeviceArray), got "
                                 f"{type(array).__name__}")
    dtype = tensor_dtype(spec, name)
    if array.dtype != STORAGE[dtype]:
        hint = " (bf16 travels as uint16 bit patterns: fmha_mlir.dtypes.bf16_bits)" if dtype == "bf16" else ""
        raise RuntimeLaunchError(f"tensor {name!r} has dtype {array.dtype}; this bundle's {dtype} {name} is "
                                 f"stored as {STORAGE[dtype]}{hint}")
    if array.ndim != len(TENSOR_DIMS[name]):
        raise RuntimeLaunchError(f"tensor {name!r} has rank {array.ndim}; expected [{', '.join(TENSOR_DIMS[name])}]")
    if any(s < 0 or s % array.itemsize for s in array.strides):
        raise RuntimeLaunchError(f"tensor {name!r} has byte strides {array.strides}; the kernels take "
                                 "non-negative strides that are whole elements")
    if array.shape[-1] > 1 and array.strides[-1] != array.itemsize:
        raise RuntimeLaunchError(f"tensor {name!r}: its last dimension must be contiguous (stride 1 element), "
                                 f"got byte strides {array.strides}")


def check_slice_alignment(bundle: Bundle, host: Mapping[str, np.ndarray]) -> None:
    """The warp body loads a lane's hdim / wave_size contiguous elements as one vector that claims the
    alignment of its largest power-of-two run (passes/lane_slice.py): every stride must keep it."""
    for name, array in host.items():
        if array.ndim != 4:
            continue
        per_lane = array.shape[-1] // bundle.target.wave_size
        run = per_lane & -per_lane if per_lane else 1
        strides = [s // array.itemsize for s in array.strides[:-1]]
        if any(s % run for s, n in zip(strides, array.shape) if n > 1):  # a size-1 dim is never stepped
            raise RuntimeLaunchError(
                f"tensor {name!r} has element strides {strides}; the {bundle.target.arch} kernels load {run} "
                f"elements per lane as one aligned vector, so every stride must be a multiple of {run} "
                "(copy the tensor to a contiguous layout)")
        if isinstance(array, DeviceArray) and array.address % (run * array.itemsize):
            raise RuntimeLaunchError(
                f"tensor {name!r} starts at GPU address {array.address:#x}, which is not aligned to the "
                f"{run * array.itemsize}-byte vectors the {bundle.target.arch} kernels load (a view with a "
                "storage offset?): pass a tensor that starts at an aligned address")


def _may_overlap(array: np.ndarray) -> bool:
    """True unless each dimension's stride clears the span of all smaller-strided dimensions."""
    reach = 1
    for n, s in sorted(((n, s // array.itemsize) for n, s in zip(array.shape, array.strides) if n > 1),
                       key=lambda d: d[1]):
        if s < reach:
            return True
        reach += (n - 1) * s
    return False


def plan_layouts(bundle: Bundle, host: Mapping[str, np.ndarray]) -> dict[str, Layout]:
    """Problem buffers keep the strides of their host arrays; workspaces are contiguous, shaped like
    the buffer named by their 'like'."""
    layouts: dict[str, Layout] = {}

    def layout_of(name: str, seen: tuple[str, ...] = ()) -> Layout:
        if name in layouts:
            return layouts[name]
        if name in seen:
            raise RuntimeLaunchError(f"bundle workspaces {' -> '.join(seen + (name,))} are 'like' each other in a cycle")
        buf = bundle.buffers[name]
        if buf["role"] == "workspace":
            layout = Layout.contiguous(buf["dtype"], layout_of(buf["like"], seen + (name,)).shape)
        elif name not in host:
            raise RuntimeLaunchError(f"bundle buffer {name!r} is not a problem tensor ({', '.join(TENSOR_DIMS)})")
        else:
            if buf["dtype"] != tensor_dtype(bundle.spec, name):
                raise RuntimeLaunchError(f"bundle buffer {name!r} is {buf['dtype']} but its spec says "
                                         f"{tensor_dtype(bundle.spec, name)}: the bundle is inconsistent")
            layout = Layout.of(buf["dtype"], host[name])
        layouts[name] = layout
        return layout

    absent = [name for name in TENSOR_DIMS if name not in bundle.buffers]
    if absent:
        raise RuntimeLaunchError(f"the bundle's buffers lack problem tensor(s) {absent}: the bundle is inconsistent")
    for name in bundle.buffers:
        layout_of(name)
    return layouts


class PreparedRun:
    """A bundle's buffers staged on `device`: `launch()` runs every step (as often as wanted, e.g. to
    time it), `results()` downloads dq, dk, dv. Use it as a context manager to free the buffers."""

    def __init__(self, bundle: Bundle, device: Executor, tensors: Mapping[str, np.ndarray]):
        device.check_bundle(bundle)
        self.bundle, self.device = bundle, device
        self.host = check_tensors(bundle.spec, tensors)
        check_slice_alignment(bundle, self.host)
        self.layouts = plan_layouts(bundle, self.host)
        device.load(bundle)
        self.allocations: dict[str, Allocation] = {}
        self.buffers: dict[str, DeviceBuffer] = {}
        try:
            for name, layout in self.layouts.items():
                nbytes = layout.span * layout.storage.itemsize
                array = self.host.get(name)
                if isinstance(array, DeviceArray):  # used in place: borrowed, never copied or freed
                    allocation = device.borrow(array.address, nbytes)
                else:
                    allocation = self.allocations[name] = device.alloc(nbytes)
                    role = bundle.buffers[name]["role"]
                    staged = layout.stage(array) if role == "input" else np.full(
                        layout.span, to_storage(np.float32(np.nan), layout.dtype), layout.storage)
                    device.upload(allocation, staged)
                self.buffers[name] = DeviceBuffer(name, layout.dtype, layout.shape, layout.strides,
                                                  allocation.address, allocation)
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def launch(self) -> None:
        for index, step in enumerate(self.bundle.steps):
            _run_step(self.bundle, self.device, index, step, self.layouts, self.buffers)

    def results(self) -> dict[str, np.ndarray]:
        """dq, dk, dv (written into the output arrays passed in, when given)."""
        self.device.synchronize()
        for name in OUTPUTS:
            if isinstance(self.host[name], DeviceArray):
                continue  # the kernels wrote it in place
            flat = np.empty(self.layouts[name].span, self.layouts[name].storage)
            self.device.download(self.allocations[name], flat)
            self.host[name][...] = self.layouts[name].view(flat)
        return {name: self.host[name] for name in OUTPUTS}

    def close(self) -> None:
        """Free every buffer, even when freeing one fails (the first failure is raised afterwards)."""
        allocations, self.allocations = self.allocations, {}
        failure = None
        for allocation in allocations.values():
            try:
                self.device.free(allocation)
            except Exception as exc:  # keep freeing the rest
                failure = failure or exc
        if failure is not None:
            raise failure

    def __enter__(self) -> "PreparedRun":
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        try:
            self.close()
        except Exception:
            if exc is None:
                raise
            # else let `exc` propagate: it is the cause, and after a kernel fault every free fails too


def run_bundle(bundle: Bundle, device: Executor, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the bundle's steps on `device`; returns dq, dk, dv (the arrays passed in, when given)."""
    with PreparedRun(bundle, device, tensors) as run:
        run.launch()
        return run.results()


def _run_step(bundle: Bundle, device: Executor, index: int, step: dict, layouts: dict[str, Layout],
              buffers: dict[str, DeviceBuffer]) -> None:
    if step["op"] == "zero":
        device.zero(buffers[step["buffer"]].allocation)
        return
    kernel = step["kernel"]
    grid = []
    for entry in step["grid"]:
        shape = layouts[entry["buffer"]].shape
        if not 0 <= entry["dim"] < len(shape):
            raise RuntimeLaunchError(f"manifest step {index} ({kernel}): grid uses dim {entry['dim']} of "
                                     f"{entry['buffer']!r}, which has rank {len(shape)}")
        grid.append(shape[entry["dim"]])
    args = bind_args(kernel, bundle.kernels[kernel]["args"], step["args"], buffers)
    device.launch(kernel, grid, step["block"], args, step.get("shared_bytes", 0))
