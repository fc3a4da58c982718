"""Vendor backends, keyed by Target.backend."""
from __future__ import annotations

from ..target import Target
from .amd import AmdBackend
from .base import BACKEND_STAGES, Backend
from .nvidia import NvidiaBackend

__all__ = ["AmdBackend", "NvidiaBackend", "Backend", "BACKENDS", "BACKEND_STAGES", "backend_for"]

BACKENDS: dict[str, type[Backend]] = {cls.BACKEND: cls for cls in (AmdBackend, NvidiaBackend)}


def backend_for(target: Target, *, ptxas: str | None = None, amd_reduce: str = "dpp") -> Backend:
    """The backend compiling for `target`. `ptxas` (NVIDIA) turns the PTX into a cubin; `amd_reduce`
    picks the full-wave reduction on AMD (dpp or shuffle)."""
    if target.backend == NvidiaBackend.BACKEND:
        return NvidiaBackend(target, ptxas=ptxas)
    return BACKENDS[target.backend](target, reduce=amd_reduce)
