// Bad input, bad pipelines and failing passes give located errors and exit 1, never a traceback.
// RUN: not fmha-opt %s --pass-pipeline='builtin.module(no-such-pass)' 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not fmha-opt %s --pass-pipeline='builtin.module(canonicalize{no-such-option=1})' 2>&1 | FileCheck %s --check-prefix=UPSTREAM-OPTION
// RUN: not fmha-opt %s --pass-pipeline='builtin.module(fmha-decompose-bwd{no-such-option=1})' 2>&1 | FileCheck %s --check-prefix=FMHA-OPTION
// RUN: not fmha-opt %s --pass-pipeline='builtin.module(cse' 2>&1 | FileCheck %s --check-prefix=UNBALANCED
// RUN: not fmha-opt %s -split-input-file 2>&1 | FileCheck %s --check-prefix=CHUNKS
// RUN: not fmha-opt %s.missing 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not fmha-opt %s --pass-pipeline='builtin.module(gpu.module(convert-gpu-to-rocdl{chipset=gfx9999}))' 2>&1 | FileCheck %s --check-prefix=CHIP
// RUN: not fmha-opt %s --pass-pipeline='builtin.module(gpu.module(convert-fmha-to-rocdl))' 2>&1 | FileCheck %s --check-prefix=NESTED

// UNKNOWN: fmha-opt: error: invalid --pass-pipeline: {{.*}}'no-such-pass' does not refer to a registered pass
// UNKNOWN-NOT: Traceback
// UPSTREAM-OPTION: fmha-opt: error: invalid --pass-pipeline: {{.*}}no such option no-such-option
// UPSTREAM-OPTION-NOT: Traceback
// FMHA-OPTION: fmha-opt: error: invalid --pass-pipeline: pass 'fmha-decompose-bwd' has no option 'no-such-option'
// FMHA-OPTION-NOT: Traceback
// UNBALANCED: fmha-opt: error: invalid --pass-pipeline: unbalanced brackets
// MISSING: fmha-opt: error: cannot read {{.*}}errors.mlir.missing: No such file or directory
// A chip MLIR does not know would abort the process in instruction selection: rejected up front.
// CHIP: fmha-opt: error: invalid --pass-pipeline: convert-gpu-to-rocdl: chipset='gfx9999' is not a supported chip; use one of gfx942, gfx950
// CHIP-NOT: Traceback
// NESTED: fmha-opt: error: invalid --pass-pipeline: fmha pass 'convert-fmha-to-rocdl' runs on the top-level module only
// NESTED-NOT: Traceback

// The fmha verifier runs after parsing; the other chunks still go through.
// CHUNKS: errors.mlir:[[# @LINE + 3]]:8: error: 'fmha.wave_reduce' op attribute 'width' must be a power of two from 2 to 64, got 3
// CHUNKS-NOT: Traceback
func.func @bad_width(%x: f32) -> f32 {
  %r = "fmha.wave_reduce"(%x) {kind = "add", width = 3 : i32} : (f32) -> f32
  return %r : f32
}

// -----

// Parse errors carry the line of the whole file, not of the chunk.
// CHUNKS: errors.mlir:[[# @LINE + 2]]:10: error: use of undeclared SSA value name
func.func @undeclared() -> f32 {
  return %nothing : f32
}

// -----

// CHUNKS: module {
// CHUNKS-NEXT: func.func @fine
func.func @fine() {
  return
}
