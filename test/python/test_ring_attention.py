"""fmha_mlir.torch.ring_attention: each rank of a gloo process group (CPU tensors: our backward in the
interpreter) computes its zigzag part; the parts put together are the gradients of one attention over
the whole sequence, under the gate: the oracle is one call's on the whole sequence, fed the out and lse
the ring's backward saw; the lowp reference is the ring's own (every block's, rounded to the dtype as its
kernel writes it, the blocks summed in f32 and rounded once more).

One spawn per world size runs all of its cases (a process's start-up is most of the time); the ring
benchmark (tools/bench_ring.py) runs once under torchrun.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from fmha_mlir import SpecError, oracle  # noqa: E402
from fmha_mlir.dtypes import round_to  # noqa: E402
from fmha_mlir.spec import Mask  # noqa: E402
from fmha_mlir.tolerance import check_gradients  # noqa: E402
from fmha_mlir.torch import attention, ring_attention, zigzag_shard, zigzag_unshard  # noqa: E402
from fmha_mlir.torch.backward import backward_runner  # noqa: E402
from fmha_mlir.torch_in_place import torch_dtype_names  # noqa: E402
from test_torch_op import _call, _tensors, _values  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="needs torch.distributed with gloo")

# name: (world size, dtype, chunk length (2 world size chunks), heads_kv, ring_attention kwargs, an lse gradient)
CASES = {
    "w1-causal-gqa": (1, torch.float32, 3, 1, dict(mask="top_left"), False),   # a ring of one: no messages
    "w2-none-gqa": (2, torch.float32, 3, 1, dict(mask="none"), False),
    "w2-causal": (2, torch.float32, 3, 2, dict(mask="top_left"), False),
    "w2-causal-bshd-gqa-lse": (2, torch.float32, 2, 1, dict(mask="bottom_right", layout="bshd"), True),
    "w2-causal-bf16-softcap": (2, torch.bfloat16, 4, 2, dict(mask="top_left", softcap=2.0), False),
    "w4-causal-gqa-bf16": (4, torch.bfloat16, 2, 1, dict(mask="top_left"), False),
    "w4-none": (4, torch.float32, 2, 2, dict(mask="none"), False),
}
HEADS_Q, HDIM = 2, 32


def _case_tensors(name):
    """The whole sequence's (q, k, v, dO, dlse or None) of a case, in its layout."""
    world, dtype, chunk, heads_kv, kw, with_dlse = CASES[name]
    seqlen = 2 * world * chunk
    shape = (lambda h: (1, seqlen, h, HDIM)) if kw.get("layout") == "bshd" else (lambda h: (1, h, seqlen, HDIM))
    q, k, v = _tensors(shape(HEADS_Q), shape(heads_kv), dtype, seed=5)
    g = torch.Generator().manual_seed(6)
    do = (0.5 * torch.randn(q.shape, generator=g)).to(dtype)
    dlse = torch.randn((1, HEADS_Q, seqlen), generator=g) if with_dlse else None
    return q, k, v, do, dlse


def _seq_dim(kw) -> int:
    return 1 if kw.get("layout") == "bshd" else 2


def _rank_main(rank, world, store, names, results):
    """One rank: every case of `names` through ring_attention on its parts; its parts of out, lse and the
    gradients go to results[(name, rank)]."""
    # a ring that loses a message fails (the timeout) rather than waits forever
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        for name in names:
            kw = CASES[name][4]
            dim = _seq_dim(kw)
            q, k, v, do, dlse = _case_tensors(name)
            mine = [zigzag_shard(x, rank, world, dim).requires_grad_() for x in (q, k, v)]
            out, lse = ring_attention(*mine, return_lse=True, **kw)
            outputs, gradients = [out], [zigzag_shard(do, rank, world, dim)]
            if dlse is not None:
                outputs.append(lse)
                gradients.append(zigzag_shard(dlse, rank, world, 2))
            torch.autograd.backward(outputs, gradients)
            results[(name, rank)] = [t.detach().clone() for t in (out, lse, *(x.grad for x in mine))]
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ring_results(tmp_path_factory):
    """Every case's per-rank results, one spawn per world size."""
    results = {}
    for world in sorted({c[0] for c in CASES.values()}):
        names = [n for n, c in CASES.items() if c[0] == world]
        store = tmp_path_factory.mktemp("ring") / "store"
        with mp.Manager() as manager:
            shared = manager.dict()
            mp.spawn(_rank_main, args=(world, store, names, shared), nprocs=world, join=True)
            results.update(shared)
    return results


@pytest.mark.parametrize("name", list(CASES))
def test_ring_gradients_are_one_calls_under_the_gate(name, ring_results):
    world, dtype, chunk, _, kw, _ = CASES[name]
    dim = _seq_dim(kw)
    q, k, v, do, dlse = _case_tensors(name)
    parts = [ring_results[(name, rank)] for rank in range(world)]
    out, lse, dq, dk, dv = (zigzag_unshard([p[i] for p in parts], 2 if i == 1 else dim) for i in range(5))
    options = {n: kw[n] for n in ("mask", "layout", "softcap") if n in kw}
    # the ring's merge against the single call's forward: the lse f32 in both (as test_torch_op's f32
    # forwards against the oracle); out f32, or in bf16 the ring's blocks' roundings and its own beside
    # the single call's one (each 2^-9 relative)
    with torch.no_grad():
        single_out, single_lse = attention(q, k, v, return_lse=True, **options)
    torch.testing.assert_close(lse, single_lse, atol=1e-5, rtol=0)
    bound = 1e-5 if dtype == torch.float32 else 3 * 2.0 ** -9 * float(single_out.abs().max())
    torch.testing.assert_close(out.float(), single_out.float(), atol=bound, rtol=0)
    layout = kw.get("layout", "bhsd")
    views = [_values(x.transpose(1, 2) if layout == "bshd" else x) for x in (q, k, v, out, do, dq, dk, dv)]
    spec = _call(q, k, v, return_lse=dlse is not None, **options).backward_spec(dlse is not None)
    extra = dict(scale=spec.scale, gqa_ratio=HEADS_Q // views[1].shape[1], softcap=spec.softcap,
                 dlse=None if dlse is None else _values(dlse))
    inputs, dtype_name = (*views[:5], _values(lse)), torch_dtype_names()[dtype]
    reference = oracle.backward(*inputs, mask=spec.mask, **extra)
    lowp = _ring_lowp(inputs, spec, world, chunk, dtype_name, extra)
    checks = check_gradients(dict(zip(("dq", "dk", "dv"), views[5:])), reference, lowp, dtype_name, HDIM)
    assert all(c.passed for c in checks), [str(c) for c in checks]


def _ring_blocks(world: int, chunk: int, causal: bool):
    """(query rows, key columns, mask) of every block the ring computes, as indices into the whole
    sequence in the ranks' order (ring.py's table, restated on the zigzag split)."""
    def part(rank):
        return np.concatenate([np.arange(c * chunk, (c + 1) * chunk) for c in (rank, 2 * world - 1 - rank)])

    for rank in range(world):
        for step in range(world):
            source = (rank - step) % world
            rows, cols = part(rank), part(source)
            if not causal or step == 0:
                yield rows, cols, Mask("causal_top_left" if causal else "none")
            elif source < rank:
                yield rows, cols[:chunk], Mask()
            else:
                yield rows[chunk:], cols, Mask()


def _ring_lowp(inputs, spec, world, chunk, dtype, extra) -> oracle.Gradients:
    """The ring's lowp reference: each block's lowp backward (the body's numerics; its gradients rounded
    to the dtype, as the kernel writes them) with the whole call's out and lse rows, summed in f32 over
    the blocks, then rounded to the dtype (the ring's f32 sums, cast back)."""
    q, k, v, out, do, lse = inputs
    sums = [np.zeros(x.shape, np.float32) for x in (q, k, v)]
    runner = backward_runner("cpu", None, None)
    for rows, cols, mask in _ring_blocks(world, chunk, spec.mask.kind != "none"):
        numerics = runner.bundle(dataclasses.replace(spec, mask=mask)).numerics
        block = oracle.lowp_backward(q[:, :, rows], k[:, :, cols], v[:, :, cols], out[:, :, rows], do[:, :, rows],
                                     lse[:, :, rows], dtype=dtype, mask=mask, numerics=numerics,
                                     **dict(extra, dlse=None if extra["dlse"] is None else extra["dlse"][:, :, rows]))
        sums[0][:, :, rows] += block.dq
        sums[1][:, :, cols] += block.dk
        sums[2][:, :, cols] += block.dv
    dq, dk, dv = (round_to(x, dtype).astype(np.float64) for x in sums)
    return oracle.Gradients(dq, dk, dv, np.zeros(lse.shape))


def test_zigzag_unshard_undoes_zigzag_shard():
    x = torch.arange(2 * 24).reshape(2, 24)
    parts = [zigzag_shard(x, rank, 3, dim=1) for rank in range(3)]
    assert parts[0][0].tolist() == [0, 1, 2, 3, 20, 21, 22, 23]
    assert torch.equal(zigzag_unshard(parts, dim=1), x)
    with pytest.raises(SpecError, match="multiple of 2 x world size = 6"):
        zigzag_shard(torch.zeros(1, 1, 10, 4), 0, 3)


@pytest.mark.parametrize("shapes, kwargs, match", [
    ((8, 8), dict(mask="window:4,0"), "no mask or causal"),
    ((8, 8), dict(bias=torch.zeros(8, 8)), "bias: ring attention takes none"),
    ((8, 8), dict(sinks=torch.zeros(2)), "sinks: ring attention takes none"),
    ((8, 8), dict(layout="sbhd"), "unknown layout"),
    ((8, 6), dict(mask="top_left"), "two equal chunks .got 8 queries, 6 keys"),
    ((7, 7), dict(mask="bottom_right"), "two equal chunks .got 7 queries, 7 keys"),
    ((8, 8), dict(mask="top_left", scale=-1.0), "scale"),
])
def test_what_the_ring_does_not_compute_is_refused_before_anything_is_sent(shapes, kwargs, match):
    q, kv = torch.zeros(1, 2, shapes[0], 32), torch.zeros(1, 2, shapes[1], 32)
    with pytest.raises(SpecError, match=match):   # (no process group: refused before the ring is asked)
        ring_attention(q, kv, kv, **kwargs)


def test_a_ring_needs_an_initialised_process_group():
    q = torch.zeros(1, 2, 8, 32)
    with pytest.raises(SpecError, match="not initialised"):
        ring_attention(q, q, q, mask="top_left")


def test_the_ring_benchmark_times_the_ring_and_the_single_call_on_two_gloo_ranks(tmp_path):
    record = tmp_path / "ring.json"
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                    str(Path(__file__).parents[2] / "tools" / "bench_ring.py"), "run", "--device", "cpu", "--seqlen",
                    "16", "--heads", "2", "--heads-kv", "1", "--dim", "32", "--steps", "1", "--warmup", "0",
                    "--json", str(record)], check=True, capture_output=True, timeout=300)
    got = json.loads(record.read_text())
    assert got["world_size"] == 2 and got["ring"]["median_ms"] > 0 and got["single"]["median_ms"] > 0
    assert got["efficiency"] == pytest.approx(got["single"]["median_ms"] / got["ring"]["median_ms"] / 2)
