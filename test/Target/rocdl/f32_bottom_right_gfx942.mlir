// f32, causal bottom-right, hdim 256 (4 elements per lane), GQA 4 on gfx942: dK / dV accumulate straight
// into the outputs, so there are no convert kernels.
// RUN: fmha-compile --dtype f32 --mask bottom_right --hdim 256 --gqa 4 --target gfx942 --emit isa | FileCheck %s
// RUN: fmha-compile --dtype f32 --mask bottom_right --hdim 256 --gqa 4 --target gfx942 --emit isa | FileCheck %s --check-prefix=NEVER
// RUN: fmha-compile --dtype f32 --mask bottom_right --hdim 256 --gqa 4 --target gfx942 --emit metadata | FileCheck %s --check-prefix=META

// CHECK-LABEL: fmha_bwd_f32_d256x256_g4_br_warp64_dot_do_o:
// CHECK-LABEL: fmha_bwd_f32_d256x256_g4_br_warp64_dq_dk_dv:
// CHECK: v_exp_f32
// CHECK-COUNT-8: global_atomic_add_f32
// CHECK-NOT: global_atomic
// CHECK: s_endpgm

// NEVER-NOT: global_atomic_cmpswap
// NEVER-NOT: convert_dk
// NEVER-NOT: scratch_

// META-LABEL: "fmha_bwd_f32_d256x256_g4_br_warp64_dq_dk_dv": {
// META: "private_segment_fixed_size": 0,
// META: "wavefront_size": 64
