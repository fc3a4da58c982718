"""fmha-select-kernel-config: put the kernel config (body, tiles) for a target on each problem op.

`body=auto` takes the fastest body that supports the spec on the target (fmha_mlir.bodies.choose_config);
`warp` or `tiled` asks for one and fails, naming every reason, when it cannot. A config already on the
op (written by hand, or by an earlier run) is kept once it is checked against the spec and target.
"""
from __future__ import annotations

import dataclasses

from fmha_mlir.bodies import BODIES, check_config, choose_config
from fmha_mlir.dialects import fmha
from fmha_mlir.dialects.fmha_attrs import CONFIG_ATTRIBUTE, config_attribute
from fmha_mlir.errors import SpecError
from fmha_mlir.mlir import ir
from fmha_mlir.target import TARGETS

from .base import FmhaPass, PassFailure
from .ir_builders import collect_ops
from .verify import verified_spec

BODY_CHOICES = ("auto", *BODIES)


@dataclasses.dataclass(frozen=True)
class SelectKernelConfig(FmhaPass):
    NAME = "fmha-select-kernel-config"
    DESCRIPTION = "Attach the kernel config (body, tile sizes) for a target to each fmha.attention_bwd"

    target: str = "gfx942"
    body: str = "auto"

    def __post_init__(self):
        if self.target not in TARGETS:
            raise ValueError(f"unknown target {self.target!r}; use one of {', '.join(TARGETS)}")
        if self.body not in BODY_CHOICES:
            raise ValueError(f"unknown body {self.body!r}; use one of {', '.join(BODY_CHOICES)}")

    def run_on_module(self, module: "ir.Operation") -> None:
        target = TARGETS[self.target]
        for op in collect_ops(module, [fmha.AttentionBwdOp.NAME]):
            spec = verified_spec(op)
            try:
                if CONFIG_ATTRIBUTE in op.attributes:
                    config = fmha.config_of(op)
                    if self.body not in ("auto", config.body):
                        raise PassFailure(f"the op's config is for the {config.body} body, the pass was asked for "
                                          f"body={self.body}: drop one of them", op)
                    check_config(spec, target, config)
                else:
                    op.attributes[CONFIG_ATTRIBUTE] = config_attribute(choose_config(spec, target, self.body))
            except SpecError as exc:
                raise PassFailure(f"no kernel config for {target.arch}: " + "; ".join(map(str, exc.reasons)),
                                  op) from None
