"""The problem spec: what one attention-backward kernel set is compiled for. Importable without MLIR.

Runtime sizes (batch, heads, sequence lengths, strides) are not part of the spec: the kernels take them
as arguments. Everything here is a compile-time choice, validated into structured reasons before any IR
is built (MLIR aborts the process on some invalid inputs, so nothing unchecked may reach it).
"""
from __future__ import annotations

import math
import numbers
import struct
from dataclasses import dataclass, field
from functools import cached_property

from . import mask_geometry
from .errors import Reason, SpecError

DTYPES = ("f16", "bf16", "f32")
MASK_KINDS = ("none", "causal_top_left", "causal_bottom_right", "sliding_window")
BIAS_KINDS = ("none", "elementwise", "alibi")
# The dtype dQ's atomic adds accumulate in: f32 into a workspace (converted after), or bf16 by packed
# atomics straight into dQ (half the atomic traffic, a bf16 rounding per key block).
GRAD_ACCUMS = ("f32", "bf16")
# The scale is compiled in as an f32 attribute: it must survive the rounding, and not as a denormal.
F32_MIN_NORMAL = 1.1754943508222875e-38
F32_MAX = 3.4028234663852886e38
# Sizes become 64-bit IR attributes and 32-bit kernel arithmetic; anything larger is a typo.
MAX_INT_OPTION = 2**31 - 1

_MASK_ALIASES = {
    "none": "none", "no_mask": "none",
    "causal": "causal_top_left", "top_left": "causal_top_left", "causal_top_left": "causal_top_left",
    "tl": "causal_top_left",
    "bottom_right": "causal_bottom_right", "causal_bottom_right": "causal_bottom_right", "br": "causal_bottom_right",
}


@dataclass(frozen=True)
class Mask:
    """Which keys each query row sees.

    causal_top_left:     k <= q
    causal_bottom_right: k <= q + (seqlen_k - seqlen_q)
    sliding_window:      q + off - left <= k <= q + off + right with off = seqlen_k - seqlen_q
                         (bottom-right aligned, as FlashAttention); a negative size means unbounded.
    """

    kind: str = "none"
    window_left: int = -1
    window_right: int = -1

    @staticmethod
    def parse(text: str) -> "Mask":
        """'none', 'top_left', 'bottom_right' (and their long names) or 'window:LEFT,RIGHT'."""
        text = text.strip() if isinstance(text, str) else text
        if not isinstance(text, str):
            raise SpecError([Reason("mask", f"must be a mask name or a Mask (got {type(text).__name__} {text!r})",
                                    "use none, top_left, bottom_right or window:LEFT,RIGHT")])
        kind, colon, sizes = text.partition(":")
        if colon and kind in ("window", "sliding_window"):
            try:
                left, right = (int(s) for s in sizes.split(","))
            except ValueError:
                raise SpecError([Reason("mask", f"cannot read window sizes from {text!r}",
                                        "write window:LEFT,RIGHT, e.g. window:64,0")]) from None
            return Mask("sliding_window", left, right)
        if text not in _MASK_ALIASES:
            raise SpecError([Reason("mask", f"unknown mask {text!r}",
                                    "use none, top_left, bottom_right or window:LEFT,RIGHT")])
        return Mask(_MASK_ALIASES[text])

    def __str__(self) -> str:
        if self.kind == "sliding_window":
            return f"window:{self.window_left},{self.window_right}"
        return self.kind

    def visible(self, q, k, seqlen_q: int, seqlen_k: int):
        """Visibility of key k to query q (mask_geometry.visible) on ints and on broadcasting NumPy or
        torch arrays; an array-like for arrays even when every key is visible."""
        seen = mask_geometry.visible(self, q, k, seqlen_q, seqlen_k)
        return (k >= 0) | True if seen is True else seen

    def reasons(self) -> list[Reason]:
        for side in ("window_left", "window_right"):
            value = getattr(self, side)
            if not isinstance(value, int) or isinstance(value, bool) or not -1 <= value <= MAX_INT_OPTION:
                return [Reason(f"mask.{side}", f"must be an integer from -1 (unbounded) to {MAX_INT_OPTION} "
                                               f"(got {value!r})")]
        if self.kind not in MASK_KINDS:
            return [Reason("mask.kind", f"unknown mask kind {self.kind!r}", f"use one of {', '.join(MASK_KINDS)}")]
        if self.kind != "sliding_window" and (self.window_left, self.window_right) != (-1, -1):
            return [Reason("mask", f"window sizes given for mask {self.kind!r}",
                           "window sizes apply to sliding_window only; leave them at -1")]
        if self.kind == "sliding_window" and self.window_left < 0 and self.window_right < 0:
            return [Reason("mask", "sliding window with both sides unbounded",
                           "give at least one non-negative window size, or use mask none")]
        return []


@dataclass(frozen=True)
class AttentionBwdSpec:
    """Compile-time choices for one attention backward."""

    dtype: str = "f16"
    hdim_q: int = 128
    hdim_v: int = 0            # 0: same as hdim_q
    gqa_ratio: int = 1         # query heads per key/value head (1: MHA; heads_q: MQA)
    mask: Mask = field(default_factory=Mask)
    scale: float = 0.0         # softmax scale; 0: 1/sqrt(hdim_q)
    bias: str = "none"         # elementwise: a bias tensor added to the scores; alibi: -slope_h |q + Sk - Sq - k|
    dbias: bool = False        # also the bias's gradient: dbias (elementwise) or d(slopes) (alibi_slopes)
    alibi_slopes: bool = False  # alibi's slopes from an f32 operand [1 or batch, heads_q]; else the standard ones
    deterministic: bool = False  # no atomics whose order can change a result (tiled bodies: dQ, dbias partials)
    softcap: float = 0.0       # > 0: scores are softcap * tanh(scale q.k / softcap) (FlashAttention's softcap)
    grad_accum: str = "f32"    # bf16: dQ added into dQ itself by packed bf16 atomics (no f32 workspace)
    varlen: bool = False       # packed [total, heads, dim] sequences with cu_seqlens (fmha_mlir/varlen.py)
    # Learnable attention sinks (gpt-oss): a per-head logit in every row's softmax denominator. The lse
    # already includes it, so P, D and dS do not change; the flag adds the f32 [heads_q] `sinks` operand
    # and their gradient `dsinks` = -sum over rows (and batch) of exp(sink - lse) D.
    sinks: bool = False
    # The lse is an output with a gradient (ring attention merges partial results through it): the f32
    # `dlse` operand shaped like lse, and D becomes D - dLSE.
    lse_grad: bool = False

    def __post_init__(self):
        for name in ("scale", "softcap"):   # NumPy and other real scalars (np.float32(0.125)) as Python floats
            value = getattr(self, name)
            if isinstance(value, numbers.Real) and not isinstance(value, (bool, int, float)):
                object.__setattr__(self, name, float(value))
        if self.hdim_v == 0:
            object.__setattr__(self, "hdim_v", self.hdim_q)
        if self.scale == 0.0 and isinstance(self.hdim_q, int) and self.hdim_q > 0:
            object.__setattr__(self, "scale", 1.0 / math.sqrt(self.hdim_q))

    @property
    def kernel_prefix(self) -> str:
        """A readable, unique-per-spec symbol prefix for the kernels."""
        mask = {"none": "nomask", "causal_top_left": "tl", "causal_bottom_right": "br"}.get(
            self.mask.kind, f"win{self.mask.window_left}_{self.mask.window_right}".replace("-", "m"))
        name = f"fmha_bwd_{self.dtype}_d{self.hdim_q}x{self.hdim_v}_g{self.gqa_ratio}_{mask}"
        if f32_value(self.scale) != f32_value(1.0 / math.sqrt(self.hdim_q)):   # attributes hold f32
            # The scale is compiled in: a non-default one must give distinct symbols.
            name += "_s" + _symbol_number(self.scale)
        if self.softcap:
            name += "_cap" + _symbol_number(self.softcap)
        if self.bias != "none":
            name += "_" + {"elementwise": "bias", "alibi": "alibi"}.get(self.bias, self.bias)
        if self.alibi_slopes:
            name += "t"     # _alibit: the slopes come from a tensor
        if self.dbias:
            name += "_dbias"
        if self.deterministic:
            name += "_det"
        if self.grad_accum != "f32":
            name += "_acc" + str(self.grad_accum)
        if self.varlen:
            name += "_varlen"
        if self.sinks:
            name += "_sinks"
        if self.lse_grad:
            name += "_dlse"
        return name

    def bias_operands(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(inputs, gradients) the score bias adds to the problem's operands (docs/ir.md): the bias
        tensor and dbias, or the slopes and d(slopes)."""
        if self.bias == "elementwise":
            return ("bias",), ("dbias",) if self.dbias else ()
        if self.bias == "alibi" and self.alibi_slopes:
            return ("alibi_slopes",), ("dalibi_slopes",) if self.dbias else ()
        return (), ()

    def row_operands(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(inputs, gradients) the row stage adds to the problem's operands (docs/ir.md): dlse with
        lse_grad; the sink logits and their gradient with sinks."""
        inputs = ("dlse",) * bool(self.lse_grad) + ("sinks",) * bool(self.sinks)
        return inputs, ("dsinks",) * bool(self.sinks)

    def reasons(self) -> list[Reason]:
        """Every reason this spec is malformed; empty when valid. What a body or target supports is
        fmha_mlir.bodies' to say. The one validation of every option: the API, the tools, the torch op
        and the IR verifier all ask it."""
        return list(self._reasons)

    @cached_property
    def _reasons(self) -> tuple[Reason, ...]:
        # A frozen spec's reasons are fixed: validated once per spec, whoever asks.
        return tuple(self._validate())

    def _validate(self) -> list[Reason]:
        out: list[Reason] = []
        if self.dtype not in DTYPES:
            out.append(Reason("dtype", f"unsupported element type {self.dtype!r}", f"use one of {', '.join(DTYPES)}"))
        for name in ("hdim_q", "hdim_v", "gqa_ratio"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                out.append(Reason(name, f"must be a positive integer (got {value!r})"))
            elif value > MAX_INT_OPTION:
                out.append(Reason(name, f"{value} is too large (at most {MAX_INT_OPTION})"))
        # A scale still 0 is the default that an invalid hdim_q left unset: hdim_q's reason says why.
        if self.scale != 0.0:
            out += scale_reasons(self.scale, "leave it 0 for 1/sqrt(hdim_q)")
        out += self.mask.reasons()
        out += softcap_reasons(self.softcap)
        out += self._bias_reasons()
        if not isinstance(self.deterministic, bool):
            out.append(Reason("deterministic", f"must be a bool (got {self.deterministic!r})"))
        elif self.deterministic and "dalibi_slopes" in self.bias_operands()[1]:
            out.append(Reason("deterministic", "d(slopes) is still summed by f32 atomics in any order; "
                                               "deterministic mode does not cover it yet",
                              "use dbias=False, or deterministic=False"))
        out += self._grad_accum_reasons()
        out += self._varlen_reasons()
        out += [Reason(name, f"must be True or False (got {getattr(self, name)!r})")
                for name in ("sinks", "lse_grad") if not isinstance(getattr(self, name), bool)]
        return out

    def _grad_accum_reasons(self) -> list[Reason]:
        if self.grad_accum not in GRAD_ACCUMS:
            return [Reason("grad_accum", f"unknown gradient accumulation dtype {self.grad_accum!r}",
                           f"use one of {', '.join(GRAD_ACCUMS)}")]
        if self.grad_accum == "f32":
            return []
        out = []
        if self.dtype != "bf16":
            out.append(Reason("grad_accum", f"bf16 atomics add into a bf16 dQ; this spec's dtype is {self.dtype}",
                              "use dtype='bf16', or grad_accum='f32'"))
        if self.deterministic is True:
            out.append(Reason("grad_accum", "bf16 atomics add in any order, and bf16 rounding makes the order "
                                            "show: deterministic mode forbids exactly that",
                              "use grad_accum='f32' with deterministic=True, or deterministic=False"))
        return out

    def _varlen_reasons(self) -> list[Reason]:
        if not isinstance(self.varlen, bool):
            return [Reason("varlen", f"must be a bool (got {self.varlen!r})")]
        if not self.varlen:
            return []
        out = []
        if self.deterministic:
            out.append(Reason("varlen", "deterministic mode's dQ partials are counted in key blocks of one "
                                        "sequence length; packed sequences of their own lengths are not built "
                                        "for it", "use deterministic=False, or pad the batch"))
        if self.bias == "elementwise" or self.alibi_slopes:
            out.append(Reason("varlen", "a bias or slopes tensor is indexed by [batch, head, Sq, Sk] of one "
                                        "length; packed sequences do not give it that shape",
                              "use bias='alibi' with the standard slopes, or pad the batch"))
        if self.grad_accum == "bf16":
            out.append(Reason("varlen", "bf16 dQ atomics into packed sequences are not built (nor tested) yet",
                              "use grad_accum='f32' with varlen"))
        return out

    def _bias_reasons(self) -> list[Reason]:
        for name in ("dbias", "alibi_slopes"):
            if not isinstance(getattr(self, name), bool):
                return [Reason(name, f"must be True or False (got {getattr(self, name)!r})")]
        if self.bias not in BIAS_KINDS:
            return [Reason("bias", f"unknown bias kind {self.bias!r}", f"use one of {', '.join(BIAS_KINDS)}")]
        if self.alibi_slopes and self.bias != "alibi":
            return [Reason("alibi_slopes", f"a slopes tensor is ALiBi's, but bias is {self.bias!r}",
                           "use bias='alibi', or alibi_slopes=False")]
        if self.dbias and self.bias == "none":
            return [Reason("dbias", "dbias asks for the gradient of a bias, but bias is 'none'",
                           "use bias='elementwise' (dbias) or 'alibi' with a slopes tensor (d(slopes))")]
        if self.dbias and self.bias == "alibi" and not self.alibi_slopes:
            return [Reason("dbias", "d(slopes) is the gradient of a slopes tensor; the standard slopes are "
                                    "constants of the kernel", "pass the slopes as a tensor (alibi_slopes=True)")]
        return []

    def check(self) -> None:
        """Raise SpecError with every reason this spec is invalid."""
        reasons = self.reasons()
        if reasons:
            raise SpecError(reasons)


def _f32_normal(value) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and F32_MIN_NORMAL <= value <= F32_MAX)


def scale_reasons(value, fix: str) -> list[Reason]:
    """The rule for a softmax scale (the spec's, the oracle's): a positive f32 normal value, which the
    kernels are compiled with."""
    if _f32_normal(value):
        return []
    return [Reason("scale", f"softmax scale must be a positive f32 value, from {F32_MIN_NORMAL:.3g} to "
                            f"{F32_MAX:.3g} (got {value!r})", fix)]


def softcap_reasons(value) -> list[Reason]:
    """The rule for a softcap (the spec's, the oracle's): 0 (off) or a positive f32 normal value."""
    if (isinstance(value, numbers.Real) and not isinstance(value, bool) and value == 0) or _f32_normal(value):
        return []
    return [Reason("softcap", f"must be 0 (off) or a positive f32 value, from {F32_MIN_NORMAL:.3g} to "
                              f"{F32_MAX:.3g} (got {value!r})", "FlashAttention's models use 30 or 50")]


def f32_value(value: float) -> float:
    """`value` rounded to f32, as the IR's attributes hold it."""
    return struct.unpack("f", struct.pack("f", value))[0]


def _symbol_number(value: float) -> str:
    """A float as it may appear in a symbol: its f32 value in the fewest digits that tell it from every
    other f32 (two specs whose compiled values differ get distinct symbols), '.' -> 'p', '-' -> 'm'."""
    rounded = f32_value(value)
    digits = next(d for d in range(6, 10) if f32_value(float(f"{rounded:.{d}g}")) == rounded)
    return f"{rounded:.{digits}g}".replace(".", "p").replace("-", "m").replace("+", "")
