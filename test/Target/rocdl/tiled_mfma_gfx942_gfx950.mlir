// The tiled body on MFMA (passes/flash_bwd.py on passes/mfma_atom.py), table configs (fmha_mlir/bodies.py): the step loop
// of dq_dk_dv holds the MFMAs of all five products and the scalar f32 dQ atomics; nothing spills, no
// compare-and-swap loop; 8 waves of 64; the LDS is the launch plan's dynamic size.
// RUN: fmha-compile --dtype bf16 --mask bottom_right --hdim 128 --gqa 4 --target gfx942 --emit isa > %t.gfx942.s
// RUN: fmha-compile --dtype f16 --mask window:16,0 --hdim 64 --target gfx950 --emit isa > %t.gfx950.s
// RUN: FileCheck %s --check-prefix=GFX942 < %t.gfx942.s
// RUN: FileCheck %s --check-prefix=GFX950 < %t.gfx950.s
// RUN: %python -m fmha_mlir.tools.amd_static_report --loops %t.gfx942.s | FileCheck %s --check-prefix=LOOPS942
// RUN: %python -m fmha_mlir.tools.amd_static_report --loops %t.gfx950.s | FileCheck %s --check-prefix=LOOPS950
// RUN: FileCheck %s --check-prefix=NEVER < %t.gfx942.s
// RUN: FileCheck %s --check-prefix=NEVER < %t.gfx950.s
// RUN: fmha-compile --dtype bf16 --mask bottom_right --hdim 128 --gqa 4 --target gfx942 --emit metadata | FileCheck %s --check-prefix=META
// RUN: fmha-compile --dtype bf16 --mask bottom_right --hdim 128 --gqa 4 --target gfx942 --emit manifest | FileCheck %s --check-prefix=PLAN
// RUN: fmha-compile --dtype f16 --mask window:16,0 --hdim 64 --target gfx950 --emit manifest | FileCheck %s --check-prefix=PLAN950

// The innermost loop of each kernel (tools/amd_static_report.py --loops): dq_dk_dv's one loop is the
// step loop, with 40 MFMAs per wave and step: 2 bm bn (3 hdim_q + 2 hdim_v) / (8 waves x 2 M N K).
// LOOPS942-LABEL: {{^}}fmha_bwd_bf16_d128x128_g4_br_tiled_m32n64w8s1_{{[0-9a-f]+}}_dot_do_o: no loop
// LOOPS942-NEXT:  {{^}}fmha_bwd_bf16_d128x128_g4_br_tiled_m32n64w8s1_{{[0-9a-f]+}}_dq_dk_dv: loop .LBB{{[0-9_]+}}: {{[0-9]+}} instructions, 40 mfma, {{[0-9]+}} global
// LOOPS942-NEXT:  {{^}}fmha_bwd_bf16_d128x128_g4_br_tiled_m32n64w8s1_{{[0-9a-f]+}}_convert_dq: no loop
// LOOPS950:       {{^}}fmha_bwd_f16_d64x64_g1_win16_0_tiled_m64n128w8s1_{{[0-9a-f]+}}_dq_dk_dv: loop .LBB{{[0-9_]+}}: {{[0-9]+}} instructions, 40 mfma,

// gfx942, d128: 32 queries x 64 keys per step, 16x16x16 (the gfx942 table row): 16-byte buffer loads into
// LDS (rows padded by 8 bytes are 8-byte aligned: each 16-byte copy is stored as one ds_write2_b64),
// the 16x16x16 MFMA, scalar f32 dQ atomics.
// GFX942-LABEL: fmha_bwd_bf16_d128x128_g4_br_tiled_m32n64w8s1_{{[0-9a-f]+}}_dq_dk_dv:
// GFX942:       buffer_load_dwordx4
// GFX942:       ds_write2_b64
// GFX942:       v_mfma_f32_16x16x16_bf16
// GFX942:       global_atomic_add_f32
// GFX942-LABEL: fmha_bwd_bf16_d128x128_g4_br_tiled_m32n64w8s1_{{[0-9a-f]+}}_convert_dq:

// gfx950, d64: the double-K 16x16x32, operands read 16 bytes at a time.
// GFX950-LABEL: fmha_bwd_f16_d64x64_g1_win16_0_tiled_m64n128w8s1_{{[0-9a-f]+}}_dq_dk_dv:
// GFX950:       ds_read_b128
// GFX950:       v_mfma_f32_16x16x32_f16
// GFX950:       global_atomic_add_f32

// NEVER-NOT: global_atomic_cmpswap
// NEVER-NOT: scratch_
// NEVER-NOT: buffer_store

// META-LABEL: "fmha_bwd_bf16_d128x128_g4_br_tiled_m32n64w8s1_{{[0-9a-f]+}}_dq_dk_dv": {
// META:       "group_segment_fixed_size": 0,
// META:       "max_flat_workgroup_size": 512,
// META:       "private_segment_fixed_size": 0,
// META:       "vgpr_spill_count": 0,
// META:       "wavefront_size": 64

// K, V [64 x 128], Q, dO [32 x 128], P^T, dS^T [64 x 32] bf16 with rows padded by 4 elements, LSE and D
// [32] f32, 128-byte aligned.
// PLAN:      "kernel": "fmha_bwd_bf16_d128x128_g4_br_tiled_m32n64w8s1_{{[0-9a-f]+}}_dq_dk_dv",
// PLAN:      "shared_bytes": 60160
// PLAN950:   "kernel": "fmha_bwd_f16_d64x64_g1_win16_0_tiled_m64n128w8s1_{{[0-9a-f]+}}_dq_dk_dv",
// PLAN950:   "shared_bytes": 92672
