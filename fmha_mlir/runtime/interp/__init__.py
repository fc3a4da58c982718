"""A CPU SIMT interpreter for the gpu-level kernel IR, without MLIR.

    interp = Interpreter(module_text, wave_size=64, atomic_order="sequential", seed=0)
    interp.run_kernel("kernel_name", [array, ..., 3], grid=(gx, gy, gz), block=(bx, by, bz), shared_bytes=0)

`module_text` is generic-form MLIR (what `get_asm(print_generic_op_form=True)` prints) containing a
gpu.module with gpu.func kernels. All threads of the grid run as one NumPy lane axis in lockstep;
memref arguments are NumPy arrays updated in place (bf16 as uint16 bits). Workgroup memory (attributions
and `shared_bytes` of dynamic shared memory per work-group) is checked for races (workgroup.py).
"""
from .errors import InterpreterError
from .interpreter import Interpreter, supported_ops

__all__ = ["Interpreter", "InterpreterError", "supported_ops"]
