"""Numeric arrays sent as parameters in PostgreSQL's binary array format, and text arrays as literals.

The final CTE takes every hit of a query as parallel arrays (ids, ranks, scores: a few hundred
elements each). psycopg dumps a Python list element by element in Python, and an array literal needs
every number printed (`repr` of a float is most of that) and parsed back by the server. The binary
format is the numbers' bytes as they are: `Int8Array`, `Int4Array` and `Float8Array` hold the encoded
parameter (built by numpy in one pass), and a dumper registered for those types (on psycopg's global
adapters: only these types of ours are concerned, on any connection) sends them with their array type.
The values are exactly the ones given: a double travels as its 8 bytes.

Text arrays stay literals (`text_array`): their elements are a few source names and memory types,
cached once quoted.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Sequence
from typing import ClassVar

import numpy as np
import psycopg
from psycopg.abc import AdaptContext
from psycopg.adapt import Dumper
from psycopg.pq import Format


class BinaryArray(bytes):
    """A one-dimensional array of non-null numbers, encoded as PostgreSQL's array_recv reads it."""

    oid: ClassVar[int]  # the array type
    element_oid: ClassVar[int]
    dtype: ClassVar[str]  # the element as numpy packs it: big-endian, the type's size

    @classmethod
    def of(cls, values: Sequence[float] | Sequence[int] | np.ndarray) -> BinaryArray:
        """`values` encoded (OverflowError for an integer the element type cannot hold)."""
        packed = np.asarray(values, dtype=cls.dtype)
        if packed.ndim != 1:
            raise ValueError(f"a {cls.__name__} holds one dimension, not {packed.ndim}")
        n = len(packed)
        if n == 0:  # no dimension at all: how PostgreSQL itself sends '{}'
            return cls(struct.pack(">iii", 0, 0, cls.element_oid))
        items = np.empty(n, dtype=[("length", ">i4"), ("value", cls.dtype)])
        items["length"] = packed.itemsize
        items["value"] = packed
        return cls(struct.pack(">iiiii", 1, 0, cls.element_oid, n, 1) + items.tobytes())

    def __repr__(self) -> str:  # what EXPLAIN output and error messages show: not the bytes
        return f"{type(self).__name__}({len(self)} bytes)"


class Int8Array(BinaryArray):
    oid, element_oid, dtype = 1016, 20, ">i8"  # bigint[]


class Int4Array(BinaryArray):
    oid, element_oid, dtype = 1007, 23, ">i4"  # integer[]


class Float8Array(BinaryArray):
    oid, element_oid, dtype = 1022, 701, ">f8"  # double precision[]


def _dumper(array: type[BinaryArray]) -> type[Dumper]:
    # The array type's oid is set on each instance, not on the class: psycopg would also register a
    # class's oid as the dumper of that type for every value (a list COPYed into a bigint[] column).
    class ArrayDumper(Dumper):
        format = Format.BINARY

        def __init__(self, cls: type, context: AdaptContext | None = None):
            super().__init__(cls, context)
            self.oid = array.oid

        def dump(self, obj: bytes) -> bytes:
            return obj

    ArrayDumper.__name__ = ArrayDumper.__qualname__ = f"{array.__name__}Dumper"
    return ArrayDumper


for _array in (Int8Array, Int4Array, Float8Array):
    psycopg.adapters.register_dumper(_array, _dumper(_array))


def text_array(values: Iterable[str | None]) -> str:
    """Strings as an array literal, for a parameter the statement casts (`%(types)s::text[]`): each
    element double-quoted, backslashes and quotes escaped; None is NULL."""
    return "{" + ",".join(map(_element, values)) + "}"


@functools.lru_cache(maxsize=1024)
def _element(value: str | None) -> str:
    # Cached: the hits' arrays repeat a few source names and memory types hundreds of times a query.
    return "NULL" if value is None else '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
