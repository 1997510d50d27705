"""Column values to member payload bytes, by Arrow type.

binary as is; string as UTF-8; numbers and booleans as decimal text (the
`.cls` convention: booleans are 1/0); struct/map/list as compact JSON;
date/timestamp as ISO-8601 text (timestamps with a zone in UTC, with a
"Z"); null leaves the member out. Everything but nested types stays in
Arrow's C++ kernels.

Inside the JSON, binary (values and map keys) is standard base64 text
with padding: `decode.py` turns it back into bytes where the read schema
says binary. A nested type whose leaves have no JSON form (a duration, an
interval, ...) is refused by its type, before any row is encoded.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidField

_TEXT_TYPES = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
_BINARY_TYPES = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view)
_NUMBER_TYPES = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)
_NESTED_TYPES = (
    pa.types.is_struct,
    pa.types.is_map,
    pa.types.is_list,
    pa.types.is_large_list,
    pa.types.is_fixed_size_list,
)


def _is(arrow_type: pa.DataType, predicates: tuple) -> bool:
    return any(predicate(arrow_type) for predicate in predicates)


def encode_column(column: pa.Array, field: str) -> pa.Array:
    """The payload of every row's member for `field`, as large_binary (null: no member)."""
    arrow_type = column.type
    if _is(arrow_type, _BINARY_TYPES + _TEXT_TYPES) or pa.types.is_fixed_size_binary(arrow_type):
        return column.cast(pa.large_binary())
    if _is(arrow_type, _NUMBER_TYPES):
        return column.cast(pa.large_string()).cast(pa.large_binary())
    if pa.types.is_boolean(arrow_type):
        text = pc.if_else(column, pa.scalar("1", pa.large_string()), pa.scalar("0", pa.large_string()))
        return text.cast(pa.large_binary())
    if pa.types.is_date(arrow_type):
        return column.cast(pa.large_string()).cast(pa.large_binary())
    if pa.types.is_timestamp(arrow_type):
        return _encode_timestamp(column)
    if pa.types.is_null(arrow_type):
        return pa.nulls(len(column), pa.large_binary())
    if _is(arrow_type, _NESTED_TYPES):
        _check_json_form(arrow_type, field, field)
        return _encode_json(column, field)
    raise InvalidField(
        f"column {field!r} has type {arrow_type}, which webdataset cannot encode "
        "(use binary, string, numbers, boolean, date, timestamp, struct, map or array)"
    )


def _encode_timestamp(column: pa.Array) -> pa.Array:
    arrow_type: pa.TimestampType = column.type
    suffix = ""
    if arrow_type.tz is not None:
        column = column.cast(pa.timestamp(arrow_type.unit, "UTC"))
        suffix = "Z"
    # seconds only when the values have no fraction, so a round trip is exact
    text = pc.strftime(column, format="%Y-%m-%dT%H:%M:%S")
    if suffix:
        text = pc.binary_join_element_wise(text, pa.scalar(suffix), "")
    return text.cast(pa.large_string()).cast(pa.large_binary())


# Binary inside JSON is base64 text, both ways (decode.py reads it back by the same set).
BINARY_TYPE_IDS = frozenset(t.id for t in (pa.binary(), pa.large_binary(), pa.binary_view(), pa.binary(1)))
_JSON_LEAF_TYPES = (
    _TEXT_TYPES
    + _BINARY_TYPES
    + _NUMBER_TYPES
    + (
        pa.types.is_fixed_size_binary,
        pa.types.is_boolean,
        pa.types.is_null,
        pa.types.is_date,
        pa.types.is_timestamp,
        pa.types.is_time,
    )
)


def _check_json_form(arrow_type: pa.DataType, field: str, path: str) -> None:
    """Refuse a nested type with a leaf `_json_default` cannot write, naming where it sits.

    `path` spells the place: `meta.gap` (struct field), `meta[]` (array
    item), `meta{key}` / `meta{value}` (map key / value).
    """
    if pa.types.is_struct(arrow_type):
        for i in range(arrow_type.num_fields):
            child = arrow_type.field(i)
            _check_json_form(child.type, field, f"{path}.{child.name}")
    elif pa.types.is_map(arrow_type):
        _check_json_form(arrow_type.key_type, field, f"{path}{{key}}")
        _check_json_form(arrow_type.item_type, field, f"{path}{{value}}")
    elif _is(arrow_type, (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)):
        _check_json_form(arrow_type.value_type, field, f"{path}[]")
    elif pa.types.is_dictionary(arrow_type):
        _check_json_form(arrow_type.value_type, field, path)
    elif not _is(arrow_type, _JSON_LEAF_TYPES):
        raise InvalidField(
            f"column {field!r} holds {path!r} of type {arrow_type}, which has no JSON form (inside a "
            "struct, map or array use binary, string, numbers, boolean, date, timestamp or nested types)"
        )


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            return value.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
        return value.isoformat()
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def _plain(value: Any, arrow_type: pa.DataType) -> Any:
    """Arrow's Python value with maps turned into JSON objects (binary keys as base64)."""
    if value is None:
        return None
    if pa.types.is_map(arrow_type):
        if arrow_type.key_type.id in BINARY_TYPE_IDS:
            return {base64.b64encode(k).decode("ascii"): _plain(v, arrow_type.item_type) for k, v in value}
        return {str(k): _plain(v, arrow_type.item_type) for k, v in value}
    if pa.types.is_struct(arrow_type):
        return {
            arrow_type.field(i).name: _plain(value[arrow_type.field(i).name], arrow_type.field(i).type)
            for i in range(arrow_type.num_fields)
        }
    if _is(arrow_type, (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)):
        return [_plain(item, arrow_type.value_type) for item in value]
    return value


def _encode_json(column: pa.Array, field: str) -> pa.Array:
    arrow_type = column.type
    values = column.to_pylist(maps_as_pydicts=None)
    try:
        encoded = [
            None
            if value is None
            else json.dumps(
                _plain(value, arrow_type), separators=(",", ":"), ensure_ascii=False, default=_json_default
            ).encode()
            for value in values
        ]
    except TypeError as error:  # a leaf `_check_json_form` let through: still name the column and row
        row = next(i for i, value in enumerate(values) if not _has_json_form(value, arrow_type))
        raise InvalidField(
            f"column {field!r}, row {row} of the batch: {error} (struct/map/array values need a JSON form)"
        ) from None
    return pa.array(encoded, pa.large_binary())


def _has_json_form(value: Any, arrow_type: pa.DataType) -> bool:
    try:
        json.dumps(_plain(value, arrow_type), default=_json_default)
    except TypeError:
        return False
    return True
