"""The demo source: scikit-learn's 1,797 handwritten digits as parquet.

A small real dataset that no one here wrote, shipped inside a registry
package (no download): each row holds the 8x8 image as PNG bytes, its
class label and JSON-able metadata, split over several files as a real
source would be.
"""

from __future__ import annotations

import io
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def digits_table() -> pa.Table:
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images * (255 / 16)).round().astype(np.uint8)
    pngs = []
    for image in images:
        buffer = io.BytesIO()
        Image.fromarray(image, mode="L").resize((32, 32), Image.NEAREST).save(buffer, format="PNG")
        pngs.append(buffer.getvalue())
    count = len(pngs)
    meta = pa.array(
        [{"index": i, "label": int(digits.target[i]), "width": 32, "height": 32} for i in range(count)],
        pa.struct([("index", pa.int64()), ("label", pa.int64()), ("width", pa.int32()), ("height", pa.int32())]),
    )
    return pa.table(
        {
            "id": pa.array(range(count), pa.int64()),
            "image": pa.array(pngs, pa.binary()),
            "label": pa.array(digits.target.astype(np.int64)),
            "meta": meta,
        }
    )


def write_digits_source(directory: str, files: int = 8) -> int:
    """Write the digits as `files` parquet files under `directory`; return the row count."""
    table = digits_table()
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if name.endswith(".parquet"):
            os.remove(os.path.join(directory, name))
    step = -(-table.num_rows // files)
    for part, start in enumerate(range(0, table.num_rows, step)):
        pq.write_table(table.slice(start, step), os.path.join(directory, f"part-{part:05d}.parquet"))
    return table.num_rows
