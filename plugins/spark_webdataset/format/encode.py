"""Column values to member payload bytes, by Arrow type.

binary as is; string as UTF-8; numbers and booleans as decimal text (the
`.cls` convention: booleans are 1/0); struct/map/list as compact JSON;
date/timestamp as ISO-8601 text (timestamps with a zone in UTC, with a
"Z"); null leaves the member out. Everything but nested types stays in
Arrow's C++ kernels.
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
        return _encode_json(column)
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
    """Arrow's Python value with maps turned into JSON objects."""
    if value is None:
        return None
    if pa.types.is_map(arrow_type):
        return {str(k): _plain(v, arrow_type.item_type) for k, v in value}
    if pa.types.is_struct(arrow_type):
        return {
            arrow_type.field(i).name: _plain(value[arrow_type.field(i).name], arrow_type.field(i).type)
            for i in range(arrow_type.num_fields)
        }
    if _is(arrow_type, (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)):
        return [_plain(item, arrow_type.value_type) for item in value]
    return value


def _encode_json(column: pa.Array) -> pa.Array:
    arrow_type = column.type
    encoded = [
        None
        if value is None
        else json.dumps(
            _plain(value, arrow_type), separators=(",", ":"), ensure_ascii=False, default=_json_default
        ).encode()
        for value in column.to_pylist(maps_as_pydicts=None)
    ]
    return pa.array(encoded, pa.large_binary())
