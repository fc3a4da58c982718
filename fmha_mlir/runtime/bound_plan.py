"""A bundle's launch plan bound once to a geometry, then run on any tensors of that geometry (the
compile side's fmha_mlir/launch_plan.py writes the plan; this binds it).

A training loop calls the backward with tensors of the same shapes, strides and dtypes at every step;
only their addresses change. A BoundPlan does once what depends on the geometry alone (the tensor
checks, the layouts and workspace sizes, the grids and scalar arguments, each argument's parameter) and
per run only what depends on the addresses: their alignment, outputs that overlap, the workspaces, the
launches. Runs are on GPU-resident tensors (DeviceArrays) with a workspace allocator, on a stream, and
never wait for the device: what fmha_mlir.torch needs, in a small fraction of a PreparedRun's host time.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Mapping

from ..errors import RuntimeLaunchError
from .args import DeviceBuffer
from .bundle import Bundle
from .device_array import DeviceArray
from .executor import Executor
from .runner import (BoundStep, allocate_workspace, bind_steps, check_alignment, check_output, check_scalars,
                     check_tensors, plan_layouts, problem_buffers)


def geometry(arrays: Mapping[str, DeviceArray], scalars: Mapping[str, int] | None) -> tuple:
    """What a plan depends on besides the bundle: every tensor's shape, strides and dtype, and the scalars."""
    return (tuple((name, a.shape, a.strides, a.dtype.str) for name, a in sorted(arrays.items())),
            tuple(sorted((scalars or {}).items())))


class BoundPlan:
    """The bundle's steps bound to one geometry on one executor (immutable: threads may share it)."""

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
        self.aligns = {name: buf["align"] for name, buf in buffers.items()}
        self.workspaces = [name for name in self.layouts if name not in buffers]
        self.steps: list[BoundStep] = bind_steps(bundle, self.layouts, self.scalars)
        self.kernels = device.load(bundle)

    def run(self, arrays: Mapping[str, DeviceArray], workspace: Callable[[int], DeviceArray],
            stream: int | None = None) -> None:
        """Queue every step on `stream` for these tensors (of the plan's geometry; not re-checked here),
        workspaces from `workspace` (nbytes -> DeviceArray, held until the launches are queued: a
        stream-ordered allocator reuses the memory only for work queued after them)."""
        for name, array in arrays.items():
            check_alignment(self.bundle, name, array, self.aligns[name])
        for name in self.outputs:
            check_output(name, arrays[name], [(other, arrays[other]) for other in self.outputs if other < name])
        held = {name: allocate_workspace(workspace, name, self.layouts[name].nbytes) for name in self.workspaces}
        buffers = {}
        for name, array in {**arrays, **held}.items():
            layout = self.layouts[name]
            buffers[name] = DeviceBuffer(name, layout.dtype, layout.shape, layout.strides, array.address,
                                         self.device.borrow(array.address, layout.nbytes))
        with self.device.current():
            for step in self.steps:
                step.prepare(self.device, self.kernels, buffers, stream)()


class BoundPlans:
    """The plans one caller has used, by (bundle, geometry), the least recently used dropped past
    `capacity` (a training loop uses one per attention shape)."""

    def __init__(self, capacity: int = 64):
        self.capacity = capacity
        self._plans: OrderedDict[tuple, BoundPlan] = OrderedDict()
        self._lock = threading.Lock()

    def plan(self, bundle: Bundle, device: Executor, arrays: Mapping[str, DeviceArray],
             scalars: Mapping[str, int] | None = None) -> BoundPlan:
        key = (bundle.key, id(device), geometry(arrays, scalars))
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                return plan
        plan = BoundPlan(bundle, device, arrays, scalars)   # outside the lock: it may load the module
        with self._lock:
            self._plans[key] = plan
            while len(self._plans) > self.capacity:
                self._plans.popitem(last=False)
        return plan
