"""What tools/sanitize.py puts under compute-sanitizer: one bundle per kernel variant of each body on the
arch, and the small problems each bundle's child process runs. Importable without MLIR.

A variant is (body, dtype, mask kind, feature). Every feature is tried on every body, dtype and mask;
the body layer (fmha_mlir.bodies.choose_config) says which it takes, and what it refuses is listed
with its reason (`skipped`): not the full cross product of features, but every kernel-distinct one
with each mask and dtype of each body that computes it.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from fmha_mlir.bodies import BODIES, choose_config
from fmha_mlir.errors import SpecError
from fmha_mlir.kernel_config import KernelConfig
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.spec import DTYPES, AttentionBwdSpec, Mask
from fmha_mlir.target import get_target
from fmha_mlir.variants import masks
from fmha_mlir.varlen_problem import make_varlen_problem
from gpu_matrix import problem_seed   # run as a script: tools/ is on sys.path
from varlen_matrix import seed_of

BASE_HDIM = 64
# Both sides bounded, so both edges of the window are crossed at these lengths.
WINDOW = Mask("sliding_window", 32, 8)


@dataclass(frozen=True)
class Feature:
    name: str
    fields: dict   # AttentionBwdSpec fields over the base spec (dtype, mask, hdim 64)


FEATURES = (
    Feature("plain", {}),
    Feature("hdim 128", {"hdim_q": 128}),
    Feature("hdim 256", {"hdim_q": 256}),
    Feature("hdim_v 128", {"hdim_v": 128}),
    Feature("softcap 30", {"softcap": 30.0}),
    Feature("alibi", {"bias": "alibi"}),
    Feature("alibi slopes + d(slopes)", {"bias": "alibi", "alibi_slopes": True, "dbias": True}),
    Feature("bias + dbias", {"bias": "elementwise", "dbias": True}),
    Feature("gqa 2", {"gqa_ratio": 2}),
    Feature("deterministic", {"deterministic": True}),
    Feature("deterministic bias + dbias", {"deterministic": True, "bias": "elementwise", "dbias": True}),
    Feature("grad_accum bf16", {"grad_accum": "bf16"}),
    Feature("varlen", {"varlen": True}),
)

# Small and odd: partial query and key blocks, Sq > Sk (bottom-right rows that see no key) and Sq < Sk
# (more than one key block of 128). Racecheck costs ~50-200x a plain run: these finish in seconds.
SIZES = (ProblemSize(batch=2, heads_q=4, seqlen_q=67, seqlen_k=45), ProblemSize(batch=1, heads_q=4, seqlen_q=33,
                                                                              seqlen_k=150))
LAYOUTS = ("bhsd", "bshd")
# Per size, the bias tensor's broadcast ([B, 1, Sq, Sk], then [1, 1, Sq, Sk]) and the slopes' ([B, H], [1, H]).
BIAS_BROADCASTS = ("heads", "batch_heads")
SLOPES_BROADCASTS = ("none", "batch")
# Varlen: an empty query side, an empty key side, a length-1 sequence, and both orders of Sq and Sk.
VARLEN_LENGTHS = ((0, 1, 67, 33), (5, 0, 45, 150))
VARLEN_HEADS = 4


@dataclass(frozen=True)
class Variant:
    body: str
    feature: str
    spec: AttentionBwdSpec
    config: KernelConfig

    @property
    def name(self) -> str:
        """The bundle's folder name (fmha_mlir.api.bundle_path) and the report's row key."""
        return f"{self.spec.kernel_prefix}_{self.config.tag}"


@dataclass(frozen=True)
class Skipped:
    body: str
    dtype: str
    feature: str
    reason: str


def plan(arch: str) -> tuple[list[Variant], list[Skipped]]:
    """Every (body, dtype, mask, feature) the body computes on `arch`, and what it refuses with the first
    reason: a whole dtype once ("every feature"), else per feature (no refusal here depends on the mask)."""
    target, variants, skipped = get_target(arch), [], {}
    for body, dtype in itertools.product(BODIES, DTYPES):
        try:
            choose_config(AttentionBwdSpec(dtype, BASE_HDIM), target, body)
        except SpecError as exc:
            skipped[(body, dtype, "")] = Skipped(body, dtype, "every feature", str(exc.reasons[0]))
            continue
        for mask, feature in itertools.product(masks(WINDOW), FEATURES):
            # From scratch, not dataclasses.replace: hdim_v and the scale default from hdim_q.
            spec = AttentionBwdSpec(**{"dtype": dtype, "hdim_q": BASE_HDIM, "mask": mask, **feature.fields})
            try:
                variants.append(Variant(body, feature.name, spec, choose_config(spec, target, body)))
            except SpecError as exc:
                skipped.setdefault((body, dtype, feature.name),
                                   Skipped(body, dtype, feature.name, str(exc.reasons[0])))
    return variants, list(skipped.values())


def problem_count(spec: AttentionBwdSpec) -> int:
    """How many gate lines a child prints for a bundle of `spec` (len(problems(spec)), without making them)."""
    return 1 if spec.varlen else len(SIZES)


def problems(spec: AttentionBwdSpec) -> list[tuple[str, object, dict | None]]:
    """(label, problem, scalars) for every problem a child runs a bundle of `spec` on; seeds as the GPU matrices'
    (gpu_matrix.problem_seed, varlen_matrix.seed_of), so a row can be regenerated."""
    if spec.varlen:
        lengths_q, lengths_k = VARLEN_LENGTHS
        problem = make_varlen_problem(spec, lengths_q, lengths_k, heads_q=VARLEN_HEADS,
                                      seed=seed_of(spec, VARLEN_LENGTHS))
        return [(f"varlen Sq {list(lengths_q)} Sk {list(lengths_k)} Hq{VARLEN_HEADS}", problem, problem.scalars)]
    broadcasts = SLOPES_BROADCASTS if spec.alibi_slopes else BIAS_BROADCASTS
    out = []
    for size, layout, broadcast in zip(SIZES, LAYOUTS, broadcasts):
        label = f"B{size.batch} Hq{size.heads_q} Sq{size.seqlen_q} Sk{size.seqlen_k} {layout}"
        if spec.bias_operands()[0]:
            label += f" {broadcast}"
        out.append((label, make_problem(spec, size, seed=problem_seed(spec, size, layout, broadcast), layout=layout,
                                        broadcast=broadcast), None))
    return out
