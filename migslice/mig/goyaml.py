"""YAML read and written the way NVIDIA's Go tools read it (sigs.k8s.io/yaml over go-yaml v2).

mig-parted reads its config with sigs.k8s.io/yaml v1.6.0: go-yaml v2 turns the YAML into Go
values (YAML 1.1 scalars: ``y``/``n``/``on``/``off`` are booleans, numbers follow Go's
``strconv``, timestamps stay text), the values are marshalled to JSON (keys become strings;
NaN and Inf have no JSON form) and ``encoding/json`` decodes that into the typed spec. PyYAML
differs in each of these places, so :func:`load` applies go-yaml's scalar rules
(``resolve.go``) and sigs.k8s.io/yaml's key conversion, and :func:`dump` quotes every string
that go-yaml would read back as something else.
"""

from __future__ import annotations

import base64
import math
import re
import string
from typing import Any

import yaml


class GoYamlError(ValueError):
    """Text that sigs.k8s.io/yaml cannot turn into JSON; the message says where."""


_PLAIN_TAG = "tag:migslice.io,2025:go-yaml-plain"
_TRUE = ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")
_FALSE = ("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")
_BOOLS = {**dict.fromkeys(_TRUE, True), **dict.fromkeys(_FALSE, False)}
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_SPECIAL_FLOATS = {
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
_YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with go-yaml v2's rules for unquoted, untagged scalars."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0] and value != "<<":
            return _PLAIN_TAG
        return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]


def _construct_plain(loader: yaml.SafeLoader, node: yaml.Node) -> object:
    return plain_scalar(str(node.value))


_Loader.add_constructor(_PLAIN_TAG, _construct_plain)


class _Dumper(yaml.SafeDumper):
    """Quotes every string that go-yaml v2 would read back as a number, bool or null."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    read_back = plain_scalar(data)
    style = None if isinstance(read_back, str) and read_back == data else "'"
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _represent_str)


def plain_scalar(text: str) -> object:
    """The value go-yaml v2 gives an unquoted scalar: bool, None, int, float or the text."""
    if text in _BOOLS:
        return _BOOLS[text]
    if text in _NULLS:
        return None
    if text in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[text]
    if text[0] == ".":
        return _finite_float(text) if "_" not in text and text.isascii() else text
    if text[0] in "+-0123456789":
        plain = text.replace("_", "")
        number = parse_int(plain)
        if number is None:
            number = parse_uint(plain, 64)
        if number is not None:
            return number
        if _YAML_FLOAT.fullmatch(plain):
            return _finite_float(plain)
    return text


def _finite_float(text: str) -> object:
    """Go's ParseFloat, which refuses what overflows (go-yaml then keeps the text)."""
    try:
        value = float(text)
    except ValueError:
        return text
    return text if math.isinf(value) else value


def parse_uint(text: str, bits: int) -> int | None:
    """Go's ``strconv.ParseUint(text, 0, bits)``: 0x/0o/0b/0 prefixes, ``_`` separators."""
    if not text:
        return None
    body, base = text, 10
    if text[0] == "0":
        prefix = text[1:2].lower()
        if len(text) >= 3 and prefix in ("b", "o", "x"):
            body, base = text[2:], {"b": 2, "o": 8, "x": 16}[prefix]
        else:
            body, base = text[1:], 8
    value, underscores = 0, False
    for char in body:
        if char == "_":
            underscores = True
            continue
        if char in string.digits:
            digit = ord(char) - ord("0")
        elif char in string.ascii_letters:
            digit = ord(char.lower()) - ord("a") + 10
        else:
            return None
        if digit >= base:
            return None
        value = value * base + digit
    if value >= 1 << bits or (underscores and not _underscore_ok(text)):
        return None
    return value


def _underscore_ok(text: str) -> bool:
    """Go's ``strconv.underscoreOK``: ``_`` only between digits or after a base prefix."""
    saw, index, hexadecimal = "^", 0, False
    if len(text) >= 2 and text[0] == "0" and text[1].lower() in "box":
        index, saw, hexadecimal = 2, "0", text[1].lower() == "x"
    for char in text[index:]:
        if char in string.digits or (hexadecimal and char.lower() in "abcdef"):
            saw = "0"
        elif char == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def parse_int(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 0, 64)``."""
    if not text:
        return None
    negative = text[0] == "-"
    magnitude = parse_uint(text[1:] if text[0] in "+-" else text, 64)
    if magnitude is None:
        return None
    if negative:
        return -magnitude if magnitude <= 1 << 63 else None
    return magnitude if magnitude < 1 << 63 else None


MAX_ALIASED_NODES = 1_000_000
"""How many more YAML nodes aliases may add, expanded, than a document writes. A few nested
aliases (a "billion laughs") expand to billions of nodes; go-yaml and kube-apiserver's reader
refuse "excessive aliasing" too, and no config or object a tool writes comes near this."""


def excessive_aliasing(node: yaml.Node) -> str:
    """Why a composed document aliases too much ("" when it does not): its nodes with every
    alias expanded, against the nodes it writes."""
    expanded, written = _expanded(node, {}), _written(node, set())
    if expanded - written <= MAX_ALIASED_NODES:
        return ""
    return (
        f"YAML aliases expand it to {expanded:,} nodes from {written:,} written (at most "
        f"{MAX_ALIASED_NODES:,} more)"
    )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _expanded(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Nodes in ``node`` with every alias expanded (a shared node counted where it is used;
    worked out once per node)."""
    found = sizes.get(id(node))
    if found is None:
        found = sizes[id(node)] = 1 + sum(_expanded(child, sizes) for child in _children(node))
    return found


def _written(node: yaml.Node, seen: set[int]) -> int:
    """Distinct nodes in ``node`` (an alias's target counted once)."""
    if id(node) in seen:
        return 0
    seen.add(id(node))
    return 1 + sum(_written(child, seen) for child in _children(node))


def load(text: str, what: str) -> object:
    """The first YAML document of ``text`` as the JSON value sigs.k8s.io/yaml decodes.

    ``what`` names the document in errors. Empty text is None (JSON null).
    """
    try:
        # The reader refuses a character YAML does not allow (NUL, a control character)
        # as it is made, for the whole text.
        loader = _Loader(text)
    except yaml.YAMLError as error:
        raise GoYamlError(f"{what} is not YAML: {' '.join(str(error).split())}") from None
    try:
        node = loader.get_node() if loader.check_node() else None
        excess = "" if node is None else excessive_aliasing(node)
        if excess:
            raise GoYamlError(excess)
        document = None if node is None else loader.construct_document(node)
        return _jsonable(document, "")
    except yaml.YAMLError as error:
        raise GoYamlError(f"{what} is not YAML: {' '.join(str(error).split())}") from None
    except GoYamlError as error:
        raise GoYamlError(f"{what}: {error}") from None
    except RecursionError:
        raise GoYamlError(
            f"{what} nests too deep (past Python's recursion limit); a mig-parted config "
            "nests a few levels"
        ) from None
    finally:
        loader.dispose()


def _jsonable(value: object, path: str) -> object:
    if isinstance(value, dict):
        return {
            _json_key(key, path): _jsonable(v, f"{path}.{key}" if path else str(key))
            for key, v in value.items()
        }
    if isinstance(value, list):
        return [_jsonable(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        raise GoYamlError(f"{path} is {value}, which has no JSON form (the file is read as JSON)")
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if value is None or isinstance(value, str | bool | int | float):
        return value
    raise GoYamlError(f"{path} is a {type(value).__name__}, which has no JSON form")


def _json_key(key: object, path: str) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):  # Go writes float32's shortest form; the same to 6 digits
        if math.isnan(key):
            return ".nan"
        return {math.inf: ".inf", -math.inf: "-.inf"}.get(key, f"{key:g}")
    raise GoYamlError(f"{path or 'the document'} has the key {key!r}; keys are strings")


def json_int(value: object) -> int | None:
    """What ``encoding/json`` puts in a Go ``int``: null leaves 0; None where it refuses."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return None
    if isinstance(value, float):  # Go marshals an integral float below 1e21 as plain digits
        if not (value.is_integer() and abs(value) < 1e21):
            return None
        value = int(value)
    if isinstance(value, int) and -(1 << 63) <= value < 1 << 63:
        return value
    return None


def dump(document: object) -> str:
    """Block-style YAML, keys in insertion order, strings quoted where go-yaml would misread."""
    return str(yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False))
