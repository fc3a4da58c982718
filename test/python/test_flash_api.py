"""fmha_mlir.torch.flash_api: FlashAttention-2's functions on our attention (CPU tensors, the interpreter):
its mask conventions mapped onto ours, each function equal to the attention() call it stands for, the
packed forms, and what it refuses (flash_attn_varlen_func: test_torch_varlen.py)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fmha_mlir import SpecError  # noqa: E402
from fmha_mlir.torch import (attention, flash_attn_func, flash_attn_kvpacked_func,  # noqa: E402
                             flash_attn_qkvpacked_func)
from fmha_mlir.torch.flash_api import flash_mask  # noqa: E402


@pytest.mark.parametrize("causal, window, sq, sk, mask", [
    (False, (-1, -1), 5, 9, "none"),
    (True, (-1, -1), 5, 9, "bottom_right"),          # FlashAttention's causal is bottom-right
    (True, (3, 7), 5, 9, "window:3,0"),              # causal sets the right size to 0
    (False, (-1, 0), 5, 9, "bottom_right"),
    (False, (4, 2), 5, 9, "window:4,2"),
    (False, (9, 9), 5, 9, "none"),                   # sizes >= seqlen_k are unbounded
    (False, (-1, 3), 5, 9, "window:-1,3"),
    (True, (12, -1), 5, 9, "bottom_right"),
    (False, (2, -1), 5, 9, "window:2,-1"),
])
def test_flash_masks_are_ours(causal, window, sq, sk, mask):
    assert flash_mask(causal, window, sq, sk) == mask


def _bshd(b, sq, sk, hq, hkv, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g).to(dtype).requires_grad_()
            for shape in ((b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, d))]


def _run(fn, xs, **kw):
    """fn's outputs (out, or out and lse) and the gradients of a fixed loss through them, on fresh leaves."""
    xs = [x.detach().clone().requires_grad_() for x in xs]
    result = fn(*xs, **kw)
    outs = [r for r in (result if isinstance(result, tuple) else (result,)) if r is not None]
    g = torch.Generator().manual_seed(5)
    torch.autograd.backward(outs, [torch.randn(o.shape, generator=g).to(o.dtype) for o in outs])
    return [o.detach() for o in outs] + [x.grad for x in xs]


FLASH_CASES = {   # name: (flash_attn_func kwargs, the attention() kwargs they mean, (B, Sq, Sk, Hq, Hkv, d), dtype)
    "causal-short-queries": (dict(causal=True), dict(mask="bottom_right"), (1, 6, 11, 2, 2, 32), torch.bfloat16),
    "window-gqa": (dict(window_size=(3, 1)), dict(mask="window:3,1"), (1, 9, 9, 4, 2, 32), torch.float16),
    "softcap-scale": (dict(softcap=5.0, softmax_scale=0.3), dict(softcap=5.0, scale=0.3), (2, 5, 7, 2, 1, 32),
                      torch.float32),
    "alibi-lse": (dict(alibi_slopes=torch.tensor([0.2, 0.5]), causal=True, return_attn_probs=True),
                  dict(bias="alibi", alibi_slopes=torch.tensor([0.2, 0.5]), mask="bottom_right", return_lse=True),
                  (1, 7, 7, 2, 2, 32), torch.float32),
    "deterministic-d40": (dict(deterministic=True), dict(deterministic=True), (1, 5, 8, 2, 2, 40), torch.bfloat16),
}


@pytest.mark.parametrize("name", list(FLASH_CASES))
def test_flash_attn_func_is_the_attention_call_it_stands_for(name):
    flash_kw, ours, (b, sq, sk, hq, hkv, d), dtype = FLASH_CASES[name]
    xs = _bshd(b, sq, sk, hq, hkv, d, dtype)
    result = flash_attn_func(*[x.detach() for x in xs], **flash_kw)
    if flash_kw.get("return_attn_probs"):
        assert len(result) == 3 and result[2] is None and result[1].shape == (b, hq, sq)
    else:
        assert isinstance(result, torch.Tensor) and result.shape == (b, sq, hq, d)
    got, want = _run(flash_attn_func, xs, **flash_kw), _run(attention, xs, layout="bshd", **ours)
    assert len(got) == len(want)
    for g, w in zip(got, want):   # the same forward and backward: bitwise
        assert torch.equal(g, w)


def test_packed_forms_are_flash_attn_func_on_their_views():
    q, k, v = _bshd(1, 7, 7, 2, 2, 32, torch.bfloat16, seed=2)
    qkv = torch.stack([q, k, v], dim=2).detach()
    kv = torch.stack([k, v], dim=2).detach()
    want = _run(flash_attn_func, [q, k, v], causal=True)
    got = _run(flash_attn_qkvpacked_func, [qkv], causal=True)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], torch.stack(want[1:], dim=2))
    got = _run(lambda q_, kv_, **kw: flash_attn_kvpacked_func(q_, kv_, **kw), [q, kv], causal=True)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(got[2], torch.stack(want[2:], dim=2))


def test_what_we_do_not_do_is_refused_by_name():
    q, k, v = (x.detach() for x in _bshd(1, 4, 4, 2, 2, 32, torch.float32))
    with pytest.raises(SpecError, match="dropout_p: dropout is not implemented"):
        flash_attn_func(q, k, v, dropout_p=0.1)
    with pytest.raises(SpecError, match="window_size: must be a pair of ints"):
        flash_attn_func(q, k, v, window_size=3)
