"""A bloom filter of one index block's keys: which blocks a key cannot be in, without reading them.

Proving a day's new keys absent from the index reads every block a new key falls in: with hashed
keys that is every block of a large index (~20 GB at a billion keys). A segment of the index
(index_segments) stores a filter of each of its blocks after its parquet bytes, `BITS_PER_KEY`
bits a key and `HASHES` probes: about one key in 2,000 that is not in a block passes its filter, so
a block is read only when some key may be in it. A filter never says no to a key its block holds
(it is built from the block's keys, and whoever reads the block whole checks that again).

The hash is ours, not a library's, so that it cannot change under a file already written: a
polynomial over the key's UTF-8 bytes (mod 2^64) started from its length, finished by splitmix64;
two such values make the probes (Kirsch and Mitzenmacher's double hashing).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

KIND = "bloom-poly64-splitmix-v1"  # the directory names it: a reader refuses a kind it does not know
BITS_PER_KEY = 16
HASHES = 11
_POLY = np.uint64(0x100000001B3)  # FNV's 64-bit prime
_ROUNDS = 4096  # keys hashed at once (memory: 8 B a key byte of them)


def filter_bytes(rows: int) -> int:
    """Bytes of the filter of a block of `rows` keys: a power of two of bits (a mask, not a division,
    picks a bit), at least BITS_PER_KEY a key and at least 1,024 (a short last block's: in 64 bits
    the probes' two hashes would have ~2,000 patterns, ~1 % of absent keys passing)."""
    return max(1024, 1 << (rows * BITS_PER_KEY - 1).bit_length()) // 8


def build(keys: pa.Array) -> bytes:
    """The filter of a block's keys."""
    bits = filter_bytes(len(keys)) * 8
    marked = np.zeros(bits, dtype=bool)
    for start in range(0, len(keys), _ROUNDS):
        marked[_probes(keys.slice(start, _ROUNDS), bits).ravel()] = True
    return np.packbits(marked, bitorder="little").tobytes()


def may_hold(block_filter: bytes | memoryview, keys: pa.Array) -> np.ndarray:
    """A mask over `keys`: False where the key is surely not in the block the filter was built from."""
    words = np.frombuffer(block_filter, dtype=np.uint8)
    out = np.empty(len(keys), dtype=bool)
    for start in range(0, len(keys), _ROUNDS):
        probes = _probes(keys.slice(start, _ROUNDS), len(words) * 8)
        set_bits = (words[probes >> np.uint32(3)] >> (probes & np.uint32(7)).astype(np.uint8)) & 1
        out[start : start + probes.shape[1]] = set_bits.all(axis=0)
    return out


def _probes(keys: pa.Array, bits: int) -> np.ndarray:
    """(HASHES, keys) bit positions in a filter of `bits` bits (at most 2^32): the hash's two halves
    make the probes."""
    hashed = _hash(keys)
    position = (hashed & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    step = (hashed >> np.uint64(32)).astype(np.uint32) | np.uint32(1)
    out = np.empty((HASHES, len(position)), dtype=np.uint32)
    mask = np.uint32(bits - 1)
    for probe in range(HASHES):
        np.bitwise_and(position, mask, out=out[probe])
        position += step
    return out


def _hash(keys: pa.Array) -> np.ndarray:
    """64-bit hashes of string keys (nulls hash as empty strings): the polynomial taken a byte
    position at a time over every key still that long (keys are short; no array of every byte's
    own 8-byte term)."""
    keys = keys.cast(pa.large_string()) if pa.types.is_string(keys.type) else keys
    _, offsets_buffer, data_buffer = keys.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64)[keys.offset : keys.offset + len(keys) + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(1, np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    sums = lengths.astype(np.uint64)
    longest = int(lengths.max(initial=0))
    if longest and (lengths == longest).all():  # one length (ids mostly are): the bytes as a matrix
        matrix = data[int(starts[0]) : int(starts[0]) + len(keys) * longest].reshape(len(keys), longest)
        for column in matrix.T:
            sums = sums * _POLY + column
        return _mix(sums)
    for at in range(longest):
        still = lengths > at
        byte = data[np.where(still, starts + at, 0)]
        sums = np.where(still, sums * _POLY + byte, sums)
    return _mix(sums)


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: every input bit reaches every output bit."""
    values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return values ^ (values >> np.uint64(31))


__all__ = ["BITS_PER_KEY", "HASHES", "KIND", "build", "filter_bytes", "may_hold"]
