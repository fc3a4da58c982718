"""fmha_mlir.torch.attention_varlen and flash_attn_varlen_func: packed sequences of their own lengths
(empty and length-1 ones among them) through the op, the gradients under the gate with the oracle run
per sequence, the forward against the padded op per sequence, torch.compile without graph breaks, the
ops' schemas and fakes, and what is refused before the forward runs.

CPU tensors run our sm_90 bundles in the interpreter; the CUDA tests run on the H200 (torch's flash
varlen forward where it serves). A GPU machine without MLIR takes the bundles prebuilt where MLIR is:
    python test/python/test_torch_varlen.py DIR        # here
    python -m pytest -q test/python/test_torch_varlen.py --torch-bundles DIR       # there
"""
from __future__ import annotations

import dataclasses
import itertools
import sys

import pytest

torch = pytest.importorskip("torch")

from fmha_mlir import SpecError  # noqa: E402
from fmha_mlir.torch import attention_varlen, flash_attn_func, flash_attn_varlen_func  # noqa: E402
from fmha_mlir.torch import ops  # noqa: E402
from fmha_mlir.torch.backward import backward_runner  # noqa: E402
from fmha_mlir.torch.call import checked_call  # noqa: E402
from fmha_mlir.torch.flash_api import flash_mask  # noqa: E402
from fmha_mlir.torch.options import PACKED, describe  # noqa: E402
from fmha_mlir.torch.varlen_forwards import FORWARDS_VARLEN, packed_lse  # noqa: E402
from fmha_mlir.varlen_problem import varlen_problem_of  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# Sequence 0 has keys but no queries, 1 one query and no keys, 2 one query and one key; the rest cross
# each other's lengths (more queries than keys: bottom-right rows that see no key).
LENGTHS_Q = (0, 1, 1, 7, 12)
LENGTHS_K = (4, 0, 1, 9, 5)


def _cu(lengths, device="cpu"):
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)


def _packed(lengths_q, lengths_k, heads_q, heads_kv, d, dtype, device="cpu", seed=0, dv=None):
    """q [Tq, Hq, d], k, v [Tk, Hkv, d] (v: dv), cu_seqlens and the max lengths."""
    g = torch.Generator().manual_seed(seed)
    tq, tk = sum(lengths_q), sum(lengths_k)
    q = torch.randn((tq, heads_q, d), generator=g).to(device, dtype)
    k = torch.randn((tk, heads_kv, d), generator=g).to(device, dtype)
    v = (0.5 * torch.randn((tk, heads_kv, dv or d), generator=g)).to(device, dtype)
    return q, k, v, _cu(lengths_q, device), _cu(lengths_k, device), max(lengths_q), max(lengths_k)


def _values(t):
    return t.detach().cpu().double().numpy()


def _text(**kw) -> str:
    """attention_varlen()'s options string for its keyword arguments (no bias or slopes tensors)."""
    o = dict(dict(mask="none", scale=None, softcap=0.0, bias=None, deterministic=False, bundle_dir=None,
                  forward="auto", debug=False, return_lse=False), **kw)
    return describe(o["mask"], o["scale"], o["softcap"], o["bias"], False, PACKED, o["deterministic"],
                    o["bundle_dir"], o["forward"], o["debug"], o["return_lse"])


def _call(q, k, v, cu_q, cu_k, sinks=None, **kw):
    return checked_call(_text(**kw), q, k, v, None, None, sinks, cu_seqlens=(cu_q, cu_k))


def _gate(q, k, v, cu_q, cu_k, out, lse, do, grads, call, runner, sinks=None, dlse=None):
    """The gate for the packed gradients (dq, dk, dv, then dsinks when the sinks require grad), with the
    oracle run per sequence on the out and lse the backward saw (varlen_problem_of)."""
    spec = call.backward_spec(dlse is not None)
    numerics = runner.bundle(spec).numerics
    # the oracle at the caller's head dims (a padded backward's zero columns add nothing)
    spec = dataclasses.replace(spec, hdim_q=q.shape[-1], hdim_v=v.shape[-1])
    values = {name: _values(x) for name, x in (("q", q), ("k", k), ("v", v), ("o", out), ("do", do), ("lse", lse),
                                               ("sinks", sinks), ("dlse", dlse)) if x is not None}
    problem = varlen_problem_of(spec, cu_q.tolist(), cu_k.tolist(), q.shape[1], values)
    names = ("dq", "dk", "dv") + (("dsinks",) if sinks is not None and sinks.requires_grad else ())
    checks = problem.check({n: _values(g) for n, g in zip(names, grads)}, numerics)
    assert [c.name for c in checks] == list(names)
    assert all(c.passed for c in checks), [str(c) for c in checks]


def _run_and_gate(q, k, v, cu_q, cu_k, max_q, max_k, kw, sinks, wants_dlse, runner, bundle_dir):
    """attention_varlen forward and backward (a gradient into the lse when wants_dlse), then the gate."""
    xs = [x.requires_grad_() for x in (q, k, v)]
    out, lse = attention_varlen(*xs, cu_q, cu_k, max_q, max_k, sinks=sinks, return_lse=True, bundle_dir=bundle_dir,
                                **kw)
    assert out.shape == q.shape[:-1] + v.shape[-1:] and lse.shape == (q.shape[1], q.shape[0])
    assert lse.dtype == torch.float32 and not torch.isnan(lse).any()
    g = torch.Generator().manual_seed(1)
    do = (0.5 * torch.randn(out.shape, generator=g)).to(out.device, out.dtype)
    dlse = torch.randn(lse.shape, generator=g).to(lse.device) if wants_dlse else None
    torch.autograd.backward([out] + [lse] * wants_dlse, [do] + [dlse] * wants_dlse)
    grads = [x.grad for x in xs] + ([sinks.grad] if sinks is not None and sinks.requires_grad else [])
    assert all(t is not None and t.device == q.device for t in grads)
    call = _call(q, k, v, cu_q, cu_k, sinks=sinks, return_lse=True, **kw)
    _gate(q, k, v, cu_q, cu_k, out.detach(), lse.detach(), do, grads, call, runner, sinks, dlse)
    return out, lse


# ---------------------------------------------------------------------------------------------------
# CPU tensors: our backward in the interpreter, under the gate

CPU_CASES = {   # name: (dtype, heads_q, heads_kv, (d, dv), kwargs, sinks ("grad", "fixed" or None), dlse)
    "f32-none": (torch.float32, 2, 2, (32, 32), {}, None, False),
    "bf16-bottom-right-gqa": (torch.bfloat16, 4, 2, (32, 32), dict(mask="bottom_right"), None, False),
    "f16-window": (torch.float16, 2, 2, (32, 32), dict(mask="window:3,1"), None, False),
    "f32-top-left-alibi-softcap": (torch.float32, 2, 1, (32, 32), dict(mask="top_left", bias="alibi", softcap=4.0),
                                   None, False),
    "bf16-sinks-dlse-bottom-right": (torch.bfloat16, 2, 2, (32, 32), dict(mask="bottom_right"), "grad", True),
    "f16-d40-v24": (torch.float16, 2, 2, (40, 24), {}, None, False),
}


def _sinks(kind, heads, device):
    return None if kind is None else torch.linspace(-1.0, 1.5, heads, device=device).requires_grad_(kind == "grad")


@pytest.mark.parametrize("name", list(CPU_CASES))
def test_varlen_gradients_pass_the_gate(name, prebuilt_bundles):
    dtype, hq, hkv, (d, dv), kw, sinks, dlse = CPU_CASES[name]
    q, k, v, cu_q, cu_k, max_q, max_k = _packed(LENGTHS_Q, LENGTHS_K, hq, hkv, d, dtype, seed=len(name), dv=dv)
    out, lse = _run_and_gate(q, k, v, cu_q, cu_k, max_q, max_k, kw, _sinks(sinks, hq, "cpu"), dlse,
                             backward_runner("cpu", None, prebuilt_bundles), prebuilt_bundles)
    # the sequence without keys (token 0): O = 0 and lse +inf, or the sink (nothing to see but it)
    assert not out[0].any() and (torch.isposinf(lse[:, 0]).all() if sinks is None else torch.isfinite(lse[:, 0]).all())


def test_the_forward_is_the_padded_ops_per_sequence(prebuilt_bundles):
    """flash_attn_varlen_func against flash_attn_func on each sequence alone (f32: the forwards differ by
    f32 rounding, ~1e-6 here; a sequence's keys or mask offset taken from another moves out by O(0.1))."""
    q, k, v, cu_q, cu_k, max_q, max_k = _packed(LENGTHS_Q, LENGTHS_K, 4, 2, 32, torch.float32, seed=4)
    kw = dict(causal=True, window_size=(5, -1), softcap=3.0, softmax_scale=0.2)
    out, lse, probs = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, return_attn_probs=True,
                                             bundle_dir=prebuilt_bundles, **kw)
    assert probs is None and lse.shape == (4, q.shape[0])
    for q0, q1, k0, k1 in zip(cu_q.tolist(), cu_q[1:].tolist(), cu_k.tolist(), cu_k[1:].tolist()):
        want_out, want_lse, _ = flash_attn_func(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1],
                                                return_attn_probs=True, bundle_dir=prebuilt_bundles, **kw)
        torch.testing.assert_close(out[q0:q1], want_out[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(lse[:, q0:q1], want_lse[0], atol=1e-5, rtol=0)   # (+inf where both are)


@pytest.mark.parametrize("flash_kw, ours", [
    (dict(causal=True), dict(mask="bottom_right")),
    (dict(window_size=(2, 0), softcap=5.0), dict(mask="window:2,0", softcap=5.0)),
    (dict(window_size=(20, 20)), {}),     # sizes >= max_seqlen_k are unbounded
])
def test_flash_attn_varlen_func_is_the_attention_varlen_call_it_stands_for(flash_kw, ours, prebuilt_bundles):
    q, k, v, cu_q, cu_k, max_q, max_k = _packed(LENGTHS_Q, LENGTHS_K, 2, 1, 32, torch.bfloat16, seed=2)

    def run(fn, **kw):
        xs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        out = fn(*xs, cu_q, cu_k, max_q, max_k, bundle_dir=prebuilt_bundles, **kw)
        out.backward(torch.ones_like(out))
        return [out.detach()] + [x.grad for x in xs]

    for got, want in zip(run(flash_attn_varlen_func, **flash_kw), run(attention_varlen, **ours)):
        assert torch.equal(got, want)   # the same forward and backward: bitwise


def test_torch_compile_fullgraph_matches_eager(prebuilt_bundles):
    q, k, v, cu_q, cu_k, max_q, max_k = _packed(LENGTHS_Q, LENGTHS_K, 2, 2, 32, torch.float32, seed=6)
    sinks = torch.tensor([0.4, -0.9])

    def step(*xs):
        out, lse = attention_varlen(*xs[:3], cu_q, cu_k, max_q, max_k, sinks=xs[3], mask="bottom_right",
                                    return_lse=True, bundle_dir=prebuilt_bundles)
        return out.square().sum() + torch.where(torch.isinf(lse), 0.0, lse).sum()

    xs = [x.requires_grad_() for x in (q, k, v, sinks)]
    eager = torch.autograd.grad(step(*xs), xs)
    torch._dynamo.reset()
    compiled = torch.autograd.grad(torch.compile(step, backend="aot_eager", fullgraph=True)(*xs), xs)
    for got, want in zip(compiled, eager):
        torch.testing.assert_close(got, want, rtol=0, atol=0)   # the same forward and kernels


def test_opcheck_of_both_ops_on_packed_sequences(prebuilt_bundles):
    q, k, v, cu_q, cu_k, max_q, max_k = _packed((3, 0, 5), (4, 2, 6), 2, 1, 32, torch.float32, seed=8)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    text = _text(mask="bottom_right", bundle_dir=prebuilt_bundles)
    packing = (cu_q, cu_k, max_q, max_k)
    torch.library.opcheck(ops.attention_forward, (q, k, v, None, None, None, text, *packing))
    out, lse = ops.attention_forward(q, k, v, None, None, None, text, *packing)
    assert out.shape == q.shape and lse.shape == (2, 8)
    grad = torch.randn_like(out)
    args = (grad, q, k, v, out, lse, None, None, None, None, text, *packing)
    torch.library.opcheck(ops.attention_backward, args, test_utils=("test_schema", "test_faketensor"))
    assert [g.shape for g in ops.attention_backward(*args)] == [q.shape, k.shape, v.shape]


@pytest.mark.parametrize("lengths_q, lengths_k", [((0, 0), (3, 2)), ((2, 3), (0, 0)), ((0,), (0,))])
def test_no_query_or_no_key_at_all_gives_zeros(lengths_q, lengths_k):
    q, k, v, cu_q, cu_k, max_q, max_k = _packed(lengths_q, lengths_k, 2, 2, 32, torch.float32)
    xs = [x.requires_grad_() for x in (q, k, v)]
    out, lse = attention_varlen(*xs, cu_q, cu_k, max_q, max_k, mask="bottom_right", return_lse=True)
    assert out.shape == q.shape and not out.any() and torch.isposinf(lse).all() and lse.shape == (2, q.shape[0])
    out.sum().backward()
    assert all(x.grad.shape == x.shape and not x.grad.any() for x in xs)


def test_flash_lse_in_either_layout_is_ours():
    """torch's flash varlen lse as it comes ([H, total_q]) or padded per sequence ([batch, H, max_seqlen_q],
    older builds) gives [H, total_q], token t of sequence b at position t - cu_seqlens_q[b]."""
    lengths = (2, 0, 3, 1)
    cu = _cu(lengths)
    padded = torch.arange(4 * 2 * 5, dtype=torch.float32).reshape(4, 2, 5)
    want = torch.cat([padded[b, :, :n] for b, n in enumerate(lengths)], dim=1)
    assert torch.equal(packed_lse(padded, cu, 6), want) and packed_lse(want, cu, 6) is want


# ---------------------------------------------------------------------------------------------------
# refused before the forward runs

def _refused(monkeypatch, match, fn=attention_varlen, *args, lengths=((3, 2), (2, 4)), **kwargs):
    q, k, v, cu_q, cu_k, max_q, max_k = _packed(*lengths, 2, 2, 32, torch.bfloat16)
    for name, forward in FORWARDS_VARLEN.items():
        monkeypatch.setitem(FORWARDS_VARLEN, name,
                            dataclasses.replace(forward, run=lambda *a: pytest.fail("the forward ran")))
    given = dict(zip(("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"),
                     (q, k, v, cu_q, cu_k, max_q, max_k)))
    given.update(kwargs.pop("replace", {}))
    for _ in range(2):   # the second time from a warm cache: refusals are never cached
        with pytest.raises(SpecError, match=match):
            fn(*given.values(), **kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(bias=torch.zeros(5, 6)), r"bias: a tensor cannot be indexed by \[batch, head, Sq, Sk\] of packed"),
    (dict(bias="alibi", alibi_slopes=torch.ones(2)), "alibi_slopes: a tensor cannot be indexed"),
    (dict(deterministic=True), "varlen: deterministic mode's dQ partials"),
    (dict(replace=dict(cu_seqlens_q=torch.tensor([0, 3, 5]))), r"cu_seqlens_q: got torch.int64 \(3,\)"),
    (dict(replace=dict(cu_seqlens_k=_cu((2, 2, 2)))), "cu_seqlens_k: has 4 entries, cu_seqlens_q 3"),
    (dict(replace=dict(cu_seqlens_k=_cu((2, 3)))), "cu_seqlens: cu_seqlens_k = .* must start at 0, never "
                                                   "decrease and end at the packed tensors' token count 6"),
    (dict(replace=dict(max_seqlen_k=3)), "cu_seqlens: cu_seqlens_k has a sequence of 4 tokens, but max_seqlen_k"),
    (dict(replace=dict(max_seqlen_q=3.0)), "max_seqlen_q: must be an int >= 0"),
    (dict(replace=dict(q=torch.zeros(1, 5, 2, 32, dtype=torch.bfloat16))), r"q: must be a rank-3 tensor \[total"),
    (dict(replace=dict(cu_seqlens_q=[0, 3, 5])), "cu_seqlens_q: must be a torch tensor"),
    (dict(forward="flash"), "forward: 'flash' cannot serve this call: it needs CUDA tensors only"),
])
def test_what_the_varlen_backward_refuses_is_refused_before_the_forward_runs(kwargs, match, monkeypatch):
    _refused(monkeypatch, match, **kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(block_table=torch.zeros(2, 1, dtype=torch.int32)), "block_table: a paged KV cache is not implemented"),
    (dict(dropout_p=0.1), "dropout_p: dropout is not implemented"),
    (dict(alibi_slopes=torch.ones(2)), "alibi_slopes: a tensor cannot be indexed"),
    (dict(window_size=4), "window_size: must be a pair of ints"),
])
def test_flash_attn_varlen_func_refuses_by_name(kwargs, match, monkeypatch):
    _refused(monkeypatch, match, flash_attn_varlen_func, **kwargs)


def test_attention_refuses_the_packed_layout_without_cu_seqlens():
    from fmha_mlir.torch import attention

    q = torch.zeros(5, 2, 32)
    with pytest.raises(SpecError, match="layout: 'thd' .packed sequences. needs cu_seqlens"):
        attention(q, q, q, layout=PACKED)


# ---------------------------------------------------------------------------------------------------
# CUDA tensors: torch's flash varlen forward where it serves, our backward on the GPU

CUDA_LENGTHS_Q = (0, 1, 1, 130, 257, 64, 3)
CUDA_LENGTHS_K = (70, 0, 1, 200, 129, 64, 0)
CUDA_CASES = {   # name: (dtype, heads_q, heads_kv, (d, dv), kwargs, sinks, dlse, the forward 'auto' picks)
    "bf16-bottom-right-gqa": (torch.bfloat16, 8, 2, (64, 64), dict(mask="bottom_right"), None, False, "flash"),
    "f16-window-dlse": (torch.float16, 4, 4, (128, 128), dict(mask="window:32,8"), None, True, "flash"),
    "bf16-none-d40": (torch.bfloat16, 4, 2, (40, 40), {}, None, False, "flash"),
    "bf16-sinks-dlse-bottom-right": (torch.bfloat16, 4, 2, (64, 64), dict(mask="bottom_right"), "grad", True,
                                     "flash"),
    "bf16-softcap-top-left": (torch.bfloat16, 4, 4, (64, 64), dict(mask="top_left", softcap=20.0), None, False,
                              "math"),
    "f32-alibi": (torch.float32, 2, 1, (64, 64), dict(bias="alibi"), None, False, "math"),
}


def _cuda_case(name, device):
    dtype, hq, hkv, (d, dv), kw, sinks, dlse, forward = CUDA_CASES[name]
    if device == "meta":
        shapes = ((sum(CUDA_LENGTHS_Q), hq, d), (sum(CUDA_LENGTHS_K), hkv, d), (sum(CUDA_LENGTHS_K), hkv, dv))
        q, k, v = (torch.empty(s, dtype=dtype, device="meta") for s in shapes)
        return q, k, v, None if sinks is None else torch.empty(hq, device="meta"), kw, dlse
    packed = _packed(CUDA_LENGTHS_Q, CUDA_LENGTHS_K, hq, hkv, d, dtype, device, seed=len(name), dv=dv)
    return packed, _sinks(sinks, hq, device), kw, dlse, forward


@cuda
@pytest.mark.parametrize("name", list(CUDA_CASES))
def test_cuda_varlen_gradients_pass_the_gate(name, prebuilt_bundles):
    packed, sinks, kw, dlse, forward = _cuda_case(name, "cuda")
    assert _call(*packed[:5], sinks=sinks, **kw).forward.name == forward
    out, lse = _run_and_gate(*packed, kw, sinks, dlse, backward_runner("cuda", 0, prebuilt_bundles), prebuilt_bundles)
    # the sequences without keys (tokens 0 and the last 3): O = 0, lse +inf (or the sink)
    empty = torch.tensor([0] + list(range(out.shape[0] - 3, out.shape[0])), device="cuda")
    assert not out[empty].any()
    assert (torch.isposinf(lse[:, empty]).all() if sinks is None else torch.isfinite(lse[:, empty]).all())


@cuda
def test_cuda_flash_varlen_forward_is_the_math_forward(prebuilt_bundles):
    """torch's flash varlen forward against each sequence through f32 math: out within bf16's rounding of
    values below 2 (2^-9 relative), the lse (f32) within 1e-3, +inf on the same rows."""
    packed, _, kw, _, _ = _cuda_case("bf16-bottom-right-gqa", "cuda")
    outs = [attention_varlen(*packed, return_lse=True, forward=name, bundle_dir=prebuilt_bundles, **kw)
            for name in ("flash", "math")]
    (out, lse), (want_out, want_lse) = outs
    assert torch.equal(torch.isposinf(lse), torch.isposinf(want_lse))
    finite = torch.isfinite(want_lse)
    torch.testing.assert_close(lse[finite], want_lse[finite], atol=1e-3, rtol=0)
    torch.testing.assert_close(out.float(), want_out.float(), atol=2e-2, rtol=0)


def varlen_bundle_builds():
    """(where, what) of every bundle the tests here load: (q, k, v as meta tensors, prebuild's kwargs)."""
    for name, (dtype, hq, hkv, (d, dv), kw, sinks, dlse) in CPU_CASES.items():
        q, k, v = _packed(LENGTHS_Q, LENGTHS_K, hq, hkv, d, dtype, "meta", dv=dv)[:3]
        yield name, (q, k, v), dict(kw, sinks=None if sinks is None else torch.empty(hq, device="meta"),
                                    lse_grad=dlse)
    q, k, v = _packed(LENGTHS_Q, LENGTHS_K, 4, 2, 32, torch.float32, "meta")[:3]   # the padded comparison's
    yield "per-sequence f32 window softcap", (q, k, v), dict(mask="window:5,0", softcap=3.0, scale=0.2)
    padded = [torch.empty(1, 8, h, 32, device="meta") for h in (4, 2, 2)]   # (a bundle serves any lengths)
    for mask in {flash_mask(True, (5, -1), 1, sk) for sk in LENGTHS_K}:
        yield f"per-sequence padded {mask}", padded, dict(layout="bshd", mask=mask, softcap=3.0, scale=0.2)
    q, k, v = _packed(LENGTHS_Q, LENGTHS_K, 2, 1, 32, torch.bfloat16, "meta")[:3]
    for kw in (dict(mask="bottom_right"), dict(mask="window:2,0", softcap=5.0), {}):
        yield f"flash_attn_varlen_func {kw}", (q, k, v), kw
    q, k, v = _packed(LENGTHS_Q, LENGTHS_K, 2, 2, 32, torch.float32, "meta")[:3]
    yield "compile", (q, k, v), dict(mask="bottom_right", sinks=torch.empty(2, device="meta"), lse_grad=True)
    q, k, v = _packed((3, 0, 5), (4, 2, 6), 2, 1, 32, torch.float32, "meta")[:3]
    yield "opcheck", (q, k, v), dict(mask="bottom_right")
    for name in CUDA_CASES:
        q, k, v, sinks, kw, dlse = _cuda_case(name, "meta")
        yield name, (q, k, v), dict(kw, sinks=sinks, lse_grad=dlse)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUTPUT_DIR   (builds the bundles the tests load; needs MLIR)")
    from fmha_mlir.torch import prebuild

    for name, tensors, kwargs in varlen_bundle_builds():
        layout = kwargs.pop("layout", PACKED)
        for arch in ("sm_90a", "sm_90"):   # the H200's own target (CUDA tests), the interpreter's (CPU tests)
            print(name, prebuild(sys.argv[1], *tensors, arch=arch, layout=layout, **kwargs))
