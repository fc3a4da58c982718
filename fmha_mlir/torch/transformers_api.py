"""Our attention as a Hugging Face transformers attention implementation:

    from fmha_mlir.torch.transformers_api import register
    register()                                          # once
    model = AutoModelForCausalLM.from_config(config, attn_implementation="fmha_mlir")

register() adds the attention function to transformers' AttentionInterface and, for its masks, sdpa's
mask function to AttentionMaskInterface (a name without one gets no mask at all, padding included).
The models that call the standard attention signature are served: causal (no mask tensor: top-left, as
sdpa's is_causal), padding and sliding-window masks (sdpa's boolean mask, as an additive bias), softcap,
scaling, GQA, and gpt-oss's sinks (s_aux). Dropout during training is refused (SpecError). Under autocast
q, k and v are cast to its dtype, as SDPA's are (rotary embeddings hand q and k over in f32).
"""
from __future__ import annotations

import functools

import torch

from ..errors import Reason, SpecError
from .attention import attention

NAME = "fmha_mlir"


def register(name: str = NAME, *, bundle_dir=None) -> None:
    """Register the attention and its mask function with transformers under `name`; bundle_dir: prebuilt
    bundles (attention()'s)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(name, functools.partial(fmha_mlir_attention, bundle_dir=bundle_dir))
    AttentionMaskInterface.register(name, sdpa_mask)


def fmha_mlir_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, softcap=None,
                        s_aux=None, bundle_dir=None, **kwargs):
    """transformers' attention signature: query [B, H, Sq, D], key, value [B, H_kv, Sk, D]; returns
    (out [B, Sq, H, D], None: no attention weights)."""
    if dropout and module.training:
        raise SpecError([Reason("dropout", f"attention dropout is not implemented (got {dropout!r})",
                                "set attention_dropout=0 in the config")])
    device = query.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        query, key, value = (x.to(dtype) for x in (query, key, value))
    bias, mask = None, "none"
    if attention_mask is not None:   # sdpa's mask: bool, True where a query sees a key (or additive)
        seen = attention_mask[:, :, :, :key.shape[2]]
        bias = (torch.zeros(seen.shape, dtype=query.dtype, device=query.device).masked_fill(~seen, float("-inf"))
                if seen.dtype == torch.bool else seen.to(query.dtype))
    elif getattr(module, "is_causal", True) and query.shape[2] > 1:
        mask = "top_left"
    out = attention(query, key, value, mask=mask, scale=scaling, bias=bias, softcap=softcap or 0.0, sinks=s_aux,
                    bundle_dir=bundle_dir)
    return out.transpose(1, 2).contiguous(), None
