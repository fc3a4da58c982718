"""wgmma's layouts (sm_90a): the m64nNk16 register fragments of a warpgroup, the canonical shared-memory
tiles its descriptors describe, the hardware swizzle that TMA writes and wgmma reads, and the 64-bit
shared-memory matrix descriptor. Written once over number-like values (NumPy only, importable without
MLIR), so that the same function runs on Python ints (folded), NumPy arrays (the interpreter, the tests)
and passes.ix.Ix (index arithmetic in the lowering), as fmha_mlir.mask_geometry is.

Sources (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"): the register fragments
("Register Fragments and Shared Memory Matrix Layouts"), the canonical layouts ("Shared Memory Matrix
Layout": K-major ((8,m),(T,2k)):((sT,SBO),(1,T)) and MN-major ((T,s,m),(8,k)):((1,T,LBO),(sT,SBO)) for
a swizzle of s x 16 bytes, T = 16 bytes of elements) and the descriptor ("Matrix Descriptor Format").

Conventions: `thread` in [0, 128) is the thread's index in its warpgroup; A is M x K, B is K x N (the
instruction's operands), an operand tile is "mn x k": rows along M (A) or N (B), columns along K. Byte
offsets are from the tile's base, which is aligned to the swizzle's repeat (SWIZZLE_ALIGNMENT), since
the hardware swizzles absolute shared addresses.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from . import matrix_layouts

WARPGROUP = 128                       # threads of one wgmma: four warps
M = 64                                # rows of a wgmma per warpgroup
K_BYTES = 32                          # one instruction's K extent in bytes: k16 for 16-bit types
CHUNK = 16                            # bytes of a core-matrix row (T elements)
SWIZZLES = (0, 32, 64, 128)           # bytes of a swizzled row; 0: no swizzle (8 x 16-byte core matrices)
DESCRIPTOR_MODE = {0: 0, 128: 1, 64: 2, 32: 3}   # descriptor bits 62-63
SWIZZLE_ALIGNMENT = {0: 128, 32: 256, 64: 512, 128: 1024}   # the byte period of each swizzle pattern
N_SIZES = tuple(range(8, 257, 8))     # the instruction's legal N (multiples of 8 up to 256)


def accumulator(thread, register):
    """(row, col) of the 64 x N f32 accumulator held by `register` (0 .. N/2 - 1) of warpgroup `thread`:
    warp w owns rows 16w .. 16w + 15; each 8-column block repeats the mma.m16n8k16 C pattern."""
    warp, lane = thread // 32, thread % 32
    row = 16 * warp + lane // 4 + 8 * ((register // 2) % 2)
    col = 8 * (register // 4) + 2 * (lane % 4) + register % 2
    return row, col


def accumulator_offset(register: int) -> tuple[int, int]:
    """(rows, cols) from a thread's register 0 to its `register`: the same for every thread (the pattern
    above moves with the thread as a whole), so a thread builds one position and adds these."""
    return 8 * ((register // 2) % 2), 8 * (register // 4) + register % 2


def accumulator_store_address(thread):
    """(row, chunk) whose 16-byte row address `thread` gives to the stmatrix x4 that stores registers
    8 q .. 8 q + 7 of an accumulator (four 8 x 8 matrices, each a register pair: the accumulator's pattern
    over an 8 x 8 block is stmatrix's fragment, as it is ldmatrix's): the row of the 64-row tile and the
    16-byte chunk counted from column 16 q. Matrix i lies at rows + 8 (i % 2), chunk i // 2 of the warp's
    16 x 16 block, as an ldmatrix x4 of an A operand reads it."""
    row, chunk = matrix_layouts.ldmatrix_address(thread % 32, 4, rows_first=True)
    return 16 * (thread // 32) + row, chunk


def dq_fragment_position(row, col, hdim: int):
    """Where logical (row, col) of dQ lies in a dq_acc of `hdim` columns (a multiple of 8) kept in fragment
    order (ints or Ix). Each block of 16 rows x 8 columns is 128 adjacent values, thread-major: lane l of a
    warp (rows r and r + 8, columns 2c and 2c + 1, l = 4 (r % 8) + c) has its four values there, its
    accumulator registers 4j .. 4j + 3 in order, at 4 l: one aligned v4 atomic of adjacent registers a thread
    (in one row, as hdim is a multiple of 4), 512 contiguous bytes a warp where rows hold whole blocks. A
    16-row group's blocks fill its 16 rows in column-block order. bodies.tiled.dq_fragment_order says where;
    the convert puts the values back. FlashAttention-3 keeps its dQ accumulator in fragment order likewise."""
    r, c = row % 16, col % 8
    lane = 4 * (r % 8) + c // 2
    flat = 4 * lane + 2 * (r // 8) + c % 2
    if hdim % 128 == 0:   # rows of whole blocks: the place below, in fewer operations
        per_row, block = hdim // 128, col // 8
        return row - r + block // per_row, 128 * (block % per_row) + flat
    inside = 128 * (col // 8) + flat   # from the group's first row
    return row - r + inside // hdim, inside % hdim


def dq_run_period(hdim: int) -> int:
    """Column blocks after which blocks start a row of dq_acc again in fragment order: 1 where rows hold
    whole blocks (hdim a multiple of 128) or blocks whole rows (64); 3 at d192, 5 at d160."""
    return 1 if hdim % 128 == 0 else hdim // gcd(hdim, 128)


def dq_run_place(rows: int, cols: int, hdim: int) -> tuple[int, tuple[int, int]]:
    """How flash_bwd.add_dq_runs places the run of a thread's accumulator block at (rows, cols) from its
    first element (rows a multiple of 16, cols of 8): (shift, constant), the run's place being the lane's
    place at `shift` more columns (dq_fragment_position of its first element) plus `constant`. Where rows
    hold whole blocks nothing shifts: the lane's place plus the block's. Else a block's 128 values may
    continue on the next row, so each class of blocks (modulo dq_run_period) has its own lane place, and
    what remains is whole rows."""
    shift = (cols // 8) % dq_run_period(hdim)
    return 8 * shift, dq_fragment_position(rows, cols - 8 * shift, hdim)


def a_fragment(thread, element):
    """(row, col) of the 64 x 16 A operand held by 16-bit `element` (0 .. 7: four .b32 registers of two)
    of warpgroup `thread`, in wgmma's register-A (RS) form. It is the accumulator pattern over 16 columns,
    so accumulator register 8 j + e of a product is element e of the A operand of its k-block j."""
    return accumulator(thread, element)


def swizzle(offset, swizzle_bytes: int):
    """The physical byte offset of logical byte `offset` under a swizzle of `swizzle_bytes` (0, 32, 64,
    128): inside each swizzle_bytes-wide row of an 8-row pattern, the 16-byte chunk index is XORed with
    the row's index modulo swizzle_bytes / 16 (CuTe's Swizzle<log2(s/16), 4, 3>)."""
    if swizzle_bytes == 0:
        return offset
    chunks = swizzle_bytes // CHUNK
    row = (offset // 128) % chunks          # bits 7.. of the address: the row within the pattern
    chunk = (offset // CHUNK) % chunks      # bits 4..: the 16-byte chunk within the row
    return offset + ((chunk ^ row) - chunk) * CHUNK


@dataclass(frozen=True)
class OperandTile:
    """One wgmma operand tile in shared memory in a canonical layout: `mn` x `k` elements of
    `element_bytes`, K-major (K contiguous: A = Q, B = K^T's K for S = Q K^T) or MN-major (MN contiguous:
    B = dO for dV = P^T dO), with a swizzle of `swizzle` bytes (0: none).

    K-major, swizzled: the tile is k / (swizzle / element_bytes) column blocks, each mn rows of
    `swizzle` bytes (one TMA box of mn x swizzle bytes); 8-row groups are SBO = 8 x swizzle apart.
    MN-major, swizzled: mn / (swizzle / element_bytes) blocks of k rows of `swizzle` bytes, LBO = k x
    swizzle apart; 8-k-row groups are SBO = 8 x swizzle apart. Without a swizzle, 8 x 16-byte core
    matrices (8 rows along MN for K-major, along K for MN-major), LBO = 128 apart along K and SBO =
    128 k / 8 apart along MN, for either major."""

    mn: int
    k: int
    major: str = "K"          # "K" or "MN"
    swizzle: int = 128
    element_bytes: int = 2

    def __post_init__(self):
        if self.major not in ("K", "MN"):
            raise ValueError(f"major is 'K' or 'MN', not {self.major!r}")
        if self.swizzle not in SWIZZLES:
            raise ValueError(f"swizzle is one of {SWIZZLES} bytes, not {self.swizzle}")
        lead, inner = (self.k, self.mn) if self.major == "K" else (self.mn, self.k)
        if self.k % (K_BYTES // self.element_bytes) or self.mn % 8 or lead % self.atom_elements or inner % 8:
            raise ValueError(f"a {self.mn} x {self.k} {self.major}-major tile of {self.element_bytes}-byte elements "
                             f"with swizzle {self.swizzle} does not tile into whole swizzle atoms and k16 steps")

    @property
    def atom_elements(self) -> int:
        """Elements along the contiguous dimension in one swizzled row (one core-matrix row unswizzled)."""
        return max(self.swizzle, CHUNK) // self.element_bytes

    @property
    def nbytes(self) -> int:
        return self.mn * self.k * self.element_bytes

    @property
    def alignment(self) -> int:
        return SWIZZLE_ALIGNMENT[self.swizzle]

    @property
    def leading_byte_offset(self) -> int:
        """LBO: for K-major swizzled tiles unused (the hardware assumes 1, i.e. 16 bytes)."""
        if self.swizzle == 0:
            return 128
        return CHUNK if self.major == "K" else self.k * self.swizzle

    @property
    def stride_byte_offset(self) -> int:
        if self.swizzle == 0:
            return 128 * self.k // 8
        return 8 * self.swizzle

    def offset(self, mn, k):
        """Logical (unswizzled) byte offset of element (mn, k)."""
        eb, atom = self.element_bytes, self.atom_elements
        if self.swizzle == 0:
            if self.major == "K":
                return ((mn // 8) * self.stride_byte_offset + (k // 8) * self.leading_byte_offset
                        + (mn % 8) * CHUNK + (k % 8) * eb)
            return ((mn // 8) * self.stride_byte_offset + (k // 8) * self.leading_byte_offset
                    + (k % 8) * CHUNK + (mn % 8) * eb)
        if self.major == "K":
            return (k // atom) * (self.mn * self.swizzle) + mn * self.swizzle + (k % atom) * eb
        return (mn // atom) * self.leading_byte_offset + k * self.swizzle + (mn % atom) * eb

    def physical(self, mn, k):
        """Physical byte offset of element (mn, k): where TMA writes it and wgmma reads it."""
        return swizzle(self.offset(mn, k), self.swizzle)

    def descriptor(self, base_address, mn0: int = 0, k0: int = 0):
        """The matrix descriptor of the sub-tile at (mn0, k0) (mn0 a multiple of 64 rows of an A tile or
        of N of a B tile, k0 of 16): the start address is that element's unswizzled address."""
        return descriptor(base_address + self.offset(mn0, k0), self.leading_byte_offset, self.stride_byte_offset,
                          self.swizzle)

    @property
    def box(self) -> tuple[int, int]:
        """The TMA box (outer rows, contiguous elements) that `boxes` loads: the tensor map of this tile's
        tensor is encoded with it, and each box load completes box_rows x swizzle bytes on its barrier."""
        return (self.mn if self.major == "K" else self.k), self.atom_elements

    def boxes(self) -> list[tuple[int, int, int]]:
        """The TMA boxes that fill the tile, as (shared byte offset, first element along the contiguous
        dimension, rows): each box is `rows` rows of atom_elements contiguous elements (swizzled tiles)."""
        rows = self.box[0]
        blocks = (self.k if self.major == "K" else self.mn) // self.atom_elements
        return [(b * rows * max(self.swizzle, CHUNK), b * self.atom_elements, rows) for b in range(blocks)]


def descriptor_address_field(address):
    """Bits 0-13 of a descriptor: the shared address (a 18-bit window) in 16-byte units."""
    return (address % (1 << 18)) // 16


def descriptor_constant(leading_byte_offset: int, stride_byte_offset: int, swizzle_bytes: int) -> int:
    """Bits 16-63 of a descriptor: LBO (16-29) and SBO (32-45) in 16-byte units, base offset 0 (49-51:
    tiles aligned to their swizzle period), swizzle mode (62-63)."""
    return (((leading_byte_offset // 16) & 0x3FFF) << 16 | ((stride_byte_offset // 16) & 0x3FFF) << 32
            | DESCRIPTOR_MODE[swizzle_bytes] << 62)


def descriptor(address, leading_byte_offset: int, stride_byte_offset: int, swizzle_bytes: int):
    """The 64-bit shared-memory matrix descriptor (an unsigned value; the fields do not overlap, so the
    address field is added to the constant ones)."""
    return descriptor_address_field(address) + descriptor_constant(leading_byte_offset, stride_byte_offset,
                                                                    swizzle_bytes)


F32_BOX_COLUMNS = 32                  # f32 columns of one 128-byte swizzled row (dQ's shared tile, its TMA boxes)


def f32_tile_offset(row, col, rows: int):
    """Byte offset of f32 element (row, col) of a shared tile of 32-column boxes, each `rows` rows of 128
    bytes in the 128-byte swizzle (the 16-byte chunk XORed with the row modulo 8): dQ's tile, which the
    writer's TMA boxes read."""
    box, column = col // F32_BOX_COLUMNS, col % F32_BOX_COLUMNS
    return box * rows * 128 + row * 128 + ((column // 4) ^ (row % 8)) * CHUNK + (column % 4) * 4


def f32_store_column(column, row):
    """The 8-column group (a multiple of 8 inside a 32-column box) a thread at accumulator row `row` stores
    in the store that is group `column`'s for even rows: odd rows store the group two over. A warp stores
    a group of all its rows at once, two adjacent f32 a thread (a half-warp per pass); the swizzle maps
    rows r and r ^ 1 onto the same 32 bytes of banks, and the swap moves one of them to other banks."""
    return column ^ ((row % 2) * 16)


# A descriptor plus a constant (wgmma_atom.offset_descriptor), as inline PTX so that it is issued where the
# product that reads it is: the interpreter recognises this text.
DESCRIPTOR_OFFSET_PTX = "add.s64 $0, $1, $2;"


def decode_descriptor(value: int) -> dict:
    """The fields of a descriptor (unsigned or as a signed i64), in bytes; `swizzle` in bytes."""
    value &= (1 << 64) - 1
    mode = value >> 62
    return {"address": (value & 0x3FFF) * 16, "leading_byte_offset": ((value >> 16) & 0x3FFF) * 16,
            "stride_byte_offset": ((value >> 32) & 0x3FFF) * 16, "base_offset": (value >> 49) & 0x7,
            "swizzle": {v: k for k, v in DESCRIPTOR_MODE.items()}[mode]}
