"""torch tensors for the runtime (their dtypes; CUDA ones as DeviceArrays), and AttentionBackward's calls
on torch CUDA tensors, run in place and bound once per kind of call.

In place: the kernels read and write the tensors' memory, take their workspaces from torch's caching
allocator and run on torch's current stream, which orders them after the work that made the inputs;
nothing is copied and nothing waits for the device. A training loop makes the same call at every step
on new tensors of the same shapes: an InPlaceCall binds once what such a call decides (its plan, which
argument is which buffer, what each gradient is made like), and call_key finds it again from the
call's arguments, so that a repeat call skips the spec, the argument checks and the plan's geometry.
Only torch functions import torch: this module imports without it.
"""
from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from .dtypes import BUFFER_STORAGE, STORAGE
from .errors import Reason, SpecError
from .runtime.bound_plan import BoundPlan
from .runtime.bundle import Bundle
from .runtime.device_array import DeviceArray
from .runtime.executor import Executor
from .runtime.runner import PreparedRun

# AttentionBackward's tensor arguments, in the order InPlaceCall takes them.
ARGUMENTS = ("q", "k", "v", "o", "do", "lse", "bias", "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k", "sinks", "dlse")
# The tensor each gradient is made like (empty_like keeps its strides: BSHD inputs, BSHD gradients).
LIKE = {"dq": "q", "dk": "k", "dv": "v", "dbias": "bias", "dalibi_slopes": "alibi_slopes", "dsinks": "sinks"}
VIEWED = ("bias", "alibi_slopes")   # taken as rank-4 / rank-2 views of what the caller gives
UINT8 = np.dtype(np.uint8)


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


@functools.cache
def torch_dtype_names() -> dict:
    """torch dtype -> our dtype name (torch is imported only when asked; built once)."""
    import torch

    return {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}


@functools.cache
def _torch_storage() -> dict:
    """torch dtype -> the runtime's NumPy storage dtype: the problem's types and varlen's int32 cu_seqlens."""
    import torch

    return {**{t: STORAGE[name] for t, name in torch_dtype_names().items()}, torch.int32: BUFFER_STORAGE["i32"]}


def torch_dtype(t) -> str:
    names = torch_dtype_names()
    if t.dtype not in names:
        raise SpecError([Reason("dtype", f"unsupported torch dtype {t.dtype}", "use float16, bfloat16 or float32")])
    return names[t.dtype]


def torch_device_array(t) -> DeviceArray:
    """A torch CUDA tensor as the runtime's DeviceArray (same memory, strides in bytes; kept alive)."""
    storage = _torch_storage().get(t.dtype) or STORAGE[torch_dtype(t)]   # (the fallback names a bad dtype)
    size = t.element_size()
    return DeviceArray(t.data_ptr(), tuple(t.shape), tuple(s * size for s in t.stride()), storage, owner=t)


def call_key(tensors: tuple, options: tuple) -> tuple | None:
    """What a call's checks, spec and plan depend on besides the AttentionBackward: for each of ARGUMENTS
    its type, shape, strides, dtype and device (or itself, when None or a string: bias="alibi"), and
    `options`, the call's other arguments. None for a call that is not bound: q not a torch CUDA tensor,
    or an argument that is not a tensor or not hashable (the unbound path then says what is wrong).
    The addresses are not in it: their alignment is checked on every run (BoundPlan.launch)."""
    q = tensors[0]
    if not (is_torch(q) and q.is_cuda):
        return None
    try:
        key = (options, tuple([t if t is None or isinstance(t, str) else (type(t), t.shape, t.stride(), t.dtype,
                                                                         t.device) for t in tensors]))
        hash(key)
    except (AttributeError, TypeError):
        return None
    return key


def _allocate(where, nbytes: int) -> DeviceArray:
    """A workspace from torch's caching allocator, held until the launches are queued; then freed
    stream-ordered: reused only by work queued after ours."""
    import torch

    t = torch.empty(nbytes, dtype=torch.uint8, device=where)
    return DeviceArray(t.data_ptr(), (nbytes,), (1,), UINT8, owner=t)


def workspace(plan: BoundPlan, where):
    """The one workspace allocation a run of `plan` takes, from torch's caching allocator (None when it
    needs none): held by the caller until the launches are queued, then freed stream-ordered."""
    import torch

    return torch.empty(plan.workspace_bytes, dtype=torch.uint8, device=where) if plan.workspace_bytes else None


def _arrays(inputs: dict, grads: tuple[str, ...]) -> tuple[object, dict, dict]:
    """(the device, the gradients made like their inputs, every tensor as a DeviceArray) of a call whose
    tensors must all live on q's device."""
    import torch

    where = inputs["q"].device
    strays = sorted(name for name, t in inputs.items() if t.device != where)
    if strays:
        raise SpecError([Reason(strays[0], f"lives on {inputs[strays[0]].device} and q on {where}",
                                "put every tensor of the call on one device")])
    outputs = {name: torch.empty_like(inputs[LIKE[name]]) for name in grads}
    return where, outputs, {name: torch_device_array(t) for name, t in {**inputs, **outputs}.items()}


class InPlaceCall:
    """One kind of call bound: its plan, which argument each buffer is, what each gradient is made like.
    Calling it runs the plan on this call's tensors (of the kind it was bound for: call_key's)."""

    def __init__(self, plan_of: Callable[..., BoundPlan], bundle: Bundle, device: Executor, inputs: dict,
                 grads: tuple[str, ...], scalars: dict, given_shape: tuple | None):
        """inputs: the call's tensors by buffer name, as AttentionBackward took them (bias and slopes as
        their views); grads: the gradients returned, in order; plan_of: BoundPlans.plan; given_shape:
        the shape the fourth gradient is returned in (dbias / d(slopes): the bias's, as given), or None."""
        import torch

        self._torch = torch
        self._where, outputs, arrays = _arrays(inputs, grads)
        self.plan = plan_of(bundle, device, arrays, scalars)
        order = [*inputs, *grads]
        # per input: (its place in ARGUMENTS, the shape of the view taken of it, or None)
        self._inputs = [(ARGUMENTS.index(name), tuple(t.shape) if name in VIEWED else None)
                        for name, t in inputs.items()]
        self._like = [order.index(LIKE[name]) for name in grads]
        self._addresses = [order.index(name) for name in self.plan.names]   # the plan's order
        self._given_shape = given_shape

    def __call__(self, *arguments):
        """The gradients of this call (ARGUMENTS in order), queued on torch's current stream."""
        torch = self._torch
        tensors = [arguments[i] if shape is None else arguments[i].reshape(shape) for i, shape in self._inputs]
        tensors += [torch.empty_like(tensors[i]) for i in self._like]
        addresses = [tensors[i].data_ptr() for i in self._addresses]
        held = workspace(self.plan, self._where)
        if held is not None:
            addresses.append(held.data_ptr())
        # the current stream's handle in one C call (torch.cuda.current_stream builds a Stream object)
        self.plan.launch(addresses, torch._C._cuda_getCurrentRawStream(self._where.index))
        grads = tensors[len(self._inputs):]
        if self._given_shape is not None:
            grads[3] = grads[3].reshape(self._given_shape)
        return tuple(grads)


def run_poisoned(bundle: Bundle, device: Executor, inputs: dict, grads: tuple[str, ...], scalars: dict) -> dict:
    """AttentionBackward(debug=True)'s run: a PreparedRun that NaN-fills what the kernels write first (a
    device synchronisation and host uploads), in place otherwise; the gradients by name."""
    import torch

    where, outputs, arrays = _arrays(inputs, grads)
    with PreparedRun(bundle, device, arrays, scalars, stream=torch.cuda.current_stream(where).cuda_stream,
                     workspace=functools.partial(_allocate, where), poison=True) as run:
        run.launch()
    return outputs
