"""BodyPlan: what a body answers for one (spec, config), computed once and handed to the passes and the
manifest: workspaces, the zero-filled outputs, each stage's launch, the shared-memory layout, operand
alignment, numerics and how dot_do_o and dq_dk_dv use their outputs."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Mapping

from ..errors import SpecError
from ..kernel_config import KernelConfig
from ..numerics import Numerics
from ..spec import AttentionBwdSpec
from .choice import body_of
from .common import (ACCUMULATE, GRADS, STAGES, WRITE, Launch, SharedTile, Workspace, bias_accumulation,
                     row_stage_output_access, sink_accumulation)


@dataclass(frozen=True)
class BodyPlan:
    spec: AttentionBwdSpec
    config: KernelConfig
    workspaces: tuple[Workspace, ...]   # the body's, then the bias gradient's, then dsinks'
    zeroed_outputs: tuple[str, ...]     # outputs dq_dk_dv accumulates into directly (zero-filled first)
    row_zeroed_outputs: tuple[str, ...]  # outputs dot_do_o accumulates into (zero-filled before it)
    launches: Mapping[str, Launch]      # by stage: dot_do_o, dq_dk_dv, convert_<grad>
    shared_tiles: tuple[SharedTile, ...]  # dq_dk_dv's dynamic shared memory, in order
    alignment: Mapping[str, int]        # per problem tensor, the element multiple of its strides and address
    numerics: Numerics                  # the gate's model of this body's rounding and summation
    output_access: Mapping[str, str]    # per gradient, ACCUMULATE (zero-filled first) or WRITE
    row_output_access: Mapping[str, str]  # dot_do_o's outputs: d written, dsinks_out as sink_accumulation says

    def launch(self, stage: str) -> Launch:
        return self.launches[stage]


def body_plan(spec: AttentionBwdSpec, config: KernelConfig) -> BodyPlan:
    """The plan of `config`'s body for `spec`, made once per (spec, config); SpecError when the spec or
    config is malformed or the body cannot compute the spec whatever the target (fmha-select-kernel-config
    checks the target)."""
    reasons = spec.reasons() or config.reasons()
    if reasons:
        raise SpecError(reasons)
    return _plan(spec, config)


@lru_cache(maxsize=64)
def _plan(spec: AttentionBwdSpec, config: KernelConfig) -> BodyPlan:
    body = body_of(config)
    reasons = body.spec_reasons(spec, config)
    if reasons:
        raise SpecError(reasons)
    bias_workspaces, bias_zeroed = bias_accumulation(spec)
    sink_workspaces, sink_zeroed = sink_accumulation(spec)
    workspaces = tuple(body.workspaces(spec, config)) + tuple(bias_workspaces) + tuple(sink_workspaces)
    zeroed_outputs = tuple(body.zeroed_outputs(spec)) + bias_zeroed
    zeroed = {w.grad for w in workspaces if w.grad is not None and w.zero} | set(zeroed_outputs)
    access = {g: ACCUMULATE if g in zeroed else WRITE for g in GRADS + spec.bias_operands()[1]}
    return BodyPlan(spec, config, workspaces, zeroed_outputs, sink_zeroed,
                    MappingProxyType({stage: body.launch(stage, spec, config) for stage in STAGES}),
                    body.shared_tiles(spec, config), MappingProxyType(body.alignment(spec, config)),
                    body.numerics_of(spec, config), MappingProxyType(access),
                    MappingProxyType(row_stage_output_access(spec)))
