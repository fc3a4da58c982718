// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(fmha-hardware-atomics)' | FileCheck %s --check-prefix=AMD
// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(fmha-hardware-atomics{target=nvidia})' | FileCheck %s --check-prefix=NV

// What convert-gpu-to-rocdl/-nvvm make of memref.atomic_rmw addf: acq_rel, system scope.

gpu.module @kernels {
  // AMD-LABEL: llvm.func @relaxed
  // NV-LABEL: llvm.func @relaxed
  llvm.func @relaxed(%p: !llvm.ptr, %x: f32, %v: vector<2xbf16>) {
    // AMD: llvm.atomicrmw fadd %{{.*}}, %{{.*}} syncscope("agent") monotonic {rocdl.no_fine_grained_memory} : !llvm.ptr, f32
    // NV: llvm.atomicrmw fadd %{{.*}}, %{{.*}} syncscope("device") monotonic : !llvm.ptr, f32
    %0 = llvm.atomicrmw fadd %p, %x acq_rel : !llvm.ptr, f32
    // AMD: llvm.atomicrmw fadd %{{.*}}, %{{.*}} syncscope("agent") monotonic {rocdl.no_fine_grained_memory} : !llvm.ptr, vector<2xbf16>
    // NV: llvm.atomicrmw fadd %{{.*}}, %{{.*}} syncscope("device") monotonic : !llvm.ptr, vector<2xbf16>
    %1 = llvm.atomicrmw fadd %p, %v acq_rel : !llvm.ptr, vector<2xbf16>
    llvm.return
  }
}

// -----

// Only f32 / bf16x2 float adds inside gpu.modules change: other types, other operations and host code
// keep their ordering.

gpu.module @kernels {
  // AMD-LABEL: llvm.func @untouched
  // NV-LABEL: llvm.func @untouched
  llvm.func @untouched(%p: !llvm.ptr, %d: f64, %i: i32) {
    // AMD: llvm.atomicrmw fadd %{{.*}}, %{{.*}} acq_rel : !llvm.ptr, f64
    // NV: llvm.atomicrmw fadd %{{.*}}, %{{.*}} acq_rel : !llvm.ptr, f64
    %0 = llvm.atomicrmw fadd %p, %d acq_rel : !llvm.ptr, f64
    // AMD: llvm.atomicrmw add %{{.*}}, %{{.*}} acq_rel : !llvm.ptr, i32
    // NV: llvm.atomicrmw add %{{.*}}, %{{.*}} acq_rel : !llvm.ptr, i32
    %1 = llvm.atomicrmw add %p, %i acq_rel : !llvm.ptr, i32
    llvm.return
  }
}
// AMD-LABEL: llvm.func @host
// AMD: llvm.atomicrmw fadd %{{.*}}, %{{.*}} acq_rel : !llvm.ptr, f32
// AMD-NOT: no_fine_grained_memory
// NV-LABEL: llvm.func @host
// NV: llvm.atomicrmw fadd %{{.*}}, %{{.*}} acq_rel : !llvm.ptr, f32
llvm.func @host(%p: !llvm.ptr, %x: f32) {
  %0 = llvm.atomicrmw fadd %p, %x acq_rel : !llvm.ptr, f32
  llvm.return
}
