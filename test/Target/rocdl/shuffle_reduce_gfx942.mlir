// --reduce shuffle: wave sums become the xor butterfly (LDS permutes) instead of DPP.
// RUN: fmha-compile --dtype f16 --mask none --hdim 64 --target gfx942 --body warp --reduce shuffle --emit isa | FileCheck %s
// RUN: fmha-compile --dtype f16 --mask none --hdim 64 --target gfx942 --body warp --reduce shuffle --emit isa | FileCheck %s --check-prefix=NEVER

// dot_do_o gives each row 64*2/16 = 8 lanes: a three-step butterfly inside the row, all of it
// ds_swizzle (xor below 32 needs no bpermute).
// CHECK-LABEL: fmha_bwd_f16_d64x64_g1_nomask_warp64_dot_do_o:
// CHECK: ds_swizzle_b32 {{.*}} offset:swizzle(SWAP,1)
// CHECK: ds_swizzle_b32 {{.*}} offset:swizzle(SWAP,2)
// CHECK: ds_swizzle_b32 {{.*}} offset:swizzle(SWAP,4)
// CHECK-NOT: ds_swizzle
// CHECK-NOT: ds_bpermute
// CHECK: global_store
// The warp body reduces over the whole wave of 64: swizzles up to 16, a bpermute for xor 32.
// CHECK-LABEL: fmha_bwd_f16_d64x64_g1_nomask_warp64_dq_dk_dv:
// CHECK: ds_swizzle_b32 {{.*}} offset:swizzle(SWAP,16)
// CHECK: ds_bpermute_b32

// NEVER-NOT: _dpp
// NEVER-NOT: v_readlane_b32 {{.*}}, 63
