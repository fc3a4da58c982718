"""One kind of attention call, checked once: its options, the backward's spec, the forward that serves it.

A call is refused here, before its forward runs, for everything its backward would refuse: the spec
the backward compiles is built up front and its reasons() are the rules (scale, softcap, mask, bias,
deterministic mode), beside the tensors' fit and the forward table's. A training loop repeats one kind
of call at every step, so the result is cached per options string and tensor signature (shape, dtype,
device of q, k, v, the bias, the slopes, the sinks and, for packed sequences, cu_seqlens): a repeat call
costs one dictionary look-up.

Packed sequences (attention_varlen; layout 'thd': q [total_q, Hq, D], k, v [total_k, Hkv, D]) make a
Call whose spec is varlen and whose forward is varlen_forwards'; its ForwardCase reads a packed tensor
as [batch, H, total, D] (batch: the number of sequences).
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import torch

from ..bodies import choose_config
from ..errors import Reason, SpecError
from ..spec import AttentionBwdSpec
from ..target import get_target, nvidia_arch
from ..torch_in_place import torch_dtype_names
from .forwards import Forward, ForwardCase, choose_forward, run_forward
from .options import PACKED, AttentionOptions, parse
from .varlen_forwards import AUTO_ORDER_VARLEN, FORWARDS_VARLEN, Packing, run_packed

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# The widest head dim the op pads to (FlashAttention's and the bodies' limit)
MAX_HEAD_DIM = 256
# The target our backward compiles for CPU tensors: the interpreter runs sm_90's bundle (wave32 also takes
# head dims gfx942's wave64 bodies do not). CUDA tensors take their chip's own target (_device_arch).
BACKWARD_ARCH = {"cpu": "sm_90"}


@dataclass(frozen=True)
class Call:
    options: AttentionOptions
    spec: AttentionBwdSpec     # what the backward compiles (its scale resolved)
    case: ForwardCase
    forward: Forward
    # The backward's runs bound per the tensors' strides (backward.py; CUDA only)
    bound: dict = field(default_factory=dict, compare=False, repr=False)
    # (q, k, v, bias, slopes, sinks, packing) in the caller's layout -> (out in the caller's layout, in the
    # strides the forward gives it; lse [B, Hq, Sq] f32 in our convention, the sinks in it; packed: lse
    # [Hq, total_q]): _forward_in_layout's
    run_forward: Callable = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "run_forward", _forward_in_layout(self))

    @functools.cached_property
    def padding(self) -> tuple[int, int]:
        """The zero columns the backward adds to q and k's head dim, and to v's (backward.run_backward):
        (0, 0) unless no body computes the call's head dims (call.computed_spec)."""
        return self.spec.hdim_q - self.case.hdim_q, self.spec.hdim_v - self.case.hdim_v

    def backward_spec(self, dlse: bool) -> AttentionBwdSpec:
        """The spec the backward compiles: with lse_grad when a gradient flows into the returned lse."""
        return self.spec_with_dlse if dlse else self.spec

    @functools.cached_property
    def spec_with_dlse(self) -> AttentionBwdSpec:
        return dataclasses.replace(self.spec, lse_grad=True)


class Signature(NamedTuple):
    """What a call's checks read of a tensor (read as a tensor is: shape, dtype, device)."""

    shape: tuple
    dtype: torch.dtype
    device: torch.device


def checked_call(text: str, q, k, v, bias, slopes, sinks=None, *, arch: str | None = None,
                 cu_seqlens: tuple | None = None) -> Call:
    """The Call of these arguments (the caller's layout; tensors, or None for the bias, slopes and
    sinks), or SpecError with every reason it is refused. arch: the target the backward compiles for
    (None: the one of the tensors' device, _device_arch; prebuild names it for meta tensors).
    cu_seqlens: (cu_seqlens_q, cu_seqlens_k) of packed sequences (layout 'thd'), else None."""
    return _checked(text, arch, q.shape, q.dtype, q.device, k.shape, k.dtype, k.device, v.shape, v.dtype,
                    v.device, *[None if x is None else (x.shape, x.dtype, x.device)
                                for x in (bias, slopes, sinks, *(cu_seqlens or (None, None)))])


@functools.lru_cache(maxsize=256)
def _checked(text: str, arch: str | None, *key) -> Call:
    q, k, v = (Signature(tuple(key[i]), *key[i + 1:i + 3]) for i in (0, 3, 6))
    bias, slopes, sinks, cu_q, cu_k = (None if x is None else Signature(tuple(x[0]), *x[1:]) for x in key[9:])
    options = parse(text)
    views = _tensor_reasons(q, k, v, bias, slopes, sinks, options, cu_q, cu_k)
    spec = backward_spec(*views, bias is not None, slopes is not None, options, sinks is not None)
    reasons = spec.reasons()
    if reasons:
        raise SpecError(reasons)
    target = get_target(arch or _device_arch(q.device))
    case = ForwardCase.of(*views, spec, options.forward)   # (the forward runs at the caller's head dims)
    spec = computed_spec(spec, target)
    if options.return_lse:
        choose_config(dataclasses.replace(spec, lse_grad=True), target)
    tables = (FORWARDS_VARLEN, AUTO_ORDER_VARLEN) if spec.varlen else ()
    return Call(options, spec, case, choose_forward(case, *tables))


def computed_spec(spec: AttentionBwdSpec, target) -> AttentionBwdSpec:
    """`spec` when a body computes it on `target`; else `spec` with its head dims zero-padded to the
    narrowest pair a body computes (its scale stays the caller's: 1/sqrt(the head dim) unless given),
    or SpecError with what the bodies refuse of `spec` itself, before any forward runs."""
    try:
        choose_config(spec, target)
        return spec
    except SpecError as refused:
        pairs = itertools.product(_wider(spec.hdim_q), _wider(spec.hdim_v))
        for hdim_q, hdim_v in sorted(pairs, key=sum)[1:]:   # (the first is spec's own)
            padded = dataclasses.replace(spec, hdim_q=hdim_q, hdim_v=hdim_v)
            try:
                choose_config(padded, target)
                return padded
            except SpecError:
                continue
        raise refused


def _wider(hdim: int) -> list[int]:
    """hdim, then the multiples of 8 above it up to MAX_HEAD_DIM (the head dims a body may compute)."""
    return [hdim] + list(range(hdim - hdim % 8 + 8, MAX_HEAD_DIM + 1, 8))


def _device_arch(device: torch.device) -> str:
    """The target the backward of tensors on `device` compiles for: the CUDA device's own (AttentionBackward
    .target_arch: sm_90a on H100 / H200); the interpreter's for CPU tensors."""
    if device.type not in ("cpu", "cuda"):
        raise SpecError([Reason("device", f"our backward runs on CPU and CUDA tensors, not {device.type!r} ones",
                                "move the tensors to 'cuda' or 'cpu'")])
    if device.type == "cuda":
        return nvidia_arch(torch.cuda.get_device_capability(device))
    return BACKWARD_ARCH[device.type]


def backward_spec(q, k, v, has_bias: bool, has_slopes: bool, options: AttentionOptions,
                  has_sinks: bool = False) -> AttentionBwdSpec:
    """The spec our backward compiles for logical [B, H, S, D] q, k, v (tensors or signatures; packed:
    [batch, H, total, D]) and these options (scale None: the spec's default, 1/sqrt(head dim)), without
    an lse gradient."""
    bias = "elementwise" if has_bias else "alibi" if has_slopes or options.bias == "alibi" else "none"
    return AttentionBwdSpec(
        dtype=torch_dtype_names()[q.dtype], hdim_q=q.shape[3], hdim_v=v.shape[3],
        gqa_ratio=q.shape[1] // k.shape[1], mask=options.mask, scale=0.0 if options.scale is None else options.scale,
        softcap=options.softcap, bias=bias, dbias=options.dbias, alibi_slopes=has_slopes,
        deterministic=options.deterministic, varlen=options.layout == PACKED, sinks=has_sinks)


def check_capturable(call: Call, q) -> None:
    """Refuse debug mode inside a CUDA graph capture (before any of the call is captured)."""
    if call.options.debug and q.is_cuda and torch.cuda.is_current_stream_capturing():
        raise SpecError([Reason("debug", "debug mode synchronises and uploads NaN fills, which a CUDA graph "
                                         "capture forbids", "capture without debug=True")])


def _forward_in_layout(call: Call) -> Callable:
    """The Call's forward on tensors in the caller's layout, its choices made once: the layout views
    (BSHD: transposes, never copies), whether the lse needs converting (forwards.run_forward), debug
    mode's capture check. A training loop runs it at every step."""
    if call.spec.varlen:
        return _packed_forward(call)
    case, forward, bshd = call.case, call.forward, call.options.layout == "bshd"
    run, debug = forward.run, call.options.debug
    if case.empty or not forward.lse_is_ours or case.has_empty_rows:
        run = functools.partial(run_forward, forward)

    def forward_in_layout(q, k, v, bias, slopes, sinks=None, packing=None):
        if debug:
            check_capturable(call, q)
        if bshd:
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        out, lse = run(q, k, v, bias, slopes, case)
        if sinks is not None:
            out, lse = with_sinks(out, lse, sinks)
        return (out.transpose(1, 2) if bshd else out), lse

    return forward_in_layout


def _packed_forward(call: Call) -> Callable:
    """The Call's forward on packed sequences: out [total_q, Hq, Dv] contiguous, lse [Hq, total_q]."""
    case, forward, debug = call.case, call.forward, call.options.debug

    def forward_packed(q, k, v, bias, slopes, sinks=None, packing: Packing | None = None):
        if debug:
            check_capturable(call, q)
        out, lse = run_packed(forward, q, k, v, packing, case)
        if sinks is not None:   # with_sinks on [Hq, total_q, Dv] views
            out, lse = with_sinks(out.transpose(0, 1), lse, sinks)
            out = out.transpose(0, 1)
        return out.contiguous(), lse

    return forward_packed


def with_sinks(out, lse, sinks):
    """(O, lse) of the softmax with sink logit s_h in each row's denominator, from a forward's without it
    (docs/ir.md): lse = logaddexp(lse', s_h), O = exp(lse' - lse) O'. A row without keys (lse' +inf in
    our convention, O' = 0) sees the sink alone: lse = s_h, O = 0."""
    without = torch.where(torch.isposinf(lse), float("-inf"), lse)
    lse = torch.logaddexp(without, sinks.to(lse.dtype)[:, None])
    return (out * torch.exp(without - lse)[..., None]).to(out.dtype), lse


def _logical(x: Signature, layout: str, batch: int) -> Signature:
    s = x.shape
    if layout == PACKED:   # [total, H, D] read as [batch, H, total, D]
        return x._replace(shape=(batch, s[1], s[0], s[2]))
    return x._replace(shape=(s[0], s[2], s[1], s[3])) if layout == "bshd" else x


ORDERS = {"bhsd": "[batch, heads, seq, dim]", "bshd": "[batch, seq, heads, dim]", PACKED: "[total, heads, dim]"}


def _tensor_reasons(q, k, v, bias, slopes, sinks, options: AttentionOptions, cu_q=None, cu_k=None) -> tuple:
    """Every reason q, k, v, the bias, the slopes, the sinks and cu_seqlens (signatures) do not fit
    together, with the fix; the logical [B, H, S, D] signatures of q, k, v when they do (packed:
    [batch, H, total, D])."""
    order, packed = ORDERS[options.layout], options.layout == PACKED
    reasons = [Reason(name, f"must be a rank-{3 if packed else 4} tensor {order} (got {_describe(x)})")
               for name, x in (("q", q), ("k", k), ("v", v)) if len(x.shape) != (3 if packed else 4)]
    reasons += _packing_reasons(q, cu_q, cu_k, packed)
    if reasons:
        raise SpecError(reasons)
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        reasons.append(Reason("dtype", f"q, k, v are {q.dtype}, {k.dtype}, {v.dtype}",
                              "use one of float16, bfloat16, float32 for all three"))
    if len({q.device, k.device, v.device}) != 1:
        reasons.append(Reason("device", f"q, k, v are on {q.device}, {k.device}, {v.device}", "put them on one device"))
    views = [_logical(x, options.layout, cu_q.shape[0] - 1 if packed else 0) for x in (q, k, v)]
    (b, hq, sq, d), (bk, hk, sk, dk), (bv, hv, sv, _) = (x.shape for x in views)
    if (bk, hk, sk) != (bv, hv, sv) or dk != d or bk != b:
        reasons.append(Reason("k", f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not fit in "
                                   f"layout {options.layout!r}",
                              f"k and v {order} with q's batch, one seq length and heads; k's dim equal to q's"))
    elif hk == 0 or hq % hk:
        reasons.append(Reason("k", f"{hq} query heads are not a multiple of {hk} key/value heads",
                              "use heads_q = heads_kv x group size"))
    if packed:
        reasons += [Reason(name, "a tensor cannot be indexed by [batch, head, Sq, Sk] of packed sequences (the "
                                 "varlen backward has no such shape)", fix)
                    for name, x, fix in (("bias", bias, "pad the batch and use attention()"),
                                         ("alibi_slopes", slopes, "leave it None with bias='alibi' for the "
                                                                  "standard slopes, or pad the batch"))
                    if x is not None]
    elif bias is not None:
        full, shape = (b, hq, sq, sk), tuple(bias.shape)
        fits = 2 <= len(shape) <= 4 and all(n in (1, m) for n, m in zip(shape[:-2], full[4 - len(shape):2]))
        if not fits or shape[-2:] != (sq, sk) or bias.dtype != q.dtype or bias.device != q.device:
            reasons.append(Reason("bias", f"{_describe(bias)} does not fit scores {full}",
                                  f"pass [Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk] (1 broadcasts) in {q.dtype} "
                                  f"on {q.device}"))
        if options.bias is not None:
            reasons.append(Reason("bias", f"a bias tensor and bias={options.bias!r}", "give one of them"))
    if slopes is not None and not (slopes.dtype == torch.float32 and slopes.device == q.device
                                   and tuple(slopes.shape) in ((hq,), (b, hq), (1, hq))):
        reasons.append(Reason("alibi_slopes", f"got {_describe(slopes)}",
                              f"pass float32 [H] or [B, H] = [{hq}] or [{b}, {hq}] on {q.device}"))
    if sinks is not None and not (sinks.dtype in DTYPES and sinks.device == q.device and tuple(sinks.shape) == (hq,)):
        reasons.append(Reason("sinks", f"got {_describe(sinks)}",
                              f"pass one logit per query head: [{hq}] (float32, or q's dtype) on {q.device}"))
    if slopes is not None and bias is not None:
        reasons.append(Reason("alibi_slopes", "given with a bias tensor", "give one of them"))
    if reasons:
        raise SpecError(reasons)
    return views


def _packing_reasons(q, cu_q, cu_k, packed: bool) -> list[Reason]:
    """Why cu_seqlens (signatures) do not describe packed sequences of q: int32 [batch + 1], batch >= 1,
    on q's device, as many for the keys; layout 'thd' and cu_seqlens go together."""
    if not packed:
        return [] if cu_q is None else [Reason("layout", "cu_seqlens are packed sequences'", "use layout 'thd'")]
    if cu_q is None or cu_k is None:
        return [Reason("layout", "'thd' (packed sequences) needs cu_seqlens",
                       "call attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)")]
    reasons = [Reason(name, f"got {_describe(x)}", f"pass int32 [batch + 1] prefix sums (batch >= 1) on {q.device}")
               for name, x in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k))
               if len(x.shape) != 1 or x.shape[0] < 2 or x.dtype != torch.int32 or x.device != q.device]
    if not reasons and cu_q.shape != cu_k.shape:
        reasons.append(Reason("cu_seqlens_k", f"has {cu_k.shape[0]} entries, cu_seqlens_q {cu_q.shape[0]}",
                              "give one entry per sequence + 1 in both"))
    return reasons


def _describe(x) -> str:
    return f"{x.dtype} {tuple(x.shape)} on {x.device}"


def check_saved(call: Call, q, out, grad_out, lse, dlse=None) -> None:
    """What the backward op takes besides the Call's own tensors must be the forward's: out and dO of q's
    shape with v's head dim, in q's dtype, lse (and dlse, when given) [B, Hq, Sq] f32 (packed: [Hq,
    total_q]), all on q's device (the op's backward is bound to these shapes; a call of the public op may
    pass anything)."""
    case = call.case
    rows = ((case.heads_q, case.seqlen_q) if call.spec.varlen else (case.batch, case.heads_q, case.seqlen_q),
            torch.float32)
    expected = {"out": (tuple(q.shape[:-1]) + (case.hdim_v,), q.dtype), "grad_out": (tuple(q.shape[:-1]) +
                (case.hdim_v,), q.dtype), "lse": rows, "dlse": rows}
    reasons = [Reason(name, f"is {x.dtype} {tuple(x.shape)} on {x.device}",
                      f"pass the forward's: {dtype} {shape} on {q.device}")
               for (name, (shape, dtype)), x in zip(expected.items(), (out, grad_out, lse, dlse))
               if x is not None and (tuple(x.shape) != shape or x.dtype != dtype or x.device != q.device)]
    if reasons:
        raise SpecError(reasons)
