"""Problems of extreme but legal inputs, the kind that give silent NaN gradients when a kernel mishandles
them: q, k, v, dO of a chosen magnitude, ALiBi slopes of either sign, and either lse convention for rows
that see no key.
NumPy only: the interpreter tests build them here, tools/nan_classes.py on the GPU machine."""
from __future__ import annotations

import numpy as np

from .dtypes import round_to
from .problem import Problem, ProblemSize, problem_of
from .spec import AttentionBwdSpec


def scaled_problem(spec: AttentionBwdSpec, size: ProblemSize, seed: int, magnitude: float = 1.0, slopes=None,
                   layout: str = "bhsd", value_magnitude: float | None = None) -> Problem:
    """Random q, k of standard deviation `magnitude` and v, dO of `value_magnitude` (default half of
    it), in spec.dtype; with `slopes` (one per query head, any sign) ALiBi's slopes tensor [1, heads_q]."""
    values_std = magnitude / 2 if value_magnitude is None else value_magnitude
    rng = np.random.default_rng(seed)
    hk = size.heads_kv(spec.gqa_ratio)
    shapes = {"q": (size.batch, size.heads_q, size.seqlen_q, spec.hdim_q),
              "k": (size.batch, hk, size.seqlen_k, spec.hdim_q),
              "v": (size.batch, hk, size.seqlen_k, spec.hdim_v),
              "do": (size.batch, size.heads_q, size.seqlen_q, spec.hdim_v)}
    values = {name: round_to(rng.standard_normal(shape) * (values_std if name in ("v", "do") else magnitude),
                             spec.dtype) for name, shape in shapes.items()}
    extra = {}
    if slopes is not None:
        extra["alibi_slopes"] = np.asarray(slopes, np.float32).reshape(1, size.heads_q)
        values["alibi_slopes"] = extra["alibi_slopes"].astype(np.float64)
    return problem_of(spec, size, values, extra, layout)


def lse_minus_inf(lse: np.ndarray) -> np.ndarray:
    """The lse in torch.logsumexp's (and FlexAttention's) convention: -inf, not +inf, for a row that sees
    no key. The gradients are the same; a kernel must read both as "this row sees nothing"."""
    return np.where(np.isposinf(lse), np.float32(-np.inf), lse)
