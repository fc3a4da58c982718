"""The Python API: attention-backward gradients from arrays, and the compile / load / launch steps.

    from fmha_mlir import attention_bwd
    dq, dk, dv = attention_bwd(q, k, v, o, do, lse, mask="top_left")
    dq, dk, dv, dbias = attention_bwd(q, k, v, o, do, lse, bias=bias, dbias=True)

Arrays are NumPy arrays (or torch tensors) in logical [batch, heads, seq, dim] shape with any strides
(docs/ir.md). bf16 NumPy data is an `ml_dtypes.bfloat16` array (gradients come back in it), or uint16
bit patterns with dtype="bf16".
Compiling needs MLIR (flydsl); a machine without it runs bundles compiled elsewhere (`bundle_dir`).
"""
from __future__ import annotations

import threading

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .bodies import choose_config
from .errors import Reason, SpecError
from .kernel_config import KernelConfig
from .runtime.bundle import Bundle
from .runtime.executor import Executor, executor_class, get_executor
from .runtime.bound_plan import BoundPlans
from .runtime.runner import run_bundle
from .spec import AttentionBwdSpec, Mask
from .target import get_target, nvidia_arch, prebuilt_archs
from .torch_in_place import InPlaceCall, call_key, is_torch, run_poisoned, torch_dtype

_NUMPY_DTYPES = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32"}
# The arch a GPU-less run interprets: gfx942 exercises the wave64 (DPP) path no GPU here can run.
CPU_DEFAULT_ARCH = "gfx942"


def compile_bundle(spec: AttentionBwdSpec, arch: str, compiler=None, *, body: str = "auto",
                   config: KernelConfig | None = None) -> Bundle:
    """Compile `spec` for `arch` into a launchable bundle (needs MLIR); `body` / `config` as
    Compiler.compile_spec takes them."""
    from .compiler import Compiler  # MLIR is imported only when something is compiled

    compiled = (compiler or Compiler()).compile_spec(spec, arch, body=body, config=config)
    return Bundle(compiled.manifest, compiled.bundle_files())


def bundle_path(directory, spec: AttentionBwdSpec, arch: str, body: str = "auto",
                config: KernelConfig | None = None) -> Path:
    """Where a prebuilt bundle for (spec, arch, config) lives under a bundle directory:
    <dir>/<arch>/<kernel_prefix>_<config tag> (the config `body` picks when none is given)."""
    config = config or choose_config(spec, get_target(arch), body)
    return Path(directory) / arch / f"{spec.kernel_prefix}_{config.tag}"


def load_bundle(directory, spec: AttentionBwdSpec, arch: str, config: KernelConfig) -> Bundle:
    """The prebuilt bundle for (spec, arch, config) under a bundle directory, refused (SpecError naming
    both values) unless its manifest says it was made for exactly them."""
    path = bundle_path(directory, spec, arch, config=config)
    bundle = Bundle.load(path)
    bundle.check_made_for(spec, arch, config, str(path))
    return bundle


def infer_dtype(q, dtype: str | None) -> str:
    if dtype is not None:
        return dtype
    if is_ml_bfloat16(q):
        return "bf16"
    if q.dtype in _NUMPY_DTYPES:
        return _NUMPY_DTYPES[q.dtype]
    raise SpecError([Reason("dtype", f"cannot tell the element type of {q.dtype} arrays",
                            "pass float16, float32 or ml_dtypes.bfloat16 arrays (or uint16 bf16 bit "
                            "patterns with dtype='bf16')")])


@dataclass
class AttentionBackward:
    """Compiles (once per spec and arch) and runs the backward on one executor.

    executor: 'cuda', 'hip', 'cpu' or None (a usable GPU, else the CPU interpreter); one named that is
        not usable here is an error, and so are CUDA tensors without a usable CUDA executor.
    device_index: the GPU the executor drives (torch CUDA tensors must live on it).
    arch: the target to compile for; None picks the executor's (sm_90 on CUDA, gfx942 on the CPU).
    body: 'auto' (the fastest body that supports the spec on the arch), 'warp' or 'tiled'.
    bundle_dir: prebuilt bundles (bundle_path) used before compiling.
    debug: torch CUDA tensors only: every buffer the kernels write starts as NaN (an element no kernel
        writes shows up), at the price of a device synchronisation and a host upload per buffer.
        Host arrays are always poisoned that way: they are staged through the host anyway.
    """

    executor: str | None = None
    arch: str | None = None
    bundle_dir: str | None = None
    atomic_order: str = "sequential"
    body: str = "auto"
    device_index: int = 0
    debug: bool = False
    _bundles: dict = field(default_factory=dict, repr=False)
    # One instance may serve several threads: compiles and executor creation run one at a time (MLIR's
    # context is not for concurrent use); the CPU executor serialises its launches itself.
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    _compiler: object = field(default=None, repr=False)
    _device: Executor | None = field(default=None, repr=False)
    _plans: BoundPlans = field(default_factory=BoundPlans, repr=False)   # torch CUDA calls' plans, by geometry
    _calls: BoundPlans = field(default_factory=BoundPlans, repr=False)   # and their InPlaceCalls, by call_key

    def device(self) -> Executor:
        with self._lock:
            return self._device_locked()

    def _device_locked(self) -> Executor:
        if self._device is None:
            if self.executor == "cpu":
                from .runtime.cpu_executor import CpuExecutor

                self._device = CpuExecutor(atomic_order=self.atomic_order)
            else:
                vendor = get_target(self.arch).vendor if self.arch else None
                self._device = get_executor(self.executor, vendor, self.device_index)
        return self._device

    def target_arch(self) -> str:
        if self.arch is None:
            device = self.device()
            if device.name == "hip":
                raise SpecError([Reason("arch", "the HIP executor needs the chip to compile for",
                                        "pass arch='gfx942' or arch='gfx950'")])
            # the CUDA chip's own target where it has one (sm_90a on H100 / H200)
            self.arch = nvidia_arch(device.capability) if device.name == "cuda" else CPU_DEFAULT_ARCH
        return self.arch

    def bundle(self, spec: AttentionBwdSpec) -> Bundle:
        with self._lock:
            return self._bundle_locked(spec)

    def _bundle_locked(self, spec: AttentionBwdSpec) -> Bundle:
        arch = self.target_arch()
        key = (spec, arch)
        if key not in self._bundles:
            prebuilt = self._prebuilt(spec, arch)
            if prebuilt is not None:
                self._bundles[key] = prebuilt
            else:
                config = choose_config(spec, get_target(arch), self.body)
                if self._compiler is None:
                    from .compiler import Compiler

                    self._compiler = Compiler()
                self._bundles[key] = compile_bundle(spec, arch, self._compiler, config=config)
        return self._bundles[key]

    def _prebuilt(self, spec: AttentionBwdSpec, arch: str) -> Bundle | None:
        """The bundle_dir's bundle of `spec` for `arch`, or for a target whose binaries `arch`'s chip also
        runs (prebuilt_archs: an sm_90 bundle on an H200), each with its own table's config; None if none."""
        for candidate in prebuilt_archs(arch) if self.bundle_dir else ():
            try:
                config = choose_config(spec, get_target(candidate), self.body)
            except SpecError:
                continue
            if bundle_path(self.bundle_dir, spec, candidate, config=config).is_dir():
                return load_bundle(self.bundle_dir, spec, candidate, config)
        return None

    def spec_for(self, q, k, v, *, mask: str | Mask = "none", scale: float = 0.0, dtype: str | None = None,
                 softcap: float = 0.0, bias=None, alibi_slopes=None, dbias: bool = False, deterministic: bool = False,
                 grad_accum: str = "f32", varlen: bool = False, sinks=None, dlse=None) -> AttentionBwdSpec:
        """The spec a call with these tensors and options compiles (a prebuilt bundle's name comes from it:
        bundle_path(dir, spec, arch))."""
        kind = _bias_inputs(bias, alibi_slopes, dbias)[0]
        return AttentionBwdSpec(
            dtype=torch_dtype(q) if is_torch(q) else infer_dtype(np.asarray(q), dtype),
            hdim_q=q.shape[-1], hdim_v=v.shape[-1], gqa_ratio=_gqa_ratio(q, k, packed=varlen),
            mask=mask if isinstance(mask, Mask) else Mask.parse(mask), scale=scale, softcap=softcap, bias=kind,
            dbias=dbias, alibi_slopes=alibi_slopes is not None, deterministic=deterministic, grad_accum=grad_accum,
            varlen=varlen, sinks=sinks is not None, lse_grad=dlse is not None)

    def __call__(self, q, k, v, o, do, lse, *, mask: str | Mask = "none", scale: float = 0.0,
                 dtype: str | None = None, softcap: float = 0.0, bias=None, alibi_slopes=None, dbias: bool = False,
                 deterministic: bool = False, grad_accum: str = "f32", cu_seqlens_q=None, cu_seqlens_k=None,
                 max_seqlen_q: int | None = None, max_seqlen_k: int | None = None, sinks=None, dlse=None):
        """run() with the spec these tensors and keyword options make (spec_for)."""
        tensors = (q, k, v, o, do, lse, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, sinks, dlse)   # ARGUMENTS
        options = (mask, scale, dtype, softcap, dbias, deterministic, grad_accum, max_seqlen_q, max_seqlen_k)
        key = self._call_key(tensors, options)
        bound = self._calls.get(key) if key is not None else None
        if bound is not None:
            return bound(*tensors)
        _check_arrays(cu_seqlens_q is not None or cu_seqlens_k is not None, q=q, k=k, v=v, o=o, do=do, lse=lse,
                      **_row_arrays(sinks, dlse))
        varlen, scalars = _varlen_inputs(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
        spec = self.spec_for(q, k, v, mask=mask, scale=scale, dtype=dtype, softcap=softcap, bias=bias,
                             alibi_slopes=alibi_slopes, dbias=dbias, deterministic=deterministic,
                             grad_accum=grad_accum, varlen=bool(varlen), sinks=sinks, dlse=dlse)
        return self._launch(spec, tensors, varlen, scalars, options)

    def run(self, spec: AttentionBwdSpec, q, k, v, o, do, lse, *, bias=None, alibi_slopes=None, cu_seqlens_q=None,
            cu_seqlens_k=None, max_seqlen_q: int | None = None, max_seqlen_k: int | None = None, sinks=None,
            dlse=None):
        """The gradients `spec` asks for (dq, dk, dv, then dbias or d(slopes) with spec.dbias, then dsinks
        with spec.sinks) of these tensors: the core entry, for callers that hold a spec. The tensors must be
        what the spec says (dtype, head dims, heads, the bias or slopes tensor, packed with cu_seqlens for
        varlen, sinks and dlse): SpecError naming each field they contradict. bias: the elementwise bias
        tensor (spec.bias 'elementwise'); alibi_slopes: the slopes tensor (spec.alibi_slopes); sinks, dlse:
        as attention_bwd takes them (spec.sinks, spec.lse_grad)."""
        bias = "alibi" if bias is None and spec.bias == "alibi" and alibi_slopes is None else bias
        tensors = (q, k, v, o, do, lse, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, sinks, dlse)
        options = (spec, max_seqlen_q, max_seqlen_k)
        key = self._call_key(tensors, options)
        bound = self._calls.get(key) if key is not None else None
        if bound is not None:
            return bound(*tensors)
        spec.check()
        _check_arrays(cu_seqlens_q is not None or cu_seqlens_k is not None, q=q, k=k, v=v, o=o, do=do, lse=lse,
                      **_row_arrays(sinks, dlse))
        varlen, scalars = _varlen_inputs(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
        given = self.spec_for(q, k, v, mask=spec.mask, scale=spec.scale, softcap=spec.softcap, bias=bias,
                              alibi_slopes=alibi_slopes, dbias=spec.dbias, deterministic=spec.deterministic,
                              grad_accum=spec.grad_accum, varlen=bool(varlen),
                              dtype=spec.dtype if _bits_of_bf16(q) else None, sinks=sinks, dlse=dlse)
        contradicted = [Reason(name,
                               f"the tensors give {getattr(given, name)!r}, the spec says {getattr(spec, name)!r}",
                               "pass tensors of the spec's problem, or the spec of these tensors (spec_for)")
                        for name in _TENSOR_FIELDS if getattr(given, name) != getattr(spec, name)]
        if contradicted:
            raise SpecError(contradicted)
        return self._launch(spec, tensors, varlen, scalars, options)

    def _call_key(self, tensors: tuple, options: tuple):
        """The key a torch CUDA call is bound under (torch_in_place.call_key; `options` end with the max
        lengths); None when it is not bound: in debug mode, or when the max lengths are read from cu_seqlens."""
        reads_lengths = (tensors[8] is not None or tensors[9] is not None) and None in options[-2:]
        return None if self.debug or reads_lengths else call_key(tensors, (self.arch, options))

    def _launch(self, spec: AttentionBwdSpec, tensors: tuple, varlen: dict, scalars: dict, options: tuple):
        """Compile or load the bundle of `spec` and run it on `tensors` (ARGUMENTS order); a torch CUDA
        call binds an InPlaceCall, kept under its key (computed again once the arch is known)."""
        q, k, v, o, do, lse, bias, alibi_slopes = tensors[:8]
        sinks, dlse = tensors[10:]
        kind, bias_tensors = _bias_inputs(bias, alibi_slopes, spec.dbias)
        if _is_empty(q, k):
            spec.check()
            grads = _zero_gradients(spec.bias_operands()[1], q, k, v, bias if kind == "elementwise" else alibi_slopes)
            return grads + ((_sink_gradient_without_keys(sinks, lse, dlse, spec.varlen),) if spec.sinks else ())
        on_gpu = is_torch(q) and q.is_cuda
        device = self._cuda_executor(self.device(), q.device) if on_gpu else self.device()
        bundle = self.bundle(spec)
        inputs = {**dict(zip(("q", "k", "v", "o", "do", "lse"), (q, k, v, o, do, lse))), **bias_tensors, **varlen,
                  **_row_arrays(sinks, dlse)}
        names = ("dq", "dk", "dv") + spec.bias_operands()[1] + spec.row_operands()[1]
        given_shape = tuple((bias if kind == "elementwise" else alibi_slopes).shape) if spec.dbias else None
        if on_gpu and not self.debug:
            bound = InPlaceCall(self._plans.plan, bundle, device, inputs, names, scalars, given_shape)
            key = self._call_key(tensors, options)   # the arch is known by now
            if key is not None:
                self._calls.add(key, bound)
            return bound(*tensors)
        if on_gpu:
            grads = run_poisoned(bundle, device, inputs, names, scalars)
        else:
            grads = run_bundle(bundle, device, {name: _to_numpy(t) for name, t in inputs.items()}, scalars)
            like = {"dalibi_slopes": alibi_slopes, "dsinks": sinks}
            grads = {name: _like(like.get(name, q), grads[name]) for name in names}
        out = [grads[name] for name in names]
        if given_shape is not None:   # dbias / d(slopes) in the shape the bias was given in
            out[3] = out[3].reshape(given_shape)
        return tuple(out)

    def _cuda_executor(self, device: Executor, where) -> Executor:
        """`device`, when it can launch on torch CUDA tensors on `where` (never a silent copy to the CPU)."""
        if device.name != "cuda":
            usable, why = executor_class("cuda").available()
            raise SpecError([Reason("executor", f"the tensors live on {where} but the executor is "
                                                f"{device.name!r}" + ("" if usable else f" (cuda: {why})"),
                                    "use AttentionBackward(executor='cuda') with cuda-bindings installed, or pass "
                                    "CPU tensors")])
        if where.index != device.device_index:
            raise SpecError([Reason("device", f"the tensors live on {where} but this AttentionBackward drives "
                                              f"cuda:{device.device_index}",
                                    f"use AttentionBackward(device_index={where.index}) for them")])
        return device


def attention_bwd(q, k, v, o, do, lse, *, mask: str | Mask = "none", scale: float = 0.0,
                  dtype: str | None = None, executor: str | None = None, arch: str | None = None,
                  body: str = "auto", softcap: float = 0.0, bias=None, alibi_slopes=None, dbias: bool = False,
                  deterministic: bool = False, grad_accum: str = "f32", cu_seqlens_q=None, cu_seqlens_k=None,
                  max_seqlen_q: int | None = None, max_seqlen_k: int | None = None, sinks=None, dlse=None):
    """dQ, dK, dV of softmax(S, masked) V for upstream gradient dO (one-shot; for repeated calls keep an
    AttentionBackward, which caches compiled bundles). S = Q K^T * scale or, with softcap C > 0,
    C tanh(Q K^T * scale / C), plus a bias:

    - bias: an array of shape [Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk] (a size-1 dim broadcasts) in the
      inputs' dtype; with dbias=True its gradient comes fourth, in the bias's shape.
    - bias="alibi": -slope_h |i + Sk - Sq - j|, with the standard slopes 2^(-8 (h + 1) / H), or
      alibi_slopes (f32, [H] or [B, H]); with dbias=True d(slopes) comes fourth, in their shape.

    deterministic=True: bitwise-reproducible gradients (the tiled body: dQ by one partial per key block,
    dbias by one per batch and head, summed in order; dQ's workspace is ceil(Sk / block_n) x dQ's size
    in f32). Not with d(slopes), and not on the warp body (f32): refused with the reason.

    grad_accum="bf16" (bf16 inputs, the tiled body): dQ added into dQ itself by packed bf16 atomics, once
    per key block (no f32 workspace, no convert kernel, half the atomic traffic), at the price of a bf16
    rounding per key block (reports/bench_notes.md). Not with deterministic=True.

    Varlen (FlashAttention's varlen backward): with cu_seqlens_q / cu_seqlens_k (int32 [batch + 1]
    prefix sums) the tensors are packed, q, o, do [total_q, Hq, D], k, v [total_k, Hkv, D], lse
    [Hq, total_q]; each sequence has its own lengths (0 allowed) and its own mask. max_seqlen_q /
    max_seqlen_k size the grids; left out, they are read from cu_seqlens (a device sync for GPU tensors).
    Not with a bias or slopes tensor, deterministic mode or bf16 atomics.

    sinks (gpt-oss's learnable attention sinks): an f32 [Hq] array of per-head logits that the forward
    put in every row's softmax denominator (so lse includes them); dsinks [Hq] (f32) comes last. dlse:
    the gradient of the lse when the forward's lse was used downstream (ring attention's merge), f32
    shaped like lse; D becomes rowsum(dO * O) - dlse.
    """
    return AttentionBackward(executor=executor, arch=arch, body=body)(
        q, k, v, o, do, lse, mask=mask, scale=scale, dtype=dtype, softcap=softcap, bias=bias,
        alibi_slopes=alibi_slopes, dbias=dbias, deterministic=deterministic, grad_accum=grad_accum,
        cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
        sinks=sinks, dlse=dlse)


# The spec fields a call's tensors decide (run() checks them against the spec it is given).
_TENSOR_FIELDS = ("dtype", "hdim_q", "hdim_v", "gqa_ratio", "bias", "alibi_slopes", "varlen", "sinks", "lse_grad")


def _row_arrays(sinks, dlse) -> dict:
    """The row stage's input tensors by buffer name: those given."""
    return {name: t for name, t in (("dlse", dlse), ("sinks", sinks)) if t is not None}


def _bits_of_bf16(q) -> bool:
    """NumPy uint16 data: bf16 bit patterns, whose dtype only the caller can name."""
    return not is_torch(q) and getattr(q, "dtype", None) == np.uint16


def _varlen_inputs(cu_q, cu_k, max_q, max_k) -> tuple[dict, dict]:
    """(the cu_seqlens tensors by buffer name, the max-length scalars); both empty without varlen."""
    if cu_q is None and cu_k is None:
        if max_q is not None or max_k is not None:
            raise SpecError([Reason("max_seqlen_q", "max lengths are varlen's", "pass cu_seqlens_q and cu_seqlens_k")])
        return {}, {}
    if cu_q is None or cu_k is None:
        raise SpecError([Reason("cu_seqlens_q" if cu_q is None else "cu_seqlens_k", "varlen needs both cu_seqlens",
                                "pass cu_seqlens_q and cu_seqlens_k (int32 [batch + 1])")])
    scalars = {}
    for name, cu, given in (("max_seqlen_q", cu_q, max_q), ("max_seqlen_k", cu_k, max_k)):
        lengths = np.diff(_to_numpy(cu).astype(np.int64)) if given is None else None
        scalars[name] = int(given) if given is not None else max(int(lengths.max(initial=0)), 1)
    return {"cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k}, scalars


def _bias_inputs(bias, alibi_slopes, dbias) -> tuple[str, dict]:
    """(spec.bias, the bias tensors by buffer name, rank-4 / rank-2 views) of the API's bias arguments."""
    if isinstance(bias, str) or bias is None:
        kind = "none" if bias is None else bias
        if kind == "elementwise":
            raise SpecError([Reason("bias", "'elementwise' names the kind; the API takes the tensor itself",
                                    "pass bias=<array of shape [Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk]>")])
        if alibi_slopes is not None:
            if kind not in ("none", "alibi"):
                raise SpecError([Reason("alibi_slopes", f"slopes are ALiBi's, but bias is {kind!r}",
                                        "use bias='alibi' (or leave it out) with alibi_slopes")])
            slopes = alibi_slopes
            if slopes.ndim not in (1, 2):
                raise SpecError([Reason("alibi_slopes", f"has shape {tuple(slopes.shape)}; pass [H] or [B, H]")])
            return "alibi", {"alibi_slopes": slopes.reshape((1,) * (2 - slopes.ndim) + tuple(slopes.shape))}
        return kind, {}
    if not hasattr(bias, "ndim") or not 2 <= bias.ndim <= 4:
        raise SpecError([Reason("bias", f"must be 'alibi' or an array of shape [Sq, Sk], [H, Sq, Sk] or "
                                        f"[B, H, Sq, Sk] (got {getattr(bias, 'shape', type(bias).__name__)})")])
    if alibi_slopes is not None:
        raise SpecError([Reason("alibi_slopes", "given with a bias tensor", "give one of them")])
    return "elementwise", {"bias": bias.reshape((1,) * (4 - bias.ndim) + tuple(bias.shape))}


def _check_arrays(packed: bool, **arrays) -> None:
    """Each input is an array (NumPy or torch) of its rank: [B, H, S, D], lse and dlse [B, H, S]; packed
    (varlen) [T, H, D], lse and dlse [H, T]; sinks [H] (f32) either way."""
    reasons = []
    for name, array in arrays.items():
        rank = 1 if name == "sinks" else (3 if name in ("lse", "dlse") else 4) - packed
        if not (hasattr(array, "shape") and hasattr(array, "dtype")):
            reasons.append(Reason(name, f"must be a NumPy array or a torch tensor (got {type(array).__name__})",
                                  "pass np.asarray(...) of the right dtype"))
        elif len(array.shape) != rank:
            layout = "[heads_q]" if name == "sinks" else {
                (False, True): "[batch, heads, seq]", (False, False): "[batch, heads, seq, dim]",
                (True, True): "[heads, total]", (True, False): "[total, heads, dim]"}[packed, name in ("lse", "dlse")]
            reasons.append(Reason(name, f"has shape {tuple(array.shape)}; it must be {layout}"))
    if reasons:
        raise SpecError(reasons)


def _gqa_ratio(q, k, packed: bool = False) -> int:
    """heads_q / heads_kv of [B, H, S, D] tensors (packed: [T, H, D])."""
    rank, layout = (3, "[total, heads, dim]") if packed else (4, "[batch, heads, seq, dim]")
    if q.ndim != rank or k.ndim != rank or k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise SpecError([Reason("k", f"q {tuple(q.shape)} and k {tuple(k.shape)} must be {layout} "
                                     "with heads_q a multiple of heads_kv")])
    return q.shape[1] // k.shape[1]


def is_ml_bfloat16(array) -> bool:
    """An `ml_dtypes.bfloat16` NumPy array (told by its dtype's name: ml_dtypes need not be installed)."""
    return isinstance(array, np.ndarray) and array.dtype.name == "bfloat16"


def _is_empty(q, k) -> bool:
    """No (query, key) pair exists: a zero-sized q or k (a packed varlen total of 0 included)."""
    return 0 in tuple(q.shape) or 0 in tuple(k.shape)


def _zero_gradients(bias_grads: tuple, q, k, v, given) -> tuple:
    """The gradients of a problem without a (query, key) pair: zeros in each input's shape and type (no
    launch: a grid with an empty dimension is not launchable). dbias / d(slopes) are f32, as computed."""
    def zeros(like, f32: bool = False):
        if is_torch(like):
            import torch

            return torch.zeros(like.shape, dtype=torch.float32 if f32 else like.dtype, device=like.device)
        return np.zeros(np.shape(like), np.float32 if f32 else np.asarray(like).dtype)

    return tuple([zeros(q), zeros(k), zeros(v)] + [zeros(given, f32=True) for _ in bias_grads])


def _sink_gradient_without_keys(sinks, lse, dlse, packed: bool):
    """dsinks of a problem without keys, on the host: every row's softmax is the sink alone (O = 0, so D
    = 0), and dsinks_h = sum over its rows of exp(sink_h - lse) dlse (0 without an lse gradient, or
    without query rows). lse / dlse are [B, H, S], or [H, T] packed."""
    sink = _to_numpy(sinks).astype(np.float64)
    if dlse is None:
        return _like(sinks, np.zeros(sink.shape, np.float32))
    lse, dlse = (_to_numpy(t).astype(np.float64) for t in (lse, dlse))
    if packed:   # [H, T] -> [1, H, T]
        lse, dlse = lse[None], dlse[None]
    with np.errstate(invalid="ignore", over="ignore"):
        terms = np.where(np.isfinite(lse), np.exp(sink[None, :, None] - lse) * dlse, 0.0)
    return _like(sinks, terms.sum(axis=(0, 2)).astype(np.float32))


def _to_numpy(t) -> np.ndarray:
    """A NumPy view of the data in the runtime's storage (torch tensors are copied to the host; bf16,
    torch or ml_dtypes, becomes uint16 bits)."""
    if not is_torch(t):
        array = np.asarray(t)
        return array.view(np.uint16) if is_ml_bfloat16(array) else array
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _like(reference, array: np.ndarray):
    """`array` (in storage) as what `reference` is: a torch tensor of its dtype on its device, an
    ml_dtypes.bfloat16 array, or the array itself."""
    if not is_torch(reference):
        return array.view(reference.dtype) if is_ml_bfloat16(np.asarray(reference)) else array
    import torch

    if reference.dtype == torch.bfloat16:
        tensor = torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(torch.bfloat16)
    else:
        tensor = torch.from_numpy(np.ascontiguousarray(array))
    return tensor.to(reference.device)
