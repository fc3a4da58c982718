"""A parser for MLIR's *generic* operation form, without MLIR.

The GPU machines have no MLIR bindings, so the bundle carries the kernels as generic-form text
(`get_asm(print_generic_op_form=True)`) and this module reads it back into a small op tree:

    op        ::= results? string '(' uses ')' successors? ('<{' props '}>')? regions? attr-dict? ':' fn-type loc?
    region    ::= '{' block* '}'      block ::= ('^name' ('(' %arg ':' type loc? ... ')')? ':')? op*

Attributes become Python values (see `Number`, `Dense`, `DialectAttr`, `SymbolRef`, `Opaque`); types
become `types.py` objects. Alias definitions (`#map = ...`, `!t = ...`, `#loc3 = loc(...)`) may sit
before or after the module and are resolved by name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ...dtypes import bf16_bits, bf16_value
from .errors import InterpreterError
from .types import FunctionType, MemRefType, OpaqueType, ScalarType, VectorType, scalar_type

# --- the op tree -----------------------------------------------------------------------------------


@dataclass
class Block:
    args: list[tuple[str, object]]           # (value name, type)
    ops: list["Operation"]


@dataclass
class Region:
    blocks: list[Block]


@dataclass
class Operation:
    name: str
    results: list[str]                       # value names, '%12#1' for the 2nd result of '%12:2'
    operands: list[str]
    attributes: dict                         # properties and discardable attributes together
    regions: list[Region]
    operand_types: tuple
    result_types: tuple
    line: int                                # 1-based line of the op in the parsed text
    loc: str | None = None                   # the trailing loc(...) body, aliases unresolved
    successors: list[str] = field(default_factory=list)


@dataclass
class ParsedModule:
    ops: list[Operation]                     # the top-level ops
    aliases: dict[str, str]                  # '#loc3' -> 'loc("-":5:17)', '#map' -> 'affine_map<...>'

    def location(self, op: Operation) -> str:
        """'line N' of the interpreter IR, plus the MLIR source location when the text carries one."""
        text = f"line {op.line} of the interpreter IR"
        loc = self.resolve_loc(op.loc) if op.loc else ""
        return f"{text}, {loc}" if loc and loc != "unknown" else text

    def resolve_loc(self, loc: str, depth: int = 0) -> str:
        loc = loc.strip()
        if loc.startswith("#") and depth < 8 and loc in self.aliases:
            alias = self.aliases[loc].strip()
            if alias.startswith("loc(") and alias.endswith(")"):
                alias = alias[4:-1]
            return self.resolve_loc(alias, depth + 1)
        return loc

    def walk(self):
        """Every op, depth first, in text order."""
        stack = list(reversed(self.ops))
        while stack:
            op = stack.pop()
            yield op
            for region in reversed(op.regions):
                for block in reversed(region.blocks):
                    stack.extend(reversed(block.ops))


# --- attribute values ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Number:
    """An integer or float literal with its type (`15 : i32`, `1.5e+00 : f32`)."""

    value: int | float
    type: object = None


@dataclass(frozen=True)
class Dense:
    """`dense<...> : type`: `values` is a NumPy array of the type's shape, in value dtype."""

    values: np.ndarray
    type: object


@dataclass(frozen=True)
class DialectAttr:
    """`#dialect<body>` or `#dialect.name<body>`: an enum-like attribute kept as text."""

    text: str

    @property
    def keyword(self) -> str:
        """The last word of the body: 'x' for #gpu<dim x>, 'row_shl' for #amdgpu<dpp_perm row_shl>."""
        body = self.text[self.text.find("<") + 1:].rstrip(">").strip()
        return body.split()[-1] if body else ""


@dataclass(frozen=True)
class SymbolRef:
    name: str


@dataclass(frozen=True)
class Opaque:
    """An attribute the interpreter does not interpret (affine maps, locations, ...), as text."""

    text: str


# --- the parser ------------------------------------------------------------------------------------

_WS = re.compile(r"(?:\s+|//[^\n]*)+")
_WS_START = frozenset(" \t\r\n\f\v/")
_VALUE_ID = re.compile(r"%[A-Za-z0-9_$.\-]+")
_SUFFIX_ID = re.compile(r"[A-Za-z0-9_$.\-]+")
_BARE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_$.\-]*")
_NUMBER = re.compile(r"[-+]?(?:0x[0-9A-Fa-f]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|inf|nan)")
_INT = re.compile(r"\d+")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self._counted = (0, 1)  # (position, line there): lines are counted on from the last query
        self._op_types: dict[str, tuple] = {}
        self.aliases: dict[str, str] = {}
        self._parsed_aliases: dict[str, object] = {}

    # -- low level --
    def error(self, message: str, pos: int | None = None) -> InterpreterError:
        pos = self.pos if pos is None else pos
        line = self.text.count("\n", 0, pos) + 1
        col = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        snippet = self.text[pos:pos + 40].split("\n")[0]
        return InterpreterError(f"cannot parse the interpreter IR at line {line}, column {col}: {message} "
                                f"(at {snippet!r})")

    def skip(self) -> None:
        if self.text[self.pos:self.pos + 1] not in _WS_START:  # the usual case: nothing to skip
            return
        m = _WS.match(self.text, self.pos)
        if m:
            self.pos = m.end()

    def peek(self, s: str) -> bool:
        self.skip()
        return self.text.startswith(s, self.pos)

    def accept(self, s: str) -> bool:
        if self.peek(s):
            self.pos += len(s)
            return True
        return False

    def expect(self, s: str) -> None:
        if not self.accept(s):
            raise self.error(f"expected {s!r}")

    def match(self, pattern: re.Pattern) -> str | None:
        self.skip()
        m = pattern.match(self.text, self.pos)
        if not m:
            return None
        self.pos = m.end()
        return m.group(0)

    def line(self) -> int:
        pos, line = self._counted
        if self.pos < pos:
            pos, line = 0, 1
        line += self.text.count("\n", pos, self.pos)
        self._counted = (self.pos, line)
        return line

    def at_end(self) -> bool:
        self.skip()
        return self.pos >= len(self.text)

    def balanced(self, open_ch: str, close_ch: str) -> str:
        """Consume from an opening bracket to its match; '->' is not a closing '>'. Returns the text."""
        self.skip()
        start = self.pos
        if self.text[self.pos] != open_ch:
            raise self.error(f"expected {open_ch!r}")
        pairs = {"<": ">", "(": ")", "[": "]", "{": "}"}
        stack = []
        i = self.pos
        text = self.text
        while i < len(text):
            c = text[i]
            if c == '"':
                m = _STRING.match(text, i)
                if not m:
                    raise self.error("unterminated string", i)
                i = m.end()
                continue
            if c in pairs:
                stack.append(pairs[c])
            elif c in ")]}>":
                if c == ">" and i > 0 and text[i - 1] == "-":
                    i += 1
                    continue
                if not stack or stack[-1] != c:
                    raise self.error(f"unbalanced {c!r}", i)
                stack.pop()
                if not stack:
                    self.pos = i + 1
                    return text[start:self.pos]
            i += 1
        raise self.error(f"unterminated {open_ch!r}", start)

    # -- module --
    def parse_module(self) -> ParsedModule:
        ops = []
        while not self.at_end():
            if self.peek("#") or self.peek("!"):
                self.parse_alias_definition()
            else:
                ops.append(self.parse_operation())
        return ParsedModule(ops, self.aliases)

    def parse_alias_definition(self) -> None:
        start = self.pos
        sigil = self.text[self.pos]
        self.pos += 1
        name = self.match(_SUFFIX_ID)
        if not name:
            raise self.error("expected an alias name", start)
        self.expect("=")
        self.skip()
        value_start = self.pos
        if sigil == "!":
            self.parse_type()
        else:
            self.parse_attribute()
        self.aliases[sigil + name] = self.text[value_start:self.pos].strip()

    # -- operations --
    def parse_operation(self) -> Operation:
        self.skip()
        line = self.line()
        results: list[str] = []
        if self.peek("%"):
            while True:
                name = self.match(_VALUE_ID)
                if not name:
                    raise self.error("expected a result name")
                count = 1
                if self.accept(":"):
                    count = int(self.match(_INT) or 1)
                    results += [f"{name}#{i}" for i in range(count)]
                else:
                    results.append(name)
                if not self.accept(","):
                    break
            self.expect("=")
        name_text = self.match(_STRING)
        if not name_text:
            raise self.error("expected a generic op name in quotes (is this the generic op form?)")
        name = _unescape(name_text[1:-1])
        self.expect("(")
        operands = []
        if not self.accept(")"):
            while True:
                operands.append(self.parse_value_use())
                if self.accept(")"):
                    break
                self.expect(",")
        successors = []
        if self.accept("["):
            while not self.accept("]"):
                self.skip()
                successors.append(self.match(re.compile(r"\^[A-Za-z0-9_$.\-]+")) or "")
                if not successors[-1]:
                    raise self.error("expected a successor block")
                if self.peek(":"):  # successor operands: ^bb1(%x : type)
                    raise self.error("block successors with operands are not supported")
                self.accept(",")
        attributes = {}
        if self.accept("<{"):
            attributes.update(self.parse_attr_entries("}>"))
        regions = []
        if self.peek("("):
            self.expect("(")
            while True:
                regions.append(self.parse_region())
                if self.accept(")"):
                    break
                self.expect(",")
        if self.peek("{"):
            self.expect("{")
            attributes.update(self.parse_attr_entries("}"))
        self.expect(":")
        fn = self.parse_function_type()
        if not isinstance(fn, FunctionType):
            raise self.error("expected the op's function type")
        loc = self.parse_optional_loc()
        return Operation(name, results, operands, attributes, regions, fn.inputs, fn.results, line, loc,
                         successors)

    def parse_function_type(self):
        """An op's trailing type. Kernels repeat a few types many times, so each distinct rest of the
        line (the type and whatever follows it) is parsed once."""
        self.skip()
        end = self.text.find("\n", self.pos)
        key = self.text[self.pos:end if end >= 0 else len(self.text)]
        known = self._op_types.get(key)
        if known is not None:
            self.pos += known[1]
            return known[0]
        start = self.pos
        fn = self.parse_type()
        if self.pos - start <= len(key):  # it ended on this line: the line decides it
            self._op_types[key] = (fn, self.pos - start)
        return fn

    def parse_value_use(self) -> str:
        name = self.match(_VALUE_ID)
        if not name:
            raise self.error("expected an SSA value")
        if self.text.startswith("#", self.pos):
            self.pos += 1
            name += "#" + (self.match(_INT) or "")
        return name

    def parse_optional_loc(self) -> str | None:
        if self.peek("loc("):
            self.pos += 3
            return self.balanced("(", ")")[1:-1]
        return None

    def parse_region(self) -> Region:
        self.expect("{")
        blocks: list[Block] = []
        while not self.accept("}"):
            args: list[tuple[str, object]] = []
            if self.peek("^"):
                self.match(re.compile(r"\^[A-Za-z0-9_$.\-]+"))
                if self.accept("("):
                    while not self.accept(")"):
                        arg = self.match(_VALUE_ID)
                        if not arg:
                            raise self.error("expected a block argument")
                        self.expect(":")
                        args.append((arg, self.parse_type()))
                        self.parse_optional_loc()
                        self.accept(",")
                self.expect(":")
            elif blocks:
                raise self.error("expected a block label or '}'")
            ops = []
            while not (self.peek("}") or self.peek("^")):
                ops.append(self.parse_operation())
            blocks.append(Block(args, ops))
        return Region(blocks)

    # -- attributes --
    def parse_attr_entries(self, close: str) -> dict:
        entries = {}
        if self.accept(close):
            return entries
        while True:
            key = self.match(_STRING)
            key = _unescape(key[1:-1]) if key else self.match(_BARE_ID)
            if not key:
                raise self.error("expected an attribute name")
            entries[key] = self.parse_attribute() if self.accept("=") else True
            if self.accept(close):
                return entries
            self.expect(",")

    def parse_attribute(self):
        self.skip()
        text, pos = self.text, self.pos
        c = text[pos] if pos < len(text) else ""
        if c == '"':
            s = self.match(_STRING)
            return _unescape(s[1:-1])
        if c == "[":
            self.pos += 1
            items = []
            if not self.accept("]"):
                while True:
                    items.append(self.parse_attribute())
                    if self.accept("]"):
                        break
                    self.expect(",")
            return items
        if c == "{":
            self.pos += 1
            return self.parse_attr_entries("}")
        if c == "@":
            self.pos += 1
            name = self.match(_STRING) or self.match(_SUFFIX_ID)
            while self.text.startswith("::@", self.pos):
                self.pos += 3
                name += "::@" + (self.match(_STRING) or self.match(_SUFFIX_ID))
            return SymbolRef(name.strip('"'))
        if c == "#":
            return self.parse_hash_attribute()
        if c == "(":
            return self.parse_type()
        if c == "-" or c.isdigit() or c == "+":
            return self.parse_number_attribute()
        word_m = _BARE_ID.match(text, pos)
        word = word_m.group(0) if word_m else ""
        if word in ("true", "false"):
            self.pos = word_m.end()
            return word == "true"
        if word == "unit":
            self.pos = word_m.end()
            return True
        if word == "array" and text.startswith("<", word_m.end()):
            return self.parse_dense_array()
        if word == "dense" and text.startswith("<", word_m.end()):
            return self.parse_dense()
        if word == "loc" and text.startswith("(", word_m.end()):
            self.pos = word_m.end()
            return Opaque("loc" + self.balanced("(", ")"))
        if word and (scalar_type(word) or word in ("vector", "memref", "none", "tensor")):
            return self.parse_type()
        if word:
            self.pos = word_m.end()
            if self.text.startswith("<", self.pos):
                return Opaque(word + self.balanced("<", ">"))
            if self.text.startswith("[", self.pos):  # distinct[0]<...>
                rest = self.balanced("[", "]")
                if self.text.startswith("<", self.pos):
                    rest += self.balanced("<", ">")
                return Opaque(word + rest)
            return Opaque(word)
        if c == "!":
            return self.parse_type()
        raise self.error("cannot read this attribute")

    def parse_hash_attribute(self):
        start = self.pos
        self.pos += 1
        name = self.match(_SUFFIX_ID) or ""
        if self.text.startswith("<", self.pos):
            self.balanced("<", ">")
            return DialectAttr(self.text[start:self.pos])
        alias = "#" + name
        if alias in self.aliases:
            return self.parsed_alias(alias)
        return Opaque(alias)  # an alias defined later in the text (locations are printed last)

    def parsed_alias(self, alias: str):
        if alias not in self._parsed_aliases:
            sub = _Parser(self.aliases[alias])
            sub.aliases = self.aliases
            self._parsed_aliases[alias] = sub.parse_attribute() if alias[0] == "#" else sub.parse_type()
        return self._parsed_aliases[alias]

    def parse_number_attribute(self):
        literal = self.match(_NUMBER)
        if literal is None:
            raise self.error("expected a number")
        t = None
        if self.peek(":") and not self.peek("::"):
            save = self.pos
            self.expect(":")
            self.skip()
            if self.text[self.pos].isalpha() or self.text[self.pos] == "!":
                t = self.parse_type()
            else:
                self.pos = save
        return Number(literal_value(literal, t), t)

    def parse_dense_array(self):
        self.pos = self.text.index("<", self.pos) + 1
        t = self.parse_type()
        values = []
        if self.accept(":"):
            while True:
                literal = self.match(_NUMBER) or self.match(re.compile(r"true|false"))
                if literal is None:
                    raise self.error("expected an array element")
                values.append(literal == "true" if literal in ("true", "false") else literal_value(literal, t))
                if not self.accept(","):
                    break
        self.expect(">")
        return tuple(values)

    def parse_dense(self):
        self.pos = self.text.index("<", self.pos) + 1
        self.skip()
        body_start = self.pos
        self.pos -= 1
        self.balanced("<", ">")
        body = self.text[body_start:self.pos - 1].strip()
        self.expect(":")
        t = self.parse_type()
        return Dense(dense_values(body, t, self), t)

    # -- types --
    def parse_type(self):
        self.skip()
        text, pos = self.text, self.pos
        if text.startswith("(", pos):
            self.pos += 1
            inputs = []
            if not self.accept(")"):
                while True:
                    inputs.append(self.parse_type())
                    if self.accept(")"):
                        break
                    self.expect(",")
            if not self.accept("->"):
                return OpaqueType("(" + ", ".join(map(str, inputs)) + ")")
            if self.peek("("):
                self.expect("(")
                results = []
                if not self.accept(")"):
                    while True:
                        results.append(self.parse_type())
                        if self.accept(")"):
                            break
                        self.expect(",")
            else:
                results = [self.parse_type()]
            return FunctionType(tuple(inputs), tuple(results))
        if text.startswith("!", pos):
            self.pos += 1
            name = "!" + (self.match(_SUFFIX_ID) or "")
            if self.text.startswith("<", self.pos):
                return OpaqueType(name + self.balanced("<", ">"))
            if name in self.aliases:
                return self.parsed_alias(name)
            return OpaqueType(name)
        word = self.match(_BARE_ID)
        if not word:
            raise self.error("expected a type")
        if word == "vector":
            return self.parse_vector_type()
        if word == "memref":
            return self.parse_memref_type()
        t = scalar_type(word)
        if t is not None:
            return t
        if self.text.startswith("<", self.pos):
            return OpaqueType(word + self.balanced("<", ">"))
        return OpaqueType(word)

    def parse_shape(self) -> list[int | None]:
        dims = []
        while True:
            self.skip()
            m = re.compile(r"(\?|\d+)x").match(self.text, self.pos)
            if not m:
                return dims
            dims.append(None if m.group(1) == "?" else int(m.group(1)))
            self.pos = m.end()

    def parse_vector_type(self) -> VectorType:
        self.expect("<")
        if self.peek("["):
            raise self.error("scalable vectors are not supported")
        dims = self.parse_shape()
        elem = self.parse_type()
        self.expect(">")
        if not isinstance(elem, ScalarType) or any(d is None for d in dims):
            raise self.error(f"unsupported vector element type {elem}")
        return VectorType(tuple(dims), elem)

    def parse_memref_type(self):
        start = self.pos
        self.expect("<")
        if self.peek("*"):
            self.pos = start
            return OpaqueType("memref" + self.balanced("<", ">"))
        dims = self.parse_shape()
        elem = self.parse_type()
        strides: tuple | None = None
        space = ""
        while self.accept(","):
            self.skip()
            if self.text.startswith("strided<", self.pos):
                strides = self.parse_strided_layout()
            elif self.text.startswith("affine_map<", self.pos):
                self.pos += len("affine_map")
                layout = "affine_map" + self.balanced("<", ">")
                strides = _identity_or_fail(layout, dims, self)
            else:
                attr_start = self.pos
                attr = self.parse_attribute()
                if isinstance(attr, Opaque) and attr.text.startswith("affine_map"):
                    strides = _identity_or_fail(attr.text, dims, self)
                else:
                    space = self.text[attr_start:self.pos].strip()
        self.expect(">")
        if not isinstance(elem, ScalarType):
            raise self.error(f"memrefs of {elem} are not supported")
        return MemRefType(tuple(dims), elem, strides, space)

    def parse_strided_layout(self) -> tuple:
        self.pos += len("strided")
        self.expect("<")
        self.expect("[")
        strides = []
        while not self.accept("]"):
            strides.append(None if self.accept("?") else int(self.match(_NUMBER)))
            self.accept(",")
        if self.accept(","):
            self.expect("offset")
            self.expect(":")
            if not self.accept("?"):
                self.match(_NUMBER)
        self.expect(">")
        return tuple(strides)


def _identity_or_fail(layout: str, dims, parser: _Parser):
    """An identity affine_map layout is the default layout; any other map is not supported."""
    m = re.fullmatch(r"affine_map<\(([^)]*)\)\s*->\s*\(([^)]*)\)>", layout.replace("\n", " "))
    if m and [s.strip() for s in m.group(1).split(",")] == [s.strip() for s in m.group(2).split(",")]:
        return None
    raise parser.error(f"memref layout {layout} is not supported (use strided<[...]>)")


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt in '"\\':
                out.append(nxt)
                i += 2
                continue
            if nxt == "n":
                out.append("\n")
                i += 2
                continue
            if nxt == "t":
                out.append("\t")
                i += 2
                continue
            if re.fullmatch(r"[0-9A-Fa-f]{2}", s[i + 1:i + 3]):
                out.append(chr(int(s[i + 1:i + 3], 16)))
                i += 3
                continue
        out.append(s[i])
        i += 1
    return "".join(out)


# --- literals --------------------------------------------------------------------------------------

def literal_value(literal: str, t) -> int | float:
    """A literal's value for type `t`; hex literals of float types are bit patterns."""
    is_float = isinstance(t, ScalarType) and t.is_float
    if literal.lower().lstrip("+-").startswith("0x"):
        bits = int(literal, 16)
        return float(float_from_bits(bits, t)) if is_float else bits
    if any(ch in literal for ch in ".eEn") or is_float:
        return float(literal)
    return int(literal)


def float_from_bits(bits: int, t: ScalarType):
    width = {"f16": np.uint16, "bf16": np.uint16, "f32": np.uint32, "f64": np.uint64}[t.name]
    raw = np.array(bits, dtype=width)
    if t.name == "bf16":
        return bf16_value(raw)[()]
    return raw.view({"f16": np.float16, "f32": np.float32, "f64": np.float64}[t.name])[()]


def typed_scalar(value, t: ScalarType):
    """A Python number as a NumPy scalar of `t`'s value dtype (ints wrap, bf16 rounds to nearest even)."""
    if t.is_float:
        if t.name == "bf16":
            return bf16_value(bf16_bits(np.float32(value)))[()]
        return t.dtype.type(value)
    if t.bits == 1:
        return np.bool_(bool(value))
    value = int(value) & ((1 << t.bits) - 1)
    return np.array(value, dtype=t.unsigned_dtype).astype(t.dtype)[()]


def dense_values(body: str, t, parser: _Parser) -> np.ndarray:
    """The values of `dense<body> : t` (splat, nested list or hex blob) as an array of t's shape."""
    if isinstance(t, VectorType):
        shape, elem = t.shape, t.elem
    elif isinstance(t, ScalarType):
        shape, elem = (), t
    else:
        raise parser.error(f"dense attributes of type {t} are not supported")
    if body.startswith('"0x'):
        blob = bytes.fromhex(body[3:-1])
        flat = np.frombuffer(blob, dtype=elem.storage_dtype if elem.bits != 1 else np.uint8)
        if elem.name == "bf16":
            flat = bf16_value(flat)
        flat = flat.astype(elem.dtype)
        n = int(np.prod(shape, dtype=np.int64))
        return (np.full(shape, flat[0]) if flat.size == 1 else flat[:n].reshape(shape)).astype(elem.dtype)
    items = re.findall(r"true|false|[-+]?(?:0x[0-9A-Fa-f]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|inf|nan)", body)
    values = [typed_scalar(True if s == "true" else False if s == "false" else literal_value(s, elem), elem)
              for s in items]
    if not values:
        raise parser.error(f"cannot read dense values {body!r}")
    if len(values) == 1 and not body.startswith("["):
        return np.full(shape, values[0], dtype=elem.dtype)
    return np.array(values, dtype=elem.dtype).reshape(shape)


def parse_module(text: str) -> ParsedModule:
    """Parse generic-form MLIR text (a module, or bare top-level ops such as a gpu.module)."""
    return _Parser(text).parse_module()
