"""The options of one attention call, checked before any tensor is touched.

The custom ops take them as one string argument (torch.library schemas hold str / float / bool); this
frozen dataclass is their one definition and the one place bad values are refused with the fix.
"""
from __future__ import annotations

import ast
import functools
import math
from dataclasses import dataclass, field

import torch

from ..errors import Reason, SpecError
from ..spec import Mask

LAYOUTS = ("bhsd", "bshd")


@dataclass(frozen=True)
class AttentionOptions:
    """mask: which keys a query sees (spec.Mask); scale: the softmax scale (resolved, never None);
    softcap: 0 or C of C tanh(s / C); bias: none, elementwise (a tensor) or alibi; layout: the caller's
    storage order of q, k, v and out; forward: a name of forwards.FORWARDS or 'auto'; debug: our
    backward NaN-fills every buffer its kernels write first (AttentionBackward.debug; slow)."""

    scale: float
    mask: Mask = field(default_factory=Mask)
    softcap: float = 0.0
    bias: str = "none"
    layout: str = "bhsd"
    deterministic: bool = False
    bundle_dir: str | None = None
    forward: str = "auto"
    debug: bool = False

    def as_op_args(self) -> tuple[str]:
        """The options as the custom ops take them (after the tensors): one string, the repr of the
        fields. One argument, not nine: torch's custom-op autograd reads the op's schema once per argument
        on every forward call (torch/_library/utils.py fill_defaults), a cost that grows as their square.
        (repr, not JSON: torch.compile traces this, and it traces repr of constants, not json.dumps.)"""
        return (repr((self.bias, str(self.mask), self.scale, self.softcap, self.layout, self.deterministic,
                      self.bundle_dir, self.forward, self.debug)),)

    @staticmethod
    @functools.lru_cache(maxsize=256)   # per op call otherwise (parsing, Mask.parse); a training loop's are few
    def from_op_args(options: str) -> "AttentionOptions":
        """as_op_args' string back as the options (exactly: a float's repr is its shortest round trip)."""
        bias, mask, scale, softcap, layout, deterministic, bundle_dir, forward, debug = ast.literal_eval(options)
        return AttentionOptions(scale, Mask.parse(mask), softcap, bias, layout, deterministic, bundle_dir, forward,
                                debug)

    def reasons(self) -> list[Reason]:
        out = list(self.mask.reasons())
        if self.layout not in LAYOUTS:
            out.append(Reason("layout", f"unknown layout {self.layout!r}",
                              "use 'bhsd' ([batch, heads, seq, dim]) or 'bshd' ([batch, seq, heads, dim])"))
        if not (isinstance(self.scale, float) and math.isfinite(self.scale) and self.scale > 0):
            out.append(Reason("scale", f"must be a finite float > 0 (got {self.scale!r})",
                              "leave it None for 1/sqrt(head dim)"))
        if not (isinstance(self.softcap, float) and math.isfinite(self.softcap) and self.softcap >= 0):
            out.append(Reason("softcap", f"must be a finite float >= 0 (got {self.softcap!r})", "0 turns it off"))
        for name in ("deterministic", "debug"):
            if not isinstance(getattr(self, name), bool):
                out.append(Reason(name, f"must be True or False (got {getattr(self, name)!r})"))
        if self.bundle_dir is not None and not isinstance(self.bundle_dir, str):
            out.append(Reason("bundle_dir", f"must be a path string or None (got {type(self.bundle_dir).__name__})",
                              "pass str(path)"))
        return out

    def check(self) -> None:
        reasons = self.reasons()
        if reasons:
            raise SpecError(reasons)


def default_scale(hdim_q: int) -> float:
    """The softmax scale when none is given: 1/sqrt(head dim), as torch's SDPA and our spec take it."""
    return 1.0 / math.sqrt(hdim_q)


def options_of(q, *, mask, scale, bias, softcap, layout, deterministic, bundle_dir, forward,
               alibi_slopes=None, debug=False) -> AttentionOptions:
    """attention()'s keyword arguments as checked options (q: the caller's tensor, for the head dim).
    Cached per distinct arguments, told apart by type too (True is not 1): a training loop passes the
    same ones at every call, and checking them (Mask.parse, reasons()) is most of this function."""
    args = (q.shape[-1] if scale is None else None, mask, scale,
            bias if bias is None or isinstance(bias, str) else _A_TENSOR, softcap, layout, deterministic,
            bundle_dir, forward, alibi_slopes is not None, debug)
    return _cached_options(*args)


_A_TENSOR = object()   # what options_of keys a bias tensor by: only that it is one matters here


def _checked_options(hdim_q, mask, scale, bias, softcap, layout, deterministic, bundle_dir, forward, slopes_given,
                     debug) -> AttentionOptions:
    if isinstance(bias, str) and bias != "alibi":
        raise SpecError([Reason("bias", f"unknown bias {bias!r}",
                                "pass a tensor ([Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk]) or 'alibi'")])
    if slopes_given and bias is not None and bias != "alibi":
        raise SpecError([Reason("alibi_slopes", "given with a bias tensor", "give one of them")])
    kind = "alibi" if bias == "alibi" or slopes_given else "none" if bias is None else "elementwise"
    options = AttentionOptions(
        scale=_as_float(scale) if scale is not None else default_scale(hdim_q),
        mask=mask if isinstance(mask, Mask) else Mask.parse(mask), softcap=_as_float(softcap), bias=kind,
        layout=layout, deterministic=deterministic, bundle_dir=None if bundle_dir is None else str(bundle_dir),
        forward=forward, debug=debug)
    options.check()
    return options


def eager_cached(function):
    """`function` cached per distinct arguments, told apart by type too (True is not 1), in eager calls;
    under torch.compile's tracing the function itself (dynamo would trace through the cache, and warn;
    torch 2.11's dynamo cannot trace hash() at all), and uncached for unhashable arguments (a list for
    the mask, say: the function refuses them). For pure functions of a call's options, which a training
    loop repeats at every step."""
    cached = functools.lru_cache(maxsize=256, typed=True)(function)

    @functools.wraps(function)
    def call(*args):
        if torch.compiler.is_compiling():
            return function(*args)
        try:
            hash(args)
        except TypeError:
            return function(*args)
        return cached(*args)

    return call


_cached_options = eager_cached(_checked_options)


def _as_float(value):
    """A real number as a float; anything else is left for reasons() to name."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def logical(x, layout: str):
    """The caller's tensor as a logical [B, H, S, D] view (BSHD: a transposed view, never a copy)."""
    return x.transpose(1, 2) if layout == "bshd" else x


caller_layout = logical   # the same transpose maps a logical view back to the caller's order
