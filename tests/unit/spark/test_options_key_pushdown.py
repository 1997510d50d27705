"""Key-range reads without Spark: a shard's key range against keyMin/keyMax/keyPrefix, the row mask,
the options' parsing. The reads themselves: tests/integration/test_key_pushdown.py.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_webdataset.errors import BadOption
from spark_webdataset.spark.options import KeyRange, ReadOptions


@pytest.mark.parametrize(
    "bounds, inside, outside",
    [
        (KeyRange("k5", "k5"), ("k1", "k9"), ("k6", "k9")),
        (KeyRange(maximum="k5"), ("k5", "k9"), ("k6", "k9")),
        (KeyRange(minimum="k5"), ("k1", "k5"), ("k1", "k49")),
        (KeyRange(prefix="k5"), ("k1", "k9"), ("k6", "k9")),
        (KeyRange(prefix="k5"), ("k51", "k9"), ("k1", "k49")),
        (KeyRange("k2", "k3", "k2"), ("k1", "k25"), ("k3", "k9")),
    ],
)
def test_a_shard_key_range_may_match_or_cannot(bounds: KeyRange, inside, outside) -> None:
    assert bounds.may_hold(*inside) and not bounds.may_hold(*outside)


def test_the_row_mask_is_the_same_rule_as_python_on_every_key() -> None:
    keys = ["k1", "k2", "k20", "k29", "k3", "k30", "k4", "é", "k2é"]
    for bounds in (KeyRange("k2", "k3"), KeyRange(prefix="k2"), KeyRange(None, "k29", "k2"), KeyRange("k3")):
        mask = bounds.mask(pa.array(keys, pa.large_string())).to_pylist()
        expected = [
            (bounds.minimum is None or k >= bounds.minimum)
            and (bounds.maximum is None or k <= bounds.maximum)
            and (bounds.prefix is None or k.startswith(bounds.prefix))
            for k in keys
        ]
        assert mask == expected, bounds


def test_key_options_parse_and_unknown_ones_are_named() -> None:
    assert ReadOptions.parse({"path": "/x"}).keys is None
    assert ReadOptions.parse({"path": "/x", "keyMin": "a", "KEYPREFIX": "ab"}).keys == KeyRange("a", None, "ab")
    with pytest.raises(BadOption, match="keyrange.*known: .*keyMin, keyMax, keyPrefix"):
        ReadOptions.parse({"path": "/x", "keyRange": "a-b"})
