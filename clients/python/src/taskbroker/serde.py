"""Typed payloads and results (docs/client-spec.md, point 12): a ``Serializer`` turns values
into bytes and back; the default, ``JSONSerializer``, is JSON in UTF-8.

- Encodes dataclasses, pydantic models (when pydantic is installed), dicts, lists, strings,
  numbers, booleans and None.
- Decodes into the type a handler's parameter names: a dataclass (its fields, recursively), a
  TypedDict or ``dict``, a pydantic ``BaseModel``, ``list[...]``, a plain JSON type, or ``Any``
  (the decoded JSON value as is). ``bytes`` is never serialized: raw bytes pass through.

>>> tb.submit("emails", Email(to="ada@example.com"))      # JSON on the wire
>>> @worker.handler("emails")
... def send(email: Email) -> Receipt: ...                  # decoded by the annotation
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, Protocol, TypeVar, runtime_checkable

from taskbroker.errors import PermanentError

T = TypeVar("T")

try:  # pydantic is optional: models are encoded and decoded through it when it is installed
    import pydantic

    _BaseModel: type | None = pydantic.BaseModel
except ImportError:  # pragma: no cover -- pydantic is not installed
    _BaseModel = None


@runtime_checkable
class Serializer(Protocol):
    """Turns a value into a payload or result (``encode``) and back into a value of the type
    asked for (``decode``). Raise ``TypeError`` or ``ValueError`` for what cannot be done."""

    def encode(self, value: Any) -> bytes: ...

    def decode(self, data: bytes, type_: Any) -> Any: ...


class PayloadError(PermanentError):
    """A payload that does not decode into its handler's type: the attempt fails at once and
    for good (retrying cannot change the payload)."""


class JSONSerializer:
    """JSON in UTF-8 (the default)."""

    def encode(self, value: Any) -> bytes:
        return json.dumps(_plain(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()

    def decode(self, data: bytes, type_: Any) -> Any:
        return _convert(json.loads(data), type_)


#: The serializer clients and workers use unless given another.
DEFAULT_SERIALIZER: Serializer = JSONSerializer()


def type_name(type_: Any) -> str:
    """A type as a message names it: ``Email``, ``dict``, ``list[int]``."""
    if type_ is Any:
        return "JSON value"
    name = getattr(type_, "__name__", None)
    return name if isinstance(name, str) and typing.get_origin(type_) is None else str(type_).replace("typing.", "")


def one_line(err: BaseException) -> str:
    """An exception's message on one line (pydantic's span several)."""
    return " ".join(str(err).split()) or type(err).__name__


def encode_payload(serializer: Serializer, value: Any) -> bytes:
    """A payload or result as bytes: bytes as they are, anything else through ``serializer``."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return serializer.encode(value)


def decode_payload(serializer: Serializer, data: bytes, type_: Any, queue: str) -> Any:
    """``data`` as ``type_`` (bytes pass through); raises PayloadError naming the queue and the
    type in one line when it does not decode."""
    if type_ is bytes:
        return data
    try:
        return serializer.decode(data, type_)
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as err:
        raise PayloadError(f"queue {queue}: payload is not a valid {type_name(type_)}: {one_line(err)}") from err


# JSON <-> Python values.


def _plain(value: Any) -> Any:
    """``value`` made of JSON types only (dataclasses and models as dicts)."""
    if _BaseModel is not None and isinstance(value, _BaseModel):
        return value.model_dump(mode="json")  # type: ignore[attr-defined]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"a dict key of type {type(k).__name__} is not a JSON object key")
            out[k] = _plain(v)
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _convert(value: Any, type_: Any) -> Any:
    """A decoded JSON value checked and converted into ``type_``."""
    if type_ is Any or type_ is object:
        return value
    if _BaseModel is not None and isinstance(type_, type) and issubclass(type_, _BaseModel):
        return type_.model_validate(value)  # type: ignore[attr-defined]
    origin = typing.get_origin(type_)
    args = typing.get_args(type_)
    if origin is typing.Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(value, arg)
            except (TypeError, ValueError, KeyError) as err:
                errors.append(one_line(err))
        raise ValueError("; ".join(errors) or f"got {_json_type(value)}")
    if origin in (list, tuple, set, frozenset) or type_ in (list, tuple, set, frozenset):
        _expect(value, list, type_)
        item = args[0] if args else Any
        items = [_convert(v, item) for v in value]
        container = origin or type_
        return items if container is list else container(items)
    if origin is dict or type_ is dict:
        _expect(value, dict, type_)
        item = args[1] if len(args) == 2 else Any
        return {k: _convert(v, item) for k, v in value.items()}
    if typing.is_typeddict(type_):
        _expect(value, dict, type_)
        hints = typing.get_type_hints(type_)
        missing = sorted(getattr(type_, "__required_keys__", frozenset()) - value.keys())
        if missing:
            raise ValueError(f"missing field {', '.join(missing)}")
        return {k: _convert(v, hints[k]) if k in hints else v for k, v in value.items()}
    if dataclasses.is_dataclass(type_) and isinstance(type_, type):
        _expect(value, dict, type_)
        hints = typing.get_type_hints(type_)
        fields = {f.name: f for f in dataclasses.fields(type_) if f.init}
        unknown = sorted(value.keys() - fields.keys())
        if unknown:
            raise ValueError(f"unknown field {', '.join(unknown)}")
        required = [
            n for n, f in fields.items()
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
        ]
        missing = sorted(set(required) - value.keys())
        if missing:
            raise ValueError(f"missing field {', '.join(missing)}")
        return type_(**{k: _convert(v, hints.get(k, Any)) for k, v in value.items()})
    if type_ is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if type_ in (str, int, float, bool, type(None)):
        if type(value) is not type_:
            raise ValueError(f"expected {type_name(type_)}, got {_json_type(value)}")
        return value
    raise TypeError(f"cannot decode into {type_name(type_)}")


def _expect(value: Any, json_type: type, type_: Any) -> None:
    if not isinstance(value, json_type):
        shape = "object" if json_type is dict else "array"
        # A payload of the wrong shape is a bad value (PayloadError), not a programming error.
        raise ValueError(f"expected a JSON {shape} for {type_name(type_)}, got {_json_type(value)}")  # noqa: TRY004


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )
