"""L2 sections of heads (config.l2_section_bytes): the tiled body's work-groups renumbered so that the ones
running at once share a few heads' Q, dO and dq_acc in L2, key block major inside a section. The mapping
is checked on integers (every work-group once, each head's key blocks in order, few heads at once), then
run by the interpreter against the oracle, with the producer and with deterministic turns; what cannot
take sections is refused."""
from __future__ import annotations

import dataclasses
import itertools

import pytest

from fmha_mlir.bodies import check_config, choose_config, section_block_ids, section_heads
from fmha_mlir.bodies.wgmma import WGMMA_TABLE
from fmha_mlir.errors import SpecError
from fmha_mlir.problem import ProblemSize
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import TARGETS
from test_wgmma_body import ONE_WARPGROUP, compiled_variant, run_variant


@pytest.mark.parametrize("heads,key_blocks,section", itertools.product(range(1, 8), range(1, 5), range(1, 9)))
def test_sections_number_every_work_group_once_with_each_heads_key_blocks_in_order(heads, key_blocks, section):
    order = [section_block_ids(linear, heads, key_blocks, section) for linear in range(heads * key_blocks)]
    assert sorted(order) == sorted(itertools.product(range(key_blocks), range(heads)))
    for head in range(heads):   # deterministic turns wait only for key blocks dispatched before
        assert [block for block, h in order if h == head] == list(range(key_blocks))
    # The work-groups of one section: its heads only, key block major.
    width = min(section, heads)
    first = order[:width * key_blocks]
    assert {h for _, h in first} == set(range(width))
    assert first == [(block, h) for block in range(key_blocks) for h in range(width)]


def test_a_section_holds_the_heads_whose_rows_fit_its_bytes():
    spec = AttentionBwdSpec("bf16", 192, gqa_ratio=2)
    row = 2 * (2 * (192 + 192) + 4 * (192 + 2))   # Q and dO in bf16, dq_acc in f32, LSE and D, two query heads
    config = dataclasses.replace(WGMMA_TABLE[256], l2_section_bytes=5 * 2048 * row + 7)
    assert section_heads(spec, config, 2048) == 5
    assert section_heads(spec, config, 100_000) == 1   # a head larger than the section still takes one


SECTIONS_OF_4 = dataclasses.replace(ONE_WARPGROUP, l2_section_bytes=4 * 90 * (2 * 128 + 4 * 66))
PRODUCED_SECTIONS_OF_3 = dataclasses.replace(ONE_WARPGROUP, producer=True, dq_bulk=True,
                                             l2_section_bytes=3 * 90 * 2 * (2 * 128 + 4 * 66))


@pytest.mark.parametrize("spec,size,config", [
    (AttentionBwdSpec("bf16", 64), ProblemSize(2, 3, 90, 200), SECTIONS_OF_4),
    (AttentionBwdSpec("f16", 64, mask=Mask("causal_bottom_right"), gqa_ratio=2), ProblemSize(2, 4, 90, 150),
     PRODUCED_SECTIONS_OF_3),
], ids=["six-heads-in-4-and-2", "producer-br-gqa2-four-kv-heads-in-3-and-1"])
def test_sectioned_work_groups_match_the_oracle(spec, size, config):
    heads = size.batch * size.heads_q // spec.gqa_ratio
    assert heads % section_heads(spec, config, size.seqlen_q) != 0   # a last section with fewer heads
    sectioned = run_variant(spec, size, config).isa
    plain = compiled_variant(spec, size, dataclasses.replace(config, l2_section_bytes=0))[0].isa
    assert sectioned.count("div.") > plain.count("div.")   # the renumbering is built, once per work-group


def test_deterministic_turns_hold_in_sections():
    from test_warp_roles import CAUSAL_GQA_TURNS, test_deterministic_dq_takes_turns_and_is_bitwise_in_every_start_order

    spec, size = CAUSAL_GQA_TURNS
    for order in ("last_to_first", "first_to_last"):   # one head a section: its key blocks in turn order
        config = dataclasses.replace(WGMMA_TABLE[64], l2_section_bytes=1, turn_order=order)
        test_deterministic_dq_takes_turns_and_is_bitwise_in_every_start_order(spec, size, config)


@pytest.mark.parametrize("change,words", [
    ({"l2_section_bytes": -1}, "non-negative"),
    ({"l2_section_bytes": 1 << 20, "grid_order": "keys_inner"}, "keys_outer"),
])
def test_sections_that_cannot_be_built_are_refused(change, words):
    config = dataclasses.replace(ONE_WARPGROUP, **change)
    with pytest.raises(SpecError, match=words):
        check_config(AttentionBwdSpec("bf16", 64), TARGETS["sm_90a"], config)


def test_packed_sequences_are_refused_sections_and_the_table_drops_them():
    spec = AttentionBwdSpec("bf16", 64, varlen=True)
    with pytest.raises(SpecError, match="l2_section_bytes"):
        check_config(spec, TARGETS["sm_90a"], dataclasses.replace(ONE_WARPGROUP, l2_section_bytes=1 << 20))
    packed = choose_config(AttentionBwdSpec("bf16", 128, mask=Mask("causal_bottom_right"), varlen=True),
                           TARGETS["sm_90a"])
    assert packed.instruction == "wgmma.m64n64k16" and packed.l2_section_bytes == 0


@pytest.mark.parametrize("spec,sections", [
    (AttentionBwdSpec("bf16", 64), 16 << 20),
    (AttentionBwdSpec("bf16", 128, mask=Mask("causal_top_left")), 16 << 20),
    (AttentionBwdSpec("f16", 192), 16 << 20),
    (AttentionBwdSpec("bf16", 128, gqa_ratio=4), 16 << 20),
    (AttentionBwdSpec("bf16", 128, mask=Mask("causal_top_left"), gqa_ratio=4), 0),
])
def test_the_table_takes_sections_where_they_were_measured_faster(spec, sections):
    """16 MiB on sm_90a's wgmma rows (+6% to +79% on the H100), none under a causal mask with GQA (-7%);
    sm_90's mma.sync table has none (not measured)."""
    assert choose_config(spec, TARGETS["sm_90a"]).l2_section_bytes == sections
    assert choose_config(spec, TARGETS["sm_90"]).l2_section_bytes == 0
