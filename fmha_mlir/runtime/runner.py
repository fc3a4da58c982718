"""Run a bundle's launch plan on an executor: check the tensors, stage buffers, walk the steps.

Tensors keep their strides on the device (BHSD and BSHD are both just strides), so a strided host view
is copied into a staging array that covers its memory span with the same strides. Buffers the plan
writes (outputs, workspaces) start out as NaN: an element no kernel writes shows up as NaN, not as a
plausible zero.

DeviceArrays (tensors already in GPU memory) are used in place: no copies, so then every tensor,
outputs included, must be one, and outputs must be dense (their zero fill covers their whole span).
A training loop's caller (fmha_mlir.torch) also hands over its stream and a workspace allocator (torch's
caching allocator) and turns poisoning off: then a run allocates nothing itself, copies nothing to or
from the host and never waits for the device.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from .. import shape_expr
from .. import varlen
from ..dtypes import BUFFER_STORAGE as STORAGE, INDEX_STORAGE, to_storage
from ..errors import RuntimeLaunchError
from .addressing import check_dimensions, check_extents
from .args import DeviceBuffer, ScalarArg, TensorMapArg, bind_args, strided_view, with_buffers
from .bundle import Bundle
from .device_array import DeviceArray
from .executor import Allocation, Executor, KernelSet
from .tensor_maps import tiled_encoding


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
        """The layout of a host array (byte strides that are whole elements). A size-1 dimension is never
        stepped, so its stride is whatever the array says (torch gives lse [B, H, 1] a stride of H):
        it is set to the contiguous one, which a kernel's unit-stride row copies accept."""
        strides, step = [], 1
        for n, s in zip(reversed(array.shape), reversed(array.strides)):
            strides.append(step if n == 1 else s // array.itemsize)
            step = strides[-1] * n
        return cls(dtype, tuple(array.shape), tuple(reversed(strides)))

    @property
    def storage(self) -> np.dtype:
        return STORAGE[self.dtype]

    @property
    def span(self) -> int:
        """Elements from the first to one past the last one the layout reaches."""
        return 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides))

    @property
    def nbytes(self) -> int:
        """Bytes of the allocation that holds the span."""
        return self.span * self.storage.itemsize

    def view(self, flat: np.ndarray) -> np.ndarray:
        """`flat` (span elements) seen as the logical tensor."""
        return strided_view(flat, self.shape, self.strides)

    def stage(self, host: np.ndarray) -> np.ndarray:
        flat = np.zeros(self.span, self.storage)
        self.view(flat)[...] = host
        return flat


def problem_buffers(bundle: Bundle) -> dict[str, dict]:
    """The manifest's problem tensors (inputs and outputs), by name, in manifest order."""
    return {name: buf for name, buf in bundle.buffers.items() if buf["role"] != "workspace"}


def check_scalars(bundle: Bundle, tensors: Mapping[str, np.ndarray], scalars: Mapping[str, int] | None) -> dict:
    """The scalars the bundle's plan reads (varlen's max lengths): each given, a positive int; with host
    cu_seqlens, that they describe the packed tensors (GPU-resident ones are trusted, as FlashAttention
    trusts them: reading them would wait for the device)."""
    wanted = bundle.manifest.get("scalars", [])
    given = dict(scalars or {})
    if sorted(given) != sorted(wanted):
        raise RuntimeLaunchError(f"scalars: the bundle takes {wanted or 'none'}, got {sorted(given) or 'none'}")
    for name, value in given.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise RuntimeLaunchError(f"scalar {name!r} must be a positive integer (got {value!r})")
    # No sequence is longer than its packed tensor: a larger bound (FlashAttention takes one) would only
    # size grids and workspaces for rows that do not exist, up to hundreds of GiB.
    for name, tensor in zip(varlen.MAX_SEQLENS, ("q", "k")):
        if name in given and tensor in tensors:
            given[name] = min(int(given[name]), tensors[tensor].shape[0])
    cu = [tensors.get(name) for name in varlen.CU_SEQLENS]
    if wanted and all(isinstance(c, np.ndarray) for c in cu) and all(
            isinstance(tensors.get(n), np.ndarray) for n in ("q", "k")):
        problem = varlen.check_cu_seqlens(cu[0], cu[1], tensors["q"].shape[0], tensors["k"].shape[0],
                                          given["max_seqlen_q"], given["max_seqlen_k"])
        if len(cu[0]) != len(cu[1]):
            problem = f"cu_seqlens_q has {len(cu[0])} entries and cu_seqlens_k {len(cu[1])}: one per batch + 1 each"
        if problem:
            raise RuntimeLaunchError(problem)
    return {name: int(value) for name, value in given.items()}


def check_tensors(bundle: Bundle, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Validate the problem tensors against the bundle's buffers (dtypes, ranks, the sizes their dimension
    names share, static head dims, the GQA ratio, alignment); returns them with missing outputs allocated
    (contiguous). Raises RuntimeLaunchError naming the tensor at fault."""
    buffers = problem_buffers(bundle)
    inputs = [name for name, buf in buffers.items() if buf["role"] == "input"]
    outputs = [name for name, buf in buffers.items() if buf["role"] == "output"]
    unknown = sorted(set(tensors) - set(buffers))
    missing = [name for name in inputs if name not in tensors]
    if unknown or missing:
        raise RuntimeLaunchError(f"tensors: unknown {unknown}, missing {missing}; give {', '.join(inputs)} "
                                 f"and optionally {', '.join(outputs)}")
    for name, array in tensors.items():
        _check_array(name, array, buffers[name])
    _check_residency(tensors, inputs, outputs)
    sizes = _sizes(tensors, buffers)
    _check_broadcast(sizes)
    check_dimensions(sizes)
    spec = bundle.spec
    if "heads_q" in sizes and "heads_kv" in sizes and sizes["heads_q"] != spec.gqa_ratio * sizes["heads_kv"]:
        raise RuntimeLaunchError(f"tensors: q has {sizes['heads_q']} heads and k has {sizes['heads_kv']}, but the "
                                 f"bundle's gqa_ratio is {spec.gqa_ratio} (heads_q must be gqa_ratio x heads_kv)")
    given = [name for name in outputs if name in tensors]
    for name in given:
        check_output(name, tensors[name], [(other, tensors[other]) for other in given if other < name])
    full = dict(tensors)
    for name in outputs:
        if name not in full:
            shape = tuple(sizes[d] if isinstance(d, str) else d for d in buffers[name]["dims"])
            full[name] = np.empty(shape, STORAGE[buffers[name]["dtype"]])
    for name, array in full.items():
        check_alignment(bundle, name, array, buffers[name]["align"])
    return full


# A bias or slopes tensor broadcasts over a dimension of size 1 (docs/ir.md): else it has the problem's size.
BROADCAST_DIMS = {"bias_batch": "batch", "bias_heads": "heads_q", "slopes_batch": "batch"}


def _check_broadcast(sizes: dict[str, int]) -> None:
    for dim, full in BROADCAST_DIMS.items():
        if dim in sizes and full in sizes and sizes[dim] not in (1, sizes[full]):
            what = {"batch": "batch", "heads_q": "query head"}[full]
            raise RuntimeLaunchError(f"the bias's {dim} is {sizes[dim]}: it must be 1 (broadcast over every "
                                     f"{what}) or {full} = {sizes[full]}")


def _sizes(tensors: Mapping[str, np.ndarray], buffers: dict[str, dict]) -> dict[str, int]:
    """The size of every dimension name, from the tensors given; RuntimeLaunchError on a disagreement."""
    sizes: dict[str, tuple[int, str]] = {}
    for name, array in tensors.items():
        dims = buffers[name]["dims"]
        for axis, (dim, size) in enumerate(zip(dims, array.shape)):
            if size < 1:
                raise RuntimeLaunchError(f"tensor {name!r} has size {size} in dimension {axis}; every size must "
                                         "be at least 1")
            if isinstance(dim, int):
                if size != dim:
                    raise RuntimeLaunchError(f"tensor {name!r} has shape {array.shape}; dimension {axis} must be "
                                             f"{dim} (the bundle's static size)")
                continue
            seen = sizes.setdefault(dim, (size, name))
            if seen[0] != size:
                raise RuntimeLaunchError(f"tensor {name!r} has shape {array.shape} = "
                                         f"[{', '.join(map(str, dims))}]: its {dim} is {size}, but {seen[1]!r} "
                                         f"says {seen[0]}")
    return {dim: size for dim, (size, _) in sizes.items()}


def check_alignment(bundle: Bundle, name: str, array, align: int) -> None:
    """The kernels load `align` elements of this tensor as one aligned vector: every stride that is
    stepped, and a GPU tensor's address, must keep that alignment."""
    if align == 1:
        return
    strides = [s // array.itemsize for s in array.strides[:-1]]
    if any(s % align for s, n in zip(strides, array.shape) if n > 1):  # a size-1 dim is never stepped
        raise RuntimeLaunchError(
            f"tensor {name!r} has element strides {strides}; the {bundle.target.arch} kernels load {align} "
            f"elements of it as one aligned vector, so every stride must be a multiple of {align} "
            "(copy the tensor to a contiguous layout)")
    if isinstance(array, DeviceArray) and array.address % (align * array.itemsize):
        raise RuntimeLaunchError(
            f"tensor {name!r} starts at GPU address {array.address:#x}, which is not aligned to the "
            f"{align * array.itemsize}-byte vectors the {bundle.target.arch} kernels load (a view with a "
            "storage offset?): pass a tensor that starts at an aligned address")


def _check_residency(tensors: Mapping[str, np.ndarray], inputs: list[str], outputs: list[str]) -> None:
    """Host arrays are staged on the device, DeviceArrays used in place: a run takes one kind only."""
    on_device = {name for name, array in tensors.items() if isinstance(array, DeviceArray)}
    if not on_device:
        return
    if on_device != set(tensors) or any(name not in tensors for name in outputs):
        raise RuntimeLaunchError(
            f"tensors {sorted(on_device)} live in GPU memory but {sorted(set(inputs + outputs) - on_device)} do "
            f"not: with GPU-resident tensors pass every input and the {', '.join(outputs)} outputs on the GPU")
    for name in outputs:
        if not tensors[name].dense:
            raise RuntimeLaunchError(f"output {name!r} on the GPU has gaps between its elements (strides "
                                     f"{tensors[name].strides}); zero-filling it would overwrite them: pass a "
                                     "dense output")


def check_output(name: str, array: np.ndarray, others: list[tuple[str, np.ndarray]]) -> None:
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


def _check_array(name: str, array, buf: dict) -> None:
    if not isinstance(array, (np.ndarray, DeviceArray)):
        raise RuntimeLaunchError(f"tensor {name!r} must be a NumPy array (or a DeviceArray), got "
                                 f"{type(array).__name__}")
    dtype = buf["dtype"]
    if array.dtype != STORAGE[dtype]:
        hint = " (bf16 travels as uint16 bit patterns: fmha_mlir.dtypes.bf16_bits)" if dtype == "bf16" else ""
        raise RuntimeLaunchError(f"tensor {name!r} has dtype {array.dtype}; this bundle's {dtype} {name} is "
                                 f"stored as {STORAGE[dtype]}{hint}")
    if array.ndim != buf["rank"]:
        raise RuntimeLaunchError(f"tensor {name!r} has rank {array.ndim}; expected "
                                 f"[{', '.join(map(str, buf['dims']))}]")
    if any(s < 0 or s % array.itemsize for s in array.strides):
        raise RuntimeLaunchError(f"tensor {name!r} has byte strides {array.strides}; the kernels take "
                                 "non-negative strides that are whole elements")
    if array.shape[-1] > 1 and array.strides[-1] != array.itemsize:
        raise RuntimeLaunchError(f"tensor {name!r}: its last dimension must be contiguous (stride 1 element), "
                                 f"got byte strides {array.strides}")


def _may_overlap(array: np.ndarray) -> bool:
    """True unless each dimension's stride clears the span of all smaller-strided dimensions."""
    reach = 1
    for n, s in sorted(((n, s // array.itemsize) for n, s in zip(array.shape, array.strides) if n > 1),
                       key=lambda d: d[1]):
        if s < reach:
            return True
        reach += (n - 1) * s
    return False


def plan_layouts(bundle: Bundle, host: Mapping[str, np.ndarray], scalars: Mapping[str, int] | None = None
                 ) -> dict[str, Layout]:
    """Problem buffers keep the strides of their host arrays; workspaces are contiguous, shaped by their
    size expressions over the problem buffers' sizes (and the scalars)."""
    layouts = {name: Layout.of(bundle.buffers[name]["dtype"], host[name]) for name in problem_buffers(bundle)}
    shapes = {name: layout.shape for name, layout in layouts.items()}
    for name, buf in bundle.buffers.items():
        if buf["role"] != "workspace":
            continue
        shape = tuple(shape_expr.evaluate(shape_expr.from_json(d), shapes, f"workspace {name!r}", scalars)
                      for d in buf["dims"])
        if any(n < 1 for n in shape):
            raise RuntimeLaunchError(f"workspace {name!r} would have shape {shape}: every size must be at least 1")
        layouts[name] = Layout.contiguous(buf["dtype"], shape)
    check_extents(bundle, layouts)
    return layouts


class PreparedRun:
    """A bundle's buffers staged on `device`: `launch()` runs every step (as often as wanted, e.g. to
    time it), `results()` downloads dq, dk, dv. Use it as a context manager to free the buffers.

    stream: the native stream every launch and zero fill is queued on (None: the default stream).
    workspace: where workspaces come from when the tensors are DeviceArrays, nbytes -> DeviceArray
        (memory the caller owns and frees, e.g. torch's caching allocator, stream-ordered on `stream`);
        None: the executor allocates them and close() frees them.
    poison: every buffer the plan writes starts as NaN, so an element no kernel writes cannot pass for
        a value. In GPU memory that is a device synchronisation and a host upload per buffer: a debug
        mode there, the default for host arrays (which are uploaded anyway).
    """

    def __init__(self, bundle: Bundle, device: Executor, tensors: Mapping[str, np.ndarray],
                 scalars: Mapping[str, int] | None = None, *, stream: int | None = None,
                 workspace: Callable[[int], DeviceArray] | None = None, poison: bool = True):
        device.check_bundle(bundle)
        self.bundle, self.device, self.stream = bundle, device, stream
        self.host = check_tensors(bundle, tensors)
        self.scalars = check_scalars(bundle, tensors, scalars)
        self.outputs = [name for name, buf in problem_buffers(bundle).items() if buf["role"] == "output"]
        self.layouts = plan_layouts(bundle, self.host, self.scalars)
        self.kernels = device.load(bundle)
        self.allocations: dict[str, Allocation] = {}
        self.buffers: dict[str, DeviceBuffer] = {}
        # The workspace allocator's arrays: held until close(), or their memory would be handed out again
        # (torch's caching allocator reuses a freed block at once) while this run still uses it.
        self.workspaces: dict[str, DeviceArray] = {}
        self._prepared = None
        on_device = any(isinstance(array, DeviceArray) for array in self.host.values())
        if workspace is not None and not on_device:
            raise RuntimeLaunchError("a workspace allocator serves runs on GPU-resident tensors (DeviceArrays); "
                                     "host arrays are staged by the executor")
        try:
            for name, layout in self.layouts.items():
                nbytes = layout.nbytes
                array = self.host.get(name)
                if array is None and workspace is not None:
                    array = self.workspaces[name] = allocate_workspace(workspace, f"workspace {name!r}", nbytes)
                if isinstance(array, DeviceArray):  # used in place: borrowed, never copied or freed
                    allocation = device.borrow(array.address, nbytes)
                    if poison and bundle.buffers[name]["role"] != "input":
                        device.synchronize()   # the memory may still be in use by earlier work on a stream
                        device.upload(allocation, _nan(layout))
                else:
                    allocation = self.allocations[name] = device.alloc(nbytes)
                    role = bundle.buffers[name]["role"]
                    device.upload(allocation, layout.stage(array) if role == "input" else _nan(layout))
                self.buffers[name] = DeviceBuffer(name, layout.dtype, layout.shape, layout.strides,
                                                  allocation.address, allocation)
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def step_calls(self) -> list:
        """One call per step of the plan (bundle.steps' order), each launching that step alone; the
        launches' arguments are bound and packed once, on the first use."""
        if self._prepared is None:
            self._prepared = [step.prepare(self.device, self.kernels, self.buffers, self.stream)
                              for step in bind_steps(self.bundle, self.layouts, self.scalars)]
        return self._prepared

    def launch(self) -> None:
        """Run every step."""
        for run in self.step_calls():
            run()

    def results(self) -> dict[str, np.ndarray]:
        """The outputs (dq, dk, dv), written into the output arrays passed in, when given."""
        self.device.synchronize()
        for name in self.outputs:
            if isinstance(self.host[name], DeviceArray):
                continue  # the kernels wrote it in place
            flat = np.empty(self.layouts[name].span, self.layouts[name].storage)
            self.device.download(self.allocations[name], flat)
            self.host[name][...] = self.layouts[name].view(flat)
        return {name: self.host[name] for name in self.outputs}

    def close(self) -> None:
        """Free every buffer, even when freeing one fails (the first failure is raised afterwards)."""
        self.workspaces = {}   # stream-ordered memory: freed now, reused only by work queued after ours
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


def run_bundle(bundle: Bundle, device: Executor, tensors: Mapping[str, np.ndarray],
               scalars: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Run the bundle's steps on `device`; returns the outputs (the arrays passed in, when given).
    `scalars`: what the plan takes besides tensors (varlen: max_seqlen_q, max_seqlen_k)."""
    with PreparedRun(bundle, device, tensors, scalars) as run:
        run.launch()
        return run.results()


def allocate_workspace(allocate: Callable[[int], DeviceArray], what: str, nbytes: int) -> DeviceArray:
    """`allocate(nbytes)`, checked; `what` it is for names it in the error ("workspace 'd'")."""
    array = allocate(nbytes)
    if not isinstance(array, DeviceArray) or array.span_bytes < nbytes:
        raise RuntimeLaunchError(f"the workspace allocator returned {array!r} for {what}; it must "
                                 f"return a DeviceArray of at least {nbytes} bytes")
    return array


def _nan(layout: Layout) -> np.ndarray:
    """The staging array that poisons a buffer of this layout (an i32 one with a float NaN's bits)."""
    if layout.dtype in INDEX_STORAGE:
        return np.full(layout.span, np.float32(np.nan), np.float32).view(layout.storage)
    return np.full(layout.span, to_storage(np.float32(np.nan), layout.dtype), layout.storage)


@dataclass(frozen=True)
class BoundStep:
    """One step of the plan with everything its geometry fixes evaluated: the grid, the scalar arguments,
    which buffer each memref argument is. What is left per run is the buffers' addresses."""

    kernel: str | None                      # None: zero-fill `args[0]`
    args: tuple                             # buffer names (str), ScalarArgs and TensorMapArgs (over stand-in
                                            # buffers at address 0), in parameter order
    grid: tuple[int, ...] = ()
    block: tuple[int, ...] = ()
    shared_bytes: int = 0

    def prepare(self, device: Executor, kernels: KernelSet, buffers: Mapping[str, DeviceBuffer],
                stream: int | None = None) -> Callable[[], None]:
        """A callable running the step on these buffers, on `stream`."""
        if self.kernel is None:
            allocation = buffers[self.args[0]].allocation
            return lambda: device.zero(allocation, stream)
        args = with_buffers(self.args, buffers)
        return kernels.prepare(self.kernel, self.grid, self.block, args, self.shared_bytes, stream)


def bind_steps(bundle: Bundle, layouts: Mapping[str, Layout], scalars: Mapping[str, int]) -> list[BoundStep]:
    """The bundle's steps bound to the buffers' layouts (and the scalars); RuntimeLaunchError for a grid
    that is empty or beyond the target's limits, or an argument that does not fit its parameter."""
    shapes = {name: layout.shape for name, layout in layouts.items()}
    stand_ins = {name: DeviceBuffer(name, layout.dtype, layout.shape, layout.strides, 0)   # for bind_args' checks
                 for name, layout in layouts.items()}
    return [_bind_step(bundle, index, step, shapes, stand_ins, scalars) for index, step in enumerate(bundle.steps)]


def _bind_step(bundle: Bundle, index: int, step: dict, shapes: Mapping[str, tuple[int, ...]],
               stand_ins: Mapping[str, DeviceBuffer], scalars: Mapping[str, int]) -> BoundStep:
    if step["op"] == "zero":
        return BoundStep(None, (step["buffer"],))
    kernel = step["kernel"]
    where = f"manifest step {index} ({kernel})"
    grid = tuple(shape_expr.evaluate(shape_expr.from_json(e), shapes, f"{where} grid", scalars) for e in step["grid"])
    if any(n < 1 for n in grid):
        raise RuntimeLaunchError(f"{where}: grid {list(grid)} has an empty dimension")
    too_large = bundle.target.grid_problem(grid, step["block"])
    if too_large:   # the driver would fail the launch with an opaque status, or run a truncated grid
        raise RuntimeLaunchError(f"{where}: {too_large} (grid {list(grid)}): split the problem into several "
                                 "calls, e.g. by batch (grid z) or heads (grid y)")
    args = [stand_ins[arg["buffer"]] if "buffer" in arg else tensor_map_arg(arg, stand_ins, f"{where} argument {i}")
            if "tensor_map" in arg else ScalarArg(f"arg{i}", arg["scalar"],
                                                  scalar_value(arg, shapes, f"{where} argument {i}", scalars))
            for i, arg in enumerate(step["args"])]
    bind_args(kernel, bundle.kernels[kernel]["args"], args)
    return BoundStep(kernel, tuple(a.name if isinstance(a, DeviceBuffer) else a for a in args), grid,
                     tuple(step["block"]), step.get("shared_bytes", 0))


def tensor_map_arg(arg: dict, stand_ins: Mapping[str, DeviceBuffer], what: str) -> TensorMapArg:
    """The plan's {"tensor_map", "box", "swizzle"} over its buffer's stand-in, checked now against what TMA
    can describe (the buffer's strides and dtype, the box), so that a run only encodes."""
    buffer = stand_ins[arg["tensor_map"]]
    tensor_map = TensorMapArg(f"{buffer.name}.map", buffer, tuple(arg["box"]), arg["swizzle"])
    try:
        tiled_encoding(tensor_map, 0)
    except RuntimeLaunchError as exc:
        raise RuntimeLaunchError(f"{what}: {exc}") from None
    return tensor_map


def scalar_value(arg: dict, shapes: Mapping[str, tuple[int, ...]], what: str, scalars: Mapping[str, int]):
    """A scalar argument's value: a size expression, or an f32 literal."""
    if arg["scalar"] == "f32" and isinstance(arg["value"], float):
        return arg["value"]
    return shape_expr.evaluate(shape_expr.from_json(arg["value"]), shapes, what, scalars)
