// bf16, causal top-left, hdim 128 on sm_90: relaxed device-scope float atomics, ex2.approx, warp shuffles.
// RUN: fmha-compile --body warp --dtype bf16 --mask top_left --hdim 128 --target sm_90 --ptxas none --emit isa | FileCheck %s
// RUN: fmha-compile --body warp --dtype bf16 --mask top_left --hdim 128 --target sm_90 --ptxas none --emit isa | FileCheck %s --check-prefix=NEVER

// CHECK: .target sm_90
// D is a sum over the 16 lanes of a 128-element bf16 row (16 bytes each): xor 1, 2, 4, 8.
// CHECK-LABEL: .visible .entry fmha_bwd_bf16_d128x128_g1_tl_warp32_dot_do_o(
// CHECK: shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
// CHECK: shfl.sync.bfly.b32 {{.*}}, 2, 31, -1;
// CHECK: shfl.sync.bfly.b32 {{.*}}, 4, 31, -1;
// CHECK: shfl.sync.bfly.b32 {{.*}}, 8, 31, -1;
// CHECK-NOT: shfl.sync
// CHECK: st.global.b32
// CHECK-LABEL: .visible .entry fmha_bwd_bf16_d128x128_g1_tl_warp32_dq_dk_dv(
// CHECK: shfl.sync.bfly.b32
// CHECK: ex2.approx.ftz.f32
// CHECK: atom.relaxed.gpu.global.add.f32
// CHECK-LABEL: .visible .entry fmha_bwd_bf16_d128x128_g1_tl_warp32_convert_dk(
// CHECK: cvt.rn.bf16
// CHECK-LABEL: .visible .entry fmha_bwd_bf16_d128x128_g1_tl_warp32_convert_dv(

// No system-scope or acq_rel atomics, no compare-and-swap loop, no libdevice calls.
// NEVER-NOT: atom.acq_rel
// NEVER-NOT: .sys
// NEVER-NOT: atom.global.cas
// NEVER-NOT: __nv_
