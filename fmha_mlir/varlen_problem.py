"""Varlen test problems: sequences of their own lengths, packed (fmha_mlir/varlen.py), with the oracle
and the same-dtype reference run per sequence and concatenated. Numpy only.

Each sequence with both lengths positive is an ordinary one-batch problem (problem.make_problem);
an empty side has nothing to compute: a sequence without queries has dK = dV = 0, one without keys
has O = 0, lse = +inf (FlashAttention's rows that see no key; with sinks, the sink itself) and dQ = 0.
The sinks are one [Hq] tensor shared by every sequence, so dsinks sums the sequences' own, and a row
without keys adds exp(sink - lse) dlse = dlse (its D is 0). The gate then judges the packed gradients
as one tensor each, as it judges a padded problem's.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from . import oracle
from .dtypes import round_to, to_storage
from .errors import Reason, SpecError
from .numerics import Numerics
from .problem import QK_STD, VALUE_STD, Problem, ProblemSize, make_problem
from .spec import AttentionBwdSpec
from .tolerance import GradCheck, check_gradients

GRADS = ("dq", "dk", "dv")
SINK_SEED = 10_000   # the shared sinks are drawn apart from every sequence's seed


@dataclass(frozen=True, eq=False)
class VarlenProblem:
    spec: AttentionBwdSpec
    lengths_q: tuple[int, ...]
    lengths_k: tuple[int, ...]
    heads_q: int
    tensors: dict[str, np.ndarray]     # packed q k v o do [T, H, D] (storage), lse (dlse) [Hq, Tq], cu_seqlens
                                       # int32, sinks [Hq]
    scalars: dict[str, int]            # max_seqlen_q, max_seqlen_k
    parts: list                        # per sequence: its Problem, or the empty side's shapes
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    @property
    def hdim(self) -> int:
        return max(self.spec.hdim_q, self.spec.hdim_v)

    def oracle_gradients(self) -> oracle.Gradients:
        if "oracle" not in self._cache:
            self._cache["oracle"] = self._packed(lambda part: part.oracle_gradients())
        return self._cache["oracle"]

    def lowp_gradients(self, numerics: Numerics) -> oracle.Gradients:
        key = ("lowp", numerics)
        if key not in self._cache:
            self._cache[key] = self._packed(lambda part: part.lowp_gradients(numerics))
        return self._cache[key]

    def check(self, kernel: dict, numerics: Numerics) -> list[GradCheck]:
        """The gate on the packed gradients (tolerance.check_gradients)."""
        return check_gradients(kernel, self.oracle_gradients(), self.lowp_gradients(numerics), self.spec.dtype,
                               self.hdim)

    def _packed(self, gradients_of) -> oracle.Gradients:
        """Per-sequence gradients [1, H, S, D] -> packed [T, H, D] (d: [Hq, Tq]); zeros for an empty side.
        The oracle's rounding model of dQ and dK (term_magnitudes) is packed as they are."""
        hk = self.heads_q // self.spec.gqa_ratio
        pieces = {name: [] for name in GRADS + ("d",)}
        magnitudes = {"dq": [], "dk": []}
        dsinks = np.zeros(self.heads_q) if self.spec.sinks else None
        sink_noise = np.zeros(self.heads_q) if self.spec.sinks else None   # the oracle's model; lowp has none
        q_start = 0
        for part, sq, sk in zip(self.parts, self.lengths_q, self.lengths_k):
            if isinstance(part, Problem):
                g = gradients_of(part)
                for name in GRADS:
                    pieces[name].append(getattr(g, name)[0].transpose(1, 0, 2))
                for name, packed in magnitudes.items():
                    packed.append(g.term_magnitudes[name][0].transpose(1, 0, 2) if name in g.term_magnitudes else None)
                pieces["d"].append(g.d[0])
                if dsinks is not None:
                    dsinks += g.dsinks
                    sink_noise = sink_noise + g.term_magnitudes["dsinks"] if "dsinks" in g.term_magnitudes else None
                q_start += sq
                continue
            pieces["dq"].append(np.zeros((sq, self.heads_q, self.spec.hdim_q)))
            pieces["dk"].append(np.zeros((sk, hk, self.spec.hdim_q)))
            pieces["dv"].append(np.zeros((sk, hk, self.spec.hdim_v)))
            dlse = (self.tensors["dlse"][:, q_start:q_start + sq].astype(np.float64) if self.spec.lse_grad
                    else np.zeros((self.heads_q, sq)))
            pieces["d"].append(-dlse)
            if dsinks is not None and sk == 0:   # the sink alone: lse = sink, its term -(0 - dlse)
                dsinks += dlse.sum(axis=1)
                sink_noise = None if sink_noise is None else sink_noise + np.abs(dlse).sum(axis=1)
            for name, packed in magnitudes.items():
                packed.append(pieces[name][-1])
            q_start += sq
        modelled = {name: np.concatenate(packed, axis=0) for name, packed in magnitudes.items()
                    if all(x is not None for x in packed)}
        if sink_noise is not None:
            modelled["dsinks"] = sink_noise
        return oracle.Gradients(*(np.concatenate(pieces[n], axis=0) for n in GRADS),
                                d=np.concatenate(pieces["d"], axis=1), dsinks=dsinks, term_magnitudes=modelled)


def make_varlen_problem(spec: AttentionBwdSpec, lengths_q, lengths_k, heads_q: int = 2,
                        seed: int = 0, draw=make_problem) -> VarlenProblem:
    """Packed inputs for `spec` (varlen=True) with one sequence per (lengths_q[b], lengths_k[b]);
    sequence b draws from seed + b, by `draw(spec, size, seed)` (a Problem of the padded spec)."""
    lengths_q, lengths_k = tuple(int(n) for n in lengths_q), tuple(int(n) for n in lengths_k)
    reasons = spec.reasons()
    if not spec.varlen:
        reasons.append(Reason("varlen", "a packed problem needs a varlen spec", "use varlen=True"))
    if not lengths_q or len(lengths_q) != len(lengths_k) or min(lengths_q + lengths_k) < 0:
        reasons.append(Reason("lengths", f"{lengths_q} and {lengths_k}: one non-negative length per sequence each"))
    elif not (sum(lengths_q) and sum(lengths_k)):
        reasons.append(Reason("lengths", "every packed tensor needs at least one token"))
    if heads_q % spec.gqa_ratio:
        reasons.append(Reason("heads_q", f"{heads_q} is not a multiple of gqa_ratio {spec.gqa_ratio}"))
    if reasons:
        raise SpecError(reasons)
    padded = replace(spec, varlen=False)
    sinks = draw(padded, ProblemSize(1, heads_q, 1, 1), seed=seed + SINK_SEED).tensors["sinks"] if spec.sinks else None
    rows = ("lse",) + ("dlse",) * spec.lse_grad
    parts, packed = [], {name: [] for name in ("q", "k", "v", "o", "do") + rows}
    for b, (sq, sk) in enumerate(zip(lengths_q, lengths_k)):
        if sq and sk:
            shared = {} if sinks is None else {"sinks": sinks}
            part = draw(padded, ProblemSize(1, heads_q, sq, sk), seed=seed + b, **shared)
            tensors = {n: part.tensors[n][0].transpose(1, 0, 2) for n in ("q", "k", "v", "o", "do")}
            tensors.update({n: part.tensors[n][0] for n in rows})
        else:
            part, tensors = None, _empty_side(padded, heads_q, sq, sk, np.random.default_rng(seed + b), sinks)
        parts.append(part)
        for name, array in tensors.items():
            packed[name].append(array)
    tensors = {name: np.ascontiguousarray(np.concatenate(arrays, axis=1 if name in rows else 0))
               for name, arrays in packed.items()}
    if sinks is not None:
        tensors["sinks"] = sinks
    for name, lengths in (("cu_seqlens_q", lengths_q), ("cu_seqlens_k", lengths_k)):
        tensors[name] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    scalars = {"max_seqlen_q": max(max(lengths_q), 1), "max_seqlen_k": max(max(lengths_k), 1)}
    return VarlenProblem(spec, lengths_q, lengths_k, heads_q, tensors, scalars, parts)


def varlen_problem_of(spec: AttentionBwdSpec, cu_seqlens_q, cu_seqlens_k, heads_q: int,
                      values: dict[str, np.ndarray]) -> VarlenProblem:
    """The packed problem of given inputs (a forward's out and lse among them; the torch op's tests): `values`
    are float64 packed q, k, v, o, do [T, H, D], lse [Hq, Tq], and sinks [Hq] / dlse [Hq, Tq] where the spec
    has them; each sequence with both lengths positive is a Problem of its slices (standard ALiBi
    expanded for its own lengths), the oracle runs per sequence as for make_varlen_problem's."""
    cu_q, cu_k = (np.asarray(c, np.int64) for c in (cu_seqlens_q, cu_seqlens_k))
    padded, parts = replace(spec, varlen=False), []
    for q0, q1, k0, k1 in zip(cu_q, cu_q[1:], cu_k, cu_k[1:]):
        sq, sk = int(q1 - q0), int(k1 - k0)
        if not (sq and sk):
            parts.append(None)
            continue
        sequence = {name: values[name][a:b].transpose(1, 0, 2)[None]
                    for name, a, b in (("q", q0, q1), ("k", k0, k1), ("v", k0, k1), ("o", q0, q1), ("do", q0, q1))}
        sequence.update({name: values[name][:, q0:q1][None] for name in ("lse", "dlse") if name in values})
        if "sinks" in values:
            sequence["sinks"] = values["sinks"]
        if spec.bias == "alibi":
            sequence["bias"] = oracle.alibi_bias(oracle.alibi_slopes(heads_q).astype(np.float32), sq, sk)
        parts.append(Problem(padded, ProblemSize(1, heads_q, sq, sk), "bhsd", {}, sequence))
    lengths_q, lengths_k = tuple(int(n) for n in np.diff(cu_q)), tuple(int(n) for n in np.diff(cu_k))
    tensors = {name: values[name] for name in ("dlse",) if name in values}
    return VarlenProblem(spec, lengths_q, lengths_k, heads_q, tensors, {}, parts)


def _empty_side(spec: AttentionBwdSpec, heads_q: int, sq: int, sk: int, rng, sinks=None) -> dict[str, np.ndarray]:
    """Packed inputs of a sequence with no queries or no keys: random q / dO or k / v (and dlse), O = 0
    and lse = +inf for queries that see no key, or the sink where there is one."""
    hk = heads_q // spec.gqa_ratio

    def draw(shape, std):
        return to_storage(round_to(rng.standard_normal(shape) * std, spec.dtype), spec.dtype)

    return {"q": draw((sq, heads_q, spec.hdim_q), QK_STD), "k": draw((sk, hk, spec.hdim_q), QK_STD),
            "v": draw((sk, hk, spec.hdim_v), VALUE_STD),
            "o": to_storage(np.zeros((sq, heads_q, spec.hdim_v)), spec.dtype),
            "do": draw((sq, heads_q, spec.hdim_v), VALUE_STD),
            "lse": (np.full((heads_q, sq), np.inf, np.float32) if sinks is None
                    else np.repeat(np.asarray(sinks, np.float32)[:, None], sq, axis=1)),
            **({"dlse": (rng.standard_normal((heads_q, sq)) * VALUE_STD).astype(np.float32)} if spec.lse_grad else {})}
