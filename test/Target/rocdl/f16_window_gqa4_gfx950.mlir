// f16, sliding window (16, 0), hdim 64, GQA 4 on gfx950.
// RUN: fmha-compile --dtype f16 --mask window:16,0 --hdim 64 --gqa 4 --target gfx950 --body warp --emit isa | FileCheck %s
// RUN: fmha-compile --dtype f16 --mask window:16,0 --hdim 64 --gqa 4 --target gfx950 --body warp --emit isa | FileCheck %s --check-prefix=NEVER
// RUN: fmha-compile --dtype f16 --mask window:16,0 --hdim 64 --gqa 4 --target gfx950 --body warp --emit metadata | FileCheck %s --check-prefix=META

// CHECK: .amdgcn_target "amdgcn-amd-amdhsa-{{.*}}gfx950"
// CHECK-LABEL: fmha_bwd_f16_d64x64_g4_win16_0_warp64_dq_dk_dv:
// CHECK: v_{{add_f32|mov_b32}}_dpp {{.*}} row_mirror
// CHECK: v_readlane_b32 {{.*}}, 63
// CHECK: v_exp_f32
// CHECK: global_atomic_add_f32
// CHECK-LABEL: fmha_bwd_f16_d64x64_g4_win16_0_warp64_convert_dk:
// CHECK: global_load_dwordx4
// CHECK: v_cvt_pk_f16_f32
// CHECK: global_store_dwordx4

// NEVER-NOT: global_atomic_cmpswap
// NEVER-NOT: ds_bpermute
// NEVER-NOT: scratch_

// META: "arch": "gfx950"
// META-LABEL: "fmha_bwd_f16_d64x64_g4_win16_0_warp64_dq_dk_dv": {
// META: "private_segment_fixed_size": 0,
// META: "wavefront_size": 64
// META: "mach": "gfx950"
