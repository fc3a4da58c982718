"""The op's CUDA backward for one Call and one set of strides: bound once, then run per step in one method.

A training loop calls the backward with tensors of the same Call and strides at every step; only their
addresses change. The Call stands for the checks, the spec and the shapes; the strides (the key the
bound backward is found by) fix the rest of the plan's geometry. So a bound backward binds the plan
once, and a call makes the gradients, one workspace and the list of addresses, and queues the plan on
torch's current stream: no layout views (a transposed view starts where its base does), no checks but
the plan's per-address ones, nothing that waits for the device.

The gradients are made contiguous in the caller's layout (what the op returns): the kernels write them
there, so none is copied after, whatever the strides of q, k, v (a slice of a fused qkv projection, say).
"""
from __future__ import annotations

import operator

import torch

from ..api import AttentionBackward, _bias_inputs
from ..runtime.bound_plan import BoundPlans
from ..torch_in_place import LIKE, torch_device_array
from .call import Call
from .options import logical

# What a bound backward takes, in order (the caller's layout), then the gradients it makes; each
# buffer of the bundle is one of them.
TENSORS = ("q", "k", "v", "o", "do", "lse", "bias", "alibi_slopes")
POSITION = {**{name: i for i, name in enumerate(TENSORS)}, "dq": 8, "dk": 9, "dv": 10, "dbias": 11,
            "dalibi_slopes": 11}


def stride_key(grad_out, q, k, v, out, lse, bias, slopes) -> tuple:
    """What besides the Call a bound backward depends on: the tensors' strides."""
    return (q.stride(), k.stride(), v.stride(), out.stride(), grad_out.stride(), lse.stride(),
            None if bias is None else bias.stride(), None if slopes is None else slopes.stride())


class BoundBackward:
    """One Call's CUDA backward bound to one stride_key: its plan, which tensor each buffer is, the
    gradients' shapes (backward.run_backward keeps it on the Call, by that key)."""

    def __init__(self, plans: BoundPlans, runner: AttentionBackward, call: Call, tensors: tuple):
        """tensors: TENSORS of a first call (bias and slopes None when not given), the caller's layout."""
        spec, layout = call.spec, call.options.layout
        q, k, v, out, grad_out, lse, bias, slopes = tensors
        grad_names = ("dq", "dk", "dv") + spec.bias_operands()[1]
        # per gradient: (the position of the tensor it is made like, its shape); dbias / d(slopes) come in
        # the shape the bias or slopes were given in
        self._made = [(POSITION[LIKE[name]], tuple(tensors[POSITION[LIKE[name]]].shape)) for name in grad_names]
        grads = [tensors[i].new_empty(shape) for i, shape in self._made]
        # the runner's buffers: logical [B, H, S, D] views, the bias rank-4 and the slopes rank-2
        kind = bias if bias is not None else spec.bias if spec.bias == "alibi" else None
        extra = _bias_inputs(kind, slopes, spec.dbias)[1]
        views = {**dict(zip(("q", "k", "v", "o", "do"), (logical(x, layout) for x in (q, k, v, out, grad_out)))),
                 "lse": lse, **extra,
                 **dict(zip(("dq", "dk", "dv"), (logical(g, layout) for g in grads[:3])))}
        if len(grads) > 3:   # the bias's or slopes' gradient, viewed as its input is
            views[grad_names[3]] = grads[3].reshape(extra[grad_names[3][1:]].shape)
        arrays = {name: torch_device_array(t) for name, t in views.items()}
        self.plan = plans.plan(runner.bundle(spec), runner.device(), arrays, {})
        self._index, self._workspace_bytes = q.device.index, self.plan.workspace_bytes
        # the plan's buffers, picked in its order from (*TENSORS, *gradients)
        self._pick = operator.itemgetter(*[POSITION[name] for name in self.plan.names])

    def __call__(self, q, k, v, out, grad_out, lse, bias, slopes) -> list:
        """[dq, dk, dv] (+ dbias or d(slopes)) of these tensors (the strides it was bound for), contiguous
        in the caller's layout, queued on torch's current stream."""
        tensors = (q, k, v, out, grad_out, lse, bias, slopes)
        grads = [tensors[i].new_empty(shape) for i, shape in self._made]
        addresses = list(map(torch.Tensor.data_ptr, self._pick((*tensors, *grads))))
        if self._workspace_bytes:   # held until the launches are queued, then freed stream-ordered
            held = q.new_empty(self._workspace_bytes, dtype=torch.uint8)
            addresses.append(held.data_ptr())
        # the current stream's handle in one C call (torch.cuda.current_stream builds a Stream object)
        self.plan.launch(addresses, torch._C._cuda_getCurrentRawStream(self._index))
        return grads
