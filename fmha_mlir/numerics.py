"""How a kernel body computes, as far as its rounding error goes (numpy only: importable without MLIR).

The numerical gate (`fmha_mlir.tolerance`) compares a kernel with a same-dtype reference that rounds
and accumulates as the kernel does (`oracle.lowp_backward`); a body declares here what that means for
it. Two facts decide a kernel's error beyond its inputs' rounding:

- whether P and dS are rounded to the element type before they meet the dtype operands of a matrix
  product (matrix-core bodies round them; a scalar body keeps them in f32), and
- in which order the long reductions are summed in f32: dQ over keys, dK and dV over the query rows
  of every head of a GQA group. A kernel adds `sum_chunk` terms at a time (a matrix instruction's K
  step, or one key per iteration) and the chunks one after the other. In f32 this order is what
  separates a correct kernel from a pairwise-summing NumPy reference; in f16/bf16 the output
  rounding dominates and the order hardly shows.

A body whose dQ atomics add in bf16 (grad_accum = "bf16") rounds twice per key block: its f32 partial
(scaled) to bf16, then the running sum after the add (the hardware's packed add rounds to nearest
even). `dq_add_block` says how many keys one such partial covers; the reference rounds the same way.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .errors import Reason, SpecError


@dataclass(frozen=True)
class Numerics:
    round_p_ds: bool = True   # P and dS rounded to the element type before the dV / dK / dQ products
    sum_chunk: int = 16       # terms per f32 partial sum of the long reductions, chunks summed in sequence
    # 0: dQ summed over all keys in f32, rounded once. n > 0: dQ added in the element type once per n keys
    # (the key block of a bf16 atomic): each block's f32 partial rounded, and the sum after each add.
    dq_add_block: int = 0

    def __post_init__(self):
        if not isinstance(self.sum_chunk, int) or isinstance(self.sum_chunk, bool) or self.sum_chunk < 1:
            raise SpecError([Reason("sum_chunk", f"must be a positive integer (got {self.sum_chunk!r})")])
        if not isinstance(self.dq_add_block, int) or isinstance(self.dq_add_block, bool) or self.dq_add_block < 0:
            raise SpecError([Reason("dq_add_block", f"must be 0 (f32 accumulation) or a positive number of keys "
                                                    f"(got {self.dq_add_block!r})")])

    def to_json(self) -> dict:
        """The manifest's "numerics": dq_add_block only when on (f32 bundles' manifests stay as they were)."""
        out = asdict(self)
        if not self.dq_add_block:
            del out["dq_add_block"]
        return out


# The scalar warp body: P and dS stay f32, one key (dQ) or one query row (dK, dV atomics) per step.
SCALAR_ROWS = Numerics(round_p_ds=False, sum_chunk=1)
# Matrix-instruction bodies: P and dS rounded for the products, K steps of 16 (mma.sync m16n8k16, MFMA
# 32x32x8 runs two of them per 16), the steps added in sequence in the accumulator registers.
MATRIX_K16 = Numerics(round_p_ds=True, sum_chunk=16)
