"""The options of one attention call as the custom ops carry them: one string, read and checked once per
distinct string.

attention() only describes its keyword arguments (describe: total and traceable, it never refuses, so
that torch.compile traces it); the ops read the description back (parse) and refuse what is wrong, as
every entry point does. The string is the repr of a tuple of Python literals: torch.compile traces repr of
constants (not json.dumps), and ast.literal_eval reads it without evaluating anything. Which values the
backward accepts (scale, softcap, mask, bias kinds, deterministic mode) is the spec's to say
(AttentionBwdSpec.reasons, through call.py); this module checks only the string's form and the fields the
spec does not hold (layout, forward, bundle_dir, debug).
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field

from ..errors import Reason, SpecError
from ..spec import Mask

# 'thd': packed sequences [total, heads, dim] (attention_varlen's; the Call then takes cu_seqlens)
PACKED = "thd"
LAYOUTS = ("bhsd", "bshd", PACKED)
# The string's fields, in order.
FIELDS = ("mask", "scale", "softcap", "bias", "dbias", "layout", "deterministic", "bundle_dir", "forward", "debug",
          "return_lse")
_LITERALS = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class AttentionOptions:
    """mask: which keys a query sees; scale: the softmax scale, None for the spec's default (1/sqrt(head
    dim)); softcap: 0 or C of C tanh(s / C); bias: None or 'alibi' (a bias or slopes tensor travels as a
    tensor argument); dbias: the bias's or slopes' gradient is wanted; layout: the caller's storage order
    of q, k, v and out; forward: a name of forwards.FORWARDS or 'auto'; debug: our backward NaN-fills
    every buffer its kernels write first (AttentionBackward.debug; slow); return_lse: the lse is an output
    with a gradient (the backward then takes dlse)."""

    mask: Mask = field(default_factory=Mask)
    scale: float | None = None
    softcap: float = 0.0
    bias: str | None = None
    dbias: bool = False
    layout: str = "bhsd"
    deterministic: bool = False
    bundle_dir: str | None = None
    forward: str = "auto"
    debug: bool = False
    return_lse: bool = False

    def text(self) -> str:
        """The options as the ops take them (parse(text()) == self)."""
        return repr(tuple([str(v) if isinstance(v, Mask) else v for v in (getattr(self, n) for n in FIELDS)]))


def describe(mask, scale, softcap, bias, dbias, layout, deterministic, bundle_dir, forward, debug,
             return_lse=False) -> str:
    """attention()'s keyword arguments as the ops' string, judged by nobody yet: a value that is no Python
    literal is written as '<its type>', which parse then refuses by name. (bias: anything but a tensor.)"""
    values = (str(mask) if isinstance(mask, Mask) else mask, scale, softcap, bias, dbias, layout, deterministic,
              bundle_dir if bundle_dir is None or isinstance(bundle_dir, str) else _path(bundle_dir), forward, debug,
              return_lse)
    # float(): a float subclass (NumPy's float64) has a repr literal_eval cannot read
    return repr(tuple([float(v) if isinstance(v, float) else v if isinstance(v, _LITERALS) else
                       f"<{type(v).__name__}>" for v in values]))


def _path(value) -> str:
    return str(value) if hasattr(value, "__fspath__") else f"<{type(value).__name__}>"


@functools.lru_cache(maxsize=256)   # per op call otherwise; a training loop's strings are few
def parse(text: str) -> AttentionOptions:
    """The ops' options string back as options, or SpecError with every reason it is not a valid one."""
    try:
        values = ast.literal_eval(text) if isinstance(text, str) else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        values = None
    if not (isinstance(values, tuple) and len(values) == len(FIELDS)):
        raise SpecError([Reason("options", f"cannot read the options string {str(text)[:200]!r}",
                                f"pass AttentionOptions(...).text(): the repr of a tuple ({', '.join(FIELDS)})")])
    given = dict(zip(FIELDS, values))
    reasons, mask = _reasons(given), None
    try:
        mask = Mask.parse(given["mask"])
    except SpecError as refused:
        reasons += refused.reasons
    if reasons:
        raise SpecError(reasons)
    return AttentionOptions(**{**given, "mask": mask, "scale": _real(given["scale"]),
                               "softcap": _real(given["softcap"])})


def _real(value):
    """A real number as a float (the spec's checks then see floats); anything else as it is."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _reasons(given: dict) -> list[Reason]:
    """Reasons about the fields the spec does not judge, and about the string's types."""
    out = []
    if given["layout"] not in LAYOUTS:
        out.append(Reason("layout", f"unknown layout {given['layout']!r}",
                          "use 'bhsd' ([batch, heads, seq, dim]) or 'bshd' ([batch, seq, heads, dim]); "
                          "packed sequences: attention_varlen"))
    scale = given["scale"]
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale == 0):
        out.append(Reason("scale", f"must be a positive number (got {scale!r})", "leave it None for 1/sqrt(head dim)"))
    softcap = given["softcap"]
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        out.append(Reason("softcap", f"must be a number (got {softcap!r})", "0 turns it off"))
    if given["bias"] not in (None, "alibi"):
        out.append(Reason("bias", f"unknown bias {given['bias']!r}",
                          "pass a tensor ([Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk]) or 'alibi'"))
    for name in ("dbias", "deterministic", "debug", "return_lse"):
        if not isinstance(given[name], bool):
            out.append(Reason(name, f"must be True or False (got {given[name]!r})"))
    if given["bundle_dir"] is not None and not isinstance(given["bundle_dir"], str):
        out.append(Reason("bundle_dir", f"must be a path or None (got {given['bundle_dir']!r})", "pass str(path)"))
    if not isinstance(given["forward"], str):
        out.append(Reason("forward", f"must be a forward's name (got {given['forward']!r})", "use 'auto'"))
    return out


def logical(x, layout: str):
    """The caller's tensor as a logical [B, H, S, D] view (BSHD: a transposed view, never a copy); packed
    sequences stay as they are (the varlen backward takes them packed)."""
    return x.transpose(1, 2) if layout == "bshd" else x


caller_layout = logical   # the same transpose maps a logical view back to the caller's order
