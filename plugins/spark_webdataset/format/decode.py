"""Member payloads back to typed values: the inverse of `encode.py`.

Binary stays as is; the other types parse the text the writer wrote (and
the usual spellings other tools write: "true"/"false", ISO dates with or
without a zone). Binary inside struct/map/array JSON (values and map
keys) is base64 text, as the writer wrote it. A payload that does not
parse names the field and key.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from ..errors import BadOption, InputError
from .encode import BINARY_TYPE_IDS


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def _bool(data: bytes) -> bool:
    text = data.strip().lower()
    if text in (b"1", b"true"):
        return True
    if text in (b"0", b"false"):
        return False
    raise ValueError(f"{data[:40]!r} is not a boolean")


def _timestamp(data: bytes) -> datetime.datetime:
    text = data.decode("ascii").strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    value = datetime.datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)


def _naive_timestamp(data: bytes) -> datetime.datetime:
    return datetime.datetime.fromisoformat(data.decode("ascii").strip().rstrip("Z"))


def _base64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not base64 text")
    return base64.b64decode(value, validate=True)


def _json_value(arrow_type: pa.DataType) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        return _from_json(json.loads(data), arrow_type)

    return parse


def _from_json(value: Any, arrow_type: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_map(arrow_type):
        if arrow_type.key_type.id in BINARY_TYPE_IDS:
            return [(_base64(k), _from_json(v, arrow_type.item_type)) for k, v in value.items()]
        return [(k, _from_json(v, arrow_type.item_type)) for k, v in value.items()]
    if pa.types.is_struct(arrow_type):
        return {
            arrow_type.field(i).name: _from_json(value.get(arrow_type.field(i).name), arrow_type.field(i).type)
            for i in range(arrow_type.num_fields)
        }
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return [_from_json(item, arrow_type.value_type) for item in value]
    if pa.types.is_timestamp(arrow_type):
        return _timestamp(value.encode())
    if pa.types.is_date(arrow_type):
        return datetime.date.fromisoformat(value)
    if pa.types.is_decimal(arrow_type):
        return decimal.Decimal(str(value))
    if arrow_type.id in BINARY_TYPE_IDS:
        return _base64(value)
    return value


def parser_for(arrow_type: pa.DataType) -> Callable[[bytes], Any] | None:
    """How to parse a payload into a value of `arrow_type`; None for binary (kept as is)."""
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return None
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return _text
    if pa.types.is_integer(arrow_type):
        return lambda data: int(data)
    if pa.types.is_floating(arrow_type):
        return lambda data: float(data)
    if pa.types.is_decimal(arrow_type):
        return lambda data: decimal.Decimal(data.decode("ascii"))
    if pa.types.is_boolean(arrow_type):
        return _bool
    if pa.types.is_date(arrow_type):
        return lambda data: datetime.date.fromisoformat(data.decode("ascii").strip())
    if pa.types.is_timestamp(arrow_type):
        return _timestamp if arrow_type.tz else _naive_timestamp
    if pa.types.is_struct(arrow_type) or pa.types.is_map(arrow_type) or pa.types.is_list(arrow_type):
        return _json_value(arrow_type)
    raise BadOption(f"cannot decode webdataset fields as {arrow_type}")


def decode_column(values: Sequence[bytes | None], arrow_type: pa.DataType, field: str, keys: Sequence[str]) -> pa.Array:
    parse = parser_for(arrow_type)
    if parse is None:
        return pa.array(values, arrow_type)
    decoded = []
    for value, key in zip(values, keys):
        if value is None:
            decoded.append(None)
            continue
        try:
            decoded.append(parse(value))
        except (ValueError, UnicodeDecodeError, json.JSONDecodeError, decimal.InvalidOperation) as error:
            raise InputError(
                f"sample {key!r}, field {field!r}: cannot decode {value[:40]!r} as {arrow_type}: {error}"
            ) from None
    try:
        return pa.array(decoded, arrow_type)
    except (pa.ArrowInvalid, OverflowError):
        for value, parsed, key in zip(values, decoded, keys):  # find the value that does not fit
            try:
                pa.array([parsed], arrow_type)
            except (pa.ArrowInvalid, OverflowError) as error:
                raise InputError(
                    f"sample {key!r}, field {field!r}: {value[:40]!r} does not fit {arrow_type}: {error}"
                ) from None
        raise
