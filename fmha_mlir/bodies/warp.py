"""The warp body: one wave per query row, a key loop of wave reductions, f32 atomics for dK and dV (every
dtype; head dims that are multiples of the wave size, up to 8 elements per lane). The IR builder is
passes/warp_body.py."""
from __future__ import annotations

from ..dtypes import BYTES
from ..errors import Reason
from ..kernel_config import WarpConfig
from ..numerics import SCALAR_ROWS
from ..shape_expr import Dim
from .common import Body, Launch, Workspace, dims_of, row_alignment, row_launch, row_reasons


class WarpBody(Body):
    name = "warp"
    config_class = WarpConfig
    numerics = SCALAR_ROWS

    def target_reasons(self, spec, target, config):
        return row_reasons(spec, config.wave_size, target.arch, self.name)

    def spec_reasons(self, spec, config):
        out = row_reasons(spec, config.wave_size, "", self.name)
        if spec.deterministic:
            out.append(Reason("deterministic", "the warp body sums dK and dV over query rows by f32 atomics, in "
                                               "any order", "use the tiled body (f16 / bf16), or deterministic=False"))
        if spec.grad_accum != "f32":
            out.append(Reason("grad_accum", "the warp body stores dQ (one wave owns a row) and adds dK / dV by f32 "
                                            "atomics: it has no dQ atomics to make bf16",
                              "use the tiled body, or grad_accum='f32'"))
        return out

    def default_config(self, spec, target):
        return WarpConfig(wave_size=target.wave_size)

    def workspaces(self, spec, config):
        out = [Workspace("d", None, dims_of("lse", 3), zero=False)]
        if spec.dtype != "f32":
            out += [Workspace(f"{g}_acc", g, dims_of(g, 4, hdim), zero=True)
                    for g, hdim in (("dk", spec.hdim_q), ("dv", spec.hdim_v))]
        return out

    def zeroed_outputs(self, spec):
        return ("dk", "dv") if spec.dtype == "f32" else ()

    def launch(self, stage, spec, config):
        if stage == "dq_dk_dv":
            return Launch((Dim("q", 2), Dim("q", 1), Dim("q", 0)), (config.wave_size, 1, 1))
        return row_launch(stage, spec, config)

    def alignment(self, spec, config):
        w, b = config.wave_size, BYTES[spec.dtype]
        q, v = spec.hdim_q // w, spec.hdim_v // w   # the dq_dk_dv kernel's per-lane slices
        q, v = (max(x & -x, 1) for x in (q, v))
        rq, rv = row_alignment(spec.hdim_q, w, b), row_alignment(spec.hdim_v, w, b)
        return {"q": q, "k": q, "dq": max(q, rq), "dk": max(q, rq), "v": v, "o": rv, "do": max(v, rv),
                "dv": max(v, rv)}
