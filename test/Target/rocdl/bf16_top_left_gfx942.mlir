// bf16, causal top-left, hdim 128, MHA on gfx942: hardware float atomics, v_exp_f32, DPP reductions.
// RUN: fmha-compile --dtype bf16 --mask top_left --hdim 128 --target gfx942 --body warp --emit isa | FileCheck %s
// RUN: fmha-compile --dtype bf16 --mask top_left --hdim 128 --target gfx942 --body warp --emit isa | FileCheck %s --check-prefix=NEVER
// RUN: fmha-compile --dtype bf16 --mask top_left --hdim 128 --target gfx942 --body warp --emit metadata | FileCheck %s --check-prefix=META

// dot_do_o: a row of 128 bf16 is 16 lanes of 16 bytes, so D is a 16-lane sum: the four in-row
// DPP steps and nothing that crosses rows.
// CHECK-LABEL: fmha_bwd_bf16_d128x128_g1_tl_warp64_dot_do_o:
// CHECK: v_add_f32_dpp {{.*}} quad_perm:[1,0,3,2]
// CHECK: v_add_f32_dpp {{.*}} quad_perm:[2,3,0,1]
// CHECK: v_add_f32_dpp {{.*}} row_half_mirror
// CHECK: row_mirror
// CHECK-NOT: row_bcast
// CHECK-NOT: v_readlane_b32
// CHECK: global_store_dword
// The warp body's sums run over the whole wave of 64.
// CHECK-LABEL: fmha_bwd_bf16_d128x128_g1_tl_warp64_dq_dk_dv:
// CHECK: v_mov_b32_dpp {{.*}} row_bcast:15 row_mask:0xa
// CHECK: v_mov_b32_dpp {{.*}} row_bcast:31 row_mask:0xc
// CHECK: v_readlane_b32 {{.*}}, 63
// CHECK: v_exp_f32
// CHECK: global_atomic_add_f32
// CHECK: global_atomic_add_f32
// CHECK-LABEL: fmha_bwd_bf16_d128x128_g1_tl_warp64_convert_dk:
// CHECK-LABEL: fmha_bwd_bf16_d128x128_g1_tl_warp64_convert_dv:

// No compare-and-swap loop, no LDS shuffles, no scratch.
// NEVER-NOT: global_atomic_cmpswap
// NEVER-NOT: ds_bpermute
// NEVER-NOT: ds_swizzle
// NEVER-NOT: scratch_

// META: "arch": "gfx942"
// META-LABEL: "fmha_bwd_bf16_d128x128_g1_tl_warp64_dot_do_o": {
// META: "private_segment_fixed_size": 0,
// META: "wavefront_size": 64
// META-LABEL: "fmha_bwd_bf16_d128x128_g1_tl_warp64_dq_dk_dv": {
// META: "max_flat_workgroup_size": 64,
// META: "private_segment_fixed_size": 0,
// META: "wavefront_size": 64
// META: "mach": "gfx942"
