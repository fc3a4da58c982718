"""Which body and config compute a spec on a target: the bodies by name, the automatic choice, and the
one check of a body's limits (fmha-select-kernel-config and the compiler call it)."""
from __future__ import annotations

from functools import lru_cache

from ..errors import Reason, SpecError
from ..kernel_config import KernelConfig
from ..spec import AttentionBwdSpec
from ..target import Target
from .common import Body
from .tiled import TiledBody
from .warp import WarpBody

BODIES: dict[str, Body] = {body.name: body for body in (WarpBody(), TiledBody())}
# body="auto" takes the first body that supports the spec, fastest first.
AUTO_ORDER = ("tiled", "warp")


def get_body(name: str) -> Body:
    if name not in BODIES:
        raise SpecError([Reason("body", f"unknown body {name!r}", f"use one of {', '.join(BODIES)} or auto")])
    return BODIES[name]


def body_of(config: KernelConfig) -> Body:
    return get_body(config.body)


def choose_config(spec: AttentionBwdSpec, target: Target, body: str = "auto") -> KernelConfig:
    """The config to compile `spec` for `target` with: `body` = warp | tiled | auto (the fastest body
    that supports the spec). SpecError with every reason when the requested body cannot."""
    reasons = spec.reasons()
    if reasons:
        raise SpecError(reasons)
    if body != "auto":
        config = get_body(body).default_config(spec, target)
        check_config(spec, target, config)
        return config
    refused = []
    for name in AUTO_ORDER:
        config = BODIES[name].default_config(spec, target)
        found = BODIES[name].reasons(spec, target, config)
        if not found:
            return config
        refused += found
    raise SpecError(refused)


def check_config(spec: AttentionBwdSpec, target: Target, config: KernelConfig) -> None:
    """SpecError unless `config`'s body can compute `spec` on `target` with it: the one check of a body's
    limits (fmha-select-kernel-config, the compiler, and the check of each kernel against its chip)."""
    reasons = spec.reasons() or config.reasons() or list(_body_reasons(spec, target, config))
    if reasons:
        raise SpecError(reasons)


@lru_cache(maxsize=64)
def _body_reasons(spec: AttentionBwdSpec, target: Target, config: KernelConfig) -> tuple[Reason, ...]:
    return tuple(body_of(config).reasons(spec, target, config))
