"""Our score definition in torch: the mask, ALiBi and the additive bias, as every forward needs them.

S = scale Q K^T (through C tanh(. / C) with softcap C) + bias, -inf where the mask hides a key
(fmha_mlir/spec.py, oracle.py are the definitions: these build on them, never restate them).
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from .. import oracle
from ..spec import Mask


# Cached per shape and device: no host upload on the hot path of a training loop.
@functools.lru_cache(maxsize=64)
def visible(mask: Mask, seqlen_q: int, seqlen_k: int, device: torch.device) -> torch.Tensor:
    """[Sq, Sk] bool: which keys each query sees (oracle.visible_matrix, from spec.Mask.visible)."""
    return torch.from_numpy(np.array(oracle.visible_matrix(mask, seqlen_q, seqlen_k))).to(device)


@functools.lru_cache(maxsize=256)
def empty_rows(mask: Mask, seqlen_q: int, seqlen_k: int) -> np.ndarray:
    """[Sq] bool, read-only: the rows that see no key (their lse is +inf in our convention). Cached per
    shape: the [Sq, Sk] matrix behind it costs milliseconds of host time at Sq = Sk = 1024."""
    rows = ~oracle.visible_matrix(mask, seqlen_q, seqlen_k).any(axis=1)
    rows.flags.writeable = False
    return rows


@functools.lru_cache(maxsize=256)
def has_empty_rows(mask: Mask, seqlen_q: int, seqlen_k: int) -> bool:
    """Whether any row sees no key (asked at every forward)."""
    return bool(empty_rows(mask, seqlen_q, seqlen_k).any())


@functools.lru_cache(maxsize=64)
def seen_rows(mask: Mask, seqlen_q: int, seqlen_k: int, device: torch.device) -> torch.Tensor:
    """[Sq] bool on `device`: the rows that see a key (uploaded once per shape)."""
    return torch.from_numpy(~empty_rows(mask, seqlen_q, seqlen_k)).to(device)


def alibi_slopes(slopes: torch.Tensor | None, heads_q: int, device) -> torch.Tensor:
    """[1 or B, Hq] f32: the given slopes ([H] or [B, H]) or the standard 2^(-8 (h+1) / H)."""
    if slopes is None:
        return _standard_slopes(heads_q, device)
    return slopes.reshape((1,) * (2 - slopes.dim()) + tuple(slopes.shape)).float()


# Uploaded once per head count and device: a host upload inside a CUDA graph capture is an error.
@functools.lru_cache(maxsize=64)
def _standard_slopes(heads_q: int, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(oracle.alibi_slopes(heads_q).astype(np.float32)).to(device).reshape(1, heads_q)


@functools.lru_cache(maxsize=64)
def _distance(seqlen_q: int, seqlen_k: int, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(oracle.alibi_distance(seqlen_q, seqlen_k).astype(np.float32)).to(device)


def additive_bias(kind: str, bias: torch.Tensor | None, slopes: torch.Tensor | None, heads_q: int,
                  seqlen_q: int, seqlen_k: int, device) -> torch.Tensor | None:
    """The bias added to the scores, broadcastable to [B, Hq, Sq, Sk] (f32 for ALiBi, the bias's own
    dtype for a tensor); None without one."""
    if kind == "elementwise":
        return bias
    if kind == "alibi":
        return -alibi_slopes(slopes, heads_q, device)[:, :, None, None] * _distance(seqlen_q, seqlen_k, device)
    return None


def expand_kv(x: torch.Tensor, heads_q: int) -> torch.Tensor:
    """kv heads -> query heads (query head h reads kv head h // ratio), for forwards without GQA."""
    return x if x.shape[1] == heads_q else x.repeat_interleave(heads_q // x.shape[1], dim=1)
