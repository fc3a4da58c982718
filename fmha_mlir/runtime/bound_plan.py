"""A bundle's launch plan bound once to a geometry, then run on any tensors of that geometry (the
compile side's fmha_mlir/launch_plan.py writes the plan; this binds it).

A training loop calls the backward with tensors of the same shapes, strides and dtypes at every step;
only their addresses change. A BoundPlan does once what depends on the geometry alone (the tensor
checks, the layouts and workspace sizes, the grids and scalar arguments, each argument's parameter) and
per run only what depends on the addresses: their alignment, outputs that overlap, the workspaces, the
launches, whose arguments are packed once too (packed_steps.py: a run writes only the addresses). Runs
are on GPU-resident tensors (DeviceArrays, or their addresses) with a workspace allocator, on a stream,
and never wait for the device: what fmha_mlir.torch needs, in a small fraction of a PreparedRun's host
time.
"""
from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from typing import Callable, Mapping, Sequence

from ..errors import RuntimeLaunchError
from .bundle import Bundle
from .device_array import DeviceArray
from .executor import Executor
from .packed_steps import PackedSteps
from .runner import (BoundStep, allocate_workspace, bind_steps, check_alignment, check_output, check_scalars,
                     check_tensors, plan_layouts, problem_buffers)


# Each workspace starts this many bytes into the run's one allocation: more than any vector a kernel loads.
WORKSPACE_ALIGN = 256


def geometry(arrays: Mapping[str, DeviceArray], scalars: Mapping[str, int] | None) -> tuple:
    """What a plan depends on besides the bundle: every tensor's shape, strides and dtype, and the scalars."""
    return (tuple((name, a.shape, a.strides, a.dtype.str) for name, a in sorted(arrays.items())),
            tuple(sorted((scalars or {}).items())))


class BoundPlan:
    """The bundle's steps bound to one geometry on one executor. Threads may share it: a run's
    patch-and-launch of the packed arguments holds the plan's lock."""

    def __init__(self, bundle: Bundle, device: Executor, arrays: Mapping[str, DeviceArray],
                 scalars: Mapping[str, int] | None = None):
        buffers = problem_buffers(bundle)
        outputs = [name for name, buf in buffers.items() if buf["role"] == "output"]
        if not all(isinstance(arrays.get(name), DeviceArray) for name in [*arrays, *outputs]):
            raise RuntimeLaunchError("a launch plan runs on GPU-resident tensors: pass every input and the "
                                     f"{', '.join(outputs)} outputs as DeviceArrays")
        device.check_bundle(bundle)
        checked = check_tensors(bundle, arrays)
        self.bundle, self.device, self.outputs = bundle, device, outputs
        self.scalars = check_scalars(bundle, arrays, scalars)
        self.layouts = plan_layouts(bundle, checked, self.scalars)
        self.names = tuple(buffers)   # the problem tensors in manifest order: launch()'s addresses come so
        self.aligns = {name: buf["align"] for name, buf in buffers.items()}
        self.workspaces = [name for name in self.layouts if name not in buffers]
        self.steps: list[BoundStep] = bind_steps(bundle, self.layouts, self.scalars)
        self.kernels = device.load(bundle)
        # What launch() checks per run, by position in `names`: the byte alignment of each address (1:
        # none), and the byte ranges of the outputs (their strides are checked above, once).
        self._alignments = tuple(self.aligns[n] * self.layouts[n].storage.itemsize if self.aligns[n] > 1 else 1
                                 for n in self.names)
        spans = [(self.names.index(n), self.layouts[n].nbytes) for n in outputs]
        self._output_pairs = [(a, b) for i, a in enumerate(spans) for b in spans[i + 1:]]
        # The workspaces share one allocation per run, each at a WORKSPACE_ALIGN-byte offset.
        self._workspace_offsets, self.workspace_bytes = [], 0   # the one allocation launch() is given
        self._workspaces_named = "workspaces " + ", ".join(map(repr, self.workspaces))
        for name in self.workspaces:
            self._workspace_offsets.append(self.workspace_bytes)
            self.workspace_bytes += -(-self.layouts[name].nbytes // WORKSPACE_ALIGN) * WORKSPACE_ALIGN
        self._packed = PackedSteps(self.steps, self.layouts, [*self.names, *self.workspaces], device, self.kernels)
        self._lock, self._current = threading.Lock(), device.current()

    def run(self, arrays: Mapping[str, DeviceArray], workspace: Callable[[int], DeviceArray],
            stream: int | None = None) -> None:
        """launch() on these tensors (of the plan's geometry; not re-checked here), the workspaces taken
        from one `workspace(nbytes)` (-> DeviceArray) held until the launches are queued."""
        addresses = [arrays[name].address for name in self.names]
        if self.workspace_bytes:
            held = allocate_workspace(workspace, self._workspaces_named, self.workspace_bytes)
            addresses.append(held.address)
        self.launch(addresses, stream)

    def launch(self, addresses: Sequence[int], stream: int | None = None) -> None:
        """Queue every step on `stream` for tensors of the plan's geometry at `addresses` (one per name of
        `names`, then, when workspace_bytes > 0, the start of an allocation of that many bytes that the
        caller holds until this returns: a stream-ordered allocator reuses it only for work queued after
        ours), checking the tensors' addresses: their alignment, outputs that overlap."""
        names = len(self.names)
        if any(map(operator.mod, addresses[:names], self._alignments)):
            self._refuse(addresses)
        for (a, span_a), (b, span_b) in self._output_pairs:
            if addresses[a] < addresses[b] + span_b and addresses[b] < addresses[a] + span_a:
                self._refuse(addresses)
        if self.workspace_bytes:
            base = addresses[names]
            addresses = [*addresses[:names], *map(base.__add__, self._workspace_offsets)]
        with self._lock, self._current:
            self._packed.run(addresses, stream)

    def _refuse(self, addresses: Sequence[int]) -> None:
        """The runner's error for the misaligned address or the overlapping outputs among `addresses`."""
        arrays = {}
        for name, address in zip(self.names, addresses):
            layout = self.layouts[name]
            strides = tuple(s * layout.storage.itemsize for s in layout.strides)
            arrays[name] = DeviceArray(address, layout.shape, strides, layout.storage)
        for name, array in arrays.items():
            check_alignment(self.bundle, name, array, self.aligns[name])
        for name in self.outputs:
            check_output(name, arrays[name], [(other, arrays[other]) for other in self.outputs if other < name])


class BoundPlans:
    """What one caller has bound, by key, the least recently used dropped past `capacity` (a training
    loop uses one per attention shape): plans by (bundle, geometry) through plan(), or whatever a caller
    binds around a plan through get() and add() (AttentionBackward's calls on torch tensors)."""

    def __init__(self, capacity: int = 64):
        self.capacity = capacity
        self._plans: OrderedDict[tuple, object] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple):
        """What `key` is bound to, now the most recently used; None if nothing is."""
        with self._lock:
            value = self._plans.get(key)
            if value is not None:
                self._plans.move_to_end(key)
            return value

    def add(self, key: tuple, value):
        """Bind `key` to `value` (returned), dropping the least recently used past the capacity."""
        with self._lock:
            self._plans[key] = value
            while len(self._plans) > self.capacity:
                self._plans.popitem(last=False)
        return value

    def plan(self, bundle: Bundle, device: Executor, arrays: Mapping[str, DeviceArray],
             scalars: Mapping[str, int] | None = None) -> BoundPlan:
        key = (bundle.key, id(device), geometry(arrays, scalars))
        plan = self.get(key)
        # bound outside the lock: it may load the module
        return plan if plan is not None else self.add(key, BoundPlan(bundle, device, arrays, scalars))
