"""Small random-init transformers models trained with attn_implementation="fmha_mlir" or torch's:
train_compare.py's runs for a Llama-style and a gpt-oss-style model.

    python tools/train_hf.py build DIR --model gpt_oss              # here (MLIR): the sm_90a bundles
    python tools/train_compare.py run DIR --model gpt_oss --bundle-dir DIR    # on the GPU (train_compare.py)

The models: LlamaForCausalLM (rotary positions, RMSNorm, SwiGLU) and GptOssForCausalLM (sinks, sliding-window
layers alternating with full ones, grouped key/value heads, a mixture of experts), float32 weights under
bf16 autocast, trained as train_gpt.py's GPT (its train(): AdamW, the schedule, clipping, gpt_corpus's
sequences, the logs). The attentions, as train_compare.py names them: `fmha` is transformers_api's
"fmha_mlir" (torch's forward, our backward); `sdpa` is what transformers runs for the model itself:
"sdpa" for Llama, "eager" for gpt-oss (transformers refuses sdpa there: SDPA has no sinks); `reference`
is the exact attention: float32 softmax attention of the bf16-rounded q, k, v by autograd, its output
rounded once to bf16 (a yardstick, not a candidate).
"""
from __future__ import annotations

import argparse
import copy
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from train_gpt import Trainee, TrainConfig

NAME = "compared"   # the attention implementation every run registers: its own function and mask function
TORCH_IMPLEMENTATION = {"llama": "sdpa", "gpt_oss": "eager"}
MODEL_CLASS = {"llama": "LlamaForCausalLM", "gpt_oss": "GptOssForCausalLM"}


def labels(family: str) -> dict[str, str]:
    """The attentions a run of `family` may use, by train_compare's names: what its record calls them."""
    return {"reference": "exact f32 attention by autograd, rounded once to bf16",
            "sdpa": f'transformers "{TORCH_IMPLEMENTATION[family]}"',
            "fmha": 'transformers "fmha_mlir" (fmha_mlir.torch.transformers_api)'}


@dataclass(frozen=True)
class HFModelConfig:
    family: str = "llama"     # a key of MODEL_CLASS
    layers: int = 4
    width: int = 512
    heads: int = 8
    kv_heads: int = 8
    head_dim: int = 64
    seq: int = 512
    vocab: int = 256
    window: int = 128         # gpt_oss: its sliding-window layers' window (every other layer, from the first)
    experts: int = 4          # gpt_oss: experts per layer, 2 of them per token

    def problem(self) -> str | None:
        """Why this model cannot be built, with the fix (None: it can)."""
        if self.family not in MODEL_CLASS:
            return f"unknown model family {self.family!r}: use one of {', '.join(MODEL_CLASS)}"
        if self.kv_heads < 1 or self.heads % self.kv_heads:
            return f"--heads {self.heads} is not a multiple of --kv-heads {self.kv_heads}"
        return None

    def transformers_config(self):
        import transformers

        common = dict(vocab_size=self.vocab, hidden_size=self.width, num_hidden_layers=self.layers,
                      num_attention_heads=self.heads, num_key_value_heads=self.kv_heads, head_dim=self.head_dim,
                      attention_dropout=0.0, tie_word_embeddings=False)
        if self.family == "llama":
            return transformers.LlamaConfig(**common, intermediate_size=8 * self.width // 3 // 64 * 64,
                                            max_position_embeddings=self.seq)
        kinds = ("sliding_attention", "full_attention")
        return transformers.GptOssConfig(**common, intermediate_size=self.width, sliding_window=self.window,
                                         layer_types=[kinds[i % 2] for i in range(self.layers)],
                                         num_local_experts=self.experts, num_experts_per_tok=2)

    def trainee(self, t: TrainConfig) -> Trainee:
        return hf_trainee(self, t)


# Each family's model as train_compare's runs train it by default (gpt-oss: 4 query heads per key/value head).
MODELS = {"llama": HFModelConfig("llama"), "gpt_oss": HFModelConfig("gpt_oss", kv_heads=2)}


class Attending:
    """The attention function a run registers: t.attention's, keeping each call's q, k, v with their
    grads retained while `keep` is set (for step 0's gradient groups; the arithmetic is unchanged)."""

    def __init__(self, attend):
        self.attend, self.inputs, self.keep = attend, [], False

    def __call__(self, module, query, key, value, *args, **kwargs):
        if self.keep:
            for x in (query, key, value):
                x.retain_grad()
            self.inputs.append((query, key, value))
        return self.attend(module, query, key, value, *args, **kwargs)


def exact_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, s_aux=None, **kwargs):
    """The exact attention of what a bf16 attention reads: q, k, v rounded to autocast's dtype, then
    f32 softmax(scale Q K^T masked, with the sinks in each row's denominator) V, rounded once. The mask:
    sdpa's (boolean, True where a query sees a key) or, without one, top-left causal."""
    device = query.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else value.dtype
    with torch.autocast(device, enabled=False):
        q, k, v = (x.to(dtype).float() for x in (query, key, value))
        k, v = (x.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for x in (k, v))
        s = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scaling is None else scaling)
        seen = (attention_mask[..., :k.shape[2]] if attention_mask is not None else
                torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril())
        s = s.masked_fill(~seen, float("-inf"))
        if s_aux is not None:
            s = torch.cat([s, s_aux.float().view(1, -1, 1, 1).expand(*s.shape[:3], 1)], dim=-1)
        out = (torch.softmax(s, dim=-1)[..., :k.shape[2]] @ v).to(dtype)
    return out.transpose(1, 2).contiguous(), None


def _implementation(family: str, attention: str, bundle_dir: str | None):
    """(attention function, mask function) of a train_compare attention name for a model family."""
    import functools

    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from fmha_mlir.torch.transformers_api import fmha_mlir_attention

    sdpa_mask = ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]
    if attention == "fmha":
        return functools.partial(fmha_mlir_attention, bundle_dir=bundle_dir), sdpa_mask
    if attention == "reference":
        return exact_attention, sdpa_mask
    torch_name = TORCH_IMPLEMENTATION[family]
    if torch_name == "eager":   # the model's own eager function (gpt-oss's has the sinks)
        module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        return module.eager_attention_forward, ALL_MASK_ATTENTION_FUNCTIONS["eager"]
    return ALL_ATTENTION_FUNCTIONS[torch_name], sdpa_mask


def hf_trainee(m: HFModelConfig, t: TrainConfig) -> Trainee:
    """m's model calling t.attention through the implementation NAME, registered here: the latest
    trainee's attention serves every model made here (train() runs one at a time)."""
    import transformers
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    attend, mask = _implementation(m.family, t.attention, t.bundle_dir)
    attending = Attending(attend)
    AttentionInterface.register(NAME, attending)
    AttentionMaskInterface.register(NAME, mask)
    # its own config copy: transformers sets the implementation on the config object
    model = getattr(transformers, MODEL_CLASS[m.family])._from_config(copy.deepcopy(m.transformers_config()),
                                                                      attn_implementation=NAME)
    attentions = [layer.self_attn for layer in model.model.layers]

    def logits(module, tokens, keep):
        attending.keep = keep
        attending.inputs.clear()
        return module(input_ids=tokens, use_cache=False).logits

    def gradient_groups():
        groups = {"global": [p.grad for p in model.parameters()]}
        for i, (a, inputs) in enumerate(zip(attentions, attending.inputs)):
            groups.update({f"{name}{i}": [x.grad] for name, x in zip(("dq", "dk", "dv"), inputs)})
            groups[f"qkv{i}"] = [p.grad for proj in (a.q_proj, a.k_proj, a.v_proj) for p in proj.parameters()]
            groups[f"out{i}"] = [p.grad for p in a.o_proj.parameters()]
            if getattr(a, "sinks", None) is not None:
                groups[f"sinks{i}"] = [a.sinks.grad]
        return groups

    def projections():
        return [([p for proj in (a.q_proj, a.k_proj, a.v_proj) for p in proj.parameters()],
                 list(a.o_proj.parameters())) for a in attentions]

    return Trainee(model, labels(m.family)[t.attention], logits, gradient_groups, projections)


def describe(m: dict) -> str:
    """The report's line on a record's model (its HFModelConfig as a dict)."""
    text = (f"transformers {MODEL_CLASS[m['family']]}, random init, {m['layers']} layers, hidden {m['width']}, "
            f"{m['heads']} query heads of {m['head_dim']}, {m['kv_heads']} key/value heads")
    if m["family"] == "gpt_oss":
        text += (f", sinks, sliding window {m['window']} on layers 0, 2, ... (full attention on the others), "
                 f"{m['experts']} experts (2 per token)")
    return text + f", sequence {m['seq']}, vocab {m['vocab']}"


def attention_calls(m: HFModelConfig, batch: int):
    """(q, k, v, options) of each distinct attention call a training step of m makes with fmha_mlir
    (meta tensors, bf16 as autocast gives them): the bundles it loads."""
    q = torch.empty((batch, m.heads, m.seq, m.head_dim), dtype=torch.bfloat16, device="meta")
    kv = torch.empty((batch, m.kv_heads, m.seq, m.head_dim), dtype=torch.bfloat16, device="meta")
    options = dict(scale=m.head_dim ** -0.5)
    if m.family == "gpt_oss":
        options["sinks"] = torch.empty(m.heads, dtype=torch.float32, device="meta")
        window = torch.empty((batch, 1, m.seq, m.seq), dtype=torch.bfloat16, device="meta")   # sdpa's mask, a bias
        yield q, kv, kv, dict(options, bias=window)
    yield q, kv, kv, dict(options, mask="top_left")


def main(argv=None) -> int:
    import train_gpt

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    build = sub.add_parser("build", help="compile the sm_90a bundles the fmha runs load (needs MLIR)")
    build.add_argument("directory", type=Path)
    build.add_argument("--model", choices=tuple(MODELS), required=True)
    known, _ = build.parse_known_args(argv[1:] if argv is not None else sys.argv[2:])
    train_gpt.add_config_arguments(build, MODELS[known.model])
    build.set_defaults(device="cpu")   # (the bundles are built here, for the GPU the runs use)
    args = p.parse_args(argv)
    from fmha_mlir.torch import prebuild

    m, t = train_gpt.configs(build, args, "fmha", 0, MODELS[args.model])
    for q, k, v, options in attention_calls(m, t.batch):
        print(f"built {prebuild(args.directory, q, k, v, arch='sm_90a', **options)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
