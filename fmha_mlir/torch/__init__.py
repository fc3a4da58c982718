"""fmha_mlir.torch: attention for PyTorch whose forward is torch's own fused attention and whose
backward is ours (torch.library custom ops; eager and torch.compile(fullgraph=True)).

    from fmha_mlir.torch import attention
    out = attention(q, k, v, mask="bottom_right", layout="bshd")
    out.sum().backward()
    out = attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, mask="bottom_right")

Needs torch (pip install 'fmha-mlir[torch]'); the rest of fmha_mlir does not.
"""
from .attention import attention, attention_varlen
from .backward import prebuild
from .flash_api import flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func, flash_attn_varlen_func
from .forwards import FORWARDS
from .ring import ring_attention, zigzag_shard, zigzag_unshard

__all__ = ["attention", "attention_varlen", "prebuild", "FORWARDS", "flash_attn_func", "flash_attn_kvpacked_func",
           "flash_attn_qkvpacked_func", "flash_attn_varlen_func", "ring_attention", "zigzag_shard", "zigzag_unshard"]
