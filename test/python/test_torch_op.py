"""fmha_mlir.torch: torch's forwards' lse in our convention, our backward under the gate, layouts, GQA,
dbias, torch.compile without graph breaks, the fake impls, a finite-difference check, bad options.

CPU tensors run our sm_90 bundles in the interpreter; the CUDA tests run on the H200. A GPU machine
without MLIR takes the bundles they need prebuilt where MLIR is:
    python test/python/test_torch_op.py DIR        # here
    python -m pytest -q test/python/test_torch_op.py --torch-bundles DIR       # there
"""
from __future__ import annotations

import copy
import dataclasses
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fmha_mlir import SpecError, oracle  # noqa: E402
from fmha_mlir.dtypes import from_storage  # noqa: E402
from fmha_mlir.api import AttentionBackward  # noqa: E402
from fmha_mlir.torch_in_place import torch_dtype_names  # noqa: E402
from fmha_mlir.tolerance import check_gradients  # noqa: E402
from fmha_mlir.torch import attention  # noqa: E402
from fmha_mlir.torch import ops  # noqa: E402
from fmha_mlir.torch.backward import backward_runner  # noqa: E402
from fmha_mlir.torch.call import checked_call, with_sinks  # noqa: E402
from fmha_mlir.torch.forwards import FORWARDS, math_forward, run_forward  # noqa: E402
from fmha_mlir.torch.options import AttentionOptions, describe, parse  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _tensors(shape_q, shape_kv, dtype, device="cpu", seed=0, dv=None):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(shape_q, generator=g).to(device, dtype)
    k = torch.randn(shape_kv, generator=g).to(device, dtype)
    v = (0.5 * torch.randn(shape_kv[:-1] + (dv or shape_kv[-1],), generator=g)).to(device, dtype)
    return q, k, v


def _values(t):
    return t.detach().cpu().double().numpy()


def _text(bias=None, alibi_slopes=None, **kw) -> str:
    """attention()'s options string for its keyword arguments (bias, alibi_slopes: tensors or not)."""
    o = dict(dict(mask="none", scale=None, softcap=0.0, layout="bhsd", deterministic=False, bundle_dir=None,
                  forward="auto", debug=False, return_lse=False), **kw)
    dbias = any(isinstance(t, torch.Tensor) and t.requires_grad for t in (bias, alibi_slopes))
    return describe(o["mask"], o["scale"], o["softcap"], None if isinstance(bias, torch.Tensor) else bias, dbias,
                    o["layout"], o["deterministic"], o["bundle_dir"], o["forward"], o["debug"], o["return_lse"])


def _call(q, k, v, bias=None, alibi_slopes=None, sinks=None, **kw):
    """The checked Call attention(q, k, v, bias=bias, alibi_slopes=alibi_slopes, sinks=sinks, **kw) makes."""
    tensor = bias if isinstance(bias, torch.Tensor) else None
    return checked_call(_text(bias, alibi_slopes, **kw), q, k, v, tensor, alibi_slopes, sinks)


# ---------------------------------------------------------------------------------------------------
# every forward's out and lse against the float64 oracle (natural log, +inf on empty rows, f32 [B, Hq, Sq])

LSE_CASES = {   # name: (Sq, Sk, heads_kv, options, slopes)
    "plain": (9, 13, 2, {}, None),
    "causal-square": (12, 12, 2, dict(mask="top_left"), None),
    "top-left": (9, 13, 2, dict(mask="top_left"), None),
    "bottom-right-empty-rows": (13, 6, 2, dict(mask="bottom_right"), None),
    "window": (11, 17, 2, dict(mask="window:3,1"), None),
    "bias": (9, 13, 2, dict(bias="tensor"), None),
    "alibi": (9, 13, 2, dict(bias="alibi"), None),
    "alibi-slopes": (9, 13, 2, dict(bias="alibi"), "slopes"),
    "softcap": (9, 13, 2, dict(softcap=2.0), None),
    "gqa": (9, 13, 1, dict(mask="bottom_right"), None),
}


def _lse_case(name, dtype, device):
    sq, sk, hkv, kw, slopes = LSE_CASES[name]
    q, k, v = _tensors((2, 2, sq, 32), (2, hkv, sk, 32), dtype, device, seed=len(name))
    bias = 0.5 * torch.randn(2, sq, sk).to(device, dtype) if kw.get("bias") == "tensor" else kw.get("bias")
    slopes = torch.tensor([0.3, 0.7], device=device) if slopes else None
    call = _call(q, k, v, **{**kw, "bias": bias}, alibi_slopes=slopes)
    return q, k, v, (bias if isinstance(bias, torch.Tensor) else None), slopes, call


def _check_against_the_oracle(forward, name, dtype, device, atol):
    q, k, v, bias, slopes, call = _lse_case(name, dtype, device)
    case, spec = dataclasses.replace(call.case, forward=forward), call.spec
    if FORWARDS[forward].why_not(case) is not None:
        pytest.skip(f"{forward} does not serve {name}: {FORWARDS[forward].why_not(case)}")
    out, lse = run_forward(FORWARDS[forward], q, k, v, bias, slopes, case)
    extra = dict(bias=None if bias is None else _values(bias), alibi_slopes=None if slopes is None else _values(slopes))
    if spec.bias == "alibi" and slopes is None:
        extra["bias"] = oracle.alibi_bias(oracle.alibi_slopes(q.shape[1]).astype(np.float32), q.shape[2], k.shape[2])
    ref = oracle.forward(_values(q), _values(k), _values(v), mask=spec.mask, scale=spec.scale,
                         gqa_ratio=q.shape[1] // k.shape[1], softcap=spec.softcap, **extra)
    ref_out, ref_lse = torch.from_numpy(ref.o), torch.from_numpy(ref.lse)
    out, lse = out.cpu(), lse.cpu()
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:3] and lse.is_contiguous()
    assert torch.equal(torch.isposinf(lse), torch.isposinf(ref_lse)) and not torch.isneginf(lse).any()
    assert torch.isposinf(lse).any() == (name == "bottom-right-empty-rows")
    finite = torch.isfinite(ref_lse)
    torch.testing.assert_close(lse[finite].double(), ref_lse[finite].double(), atol=atol, rtol=0)
    torch.testing.assert_close(out.double(), ref_out.double(), atol=atol, rtol=0)


@pytest.mark.parametrize("forward", ["cpu_flash", "flex", "math"])
@pytest.mark.parametrize("name", list(LSE_CASES))
def test_cpu_forwards_lse_is_ours(forward, name):
    # f32 forwards against the float64 oracle: f32 rounding is ~1e-6 here; a wrong log base, padding or
    # ALiBi offset is off by far more than 1e-5.
    _check_against_the_oracle(forward, name, torch.float32, "cpu", atol=1e-5)


@cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("forward", ["flash", "efficient", "flex", "math"])
@pytest.mark.parametrize("name", list(LSE_CASES))
def test_cuda_forwards_lse_is_ours(forward, name, dtype):
    # bf16 outputs carry a bf16 rounding (2^-9 relative) of values below 2; lse is kept in f32.
    _check_against_the_oracle(forward, name, dtype, "cuda", atol=1e-5 if dtype == torch.float32 else 2e-2)


def test_auto_picks_by_device_and_options():
    q, k, v = _tensors((1, 2, 8, 32), (1, 2, 8, 32), torch.float32)
    pick = lambda **kw: _call(q, k, v, **kw).forward.name   # noqa: E731
    assert pick() == "cpu_flash" and pick(mask="bottom_right") == "cpu_flash"
    assert pick(softcap=5.0) == "math"
    with pytest.raises(SpecError, match="'flash' cannot serve this call: it needs CUDA tensors only"):
        pick(forward="flash")



def test_compiled_flex_is_not_picked_for_head_dims_below_16():
    """torch's inductor lowers flex only from head dim 16 (an InductorError from inside torch.compile at d8,
    seen on the H200): on CUDA a d8 call past flash and efficient falls to math, and asking for flex says why."""
    from fmha_mlir.spec import AttentionBwdSpec, Mask
    from fmha_mlir.torch.forwards import ForwardCase, choose_forward

    def case(hdim, forward="auto"):
        spec = AttentionBwdSpec("bf16", hdim, gqa_ratio=2, mask=Mask("causal_bottom_right"))
        return ForwardCase("cuda", torch.bfloat16, 1, 4, 2, 33, 40, hdim, hdim, spec, forward)

    assert choose_forward(case(16)).name == "flex" and choose_forward(case(8)).name == "math"
    with pytest.raises(SpecError, match="head dims of at least 16 on CUDA"):
        choose_forward(case(8, "flex"))


# ---------------------------------------------------------------------------------------------------
# our backward under the gate (CPU tensors through the interpreter)

def _gate(q, k, v, bias, slopes, call, grads, do, runner=None, saved=None, sinks=None, dlse=None):
    """The gate for the op's gradients, with the oracle fed the out and lse the backward saw: `saved`,
    or the op's forward run again (deterministic on the CPU; on CUDA a forward may not repeat bitwise, e.g.
    flex once recompiled, and d(slopes) sums enough terms to notice). `runner`: the AttentionBackward that
    ran them (its bundle's numerics model the rounding). sinks, dlse: the call's sinks and the lse's
    gradient, when it has them (grads then end with dsinks when the sinks require grad)."""
    with torch.no_grad():
        out, lse = saved or ops.forward(call, q, k, v, bias, slopes, sinks)
    layout, spec = call.options.layout, call.backward_spec(dlse is not None)
    names = ("dq", "dk", "dv") + (("dbias",) if bias is not None and bias.requires_grad else ()) + (
        ("dalibi_slopes",) if slopes is not None and slopes.requires_grad else ()) + (
        ("dsinks",) if sinks is not None and sinks.requires_grad else ())
    views = [x.detach().transpose(1, 2) if layout == "bshd" else x.detach() for x in (q, k, v, out, do)]
    grads = [g.transpose(1, 2) if layout == "bshd" and i < 3 else g for i, g in enumerate(grads)]
    extra = dict(mask=spec.mask, scale=spec.scale, gqa_ratio=views[0].shape[1] // views[1].shape[1],
                 softcap=spec.softcap)
    if bias is not None:
        extra["bias"] = _values(bias)
    elif spec.bias == "alibi" and slopes is None:
        extra["bias"] = oracle.alibi_bias(oracle.alibi_slopes(views[0].shape[1]).astype(np.float32),
                                          views[0].shape[2], views[1].shape[2])
    if slopes is not None:
        extra["alibi_slopes"] = _values(slopes)
    if sinks is not None:
        extra["sinks"] = _values(sinks)
    if dlse is not None:
        extra["dlse"] = _values(dlse)
    inputs = [_values(x) for x in views[:3]] + [_values(views[3]), _values(views[4]), _values(lse)]
    runner = runner or backward_runner("cpu", None, None)
    assert spec.dbias == (len(set(names) - {"dq", "dk", "dv", "dsinks"}) > 0)
    dtype = torch_dtype_names()[q.dtype]
    checks = check_gradients({n: _values(g) for n, g in zip(names, grads)}, oracle.backward(*inputs, **extra),
                             oracle.lowp_backward(*inputs, dtype=dtype, numerics=runner.bundle(spec).numerics, **extra),
                             dtype, max(q.shape[-1], v.shape[-1]))
    assert [c.name for c in checks] == list(names)
    assert all(c.passed for c in checks), [str(c) for c in checks]


GRAD_CASES = {   # name: (dtype, Sq, Sk, heads_kv, kwargs)
    "f32-none": (torch.float32, 17, 23, 2, {}),
    "bf16-bottom-right-empty-rows": (torch.bfloat16, 40, 24, 2, dict(mask="bottom_right")),
    "f32-window-gqa": (torch.float32, 19, 33, 1, dict(mask="window:4,2")),
    "bf16-softcap-top-left": (torch.bfloat16, 21, 21, 2, dict(mask="top_left", softcap=3.0)),
    "f32-bias-dbias": (torch.float32, 13, 29, 2, dict(bias="tensor")),
    "f32-alibi": (torch.float32, 13, 21, 2, dict(bias="alibi")),
    "f32-alibi-dslopes": (torch.float32, 13, 21, 2, dict(bias="alibi", slopes=True)),
    # torch's CPU forward returns lse [B, H, 1] with a non-unit stride on its size-1 dim
    "bf16-one-query": (torch.bfloat16, 1, 23, 2, {}),
}


@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_eager_gradients_pass_the_gate(name):
    dtype, sq, sk, hkv, kw = GRAD_CASES[name]
    q, k, v = _tensors((1, 2, sq, 32), (1, hkv, sk, 32), dtype, seed=7)
    bias = (0.5 * torch.randn(2, sq, sk)).to(dtype).requires_grad_() if kw.get("bias") == "tensor" else kw.get("bias")
    slopes = torch.tensor([0.25, 0.6], requires_grad=True) if kw.get("slopes") else None
    opts = {n: kw[n] for n in ("mask", "softcap") if n in kw}
    for x in (q, k, v):
        x.requires_grad_()
    out = attention(q, k, v, bias=bias, alibi_slopes=slopes, **opts)
    do = (0.5 * torch.randn(out.shape, generator=torch.Generator().manual_seed(1))).to(dtype)
    out.backward(do)
    grads = [q.grad, k.grad, v.grad] + [t.grad for t in (bias, slopes) if isinstance(t, torch.Tensor)]
    assert all(g is not None for g in grads)
    tensor_bias = bias if isinstance(bias, torch.Tensor) else None
    _gate(q, k, v, tensor_bias, slopes, _call(q, k, v, bias=bias, alibi_slopes=slopes, **opts), grads, do)


# ---------------------------------------------------------------------------------------------------
# attention sinks and the lse's gradient

SINK_CASES = {   # name: (dtype, Sq, Sk, heads_kv, kwargs, sinks require grad, return_lse)
    "bf16-sinks-bottom-right-empty-rows": (torch.bfloat16, 20, 12, 2, dict(mask="bottom_right"), True, False),
    "f32-sinks-window-gqa-lse": (torch.float32, 13, 19, 1, dict(mask="window:4,2"), True, True),
    "f16-lse-only": (torch.float16, 11, 17, 2, {}, None, True),
    "bf16-fixed-sinks-lse-bshd": (torch.bfloat16, 9, 14, 2, dict(layout="bshd"), False, True),
}


def _sink_case(name, seed=7):
    """(q, k, v requiring grad, sinks or None, attention() kwargs) of a SINK_CASES case."""
    dtype, sq, sk, hkv, kw, grad_sinks, return_lse = SINK_CASES[name]
    shape = (lambda h, n: (1, n, h, 32)) if kw.get("layout") == "bshd" else (lambda h, n: (1, h, n, 32))
    q, k, v = (x.requires_grad_() for x in _tensors(shape(2, sq), shape(hkv, sk), dtype, seed=seed))
    sinks = None if grad_sinks is None else torch.tensor([0.7, -1.3]).requires_grad_(grad_sinks)
    return q, k, v, sinks, dict(kw, return_lse=return_lse)


@pytest.mark.parametrize("name", list(SINK_CASES))
def test_sinks_and_the_lse_gradient_pass_the_gate(name):
    q, k, v, sinks, kw = _sink_case(name)
    result = attention(q, k, v, sinks=sinks, **kw)
    out, lse = result if kw["return_lse"] else (result, None)
    g = torch.Generator().manual_seed(1)
    do = (0.5 * torch.randn(out.shape, generator=g)).to(out.dtype)
    dlse = None if lse is None else torch.randn(lse.shape, generator=g)
    torch.autograd.backward([out] + ([lse] if lse is not None else []), [do] + ([dlse] if dlse is not None else []))
    grads = [q.grad, k.grad, v.grad] + ([sinks.grad] if sinks is not None and sinks.requires_grad else [])
    assert all(x is not None for x in grads) and (sinks is None or sinks.requires_grad or sinks.grad is None)
    _gate(q, k, v, None, None, _call(q, k, v, sinks=sinks, **kw), grads, do, sinks=sinks, dlse=dlse)


def test_the_forward_with_sinks_is_the_oracles():
    q, k, v = _tensors((2, 2, 13, 32), (2, 2, 7, 32), torch.float32, seed=4)
    sinks = torch.tensor([0.5, -2.0])
    out, lse = attention(q, k, v, sinks=sinks, mask="bottom_right", return_lse=True)   # rows 0-5 see no key
    ref = oracle.forward(_values(q), _values(k), _values(v), mask=_call(q, k, v, mask="bottom_right").spec.mask,
                         scale=32 ** -0.5, gqa_ratio=1, sinks=_values(sinks))
    # f32 forwards against the float64 oracle (as test_cpu_forwards_lse_is_ours): a sink left out or added
    # twice moves lse by O(0.1)
    torch.testing.assert_close(lse.double(), torch.from_numpy(ref.lse), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.double(), torch.from_numpy(ref.o), atol=1e-5, rtol=0)
    assert torch.equal(lse[:, :, :6], sinks[None, :, None].expand(2, 2, 6)) and not out[:, :, :6].any()


def test_an_unused_lse_builds_no_lse_gradient(monkeypatch):
    seen = []
    run = AttentionBackward.run
    monkeypatch.setattr(AttentionBackward, "run", lambda self, spec, *a, **kw: (
        seen.append((spec.lse_grad, kw["dlse"] is not None)), run(self, spec, *a, **kw))[1])
    q, k, v, sinks, kw = _sink_case("f16-lse-only")
    attention(q, k, v, **kw)[0].sum().backward()
    attention(q, k, v, **kw)[1].sum().backward()   # only the lse: dO is zeros
    assert seen == [(False, False), (True, True)] and torch.isfinite(q.grad).all()


def test_sinks_and_the_lse_gradient_match_central_differences():
    q, k, v = _tensors((1, 2, 10, 32), (1, 1, 15, 32), torch.float32, seed=12)
    sinks = torch.tensor([0.3, -0.8])
    kw = dict(mask="window:5,1")
    xs = [x.clone().requires_grad_() for x in (q, k, v, sinks)]
    out, lse = attention(*xs[:3], sinks=xs[3], return_lse=True, **kw)
    g = torch.Generator().manual_seed(2)
    d_out, d_lse = torch.randn(out.shape, generator=g), torch.randn(lse.shape, generator=g)
    torch.autograd.backward([out, lse], [d_out, d_lse])
    dirs = [torch.randn(x.shape, generator=g, dtype=torch.float64) for x in xs]
    analytic = sum(float((x.grad.double() * d).sum()) for x, d in zip(xs, dirs))
    case = _call(q, k, v, **kw).case   # the math forward on float64 tensors (its float64 lse), then the sinks

    def loss(t):
        moved = [x.detach().double() + t * d for x, d in zip(xs, dirs)]
        o, lse = with_sinks(*math_forward(*moved[:3], None, None, case), moved[3])
        return float((o * d_out.double()).sum() + (lse * d_lse.double()).sum())

    eps = 1e-4
    numeric = (loss(eps) - loss(-eps)) / (2 * eps)
    # The bound of test_one_backward_call_matches_central_differences_of_the_float64_forward: 1e-6 of
    # sum |grad_i dir_i| (f32 gradients, a float64 central difference).
    scale = sum(float((x.grad.double() * d).abs().sum()) for x, d in zip(xs, dirs))
    assert abs(analytic - numeric) <= 1e-6 * scale, (analytic, numeric, scale)


RING_SHAPES = {"cpu": ((1, 2, 12, 32), (1, 2, 22, 32)), "cuda": ((2, 4, 128, 64), (2, 4, 256, 64))}


def _ring_merge_matches_one_call(device, with_sinks, bundle_dir=None):
    """Ring / context-parallel attention: each chunk of keys gives (out_c, lse_c); the merge weighs them by
    exp(lse_c - lse), lse = logaddexp over the chunks. Its gradients reach q, k, v (and the sinks) through
    both the outs and the lse's, and must be the single call's: against the oracle under the gate (f32:
    the merge rounds in f32, below the gate's model of the kernels' own rounding)."""
    shape_q, shape_kv = RING_SHAPES[device]
    q, k, v = (x.to(device).requires_grad_() for x in _tensors(shape_q, shape_kv, torch.float32, seed=9))
    heads, half = shape_q[1], shape_kv[2] // 2
    sinks = torch.linspace(-0.6, 0.4, heads, device=device).requires_grad_() if with_sinks else None
    halves = [attention(q, k[:, :, part], v[:, :, part], sinks=sinks if part.start == 0 else None, return_lse=True,
                        bundle_dir=bundle_dir)
              for part in (slice(0, half), slice(half, 2 * half))]
    lse = torch.logaddexp(halves[0][1], halves[1][1])
    out = sum(torch.exp(part_lse - lse)[..., None] * part_out for part_out, part_lse in halves)
    do = 0.5 * torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(device)
    out.backward(do)
    grads = [q.grad, k.grad, v.grad] + ([sinks.grad] if sinks is not None else [])
    runner = backward_runner(device, 0 if device == "cuda" else None, bundle_dir if device == "cuda" else None)
    _gate(q, k, v, None, None, _call(q, k, v, sinks=sinks), grads, do, runner, (out.detach(), lse.detach()),
          sinks=sinks)


@pytest.mark.parametrize("with_sinks", [False, True], ids=["plain", "sinks"])
def test_a_ring_merge_over_key_halves_has_the_gradients_of_one_call(with_sinks):
    _ring_merge_matches_one_call("cpu", with_sinks)


@cuda
@pytest.mark.parametrize("with_sinks", [False, True], ids=["plain", "sinks"])
def test_cuda_ring_merge_over_key_halves_has_the_gradients_of_one_call(with_sinks, prebuilt_bundles):
    _ring_merge_matches_one_call("cuda", with_sinks, prebuilt_bundles)


def ring_bundle_builds():
    """(where, what) of the bundles the CUDA ring merge loads: each half with dlse, the first with sinks;
    and the single call's, whose numerics the gate models."""
    shape_q, shape_kv = RING_SHAPES["cuda"]
    q, k = torch.empty(shape_q, device="meta"), torch.empty(shape_kv, device="meta")
    half = torch.empty(shape_kv[:2] + (shape_kv[2] // 2, shape_kv[3]), device="meta")
    for sinks in (None, torch.empty(shape_q[1], device="meta")):
        yield f"ring half, sinks {sinks is not None}", (q, half, half), dict(sinks=sinks, lse_grad=True)
        yield f"ring's single call, sinks {sinks is not None}", (q, k, k), dict(sinks=sinks)


# ---------------------------------------------------------------------------------------------------
# head dims off the tables' widths: multiples of 8 the tiled body pads inside its tiles, the rest the op
# pads (q, k, v zero-padded, the gradients sliced)

PADDED_CASES = {   # name: (dtype, head dim of q and k, of v, the spec's head dims, kwargs)
    "f16-d8": (torch.float16, 8, 8, (8, 8), {}),
    "f16-d16": (torch.float16, 16, 16, (16, 16), {}),
    "bf16-d40-causal": (torch.bfloat16, 40, 40, (40, 40), dict(mask="bottom_right")),
    "f16-d59-causal-bshd": (torch.float16, 59, 59, (64, 64), dict(mask="top_left", layout="bshd")),
    "bf16-d80": (torch.bfloat16, 80, 80, (80, 80), {}),
    "bf16-d84": (torch.bfloat16, 84, 84, (88, 88), {}),
    "bf16-d40-v24-causal": (torch.bfloat16, 40, 24, (40, 24), dict(mask="bottom_right")),
    "f32-d40": (torch.float32, 40, 40, (64, 64), {}),
}


@pytest.mark.parametrize("name", list(PADDED_CASES))
def test_padded_head_dims_pass_the_gate(name):
    dtype, d, dv, padded, kw = PADDED_CASES[name]
    shape = (lambda h, n, e: (1, n, h, e)) if kw.get("layout") == "bshd" else (lambda h, n, e: (1, h, n, e))
    q, k, v = (x.requires_grad_() for x in _tensors(shape(2, 11, d), shape(2, 14, d), dtype, seed=3, dv=dv))
    call = _call(q, k, v, **kw)
    assert (call.spec.hdim_q, call.spec.hdim_v) == padded and call.spec.scale == 1 / d ** 0.5
    out = attention(q, k, v, **kw)
    assert out.shape == q.shape[:-1] + (dv,)
    do = (0.5 * torch.randn(out.shape, generator=torch.Generator().manual_seed(1))).to(dtype)
    out.backward(do)
    assert [x.grad.shape for x in (q, k, v)] == [x.shape for x in (q, k, v)]
    _gate(q, k, v, None, None, call, [q.grad, k.grad, v.grad], do)


def test_bshd_equals_bhsd_with_the_callers_strides_and_no_copies(monkeypatch):
    q, k, v = _tensors((1, 2, 11, 32), (1, 1, 15, 32), torch.bfloat16, seed=3)
    seen = []
    run = AttentionBackward.run

    def spy(self, spec, q_, k_, v_, o_, do_, lse_, **kw):
        seen.append((q_.data_ptr(), k_.data_ptr(), v_.data_ptr(), q_.stride()))
        return run(self, spec, q_, k_, v_, o_, do_, lse_, **kw)

    monkeypatch.setattr(AttentionBackward, "run", spy)
    results = {}
    for layout in ("bhsd", "bshd"):
        xs = [(x.transpose(1, 2).contiguous() if layout == "bshd" else x.clone()).requires_grad_() for x in (q, k, v)]
        out = attention(*xs, mask="bottom_right", layout=layout)
        out.float().square().sum().backward()
        # out as torch's forward gives it (eager: no copy); the gradients contiguous in the caller's layout
        assert out.shape == xs[0].shape and all(x.grad.is_contiguous() and x.grad.shape == x.shape for x in xs)
        assert seen[-1][:3] == tuple(x.data_ptr() for x in xs)     # the kernels read the caller's storage
        back = (lambda t: t.transpose(1, 2)) if layout == "bshd" else (lambda t: t)
        results[layout] = [back(t) for t in (out, *(x.grad for x in xs))]
    assert seen[1][3] == (704, 32, 64, 1)   # q's logical view of BSHD storage
    for a, b in zip(results["bhsd"], results["bshd"]):
        assert torch.equal(a, b)


# ---------------------------------------------------------------------------------------------------
# torch.compile, the fake impls, a finite-difference check

class _Block(torch.nn.Module):
    def __init__(self, width=64, heads=2, bundle_dir=None):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.bundle_dir = bundle_dir

    def forward(self, x):
        b, s, w = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, w // self.heads).unbind(2)
        out = attention(q, k, v, mask="top_left", layout="bshd", bundle_dir=self.bundle_dir)
        return self.proj(out.reshape(b, s, w))


BLOCK_INPUT = (2, 16, 64)   # batch, seq, width of the _Block runs: heads 2 of dim 32


def _compiled_matches_eager(device, backend, dtype, bundle_dir=None):
    torch.manual_seed(0)
    model = _Block(bundle_dir=bundle_dir).to(device, dtype)
    x = torch.randn(*BLOCK_INPUT, device=device, dtype=dtype)
    eager = model(x)
    eager.sum().backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, fullgraph=True)   # fullgraph: a graph break is an error
    out = compiled(x)
    out.sum().backward()
    torch.testing.assert_close(out, eager, rtol=0, atol=0 if backend == "aot_eager" else 1e-2)
    for got, want in zip((p.grad for p in model.parameters()), eager_grads):
        torch.testing.assert_close(got, want, rtol=0, atol=0 if backend == "aot_eager" else 5e-2)


def test_torch_compile_fullgraph_matches_eager_on_cpu(prebuilt_bundles):
    _compiled_matches_eager("cpu", "aot_eager", torch.float32, prebuilt_bundles)


@cuda
def test_torch_compile_fullgraph_inductor_matches_eager_on_cuda(prebuilt_bundles):
    _compiled_matches_eager("cuda", "inductor", torch.bfloat16, prebuilt_bundles)


# ---------------------------------------------------------------------------------------------------
# CUDA graphs: a training step captured and replayed on new data in the same buffers, and
# torch.compile(mode="reduce-overhead"); nothing inside the captured region allocates outside torch's
# allocator, uploads or waits (a capture would fail on it, and the executor's own calls fail the test)

def _eager_step(model, x):
    """(out, parameter gradients) of one eager training step of `model` on x."""
    model.zero_grad(set_to_none=True)
    out = model(x)
    out.float().square().mean().backward()
    return out.detach().clone(), [p.grad.clone() for p in model.parameters()]


def _forbid_host_work(monkeypatch):
    from fmha_mlir.runtime.cuda_executor import CudaExecutor

    for method in ("alloc", "upload", "download", "synchronize"):
        monkeypatch.setattr(CudaExecutor, method, lambda *a, m=method: pytest.fail(f"the captured step called {m}"))


def _assert_step_matches(got, want):
    """A replayed or compiled step against eager on the same x: the same kernels but for dQ's atomics order
    (bf16 outputs, f32 atomics): within a few bf16 ulps; a step on stale data is off by O(1)."""
    (out, grads), (out_eager, grads_eager) = got, want
    torch.testing.assert_close(out, out_eager, rtol=1e-2, atol=1e-2)
    for g, w in zip(grads, grads_eager):
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)


@cuda
def test_a_training_step_is_captured_in_a_cuda_graph_and_replays_on_new_data(prebuilt_bundles, monkeypatch):
    import copy

    torch.manual_seed(0)
    model = _Block(bundle_dir=prebuilt_bundles).to("cuda", torch.bfloat16)
    reference = copy.deepcopy(model)
    static_x = torch.randn(*BLOCK_INPUT, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()   # warm-up off the default stream, as torch.cuda.graph asks: binds our plan
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            _eager_step(model, static_x)
    torch.cuda.current_stream().wait_stream(side)
    _forbid_host_work(monkeypatch)
    graph = torch.cuda.CUDAGraph()
    model.zero_grad(set_to_none=True)   # the gradients are allocated inside the capture, in its pool
    with torch.cuda.graph(graph):
        static_out = model(static_x)
        static_out.float().square().mean().backward()
    replays = []
    for seed in (1, 2):
        x = torch.randn(*BLOCK_INPUT, generator=torch.Generator().manual_seed(seed)).to("cuda", torch.bfloat16)
        static_x.copy_(x)
        graph.replay()
        replays.append((static_out.detach().clone(), [p.grad.clone() for p in model.parameters()]))
        _assert_step_matches(replays[-1], _eager_step(reference, x))
    assert not torch.equal(replays[0][1][0], replays[1][1][0])   # the second replay read the new data


@cuda
def test_reduce_overhead_compile_replays_cuda_graphs_that_match_eager(prebuilt_bundles, monkeypatch):
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = _Block(bundle_dir=prebuilt_bundles).to("cuda", torch.bfloat16)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    xs = [torch.randn(*BLOCK_INPUT, generator=torch.Generator().manual_seed(s)).to("cuda", torch.bfloat16)
          for s in range(5)]
    for n, x in enumerate(xs):   # cudagraph trees warm up eagerly, then record, then replay
        if n == 2:
            _forbid_host_work(monkeypatch)
        got = _eager_step(compiled, x)
        _assert_step_matches(got, _eager_step(model, x))
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


@cuda
def test_debug_mode_is_refused_inside_a_cuda_graph_capture(prebuilt_bundles):
    q, k, v, _, _, opts = _cuda_case("bf16-causal-gqa", "cuda")
    xs = [x.requires_grad_() for x in (q, k, v)]
    attention(*xs, bundle_dir=prebuilt_bundles, debug=True, **opts).sum().backward()   # bound and loaded
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(SpecError, match="debug: .*CUDA graph"):
        with torch.cuda.graph(graph):
            attention(*xs, bundle_dir=prebuilt_bundles, debug=True, **opts).sum().backward()


@cuda
def test_compiled_flex_is_not_recompiled_for_new_tensors():
    """flex's score_mod is a fresh closure per call: new bias / slopes tensors of one shape reuse its graph."""
    from torch._dynamo.utils import counters

    q, k, v = _tensors((2, 4, 128, 64), (2, 2, 128, 64), torch.bfloat16, "cuda")
    call = _call(q, k, v, mask="bottom_right", softcap=20.0, bias="alibi", forward="flex",
                 alibi_slopes=torch.rand(4, device="cuda"))
    run_forward(call.forward, q, k, v, None, torch.rand(4, device="cuda"), call.case)
    graphs = counters["stats"]["unique_graphs"]
    out, lse = run_forward(call.forward, q, k, v, None, torch.rand(4, device="cuda"), call.case)
    assert counters["stats"]["unique_graphs"] == graphs and torch.isfinite(lse).all()


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_opcheck_of_both_ops(layout):
    q, k, v = _tensors((1, 2, 9, 32), (1, 2, 12, 32), torch.float32, seed=5)
    if layout == "bshd":
        q, k, v = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    q, k, v, bias = (x.requires_grad_() for x in (q, k, v, 0.3 * torch.randn(9, 12)))
    text = _text(bias, mask="bottom_right", layout=layout)
    torch.library.opcheck(ops.attention_forward, (q, k, v, bias, None, None, text))
    out, lse = ops.attention_forward(q, k, v, bias, None, None, text)
    grad = torch.randn_like(out)
    # The backward has no autograd formula of its own (no double backward): its schema and fake only.
    torch.library.opcheck(ops.attention_backward, (grad, q, k, v, out, lse, bias, None, None, None, text),
                          test_utils=("test_schema", "test_faketensor"))
    assert [g.shape for g in ops.attention_backward(grad, q, k, v, out, lse, bias, None, None, None, text)] == [
        q.shape, k.shape, v.shape, bias.shape]


def test_opcheck_with_sinks_and_the_lse_gradient():
    q, k, v, sinks, kw = _sink_case("f32-sinks-window-gqa-lse")
    text = _text(**kw)
    torch.library.opcheck(ops.attention_forward, (q, k, v, None, None, sinks, text))
    out, lse = ops.attention_forward(q, k, v, None, None, sinks, text)
    grad, dlse = torch.randn_like(out), torch.randn_like(lse)
    torch.library.opcheck(ops.attention_backward, (grad, q, k, v, out, lse, None, None, sinks, dlse, text),
                          test_utils=("test_schema", "test_faketensor"))
    grads = ops.attention_backward(grad, q, k, v, out, lse, None, None, sinks, dlse, text)
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape, sinks.shape]


def test_torch_compile_fullgraph_with_sinks_and_the_lse_matches_eager(prebuilt_bundles):
    q, k, v, sinks, kw = _sink_case("f32-sinks-window-gqa-lse")

    def step(*xs):
        out, lse = attention(*xs[:3], sinks=xs[3], bundle_dir=prebuilt_bundles, **kw)
        return out.square().sum() + lse.sum()

    xs = (q, k, v, sinks)
    eager = torch.autograd.grad(step(*xs), xs)
    torch._dynamo.reset()
    compiled = torch.autograd.grad(torch.compile(step, backend="aot_eager", fullgraph=True)(*xs), xs)
    for got, want in zip(compiled, eager):
        torch.testing.assert_close(got, want, rtol=0, atol=0)   # the same forward and kernels


def test_one_backward_call_matches_central_differences_of_the_float64_forward():
    q, k, v = _tensors((1, 2, 14, 32), (1, 1, 19, 32), torch.float32, seed=11)
    kw = dict(mask="window:6,2", softcap=4.0)
    xs = [x.clone().requires_grad_() for x in (q, k, v)]
    out = attention(*xs, **kw)
    direction_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    out.backward(direction_out)
    g = torch.Generator().manual_seed(3)
    dirs = [torch.randn(x.shape, generator=g, dtype=torch.float64) for x in xs]
    analytic = sum(float((x.grad.double() * d).sum()) for x, d in zip(xs, dirs))

    case = _call(q, k, v, **kw).case   # the math forward on float64 tensors, with this call's scores

    def loss(t):
        moved = [x.detach().double() + t * d for x, d in zip(xs, dirs)]
        return float((run_forward(FORWARDS["math"], *moved, None, None, case)[0] * direction_out.double()).sum())

    eps = 1e-4
    numeric = (loss(eps) - loss(-eps)) / (2 * eps)
    # Bound: an f32 gradient element errs by a few ulps of its terms (2^-21 ~ 5e-7 for 8 ulps), so even
    # with every error aligned |<err, dir>| <= 5e-7 sum |grad_i dir_i|; the float64 central difference errs
    # by ~eps^2 = 1e-8 relative. Hence 1e-6 of sum |grad_i dir_i|: measured 2e-8 of it, while the
    # backward run with a 1% wrong scale lands at 6e-5 of it (60x over).
    scale = sum(float((x.grad.double() * d).abs().sum()) for x, d in zip(xs, dirs))
    assert abs(analytic - numeric) <= 1e-6 * scale, (analytic, numeric, scale)


# ---------------------------------------------------------------------------------------------------
# our backward on CUDA tensors: under the gate, on torch's stream, with torch's allocator, never waiting

CUDA_CASES = {   # name: (dtype, batch, heads_q, heads_kv, Sq, Sk, head dim, kwargs)
    "bf16-causal-gqa": (torch.bfloat16, 2, 8, 2, 256, 256, 64, dict(mask="top_left")),
    "f16-bottom-right-bshd": (torch.float16, 1, 4, 4, 200, 328, 128, dict(mask="bottom_right", layout="bshd")),
    "bf16-window-softcap": (torch.bfloat16, 1, 4, 2, 192, 192, 64, dict(mask="window:32,8", softcap=20.0)),
    "bf16-bias-dbias": (torch.bfloat16, 1, 2, 2, 128, 160, 64, dict(bias="tensor")),
    "bf16-alibi-dslopes": (torch.bfloat16, 1, 4, 4, 128, 128, 64, dict(bias="alibi", slopes=True)),
    "f32-none": (torch.float32, 1, 2, 1, 77, 93, 64, {}),
    "bf16-causal-gqa-deterministic": (torch.bfloat16, 2, 8, 2, 256, 256, 64, dict(mask="top_left",
                                                                               deterministic=True)),
}


def _cuda_case(name, device):
    """(q, k, v, bias, slopes, attention() kwargs) of a CUDA case, in the case's layout (meta: shapes only)."""
    dtype, b, hq, hkv, sq, sk, d, kw = CUDA_CASES[name]
    layout = kw.get("layout", "bhsd")
    order = (lambda *s: (s[0], s[2], s[1], s[3])) if layout == "bshd" else (lambda *s: s)
    if device == "meta":
        q, k, v = (torch.empty(order(b, h, n, d), dtype=dtype, device="meta")
                   for h, n in ((hq, sq), (hkv, sk), (hkv, sk)))
    else:
        q, k, v = (x.to(device) for x in _tensors(order(b, hq, sq, d), order(b, hkv, sk, d), dtype, seed=len(name)))
    bias = (0.5 * torch.randn(hq, sq, sk)).to(device, dtype) if kw.get("bias") == "tensor" else kw.get("bias")
    slopes = torch.linspace(0.1, 0.8, hq, device=device) if kw.get("slopes") else None
    for t in (bias, slopes):
        if isinstance(t, torch.Tensor):
            t.requires_grad_()
    opts = {n: kw[n] for n in ("mask", "softcap", "layout", "deterministic") if n in kw}
    return q, k, v, bias, slopes, opts


def prebuilt_bundle_builds():
    """(where, what) of every bundle the tests that take prebuilt_bundles load (the CUDA ones and the CPU
    torch.compile test): (q, k, v as meta tensors, prebuild's kwargs)."""
    for name in CUDA_CASES:
        q, k, v, bias, slopes, opts = _cuda_case(name, "meta")
        yield name, (q, k, v), dict(opts, bias=bias, alibi_slopes=slopes)
    b, s, w = BLOCK_INPUT
    for dtype in (torch.bfloat16, torch.float32):   # the CUDA (inductor) and CPU (aot_eager) compile tests
        meta = torch.empty((b, s, 2, w // 2), dtype=dtype, device="meta")
        yield f"_Block {dtype}", (meta, meta, meta), dict(mask="top_left", layout="bshd")
    q, k, v, sinks, kw = _sink_case("f32-sinks-window-gqa-lse")   # the CPU compile test with sinks and dlse
    yield "sinks and dlse", tuple(x.to("meta") for x in (q, k, v)), dict(
        mask=kw["mask"], sinks=sinks.to("meta"), lse_grad=True)


def _cuda_backward(name, bundle_dir):
    """One forward and backward of a CUDA case through the op pair, keeping the out and lse it saved."""
    q, k, v, bias, slopes, opts = _cuda_case(name, "cuda")
    for x in (q, k, v):
        x.requires_grad_()
    tensor_bias = bias if isinstance(bias, torch.Tensor) else None
    text = _text(bias, slopes, bundle_dir=bundle_dir, **opts)
    out, lse = ops.attention_forward(q, k, v, tensor_bias, slopes, None, text)   # as attention() does under compile
    do = 0.5 * torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to("cuda", out.dtype)
    out.backward(do)
    call = checked_call(text, q, k, v, tensor_bias, slopes)
    return q, k, v, tensor_bias, slopes, call, do, (out.detach(), lse)


@cuda
@pytest.mark.parametrize("name", list(CUDA_CASES))
def test_cuda_gradients_pass_the_gate(name, prebuilt_bundles):
    q, k, v, bias, slopes, options, do, saved = _cuda_backward(name, prebuilt_bundles)
    grads = [q.grad, k.grad, v.grad] + [t.grad for t in (bias, slopes) if t is not None]
    assert all(g is not None and g.is_cuda for g in grads)
    _gate(q, k, v, bias, slopes, options, grads, do, backward_runner("cuda", 0, prebuilt_bundles), saved)


# sinks, the lse's gradient and padded head dims on CUDA
ROW_CUDA_CASES = {   # name: (dtype, batch, heads_q, heads_kv, Sq, Sk, head dims (q, v), kwargs, sinks, dlse)
    # sinks: "grad" (they require grad), "fixed" or None; dlse: a gradient flows into the returned lse
    "bf16-sinks-dlse-bottom-right-gqa": (torch.bfloat16, 2, 8, 2, 256, 256, (64, 64), dict(mask="bottom_right"),
                                         "grad", True),
    "f16-sinks-window-bshd": (torch.float16, 1, 4, 4, 200, 328, (128, 128), dict(mask="window:64,0", layout="bshd"),
                              "grad", False),
    "bf16-dlse-fixed-sinks": (torch.bfloat16, 1, 4, 4, 192, 192, (64, 64), {}, "fixed", True),
    # (forward math: 'auto' picks flex for f32 with GQA and a mask, which the H200's inductor fails to compile)
    "f32-sinks-dlse": (torch.float32, 1, 2, 1, 77, 93, (64, 64), dict(mask="top_left", forward="math"), "grad", True),
    "bf16-d40-bottom-right": (torch.bfloat16, 1, 4, 2, 160, 200, (40, 40), dict(mask="bottom_right"), None, False),
    "f16-d80": (torch.float16, 1, 4, 4, 128, 200, (80, 80), {}, None, False),
    "bf16-d59-top-left": (torch.bfloat16, 1, 2, 2, 100, 100, (59, 59), dict(mask="top_left"), None, False),
    "f16-d16-bshd": (torch.float16, 2, 4, 4, 64, 64, (16, 16), dict(layout="bshd"), None, False),
    "bf16-d192-v128-bottom-right": (torch.bfloat16, 1, 4, 4, 128, 128, (192, 128), dict(mask="bottom_right"),
                                    None, False),
}


def _row_cuda_case(name, device):
    """(q, k, v, sinks, attention() kwargs, dlse wanted) of a ROW_CUDA_CASES case (meta: shapes only)."""
    dtype, b, hq, hkv, sq, sk, (d, dv), kw, sinks, dlse = ROW_CUDA_CASES[name]
    order = (lambda *s: (s[0], s[2], s[1], s[3])) if kw.get("layout") == "bshd" else (lambda *s: s)
    q, k, v = (x.to(device) for x in _tensors(order(b, hq, sq, d), order(b, hkv, sk, d), dtype, seed=len(name), dv=dv))
    sink = None if sinks is None else torch.linspace(-1.0, 1.5, hq, device=device).requires_grad_(sinks == "grad")
    return q, k, v, sink, kw, dlse


def row_cuda_bundle_builds():
    for name in ROW_CUDA_CASES:
        q, k, v, sinks, kw, dlse = _row_cuda_case(name, "meta")
        options = {n: value for n, value in kw.items() if n != "forward"}   # (the forward is no bundle's)
        yield name, (q, k, v), dict(options, sinks=sinks, lse_grad=dlse)


@cuda
@pytest.mark.parametrize("name", list(ROW_CUDA_CASES))
def test_cuda_sinks_lse_and_padded_head_dims_pass_the_gate(name, prebuilt_bundles):
    q, k, v, sinks, kw, wants_dlse = _row_cuda_case(name, "cuda")
    xs = [x.requires_grad_() for x in (q, k, v)]
    out, lse = attention(*xs, sinks=sinks, return_lse=True, bundle_dir=prebuilt_bundles, **kw)
    g = torch.Generator().manual_seed(1)
    do = (0.5 * torch.randn(out.shape, generator=g)).to("cuda", out.dtype)
    dlse = torch.randn(lse.shape, generator=g).to("cuda") if wants_dlse else None
    torch.autograd.backward([out] + [lse] * wants_dlse, [do] + [dlse] * wants_dlse)
    grads = [x.grad for x in xs] + ([sinks.grad] if sinks is not None and sinks.requires_grad else [])
    assert all(t is not None and t.is_cuda for t in grads)
    _gate(q, k, v, None, None, _call(q, k, v, sinks=sinks, return_lse=True, **kw), grads, do,
          backward_runner("cuda", 0, prebuilt_bundles), (out.detach(), lse.detach()), sinks=sinks, dlse=dlse)


@cuda
def test_cuda_flash_attn_func_passes_the_gate(prebuilt_bundles):
    from fmha_mlir.torch import flash_attn_func

    q, k, v, _, _, opts = _cuda_case("f16-bottom-right-bshd", "cuda")
    xs = [x.requires_grad_() for x in (q, k, v)]
    out, lse, probs = flash_attn_func(*xs, causal=True, return_attn_probs=True,   # bottom-right, as the case
                                      bundle_dir=prebuilt_bundles)
    assert probs is None
    do = 0.5 * torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to("cuda", out.dtype)
    out.backward(do)
    _gate(q, k, v, None, None, _call(q, k, v, return_lse=True, **opts), [x.grad for x in xs], do,
          backward_runner("cuda", 0, prebuilt_bundles), (out.detach(), lse.detach()))


@cuda
def test_cuda_backward_queues_on_the_current_stream_and_never_waits(prebuilt_bundles):
    q, k, v, _, _, opts = _cuda_case("bf16-causal-gqa-deterministic", "cuda")

    def grads_of(xs):
        out = attention(*xs, bundle_dir=prebuilt_bundles, **opts)
        torch.cuda._sleep(2_000_000_000)    # ~1 s of GPU time queued ahead of dO and our backward
        do = torch.full_like(out, 0.5)      # written only after the sleep: read early, it is garbage
        grads = torch.autograd.grad(out, xs, do)
        return grads, not torch.cuda.current_stream().query()

    reference, _ = grads_of([x.clone().requires_grad_() for x in (q, k, v)])   # loads the bundle too
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):   # autograd runs the backward on the forward's stream: side
        grads, busy = grads_of([x.clone().requires_grad_() for x in (q, k, v)])
    torch.cuda.current_stream().wait_stream(side)
    assert busy        # a synchronisation anywhere in the call would have waited for the sleep
    for got, want in zip(grads, reference):
        assert torch.equal(got, want)   # deterministic mode: bitwise, unless a kernel read dO early


@cuda
def test_cuda_backward_takes_memory_from_torch_and_copies_nothing(prebuilt_bundles, monkeypatch):
    from fmha_mlir.runtime.cuda_executor import CudaExecutor

    _cuda_backward("bf16-causal-gqa", prebuilt_bundles)     # loaded once; what follows is the hot path
    for method in ("alloc", "upload", "download", "synchronize"):
        monkeypatch.setattr(CudaExecutor, method, lambda *a, m=method: pytest.fail(f"the hot path called {m}"))
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    q, *_ = _cuda_backward("bf16-causal-gqa", prebuilt_bundles)
    assert torch.isfinite(q.grad).all()
    # q, k, v, out, lse, dO, the gradients and our workspaces: all through torch's caching allocator
    assert torch.cuda.memory_stats()["allocation.all.allocated"] - before > 10


@cuda
def test_cuda_debug_mode_poisons_what_the_kernels_write(prebuilt_bundles, monkeypatch):
    from fmha_mlir.runtime.cuda_executor import CudaExecutor

    uploads = []
    upload = CudaExecutor.upload
    monkeypatch.setattr(CudaExecutor, "upload", lambda self, a, host: (uploads.append(host), upload(self, a, host)))
    q, k, v, _, _, opts = _cuda_case("bf16-causal-gqa", "cuda")
    xs = [x.requires_grad_() for x in (q, k, v)]
    attention(*xs, bundle_dir=prebuilt_bundles, debug=True, **opts).sum().backward()
    runner = backward_runner("cuda", 0, prebuilt_bundles, True)
    bundle = runner.bundle(_call(q, k, v, debug=True, **opts).spec)
    storage = {np.dtype(np.uint16): "bf16", np.dtype(np.float32): "f32"}
    assert len(uploads) == sum(b["role"] != "input" for b in bundle.buffers.values())   # outputs, workspaces
    assert all(np.isnan(from_storage(h, storage[h.dtype])).all() for h in uploads)
    assert all(torch.isfinite(x.grad).all() for x in xs)


# ---------------------------------------------------------------------------------------------------
# bad options: refused with the fix, before the forward runs, by every entry point

@pytest.mark.parametrize("kwargs, match", [
    (dict(layout="sbhd"), "layout: unknown layout 'sbhd'"),
    (dict(mask="diagonal"), "mask: unknown mask 'diagonal'"),
    (dict(mask=["top_left"]), "mask: unknown mask '<list>'"),
    (dict(bias="relative"), "bias: unknown bias 'relative'"),
    (dict(scale=-1.0), "scale: softmax scale must be a positive f32 value"),
    (dict(scale=0.0), "scale: must be a positive number"),
    (dict(softcap=1e-40), "softcap: must be 0 .off. or a positive f32 value"),
    (dict(deterministic=1), "deterministic: must be True or False"),
    (dict(forward="cudnn"), "forward: unknown forward 'cudnn'"),
    (dict(forward="flash"), "forward: 'flash' cannot serve this call"),
    (dict(bias=torch.zeros(5, 5)), r"bias: torch.float32 \(5, 5\) on cpu does not fit scores"),
    (dict(alibi_slopes=torch.zeros(3)), r"alibi_slopes: got torch.float32 \(3,\)"),
    (dict(bias="alibi", alibi_slopes=torch.full((2,), 0.5, requires_grad=True), deterministic=True),
     r"deterministic: d\(slopes\) is still summed by f32 atomics"),
])
def test_bad_options_are_refused_before_the_forward_runs(kwargs, match, monkeypatch):
    q, k, v = (x.requires_grad_() for x in _tensors((1, 2, 8, 32), (1, 2, 8, 32), torch.float32))
    _refused_before_the_forward(q, k, v, kwargs, match, monkeypatch)


def _refused_before_the_forward(q, k, v, kwargs, match, monkeypatch):
    for name, forward in FORWARDS.items():   # (a Call is made for a call that passes its checks)
        monkeypatch.setitem(FORWARDS, name, dataclasses.replace(forward, run=lambda *a: pytest.fail("the forward ran")))
    for _ in range(2):   # the second time from a warm cache: refusals are never cached
        with pytest.raises(SpecError, match=match):
            attention(q, k, v, **kwargs)


@pytest.mark.parametrize("dtype, hdim, device, kwargs, match", [
    # f32 runs on the warp body, which sums dK and dV by atomics
    (torch.float32, 32, "cpu", dict(deterministic=True), "deterministic: the warp body sums dK and dV"),
    (torch.bfloat16, 288, "cpu", {}, "hdim_q: 288 is not supported by the tiled body"),
    (torch.bfloat16, 32, "meta", {}, "device: our backward runs on CPU and CUDA tensors, not 'meta' ones"),
])
def test_what_no_body_computes_is_refused_before_the_forward_runs(dtype, hdim, device, kwargs, match, monkeypatch):
    q, k, v = (x.requires_grad_() for x in _tensors((1, 2, 8, hdim), (1, 2, 8, hdim), dtype, device))
    _refused_before_the_forward(q, k, v, kwargs, match, monkeypatch)


def test_fullgraph_compile_refuses_bad_options_with_the_eager_error():
    """A refusal raised while dynamo traces would reach the caller as dynamo's Unsupported; the op refuses
    when the graph runs, with the eager message."""
    q, k, v = (x.requires_grad_() for x in _tensors((1, 2, 8, 32), (1, 2, 8, 32), torch.float32))
    for kwargs, match in ((dict(layout="xyz"), "layout: unknown layout 'xyz'"),
                          (dict(softcap=1e-40), "softcap: must be 0"), (dict(mask="diagonal"), "unknown mask")):
        torch._dynamo.reset()
        compiled = torch.compile(lambda *xs: attention(*xs, **kwargs), backend="aot_eager", fullgraph=True)
        with pytest.raises(SpecError, match=match):
            compiled(q, k, v)


@pytest.mark.parametrize("text, match", [
    ("((", "options: cannot read the options string"),
    ("__import__('os')", "options: cannot read the options string"),
    ("('none', None)", "options: cannot read the options string"),
    ("('none', None, 0.0, None, False, 'xyz', False, None, 'auto', False, False)", "layout: unknown layout 'xyz'"),
    ("('none', None, 0.0, 'relative', False, 'bhsd', False, None, 'auto', False, False)",
     "bias: unknown bias 'relative'"),
    ("('none', None, 0.0, None, 'yes', 'bhsd', False, None, 'auto', False, False)", "dbias: must be True or False"),
    ("('none', None, 1e-40, None, False, 'bhsd', False, None, 'auto', False, False)", "softcap: must be 0"),
])
def test_the_ops_refuse_a_forged_options_string(text, match):
    q, k, v = _tensors((1, 2, 8, 32), (1, 2, 8, 32), torch.float32)
    with pytest.raises(SpecError, match=match):
        ops.attention_forward(q, k, v, None, None, None, text)
    with pytest.raises(SpecError, match=match):
        ops.attention_backward(q, q, k, v, q, q[..., 0], None, None, None, None, text)


def test_the_backward_op_refuses_out_dout_and_lse_that_are_not_the_forwards():
    q, k, v = _tensors((2, 2, 8, 32), (2, 2, 8, 32), torch.float32)
    text = _text()
    out, lse = ops.attention_forward(q, k, v, None, None, None, text)
    ops.attention_backward(out, q, k, v, out, lse, None, None, None, None, text)
    for args, match in (((out, out, lse[:1], None), r"lse: is torch.float32 \(1, 2, 8\)"),
                        ((out, out, lse.half(), None), "lse: is torch.float16"),
                        ((out, out, lse, lse[..., :3]), r"dlse: is torch.float32 \(2, 2, 3\)"),
                        ((out[:, :, :4], out, lse, None), r"grad_out: is torch.float32 \(2, 2, 4, 32\)")):
        grad_out, saved_out, saved_lse, dlse = args
        with pytest.raises(SpecError, match=match):
            ops.attention_backward(grad_out, q, k, v, saved_out, saved_lse, None, None, None, dlse, text)


def test_checks_are_cached_per_kind_of_call_and_told_apart_by_type():
    q, k, v = _tensors((1, 2, 8, 32), (1, 2, 8, 32), torch.bfloat16)   # (f32's warp body has no deterministic mode)
    assert _call(q, k, v, deterministic=True) is _call(q, k, v.clone(), deterministic=True)
    assert _call(q, k, v, scale=0.5) is not _call(q[:, :, :4], k, v, scale=0.5)
    assert parse(_text()) is parse(_text())
    attention(q, k, v, deterministic=True)
    with pytest.raises(SpecError, match="deterministic: must be True or False"):
        attention(q, k, v, deterministic=1)


def test_the_options_string_gives_back_the_same_options():
    for kw in ({}, dict(mask=parse(_text(mask="window:3,1")).mask, scale=0.1 + 0.2, softcap=1 / 3, bias="alibi",
                        dbias=True, layout="bshd", deterministic=True, bundle_dir="/a, 'b\"/c", forward="math",
                        debug=True)):
        options = AttentionOptions(**kw)
        assert parse(options.text()) == options and isinstance(options.text(), str)


def test_mismatched_heads_are_refused():
    q, k, v = _tensors((1, 3, 8, 32), (1, 2, 8, 32), torch.float32)
    with pytest.raises(SpecError, match="3 query heads are not a multiple of 2 key/value heads"):
        attention(q, k, v)


def test_default_scale_is_the_specs_one_over_sqrt_hdim():
    q, k, v = _tensors((1, 2, 8, 32), (1, 2, 8, 32), torch.float32)
    assert _call(q, k, v).spec.scale == 1 / 32 ** 0.5 and _call(q, k, v, scale=0.25).spec.scale == 0.25
    assert _call(q, k, v, scale=np.float64(0.25)).spec.scale == 0.25   # NumPy's repr is no Python literal


# ---------------------------------------------------------------------------------------------------
# transformers: attn_implementation="fmha_mlir" against torch's own (CPU, f32, tiny configs)

TINY = dict(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=2, max_position_embeddings=64)


def _model_grads(model, ids, mask):
    """(logits on the positions the mask keeps, parameter gradients) of a fixed loss over those positions."""
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids, attention_mask=mask).logits
    keep = (torch.ones_like(ids) if mask is None else mask).bool()
    weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(3))
    (logits * weights)[keep].sum().backward()
    return logits.detach()[keep], [p.grad for p in model.parameters()]


def _models_of(model_class, config, implementations):
    """One model per attention implementation, all with the first one's weights. Each has its own copy
    of the config: transformers sets the implementation on the config object, which a shared one would
    hand to every model built from it."""
    models = {name: model_class._from_config(copy.deepcopy(config), attn_implementation=name)
              for name in implementations}
    first = models[implementations[0]]
    for name, model in models.items():
        model.load_state_dict(first.state_dict())
        assert model.config._attn_implementation == name
    return models


def _matches_reference(config_class, model_class, reference, extra, prebuilt_bundles):
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, model_class):
        pytest.skip(f"this transformers has no {model_class}")
    from fmha_mlir.torch.transformers_api import register

    register(bundle_dir=prebuilt_bundles)
    config = getattr(transformers, config_class)(**TINY, **extra)
    torch.manual_seed(0)
    models = _models_of(getattr(transformers, model_class), config, (reference, "fmha_mlir"))
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    right_padded = torch.ones_like(ids)
    right_padded[1, 9:] = 0   # (right: every query row still sees a key)
    for mask in (None, right_padded):
        (want, want_grads), (got, got_grads) = (_model_grads(m, ids, mask) for m in models.values())
        # f32 end to end: our backward's sums run in other orders than autograd's (~1e-6 relative per
        # kernel); two layers and a loss over every logit keep it far below 1e-4, while a wrong mask, scale
        # or sink moves the logits by O(0.1)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_transformers_llama_matches_sdpa(prebuilt_bundles):
    _matches_reference("LlamaConfig", "LlamaForCausalLM", "sdpa", {}, prebuilt_bundles)


def test_transformers_gpt_oss_with_sinks_and_sliding_window_matches_eager(prebuilt_bundles):
    _matches_reference("GptOssConfig", "GptOssForCausalLM", "eager",
                       dict(head_dim=32, sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                            num_local_experts=2, num_experts_per_tok=1), prebuilt_bundles)


def test_transformers_under_autocast_attends_in_its_dtype_as_sdpa(monkeypatch):
    """Rotary embeddings hand q and k over in f32 beside a bf16 v under autocast: ours casts them to
    autocast's dtype as SDPA does, and gives SDPA's logits (the forward is torch's, on the same inputs)."""
    transformers = pytest.importorskip("transformers")
    from fmha_mlir.torch import transformers_api

    dtypes, ours = [], transformers_api.attention

    def attention(q, k, v, **kwargs):
        dtypes.append((q.dtype, k.dtype, v.dtype))
        return ours(q, k, v, **kwargs)

    monkeypatch.setattr(transformers_api, "attention", attention)
    transformers_api.register()
    torch.manual_seed(0)
    models = _models_of(transformers.LlamaForCausalLM, transformers.LlamaConfig(**TINY), ("sdpa", "fmha_mlir"))
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want, got = (m(input_ids=ids).logits for m in models.values())
    assert dtypes == [(torch.bfloat16,) * 3] * TINY["num_hidden_layers"]
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def transformers_bundle_builds():
    """(where, what) of the bundles the transformers tests load: f32 head dim 32, causal without a mask
    tensor, sdpa's boolean mask as a bias; gpt-oss's with sinks."""
    q = torch.empty((2, 2, 12, 32), device="meta")
    bias = torch.empty((2, 1, 12, 12), device="meta")
    for sinks in (None, torch.empty(2, device="meta")):
        yield f"transformers causal, sinks {sinks is not None}", (q, q, q), dict(mask="top_left", sinks=sinks)
        yield f"transformers masked, sinks {sinks is not None}", (q, q, q), dict(bias=bias, sinks=sinks)


# ---------------------------------------------------------------------------------------------------
# empty inputs: legal, nothing computed

@pytest.mark.parametrize("b, h, sq, sk", [(1, 2, 0, 5), (1, 2, 5, 0), (1, 2, 0, 0), (0, 2, 4, 4)])
def test_empty_inputs_give_empty_outputs_and_zero_gradients(b, h, sq, sk):
    q, k, v = (x.requires_grad_() for x in _tensors((b, h, sq, 32), (b, h, sk, 32), torch.float32))
    bias = torch.zeros(h, sq, sk, requires_grad=True)
    out = attention(q, k, v, bias=bias, mask="bottom_right")
    assert out.shape == (b, h, sq, 32) and not out.abs().sum()
    out.backward(torch.ones_like(out))
    for x in (q, k, v, bias):
        assert x.grad.shape == x.shape and not x.grad.abs().sum()


# ---------------------------------------------------------------------------------------------------
# every head dim a user may bring, on the GPU: multiples of 8 up to 256, two that are not, MLA's 192 / 128;
# f16 and bf16, with and without a causal mask (the CPU tests above cover each padding path once)

HEAD_DIM_SWEEP = [(dtype, d, dv, mask) for d, dv in [(h, h) for h in range(8, 257, 8)] + [(59, 59), (111, 111),
                                                                                        (192, 128)]
                  for dtype in (torch.float16, torch.bfloat16) for mask in ("none", "bottom_right")]


def _sweep_id(case) -> str:
    dtype, d, dv, mask = case
    return f"{str(dtype)[6:]}-d{d}" + (f"x{dv}" if dv != d else "") + ("-causal" if mask != "none" else "")


def _sweep_tensors(case, device):
    dtype, d, dv, mask = case
    return _tensors((1, 2, 70, d), (1, 2, 90, d), dtype, device=device, seed=d, dv=dv)


def head_dim_bundle_builds():
    for case in HEAD_DIM_SWEEP:
        yield _sweep_id(case), _sweep_tensors(case, "meta"), dict(mask=case[3])


@cuda
@pytest.mark.parametrize("case", HEAD_DIM_SWEEP, ids=map(_sweep_id, HEAD_DIM_SWEEP))
def test_cuda_every_head_dim_passes_the_gate(case, prebuilt_bundles):
    """Natively or padded (in the kernel, or by the op), a head dim is never refused and never wrong."""
    q, k, v = (x.requires_grad_() for x in _sweep_tensors(case, "cuda"))
    mask = case[3]
    out = attention(q, k, v, mask=mask, bundle_dir=prebuilt_bundles)
    do = (0.5 * torch.randn(out.shape, generator=torch.Generator().manual_seed(1))).to("cuda", out.dtype)
    out.backward(do)
    _gate(q, k, v, None, None, _call(q, k, v, mask=mask), [x.grad for x in (q, k, v)], do,
          backward_runner("cuda", 0, prebuilt_bundles))


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(f"usage: {sys.argv[0]} OUTPUT_DIR [PTXAS]   (builds the bundles the CUDA tests load; needs MLIR; "
                 "with a CUDA toolkit's ptxas they carry cubins, which the GPU loads without JIT)")
    from fmha_mlir.torch import prebuild

    ptxas = sys.argv[2] if len(sys.argv) == 3 else None
    for name, tensors, kwargs in [*prebuilt_bundle_builds(), *row_cuda_bundle_builds(), *ring_bundle_builds(),
                                  *transformers_bundle_builds()]:
        for arch in ("sm_90a", "sm_90"):   # the H200's own target (CUDA tests), the interpreter's (CPU tests)
            print(name, prebuild(sys.argv[1], *tensors, arch=arch, ptxas=ptxas, **kwargs))
    for name, tensors, kwargs in head_dim_bundle_builds():   # CUDA tests only
        print(name, prebuild(sys.argv[1], *tensors, arch="sm_90a", ptxas=ptxas, **kwargs))
