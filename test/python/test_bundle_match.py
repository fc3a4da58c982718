"""A prebuilt bundle runs only for the call it was made for: a manifest whose spec, arch or config differs
from the call's is refused, naming the field and both values (never wrong gradients without a word)."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))  # test_runtime's stand-in bundles, whatever the import mode

from fmha_mlir.api import AttentionBackward, bundle_path, load_bundle  # noqa: E402
from fmha_mlir.bodies import choose_config  # noqa: E402
from fmha_mlir.errors import SpecError  # noqa: E402
from fmha_mlir.kernel_config import INSTRUCTIONS, KernelConfig, TiledConfig, WarpConfig  # noqa: E402
from fmha_mlir.runtime.bundle import mismatches  # noqa: E402
from fmha_mlir.spec import DTYPES, AttentionBwdSpec, Mask  # noqa: E402
from fmha_mlir.target import TARGETS, get_target  # noqa: E402
from test_runtime import attention_bundle, attention_manifest  # noqa: E402

MASKS = (Mask(), Mask("causal_top_left"), Mask("causal_bottom_right"), Mask("sliding_window", 8, 0))
BIASES = (("none", False, False), ("elementwise", False, False), ("elementwise", True, False),
          ("alibi", False, False), ("alibi", False, True), ("alibi", True, True))


@st.composite
def specs(draw) -> AttentionBwdSpec:
    """Valid specs, each field drawn where the others allow it (spec.reasons() is the judge)."""
    bias, dbias, slopes = draw(st.sampled_from(BIASES))
    dtype = draw(st.sampled_from(DTYPES))
    grad_accum = draw(st.sampled_from(("f32", "bf16"))) if dtype == "bf16" else "f32"
    deterministic = grad_accum == "f32" and not (dbias and slopes) and draw(st.booleans())
    varlen = not (deterministic or bias == "elementwise" or slopes or grad_accum == "bf16") and draw(st.booleans())
    spec = AttentionBwdSpec(
        dtype=dtype, hdim_q=draw(st.sampled_from((64, 128))), hdim_v=draw(st.sampled_from((0, 64))),
        gqa_ratio=draw(st.sampled_from((1, 2))), mask=draw(st.sampled_from(MASKS)),
        scale=draw(st.sampled_from((0.0, 0.1, 0.125))), softcap=draw(st.sampled_from((0.0, 30.0, 50.0))),
        bias=bias, dbias=dbias, alibi_slopes=slopes, deterministic=deterministic, grad_accum=grad_accum,
        varlen=varlen)
    assert spec.reasons() == []
    return spec


def stand_in(spec: AttentionBwdSpec, arch: str, config: KernelConfig):
    manifest = attention_manifest(spec, arch)
    manifest["config"] = config.to_json()
    return attention_bundle(manifest)


def filed_under(directory: Path, bundle, spec: AttentionBwdSpec, arch: str, config: KernelConfig) -> None:
    """`bundle` saved where a call for (spec, arch, config) looks for its prebuilt bundle."""
    bundle.save(bundle_path(directory, spec, arch, config=config))


def differing_spec_fields(a: AttentionBwdSpec, b: AttentionBwdSpec) -> set[str]:
    return {f"spec.{f.name}" for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(made=specs(), asked=specs(), made_arch=st.sampled_from(tuple(TARGETS)),
       asked_arch=st.sampled_from(tuple(TARGETS)))
def test_every_differing_spec_field_and_arch_is_refused_naming_both(tmp_path_factory, made, asked, made_arch,
                                                                    asked_arch):
    config = WarpConfig(wave_size=TARGETS[asked_arch].wave_size)
    directory = tmp_path_factory.mktemp("bundles")
    filed_under(directory, stand_in(made, made_arch, WarpConfig(wave_size=TARGETS[made_arch].wave_size)),
                asked, asked_arch, config)
    expected = differing_spec_fields(made, asked) | ({"arch"} if made_arch != asked_arch else set())
    if TARGETS[made_arch].wave_size != TARGETS[asked_arch].wave_size:
        expected.add("config.wave_size")
    if not expected:
        assert load_bundle(directory, asked, asked_arch, config).spec == asked
        return
    with pytest.raises(SpecError) as refused:
        load_bundle(directory, asked, asked_arch, config)
    assert {r.field for r in refused.value.reasons} == expected
    for reason in refused.value.reasons:
        _, made_value, asked_value = next(m for m in mismatches((made, made_arch, WarpConfig(
            wave_size=TARGETS[made_arch].wave_size)), (asked, asked_arch, config)) if m[0] == reason.field)
        assert f"compiled for {made_value}; this call needs {asked_value}" in reason.message
        assert str(bundle_path(directory, asked, asked_arch, config=config)) in reason.message


CONFIG_CHANGES = {"body": "warp", "wave_size": 64, "block_m": 64, "block_n": 128, "warps": 4, "stages": 2,
                  "instruction": INSTRUCTIONS[-1], "sdp_warps": (4, 1), "dkv_warps": (4, 1), "dq_warps": (2, 2),
                  "p_in_registers": True, "swizzle": "xor", "grid_order": "keys_inner", "split_tail_loop": True,
                  "producer": True, "dq_bulk": True, "turn_order": "last_to_first", "turn_overlap": True,
                  "dq_fragment": False, "l2_section_bytes": 1 << 20, "producer_registers": 40, "dkv_tma_store": True,
                  "dq_convert_rows": 256}


def test_every_config_field_has_a_change_below():
    assert set(CONFIG_CHANGES) == {"body"} | {f.name for f in dataclasses.fields(TiledConfig)}


@pytest.mark.parametrize("name", sorted(set(CONFIG_CHANGES) - {"body"}))
def test_every_differing_config_field_is_refused_naming_both(name):
    made = TiledConfig(wave_size=32, block_m=32, block_n=64, warps=8, instruction="mma.m16n8k16",
                       sdp_warps=(8, 1), dkv_warps=(8, 1), dq_warps=(4, 2))
    asked = dataclasses.replace(made, **{name: CONFIG_CHANGES[name]})
    assert getattr(made, name) != getattr(asked, name)
    spec = AttentionBwdSpec()
    assert mismatches((spec, "sm_90", made), (spec, "sm_90", asked)) == [
        (f"config.{name}", repr(getattr(made, name)), repr(CONFIG_CHANGES[name]))]


def test_a_config_of_another_body_is_refused_naming_the_body_and_the_fields_only_one_has():
    made = TiledConfig(wave_size=32, block_m=32, block_n=64, warps=8, instruction="mma.m16n8k16",
                       sdp_warps=(8, 1), dkv_warps=(8, 1), dq_warps=(4, 2))
    found = mismatches((AttentionBwdSpec(), "sm_90", made), (AttentionBwdSpec(), "sm_90", WarpConfig()))
    assert found[0] == ("config.body", "'tiled'", "'warp'")
    assert ("config.block_m", "32", "None") in found and "config.wave_size" not in [m[0] for m in found]


def test_floats_compare_as_the_f32_the_kernels_hold():
    made = AttentionBwdSpec(scale=0.1, softcap=30.0)
    config = WarpConfig()
    assert mismatches((made, "gfx942", config), (dataclasses.replace(made, scale=float(np.float32(0.1))), "gfx942",
                                                 config)) == []
    assert mismatches((made, "gfx942", config), (dataclasses.replace(made, scale=0.1000001), "gfx942", config)) == [
        ("spec.scale", "0.1", "0.1000001")]


def _arrays(spec: AttentionBwdSpec):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 8, spec.hdim_q)).astype(np.float16) for _ in range(3))
    return q, k, v, v.copy(), v.copy(), np.zeros((1, 1, 8), np.float32)


@pytest.mark.parametrize("foreign", [
    dict(softcap=30.0), dict(mask=Mask("causal_top_left")), dict(scale=0.5),
], ids=["softcap", "mask", "scale"])
def test_the_api_refuses_a_foreign_bundle_filed_under_the_calls_name(tmp_path, foreign):
    asked = AttentionBwdSpec(dtype="f16", hdim_q=64)
    config = choose_config(asked, get_target("gfx942"))
    filed_under(tmp_path, stand_in(dataclasses.replace(asked, **foreign), "gfx942", config), asked, "gfx942", config)
    runner = AttentionBackward(executor="cpu", arch="gfx942", bundle_dir=str(tmp_path))
    with pytest.raises(SpecError, match=f"spec.{next(iter(foreign))}: the bundle .* was compiled for"):
        runner(*_arrays(asked))


@pytest.mark.parametrize("other", ["gfx950", "sm_90"])
def test_the_api_refuses_another_chips_bundle(tmp_path, other):
    asked = AttentionBwdSpec(dtype="f16", hdim_q=64)
    config = choose_config(asked, get_target("gfx942"))
    made_config = dataclasses.replace(config, wave_size=TARGETS[other].wave_size)
    filed_under(tmp_path, stand_in(asked, other, made_config), asked, "gfx942", config)
    runner = AttentionBackward(executor="cpu", arch="gfx942", bundle_dir=str(tmp_path))
    with pytest.raises(SpecError, match=f"arch: the bundle .* was compiled for '{other}'; this call needs 'gfx942'"):
        runner(*_arrays(asked))
