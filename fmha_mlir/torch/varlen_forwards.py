"""The forwards of packed sequences (attention_varlen) and their lse in our convention.

q [total_q, Hq, D], k, v [total_k, Hkv, D] hold the sequences one after another, cu_seqlens_q / _k
(int32 [batch + 1], on q's device) their prefix sums (fmha_mlir/varlen.py). A forward returns out
[total_q, Hq, Dv] and the lse [Hq, total_q] f32 (FlashAttention varlen's layout, our varlen backward's):
natural log, +inf on a row that sees no key (O = 0 there). Each sequence has its own lengths (0 allowed)
and its own mask; no bias or slopes tensor reaches a forward here (call.py refuses them for packed
sequences: the varlen backward has no [batch, head, Sq, Sk] to index them by).

The table, as forwards.FORWARDS: 'auto' takes the first of AUTO_ORDER[device] that serves the call.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import torch

from ..errors import Reason, SpecError
from ..varlen import check_cu_seqlens
from .forwards import FORWARDS, HALF, Forward, ForwardCase, first_reason, run_forward


class Packing(NamedTuple):
    """Where the sequences lie in the packed tensors: the prefix sums (tensors) and the longest lengths
    (ints: they size the grids)."""

    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    max_seqlen_q: int
    max_seqlen_k: int


def check_packing(packing: Packing, total_q: int, total_k: int) -> None:
    """The max lengths are ints >= 0; host cu_seqlens start at 0, never decrease, end at the token counts
    and stay within the max lengths (CUDA ones are trusted, as FlashAttention trusts them: reading them
    would wait for the device). SpecError naming what is wrong, before any forward runs."""
    reasons = [Reason(name, f"must be an int >= 0 (got {value!r})", "pass the longest sequence's length")
               for name, value in zip(("max_seqlen_q", "max_seqlen_k"), packing[2:])
               if isinstance(value, bool) or not isinstance(value, int) or value < 0]
    if not reasons and packing.cu_seqlens_q.device.type == "cpu":
        why = check_cu_seqlens(packing.cu_seqlens_q.tolist(), packing.cu_seqlens_k.tolist(), total_q, total_k,
                               packing.max_seqlen_q, packing.max_seqlen_k)
        if why is not None:
            reasons.append(Reason("cu_seqlens", why, "pass the packed tensors' prefix sums, int32 [batch + 1]"))
    if reasons:
        raise SpecError(reasons)


# ---------------------------------------------------------------------------------------------------
# torch's FlashAttention-2 varlen forward (CUDA)

@functools.cache
def _flash_takes_windows() -> bool:
    """Whether this torch's flash forward takes window sizes (its schema says; older builds do not)."""
    schema = torch.ops.aten._flash_attention_forward.default._schema
    return "window_size_left" in [argument.name for argument in schema.arguments]


def _flash_why_not(case: ForwardCase) -> str | None:
    return first_reason(
        (case.device != "cuda", "CUDA tensors only"), (case.dtype not in HALF, "f16 / bf16 only"),
        (case.spec.bias != "none" or case.spec.softcap > 0, "no ALiBi or softcap"),
        (case.hdim_q != case.hdim_v or case.hdim_q % 8 or case.hdim_q > 256, "one head dim, a multiple of 8 to 256"),
        # its causal is bottom-right per sequence, its window bottom-right aligned as ours
        (case.mask.kind == "causal_top_left", "no top-left causal mask"),
        (case.mask.kind == "sliding_window" and not _flash_takes_windows(), "a torch whose flash takes windows"))


def _flash_run(q, k, v, packing: Packing, case: ForwardCase):
    mask = case.mask
    window = {} if mask.kind != "sliding_window" else dict(window_size_left=mask.window_left,
                                                            window_size_right=mask.window_right)
    # A bound of 1 query with GQA takes flash's decode shortcut, which assumes one query in every
    # sequence (an empty one breaks it); 2 keeps it off and only sizes the grid.
    out, lse = torch.ops.aten._flash_attention_forward(
        q, k, v, packing.cu_seqlens_q, packing.cu_seqlens_k, max(packing.max_seqlen_q, 2), packing.max_seqlen_k,
        0.0, mask.kind == "causal_bottom_right", False, scale=case.spec.scale, **window)[:2]
    return out, packed_lse(lse, packing.cu_seqlens_q, q.shape[0])


def packed_lse(lse: torch.Tensor, cu_seqlens_q: torch.Tensor, total_q: int) -> torch.Tensor:
    """flash's varlen lse as [Hq, total_q]: as it comes ([H, total_q]), or gathered from the padded
    [batch, H, max_seqlen_q] older builds return (on the device: no sync). Its rows that see no key are
    +inf already (FlashAttention-2 marks them so)."""
    if lse.dim() == 2:
        return lse
    token = torch.arange(total_q, device=lse.device, dtype=cu_seqlens_q.dtype)
    sequence = torch.searchsorted(cu_seqlens_q[1:], token, right=True)
    return lse[sequence, :, token - cu_seqlens_q[sequence]].t()


# ---------------------------------------------------------------------------------------------------
# each sequence through the padded op's math forward (any option, any device)

def _math_run(q, k, v, packing: Packing, case: ForwardCase):
    cu_q, cu_k = packing.cu_seqlens_q.tolist(), packing.cu_seqlens_k.tolist()   # (a device sync on CUDA)
    outs, lses = [], []
    for q0, q1, k0, k1 in zip(cu_q, cu_q[1:], cu_k, cu_k[1:]):
        sequence = dataclasses.replace(case, batch=1, seqlen_q=q1 - q0, seqlen_k=k1 - k0)
        # [length, H, D] -> [1, H, length, D] views, and back
        views = [x[a:b].transpose(0, 1)[None] for x, a, b in ((q, q0, q1), (k, k0, k1), (v, k0, k1))]
        out, lse = run_forward(FORWARDS["math"], *views, None, None, sequence)
        outs.append(out[0].transpose(0, 1))
        lses.append(lse[0])
    return torch.cat(outs), torch.cat(lses, dim=1)


FORWARDS_VARLEN = {f.name: f for f in (
    Forward("flash", "CUDA f16/bf16, no mask, bottom-right causal or a window, GQA, one head dim a multiple of 8, "
                     "no ALiBi/softcap (torch's FlashAttention-2 varlen forward)", _flash_why_not, _flash_run),
    Forward("math", "any option on any device: each sequence through plain torch (reads cu_seqlens on the host)",
            lambda case: None, _math_run),
)}
AUTO_ORDER_VARLEN = {"cuda": ("flash", "math"), "cpu": ("math",)}


def run_packed(forward: Forward, q, k, v, packing: Packing, case: ForwardCase) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [total_q, Hq, Dv], lse [Hq, total_q] f32 contiguous, ours) of packed q, k, v by `forward`,
    after check_packing; without a (query, key) pair nothing runs: out is zeros, lse +inf."""
    check_packing(packing, q.shape[0], k.shape[0])
    if case.empty:
        return (q.new_zeros(q.shape[:-1] + (case.hdim_v,)),
                q.new_full((case.heads_q, q.shape[0]), float("inf"), dtype=torch.float32))
    out, lse = forward.run(q, k, v, packing, case)
    return out, lse.float().contiguous()
