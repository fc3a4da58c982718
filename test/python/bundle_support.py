"""Bundles for interpreter tests: compiled once per (spec, arch, body) in a test process, and whether a
body takes a spec on a target at all."""
from __future__ import annotations

import functools

from fmha_mlir.api import compile_bundle
from fmha_mlir.bodies import choose_config
from fmha_mlir.compiler import Compiler
from fmha_mlir.errors import SpecError
from fmha_mlir.spec import AttentionBwdSpec
from fmha_mlir.target import get_target


@functools.lru_cache(maxsize=None)
def bundle_of(spec: AttentionBwdSpec, arch: str, body: str):
    return compile_bundle(spec, arch, Compiler(), body=body)


def supported(spec: AttentionBwdSpec, arch: str, body: str) -> bool:
    try:
        choose_config(spec, get_target(arch), body)
    except SpecError:
        return False
    return True
