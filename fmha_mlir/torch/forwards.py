"""Which of torch's attention forwards serves a call, and each one's log-sum-exp in our convention.

Our backward needs O and the forward's lse as fmha_mlir/oracle.py defines it: natural log, [B, Hq, Sq]
f32, +inf for a row that sees no key (O = 0 there). Every forward below returns a natural-log lse; the
conversions are the padding the mem-efficient op adds (sliced off), the dtype, and the empty rows, which
the forwards mark differently (FlexAttention -inf, the CPU flash op 0): they are set from the mask.

The table (docs/user-guide.md, "PyTorch", says the same): 'auto' takes the first forward of AUTO_ORDER[device] that
serves the call; forward=NAME forces one and refuses, with the reason, a call it cannot serve.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import torch

from ..errors import Reason, SpecError
from ..spec import AttentionBwdSpec, Mask
from . import scores

HALF = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class ForwardCase:
    """The static facts of one call the table decides on (q, k, v as logical [B, H, S, D] views): the
    score definition is the backward's spec (its scale resolved), `forward` the name asked for."""

    device: str
    dtype: torch.dtype
    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int
    hdim_q: int
    hdim_v: int
    spec: AttentionBwdSpec
    forward: str = "auto"

    @staticmethod
    def of(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec: AttentionBwdSpec,
           forward: str = "auto") -> "ForwardCase":
        return ForwardCase(q.device.type, q.dtype, q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2],
                           q.shape[3], v.shape[3], spec, forward)

    @property
    def mask(self) -> Mask:
        return self.spec.mask

    @functools.cached_property
    def has_empty_rows(self) -> bool:
        """Whether a query row sees no key (its lse is +inf in our convention); asked at every forward."""
        return scores.has_empty_rows(self.mask, self.seqlen_q, self.seqlen_k)

    @property
    def empty(self) -> bool:
        """Nothing to compute: no query, no key, no head or no batch (torch's CPU flash op divides by
        zero on such a call)."""
        return 0 in (self.batch, self.heads_q, self.seqlen_q, self.seqlen_k)


@dataclass(frozen=True)
class Forward:
    name: str
    serves: str   # what it serves, for the user guide's table and the errors
    why_not: Callable[[ForwardCase], str | None]
    # (q, k, v, bias, slopes, case) -> (out [B, Hq, Sq, Dv] in q's dtype, natural-log lse [B, Hq, >= Sq])
    run: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    # Its lse is ours as it comes ([B, Hq, Sq] contiguous f32) on calls with no empty rows: not converted
    lse_is_ours: bool = False


def first_reason(*checks: tuple[bool, str]) -> str | None:
    return next((why for failed, why in checks if failed), None)


# ---------------------------------------------------------------------------------------------------
# SDPA's flash op (CUDA)

def _flash_why_not(case: ForwardCase) -> str | None:
    square_causal = case.mask.kind in ("causal_top_left", "causal_bottom_right") and case.seqlen_q == case.seqlen_k
    return first_reason(
        (case.device != "cuda", "CUDA tensors only"), (case.dtype not in HALF, "f16 / bf16 only"),
        (case.spec.bias != "none" or case.spec.softcap > 0, "no bias, ALiBi or softcap"),
        (case.heads_q != case.heads_kv, "equal heads (no GQA)"),
        (case.hdim_q != case.hdim_v or case.hdim_q % 8 or case.hdim_q > 256, "one head dim, a multiple of 8 to 256"),
        # torch's is_causal is top-left, and SDPA keeps flash off it when Sq != Sk: square causal only.
        (case.mask.kind != "none" and not square_causal, "no mask, or causal with seqlen_q == seqlen_k"))


def _flash_run(q, k, v, bias, slopes, case: ForwardCase):
    return torch.ops.aten._scaled_dot_product_flash_attention(
        q, k, v, 0.0, case.mask.kind != "none", False, scale=case.spec.scale)[:2]


# ---------------------------------------------------------------------------------------------------
# SDPA's mem-efficient op (CUDA)

# The op reads the bias in rows aligned to 16 elements (SDPA pads it the same way, then slices).
_BIAS_ROW_ALIGN = 16


def _efficient_why_not(case: ForwardCase) -> str | None:
    alignment = 4 if case.dtype == torch.float32 else 8
    return first_reason(
        (case.device != "cuda", "CUDA tensors only"), (case.spec.softcap > 0, "no softcap"),
        (case.heads_q != case.heads_kv, "equal heads (no GQA)"),
        (case.hdim_q % alignment or case.hdim_v % alignment, f"head dims a multiple of {alignment}"),
        # ALiBi reaches it as a materialised bias in q's dtype: exact in f32 only.
        (case.spec.bias == "alibi" and case.dtype != torch.float32, "ALiBi in f32 only"),
        (case.mask.kind not in ("none", "causal_top_left"), "no mask or top-left causal"))


def _efficient_run(q, k, v, bias, slopes, case: ForwardCase):
    add = scores.additive_bias(case.spec.bias, bias, slopes, case.heads_q, case.seqlen_q, case.seqlen_k, q.device)
    if add is not None:
        padded = -(-case.seqlen_k // _BIAS_ROW_ALIGN) * _BIAS_ROW_ALIGN
        storage = add.new_zeros(add.shape[:-1] + (padded,), dtype=q.dtype)
        storage[..., :case.seqlen_k] = add
        add = storage[..., :case.seqlen_k].expand(q.shape[0], case.heads_q, case.seqlen_q, case.seqlen_k)
    out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, add, True, 0.0, case.mask.kind == "causal_top_left", scale=case.spec.scale)[:2]
    return out, lse   # lse [B, H, Sq rounded up to 32]: converted_lse slices it


# ---------------------------------------------------------------------------------------------------
# FlexAttention

@functools.cache
def _compiled_flex():
    """flex_attention compiled once (its fused kernel; uncompiled, torch runs an unfused reference)."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


@functools.lru_cache(maxsize=32)
def _block_mask(mask: Mask, seqlen_q: int, seqlen_k: int, device: torch.device):
    """The mask as a BlockMask, from spec.Mask.visible (built once per shape)."""
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b, h, q_idx, kv_idx):
        return mask.visible(q_idx, kv_idx, seqlen_q, seqlen_k)

    return create_block_mask(mask_mod, None, None, seqlen_q, seqlen_k, device=device)


def _score_mod(case: ForwardCase, bias, slopes, batch: int, device):
    """softcap, then the bias or ALiBi, as a score_mod (flex hands it scale Q K^T)."""
    cap, kind = case.spec.softcap, case.spec.bias
    if not cap and kind == "none":
        return None
    offset = case.seqlen_k - case.seqlen_q
    bias4 = None if kind != "elementwise" else bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape)).expand(
        batch, case.heads_q, case.seqlen_q, case.seqlen_k)
    slopes2 = None if kind != "alibi" else scores.alibi_slopes(slopes, case.heads_q, device).expand(batch, case.heads_q)

    def score_mod(score, b, h, q_idx, kv_idx):
        if cap:
            score = cap * torch.tanh(score / cap)
        if bias4 is not None:
            score = score + bias4[b, h, q_idx, kv_idx]
        if slopes2 is not None:   # ALiBi: -slope_h |i + Sk - Sq - j|
            score = score - slopes2[b, h] * torch.abs(q_idx + offset - kv_idx)
        return score

    return score_mod


def _flex_why_not(case: ForwardCase) -> str | None:
    # torch's inductor lowers flex only for head dims of 16 or more ("NYI: embedding dimension ... at least 16").
    return first_reason((case.device == "cuda" and min(case.hdim_q, case.hdim_v) < 16,
                         "head dims of at least 16 on CUDA (compiled flex)"))


def _flex_run(q, k, v, bias, slopes, case: ForwardCase):
    from torch.nn.attention.flex_attention import AuxRequest, flex_attention

    flex = _compiled_flex() if case.device == "cuda" else flex_attention
    block_mask = None if case.mask.kind == "none" else _block_mask(case.mask, case.seqlen_q, case.seqlen_k, q.device)
    out, aux = flex(q, k, v, score_mod=_score_mod(case, bias, slopes, q.shape[0], q.device), block_mask=block_mask,
                    scale=case.spec.scale, enable_gqa=case.heads_q != case.heads_kv,
                    return_aux=AuxRequest(lse=True))
    return out, aux.lse


# ---------------------------------------------------------------------------------------------------
# the CPU flash op

def _cpu_flash_why_not(case: ForwardCase) -> str | None:
    return first_reason((case.device != "cpu", "CPU tensors only"), (case.spec.softcap > 0, "no softcap"),
                  (case.heads_q != case.heads_kv, "equal heads (no GQA)"),
                  (case.hdim_q != case.hdim_v, "one head dim for q, k and v"))


def _cpu_flash_run(q, k, v, bias, slopes, case: ForwardCase):
    # The mask and the bias as one additive f32 mask (it takes f32 beside half inputs: ALiBi stays exact).
    add = scores.additive_bias(case.spec.bias, bias, slopes, case.heads_q, case.seqlen_q, case.seqlen_k, q.device)
    attn_mask = None
    if case.mask.kind != "none" or add is not None:
        seen = scores.visible(case.mask, case.seqlen_q, case.seqlen_k, q.device)
        attn_mask = torch.zeros(seen.shape, dtype=torch.float32, device=q.device).masked_fill(~seen, float("-inf"))
        attn_mask = attn_mask if add is None else attn_mask + add.float()
        attn_mask = attn_mask.expand(q.shape[0], case.heads_q, case.seqlen_q, case.seqlen_k)
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, False, attn_mask=attn_mask, scale=case.spec.scale)


# ---------------------------------------------------------------------------------------------------
# plain torch: any option, any device; the fallback and the tests' reference (float64 inputs give a
# float64 forward)

def math_forward(q, k, v, bias, slopes, case: ForwardCase):
    acc = torch.promote_types(q.dtype, torch.float32)
    k, v = (scores.expand_kv(x, case.heads_q).to(acc) for x in (k, v))
    s = (q.to(acc) @ k.transpose(-1, -2)) * case.spec.scale
    if case.spec.softcap > 0:
        s = case.spec.softcap * torch.tanh(s / case.spec.softcap)
    add = scores.additive_bias(case.spec.bias, bias, slopes, case.heads_q, case.seqlen_q, case.seqlen_k, q.device)
    if add is not None:
        s = s + add.to(acc)
    s = s.masked_fill(~scores.visible(case.mask, case.seqlen_q, case.seqlen_k, q.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)                           # -inf where a row sees no key
    p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])   # 0 there, not NaN
    return (p @ v).to(q.dtype), lse


def _serves_all(case: ForwardCase) -> str | None:
    return None


FORWARDS = {f.name: f for f in (
    Forward("flash", "CUDA f16/bf16, no mask or causal with Sq == Sk, equal heads and head dims, no bias/softcap",
            _flash_why_not, _flash_run, lse_is_ours=True),
    Forward("efficient", "CUDA, no mask or top-left causal, an elementwise bias (ALiBi in f32), equal heads, "
                         "no softcap", _efficient_why_not, _efficient_run),
    Forward("flex", "any option (bottom-right causal, sliding window, GQA, bias/ALiBi/softcap as score_mod); "
                    "compiled on CUDA (head dims of 16 or more), torch's unfused reference elsewhere",
            _flex_why_not, _flex_run),
    Forward("cpu_flash", "CPU, any mask and bias (as an additive mask), equal heads and head dims, no softcap",
            _cpu_flash_why_not, _cpu_flash_run),
    Forward("math", "any option on any device (plain torch; the fallback and the tests' reference)",
            _serves_all, math_forward),
)}
AUTO_ORDER = {"cuda": ("flash", "efficient", "flex", "math"), "cpu": ("cpu_flash", "math")}


def choose_forward(case: ForwardCase, table: dict = FORWARDS, auto_order: dict = AUTO_ORDER) -> Forward:
    """The forward of `table` case.forward names, or for 'auto' the first of auto_order[device] that serves
    the case (once per kind of call: call.checked_call caches it; varlen_forwards has a table of its own)."""
    name = case.forward
    if name == "auto":
        return next(table[n] for n in auto_order.get(case.device, ("math",)) if table[n].why_not(case) is None)
    if name not in table:
        raise SpecError([Reason("forward", f"unknown forward {name!r}", f"use 'auto' or one of {', '.join(table)}")])
    why = table[name].why_not(case)
    if why is not None:
        raise SpecError([Reason("forward", f"{name!r} cannot serve this call: it needs {why} (it serves: "
                                           f"{table[name].serves})",
                                "use forward='auto' (it picks one that can), or change the options")])
    return table[name]


def converted_lse(lse: torch.Tensor, case: ForwardCase) -> torch.Tensor:
    """A forward's natural-log lse as ours: [B, Hq, Sq] contiguous f32, +inf on the rows that see no key."""
    if lse.shape[-1] != case.seqlen_q or lse.dtype != torch.float32:   # flash's is ours already
        lse = lse[..., :case.seqlen_q].float()
    if case.has_empty_rows:   # decided on the host: no sync
        lse = torch.where(scores.seen_rows(case.mask, case.seqlen_q, case.seqlen_k, lse.device), lse, float("inf"))
    return lse.contiguous()


def run_forward(forward: Forward, q, k, v, bias, slopes, case: ForwardCase) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse in our convention) of logical [B, H, S, D] views by `forward`; an empty call computes
    nothing: out is zeros, lse +inf (no row sees a key)."""
    if case.empty:
        shape = (case.batch, case.heads_q, case.seqlen_q)
        return q.new_zeros(shape + (case.hdim_v,)), q.new_full(shape, float("inf"), dtype=torch.float32)
    out, lse = forward.run(q, k, v, bias, slopes, case)
    return out, converted_lse(lse, case)
