"""Test problems: random inputs in a kernel's storage, their float64 values and the reference gradients.

Numpy only (importable without MLIR). `make_problem(spec, size)` draws q, k, v, dO, rounds them to
spec.dtype, runs the oracle forward for O (rounded to dtype) and lse (f32), and keeps both what the
kernel reads (`Problem.tensors`) and the float64 values the oracle uses (`Problem.values`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import oracle
from .dtypes import round_to, to_storage
from .errors import Reason, SpecError
from .numerics import Numerics
from .spec import AttentionBwdSpec
from .tolerance import GradCheck, check_gradients

LAYOUTS = ("bhsd", "bshd")
# Scores come out with standard deviation ~1 after the 1/sqrt(hdim) scale: a softmax that is neither
# flat nor one-hot, so every term of the backward matters.
QK_STD = 1.0
VALUE_STD = 0.5   # v, dO, an elementwise bias and dlse
# Sink logits: around one above a score, so the sink takes a sizeable share of every row (dsinks is
# large and the rows' P visibly sum to less than one).
SINK_MEAN = 1.0


# The oracle keeps about this many [B, Hq, Sq, Sk] float64 matrices alive at once; problems whose
# matrices would pass the limit are refused before any is allocated (MemoryError is no message).
ORACLE_MATRICES = 8
ORACLE_BYTES_LIMIT = 16 * 2**30


@dataclass(frozen=True)
class ProblemSize:
    """Runtime sizes of one problem; heads_kv follows from the spec's gqa_ratio."""

    batch: int
    heads_q: int
    seqlen_q: int
    seqlen_k: int

    def heads_kv(self, gqa_ratio: int) -> int:
        return self.heads_q // gqa_ratio

    def reasons(self, spec: AttentionBwdSpec) -> list[Reason]:
        sizes = {name: getattr(self, name) for name in ("batch", "heads_q", "seqlen_q", "seqlen_k")}
        out = [Reason(name, f"must be a positive integer (got {value!r})")
               for name, value in sizes.items() if not oracle.is_positive_int(value)]
        if not out and self.heads_q % spec.gqa_ratio:
            out.append(Reason("heads_q", f"{self.heads_q} query heads are not a multiple of gqa_ratio "
                                         f"{spec.gqa_ratio}", f"use a multiple of {spec.gqa_ratio}"))
        if not out and self.oracle_bytes() > ORACLE_BYTES_LIMIT:
            out.append(Reason("size", f"B{self.batch} Hq{self.heads_q} Sq{self.seqlen_q} Sk{self.seqlen_k}: the "
                                      f"float64 oracle would hold ~{self.oracle_bytes() / 2**30:.0f} GiB of score "
                                      f"matrices (the limit is {ORACLE_BYTES_LIMIT // 2**30} GiB)",
                              "use smaller sizes (a problem is checked against a float64 oracle on the host)"))
        return out

    def oracle_bytes(self) -> int:
        """What the oracle's [B, Hq, Sq, Sk] float64 matrices take (scores, P, dP, dS and temporaries)."""
        return ORACLE_MATRICES * 8 * self.batch * self.heads_q * self.seqlen_q * self.seqlen_k


@dataclass(frozen=True, eq=False)
class Problem:
    spec: AttentionBwdSpec
    size: ProblemSize
    layout: str
    # What the kernel reads, by buffer name: q k v o do lse (plus bias / alibi_slopes when the spec
    # reads one), in logical BHSD shape and storage dtype (bf16 as uint16 bits; lse f32). For layout
    # "bshd" the q..do arrays are transposed views of contiguous BSHD storage.
    tensors: dict[str, np.ndarray]
    # The same tensors as float64 values, contiguous BHSD; "bias" is the bias the oracle adds (for the
    # standard ALiBi slopes: expanded by oracle.alibi_bias).
    values: dict[str, np.ndarray]
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    @property
    def hdim(self) -> int:
        """The head dim the tolerance table keys on."""
        return max(self.spec.hdim_q, self.spec.hdim_v)

    def _inputs(self) -> tuple:
        return tuple(self.values[n] for n in ("q", "k", "v", "o", "do", "lse"))

    def _options(self) -> dict:
        return dict(mask=self.spec.mask, scale=self.spec.scale, gqa_ratio=self.spec.gqa_ratio,
                    bias=self.values.get("bias"), softcap=self.spec.softcap,
                    alibi_slopes=self.values.get("alibi_slopes"), sinks=self.values.get("sinks"),
                    dlse=self.values.get("dlse"))

    @property
    def bias_gradients(self) -> tuple[str, ...]:
        """The bias gradients the kernel outputs besides dq, dk, dv (dbias, dalibi_slopes)."""
        return self.spec.bias_operands()[1]

    def oracle_gradients(self) -> oracle.Gradients:
        """float64 gradients (cached)."""
        if "oracle" not in self._cache:
            self._cache["oracle"] = oracle.backward(*self._inputs(), **self._options())
        return self._cache["oracle"]

    def lowp_gradients(self, numerics: Numerics) -> oracle.Gradients:
        """Gradients as a spec.dtype kernel with `numerics` computes them, for the gate (cached)."""
        key = ("lowp", numerics)
        if key not in self._cache:
            self._cache[key] = oracle.lowp_backward(*self._inputs(), dtype=self.spec.dtype, numerics=numerics,
                                                    **self._options())
        return self._cache[key]

    def check(self, kernel: dict, numerics: Numerics) -> list[GradCheck]:
        """The gate (tolerance.check_gradients) for the outputs of a kernel whose body computes with
        `numerics` (a bundle's `numerics`)."""
        return check_gradients(kernel, self.oracle_gradients(), self.lowp_gradients(numerics), self.spec.dtype,
                               self.hdim)


def _storage_view(values: np.ndarray, dtype: str, layout: str) -> np.ndarray:
    """Values [B, H, S, D] -> the kernel's array in logical shape; for bshd a view of BSHD storage."""
    if layout == "bhsd":
        return np.ascontiguousarray(to_storage(values, dtype))
    return np.ascontiguousarray(to_storage(values.transpose(0, 2, 1, 3), dtype)).transpose(0, 2, 1, 3)


def _check(spec: AttentionBwdSpec, size: ProblemSize, layout: str) -> None:
    reasons = spec.reasons()
    if not reasons:
        reasons = size.reasons(spec)
    if layout not in LAYOUTS:
        reasons.append(Reason("layout", f"unknown layout {layout!r}", f"use one of {', '.join(LAYOUTS)}"))
    if reasons:
        raise SpecError(reasons)


# Which dimensions a bias tensor broadcasts over (size 1): an elementwise bias is [1 or B, 1 or H, Sq, Sk],
# ALiBi's slopes [1 or B, H] (docs/ir.md).
BIAS_BROADCASTS = {"batch": (True, False), "heads": (False, True), "batch_heads": (True, True),
                   "none": (False, False)}
SLOPES_BROADCASTS = ("batch", "none")


def make_problem(spec: AttentionBwdSpec, size: ProblemSize, seed: int = 0, layout: str = "bhsd",
                 broadcast: str = "batch", sinks: np.ndarray | None = None) -> Problem:
    """Random inputs for `spec` at `size` (the same seed gives the same problem), with O and lse from
    the oracle forward. An elementwise bias is [1 or B, 1 or H, Sq, Sk] in spec.dtype, size 1 where it
    `broadcast`s (BIAS_BROADCASTS; the default is [1, H, Sq, Sk]); a slopes tensor (alibi_slopes)
    is [1, H] or, with broadcast "none", [B, H] f32, drawn around the standard slopes. With spec.sinks
    the sinks are `sinks` (f32 [H]) or drawn around SINK_MEAN; with spec.lse_grad dlse is drawn."""
    _check(spec, size, layout)
    if not (isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):   # numpy's generators need it
        raise SpecError([Reason("seed", f"must be an integer >= 0 (got {seed!r})")])
    allowed = SLOPES_BROADCASTS if spec.alibi_slopes else BIAS_BROADCASTS
    if broadcast not in allowed:
        raise SpecError([Reason("broadcast", f"unknown broadcast {broadcast!r}", f"use one of {', '.join(allowed)}")])
    rng = np.random.default_rng(seed)
    b, hq, sq, sk = size.batch, size.heads_q, size.seqlen_q, size.seqlen_k
    hk = size.heads_kv(spec.gqa_ratio)

    def draw(shape, std):
        return round_to(rng.standard_normal(shape) * std, spec.dtype)

    values = {
        "q": draw((b, hq, sq, spec.hdim_q), QK_STD),
        "k": draw((b, hk, sk, spec.hdim_q), QK_STD),
        "v": draw((b, hk, sk, spec.hdim_v), VALUE_STD),
        "do": draw((b, hq, sq, spec.hdim_v), VALUE_STD),
    }
    extra_tensors = {}
    if spec.bias == "elementwise":
        one_batch, one_head = BIAS_BROADCASTS[broadcast]
        values["bias"] = draw((1 if one_batch else b, 1 if one_head else hq, sq, sk), VALUE_STD)
        extra_tensors["bias"] = to_storage(values["bias"], spec.dtype)
    elif spec.alibi_slopes:
        standard = oracle.alibi_slopes(hq)
        slopes = standard * rng.uniform(0.5, 2.0, (1 if broadcast == "batch" else b, hq))
        extra_tensors["alibi_slopes"] = slopes.astype(np.float32)
        values["alibi_slopes"] = extra_tensors["alibi_slopes"].astype(np.float64)
    elif spec.bias == "alibi":
        values["bias"] = oracle.alibi_bias(oracle.alibi_slopes(hq).astype(np.float32), sq, sk)
    if spec.sinks:
        drawn = (SINK_MEAN + rng.standard_normal(hq)).astype(np.float32)
        extra_tensors["sinks"] = drawn if sinks is None else np.asarray(sinks, dtype=np.float32)
    if spec.lse_grad:
        extra_tensors["dlse"] = (rng.standard_normal((b, hq, sq)) * VALUE_STD).astype(np.float32)
    for name in ("sinks", "dlse"):   # f32 in every dtype
        if name in extra_tensors:
            values[name] = extra_tensors[name].astype(np.float64)

    return problem_of(spec, size, values, extra_tensors, layout)


def problem_of(spec: AttentionBwdSpec, size: ProblemSize, values: dict, extra_tensors: dict,
               layout: str = "bhsd") -> Problem:
    """The problem of given inputs: `values` q, k, v, do (float64 BHSD, already representable in
    spec.dtype), bias or alibi_slopes where the spec reads one, sinks and dlse where it has them,
    `extra_tensors` the bias / slopes / sinks / dlse buffers the kernel reads; O and lse come from the
    oracle forward (the lse including the sinks)."""
    _check(spec, size, layout)
    values = dict(values)
    fwd = oracle.forward(values["q"], values["k"], values["v"], mask=spec.mask, scale=spec.scale,
                         gqa_ratio=spec.gqa_ratio, bias=values.get("bias"), softcap=spec.softcap,
                         alibi_slopes=values.get("alibi_slopes"), sinks=values.get("sinks"))
    values["o"] = round_to(fwd.o, spec.dtype)
    lse = fwd.lse.astype(np.float32)
    values["lse"] = lse.astype(np.float64)

    tensors = {name: _storage_view(values[name], spec.dtype, layout) for name in ("q", "k", "v", "o", "do")}
    tensors["lse"] = lse
    tensors.update(extra_tensors)
    return Problem(spec, size, layout, tensors, values)
