"""ring_attention(): context-parallel attention over a process group, torch's forward and our backward.

Each rank holds a part of the sequence: its query rows and the same rows' keys and values. K and V
travel around the ring (rank r sends to r + 1, receives from r - 1): in n steps (n - 1 passes) every
query part meets every key part. The sequence is split zigzag (zigzag_shard): cut into 2n chunks, rank r holds
chunks r and 2n - 1 - r. Under a causal mask each step then costs every rank the same half of a block
(the load balance), and only the masks the op has are needed:

    step 0 (its own K, V):   the [2c, 2c] block, top-left causal (chunk r before 2n - 1 - r on both sides:
                             the two diagonal blocks are causal, the later queries see the earlier keys
                             fully, the earlier queries none of the later keys)
    K, V of rank s < r:      all 2c queries, the first key chunk, no mask
    K, V of rank s > r:      the second query chunk, all 2c keys, no mask

Without a mask every step is the full [2c, 2c] block (any split would do; zigzag is the one rule).

The forward runs torch's attention (the op's forward table, forwards.py) on each block, which gives
(out_b, lse_b); the blocks merge by lse in f32: lse = logaddexp(lse, lse_b), out = exp(lse_old - lse)
out + exp(lse_b - lse) out_b.

The backward calls our backward once per block, with the merged out and lse (one autograd.Function
around the whole ring, not an op per block). Our kernel computes P = exp(S - lse) and D = rowsum(dO o
O) from the lse and O it is given; with the global ones, P is the block's part of the global softmax
and dS = P (dP - D) its part of the global dS, so a block's dQ, dK, dV are exactly its terms of the
full gradients. The alternative, autograd through the merge with an lse gradient into each block's
backward, reaches the same gradients with a dlse term per block and its bundle (lse_grad), plus the
merge's own backward, and autograd does not follow K and V through the sends. dQ sums over the steps on its rank;
dK and dV (f32 accumulators) travel with their K, V: each rank adds its block's terms and passes them
on, and one last step hands them back to the owner.

Communication (_Ring) is torch.distributed's batched isend / irecv: the next K, V are on their way
while a block computes, and a block's dK, dV while the next block computes. Every rank must call
ring_attention with the same shapes, options and group (as for any collective).

What is refused (SpecError, before anything is sent): sliding windows (a window crosses chunk
boundaries at offsets no single-block mask has), bias, ALiBi and sinks (a bias block would have to
travel with its keys; sinks join each row's softmax once, not once per block), causal parts that are
not two equal chunks; everything the op refuses for a block (dtype, head dims, heads).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from ..errors import Reason, SpecError
from ..spec import Mask
from .attention import _refuse_non_tensors
from .backward import run_backward
from .call import checked_call
from .options import LAYOUTS, caller_layout, describe, logical

# The mask kinds the ring computes; under zigzag (Sq == Sk globally) both causal alignments are one mask.
CAUSAL = ("causal_top_left", "causal_bottom_right")


def zigzag_shard(x: torch.Tensor, rank: int, world_size: int, dim: int = 2) -> torch.Tensor:
    """Rank `rank`'s part of a full-sequence tensor: chunks rank and 2 world_size - 1 - rank of the
    2 world_size chunks of `dim` (the sequence: 2 in 'bhsd', 1 in 'bshd' or for [B, S] tokens), as one
    tensor (a copy). The sequence must split into 2 world_size equal chunks."""
    chunks = 2 * world_size
    if not 0 <= rank < world_size or x.shape[dim] % chunks:
        raise SpecError([Reason("zigzag_shard", f"cannot give rank {rank} of {world_size} its part of a sequence "
                                                f"of {x.shape[dim]} (dim {dim})",
                                f"use a sequence length that is a multiple of 2 x world size = {chunks}")])
    parts = x.chunk(chunks, dim)
    return torch.cat([parts[rank], parts[chunks - 1 - rank]], dim)


def zigzag_unshard(parts: list[torch.Tensor], dim: int = 2) -> torch.Tensor:
    """The full-sequence tensor from every rank's part (zigzag_shard's, in rank order; all_gather's list)."""
    halves = [p.chunk(2, dim) for p in parts]
    return torch.cat([h[0] for h in halves] + [h[1] for h in reversed(halves)], dim)


def ring_attention(q, k, v, *, group=None, mask="none", scale=None, softcap=0.0, return_lse=False, layout="bhsd",
                   deterministic=False, bundle_dir=None, forward="auto", bias=None, alibi_slopes=None, sinks=None):
    """softmax(S) V over the whole sequence of a process group, each rank giving its zigzag part
    (zigzag_shard) of q, k, v and getting its part of out; differentiable in q, k, v.

    group: the torch.distributed group (None: the default one); every rank of it calls with the same
    shapes and options. mask: 'none' or causal ('top_left' / 'bottom_right': one mask when the whole
    sequence is both the queries and the keys); under causal each rank's q, k, v hold one sequence
    length, even. scale, softcap, return_lse, layout ('bhsd' / 'bshd'), deterministic, bundle_dir,
    forward: as attention() takes them (the lse: [B, Hq, S of this rank] f32, over every rank's keys, and
    differentiable); k, v may have fewer heads (GQA / MQA). bias, alibi_slopes, sinks: refused
    (the module docstring says why); they are here so that the refusal says so.
    """
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
        _refuse_non_tensors(q, k, v, None, None)
    computed = _computed_mask(mask, layout, bias, alibi_slopes, sinks)
    qv, kv, vv = (logical(x, layout) for x in (q, k, v))
    full, diagonal = _block_options(qv, kv, vv, computed, scale, softcap, deterministic, bundle_dir, forward)
    plan = _Plan(full, diagonal, computed.kind in CAUSAL, _Ring(group))
    out, lse = _RingAttention.apply(qv, kv, vv, plan)
    return (caller_layout(out, layout), lse) if return_lse is True else caller_layout(out, layout)


def _computed_mask(mask, layout, bias, alibi_slopes, sinks) -> Mask:
    """The mask as a Mask, or SpecError for what the ring does not compute (before anything runs or is sent)."""
    given = Mask.parse(mask) if isinstance(mask, str) else mask
    reasons = [] if isinstance(given, Mask) and given.kind in ("none", *CAUSAL) else [
        Reason("mask", f"ring attention computes no mask or causal, not {mask!r}",
               "use mask 'none' or 'top_left' (a sliding window crosses the chunks at offsets no block mask has)")]
    if layout not in LAYOUTS:
        reasons.append(Reason("layout", f"unknown layout {layout!r}", f"use one of {', '.join(LAYOUTS)}"))
    reasons += [Reason(name, "ring attention takes none", "add it outside, or use attention() on the full sequence")
                for name, x in (("bias", bias), ("alibi_slopes", alibi_slopes), ("sinks", sinks)) if x is not None]
    if reasons:
        raise SpecError(reasons)
    return given


def _block_options(q, k, v, mask: Mask, scale, softcap, deterministic, bundle_dir, forward) -> tuple[str, str]:
    """The op's options strings of a block without a mask and of step 0's block (top-left under causal),
    or SpecError where a block would be refused: checked on this rank's logical q, k, v."""
    causal = mask.kind in CAUSAL
    full, diagonal = (describe(m, scale, softcap, None, False, "bhsd", deterministic, bundle_dir, forward, False)
                      for m in ("none", "top_left" if causal else "none"))
    for options in {full, diagonal}:
        checked_call(options, q, k, v, None, None)
    if causal and (q.shape[2] != k.shape[2] or q.shape[2] % 2):
        raise SpecError([Reason("q", f"causal ring attention needs each rank's queries and keys to be its two "
                                     f"equal chunks (got {q.shape[2]} queries, {k.shape[2]} keys)",
                                "give each rank zigzag_shard(x, rank, world_size) of q, k and v")])
    return full, diagonal


class _Ring:
    """Passes tensors one step around a process group: to the next rank, from the previous one."""

    def __init__(self, group):
        if not dist.is_available() or not dist.is_initialized():
            raise SpecError([Reason("group", "torch.distributed is not initialised",
                                    "call torch.distributed.init_process_group first (torchrun sets it up)")])
        self.group = group or dist.group.WORLD
        self.size, self.rank = dist.get_world_size(self.group), dist.get_rank(self.group)
        self._next, self._previous = (dist.get_global_rank(self.group, (self.rank + step) % self.size)
                                      for step in (1, -1))

    def shift(self, tensors: list[torch.Tensor]) -> Callable[[], list[torch.Tensor]]:
        """Start sending `tensors` to the next rank and receiving the previous rank's (same shapes and
        dtypes); returns what waits for them (on a ring of one: the tensors themselves)."""
        if self.size == 1:
            return lambda: list(tensors)
        sent = [t.contiguous() for t in tensors]
        received = [torch.empty_like(t) for t in sent]
        works = dist.batch_isend_irecv(
            [dist.P2POp(dist.isend, t, self._next, self.group) for t in sent]
            + [dist.P2POp(dist.irecv, t, self._previous, self.group) for t in received])

        def wait() -> list[torch.Tensor]:
            for work in works:
                work.wait()
            return received   # (`sent` lives in this closure until the sends are done)

        return wait


@dataclass(frozen=True)
class _Plan:
    """One ring_attention call's options: the op's options string of each kind of block (_block_options),
    and the ring."""

    full: str       # a block without a mask
    diagonal: str   # step 0's block under causal (top-left); `full` without a mask
    causal: bool
    ring: _Ring

    def block(self, step: int, seqlen_q: int, seqlen_k: int) -> tuple[slice, slice, str]:
        """(query rows, key columns, options) of the block `step` computes (the module docstring's table)."""
        every = slice(None)
        if not self.causal:
            return every, every, self.full
        source = (self.ring.rank - step) % self.ring.size
        if step == 0:
            return every, every, self.diagonal
        if source < self.ring.rank:
            return every, slice(0, seqlen_k // 2), self.full
        return slice(seqlen_q // 2, seqlen_q), every, self.full


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, plan: _Plan):
        out, lse = _ring_forward(q, k, v, plan)
        ctx.plan = plan
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.set_materialize_grads(False)   # an lse no gradient flows into: None, and no dlse
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        if grad_out is None:   # only the lse is used
            grad_out = torch.zeros_like(out)
        return (*_ring_backward(grad_out, grad_lse, q, k, v, out, lse, ctx.plan), None)


def _ring_forward(q, k, v, plan: _Plan) -> tuple[torch.Tensor, torch.Tensor]:
    """(out in q's dtype, lse f32) of this rank's queries over every rank's keys (logical [B, H, S, D])."""
    rows = q.shape[:3]
    out = q.new_zeros(rows + v.shape[3:], dtype=torch.float32)
    lse = q.new_full(rows, float("-inf"), dtype=torch.float32)
    keys = [k, v]
    for step in range(plan.ring.size):
        arriving = plan.ring.shift(keys) if step + 1 < plan.ring.size else None
        r, c, options = plan.block(step, q.shape[2], k.shape[2])
        block_k, block_v = keys[0][:, :, c], keys[1][:, :, c]
        block_out, block_lse = checked_call(options, q[:, :, r], block_k, block_v, None, None).run_forward(
            q[:, :, r], block_k, block_v, None, None)
        merged = torch.logaddexp(lse[:, :, r], block_lse)
        out[:, :, r] = (out[:, :, r] * torch.exp(lse[:, :, r] - merged)[..., None]
                        + block_out.float() * torch.exp(block_lse - merged)[..., None])
        lse[:, :, r] = merged
        if arriving is not None:
            keys = arriving()
    return out.to(q.dtype), lse


def _ring_backward(grad_out, grad_lse, q, k, v, out, lse, plan: _Plan) -> tuple[torch.Tensor, ...]:
    """(dq, dk, dv) of this rank's q, k, v: our backward per block with the merged out and lse, and the
    lse's gradient (or None): dS's term P dlse is, like P, the block's part of the global one."""
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    keys, handed_on = [k, v], None
    for step in range(plan.ring.size):
        arriving = plan.ring.shift(keys) if step + 1 < plan.ring.size else None
        r, c, options = plan.block(step, q.shape[2], k.shape[2])
        block = (q[:, :, r], keys[0][:, :, c], keys[1][:, :, c])
        grads = run_backward(checked_call(options, *block, None, None), grad_out[:, :, r], *block, out[:, :, r],
                             lse[:, :, r].contiguous(), None, None,
                             dlse=None if grad_lse is None else grad_lse[:, :, r].contiguous())
        dq[:, :, r] += grads[0]
        # the dK, dV of the keys held now: zeros at step 0, else the previous rank's sums
        sums = [torch.zeros(x.shape, dtype=torch.float32, device=x.device) for x in keys] if step == 0 else handed_on()
        sums[0][:, :, c] += grads[1]
        sums[1][:, :, c] += grads[2]
        handed_on = plan.ring.shift(sums)
        if arriving is not None:
            keys = arriving()
    dk, dv = handed_on()   # after the last step: this rank's own keys' sums
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
