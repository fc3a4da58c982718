"""What an AMD code object (hsaco) says about itself: ELF flags and the AMDGPU metadata note.

A HIP launcher packs kernel arguments from this metadata, so the runtime checks the launch plan against
it. Importable without MLIR; pyelftools and msgpack are imported only when a code object is read.
"""
from __future__ import annotations

import io

from ..errors import RuntimeLaunchError

# ELF e_flags: EF_AMDGPU_MACH occupies the low byte.
EF_AMDGPU_MACH = 0xFF
AMDGPU_MACHS = {0x3F: "gfx90a", 0x40: "gfx940", 0x4B: "gfx941", 0x4C: "gfx942", 0x4F: "gfx950"}
NT_AMDGPU_METADATA = 32
NOTE_NAME = "AMDGPU"


def amdgpu_mach(e_flags: int) -> str:
    """The gfx name in an AMDGPU ELF's e_flags, e.g. 'gfx942' for 0x4c; 'unknown-0x..' otherwise."""
    mach = e_flags & EF_AMDGPU_MACH
    return AMDGPU_MACHS.get(mach, f"unknown-0x{mach:02x}")


def target_arch(target: str) -> str:
    """The processor of an amdhsa.target: 'amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-' -> 'gfx942'.
    Features go first: their '-' (xnack-) would otherwise pass for the triple's separator."""
    return target.split(":", 1)[0].rsplit("-", 1)[-1]


def read_hsaco_metadata(blob: bytes) -> dict:
    """The code object's facts.

    {"e_flags": int, "mach": "gfx942", "target": "amdgcn-amd-amdhsa--gfx942", "arch": "gfx942",
     "version": [1, 2], "kernels": {name: {"vgpr_count": ..., "args": [{"offset", "size",
     "value_kind", ...}], ...}}}: each kernel's amdhsa.kernels entry with the leading '.' dropped and
    '-' spelled '_'. RuntimeLaunchError when the blob is not an AMDGPU code object with a metadata note.
    """
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        elf = ELFFile(io.BytesIO(blob))
        e_flags = elf.header.e_flags
        is_amdgpu = elf.header.e_machine == "EM_AMDGPU"
        note = _metadata_note(elf) if is_amdgpu else None
    except ELFError as exc:
        raise RuntimeLaunchError(f"not an ELF code object: {exc}") from None
    if not is_amdgpu:
        raise RuntimeLaunchError(f"not an AMDGPU code object (e_machine {elf.header.e_machine})")
    if note is None:
        raise RuntimeLaunchError("the code object has no AMDGPU metadata note (NT_AMDGPU_METADATA)")
    metadata = _unpack(note)
    target = metadata.get("amdhsa.target", "")
    kernels = {}
    for entry in metadata.get("amdhsa.kernels", []):
        fields = _plain_keys(entry)
        fields["args"] = [_plain_keys(arg) for arg in fields.get("args", [])]
        kernels[fields["name"]] = fields
    return {
        "e_flags": e_flags,
        "mach": amdgpu_mach(e_flags),
        "target": target,
        "arch": target_arch(target),
        "version": list(metadata.get("amdhsa.version", [])),
        "kernels": kernels,
    }


def _metadata_note(elf) -> bytes | None:
    for section in elf.iter_sections():
        if section.header.sh_type != "SHT_NOTE":
            continue
        for note in section.iter_notes():
            if note.n_name == NOTE_NAME and note.n_type in (NT_AMDGPU_METADATA, "NT_AMDGPU_METADATA"):
                desc = note.n_desc
                return desc if isinstance(desc, bytes) else desc.encode("latin-1")
    return None


def _unpack(note: bytes) -> dict:
    import msgpack

    try:
        metadata = msgpack.unpackb(note, raw=False, strict_map_key=False)
    except (ValueError, msgpack.ExtraData) as exc:
        raise RuntimeLaunchError(f"the AMDGPU metadata note is not valid msgpack: {exc}") from None
    if not isinstance(metadata, dict):
        raise RuntimeLaunchError("the AMDGPU metadata note is not a msgpack map")
    return metadata


def _plain_keys(entry: dict) -> dict:
    """'.vgpr_count' -> 'vgpr_count', '.uses-dynamic-stack' -> 'uses_dynamic_stack'."""
    return {key.lstrip(".").replace("-", "_"): value for key, value in entry.items()}
