"""A Caffe2 checkpoint as PySlowFast's model zoo has it (helpers of the import tests, no tests of
its own): `{"blobs": {name: numpy.ndarray}}` pickled by Python 2.7's `cPickle` at protocol 2
(`pickle.HIGHEST_PROTOCOL` there), as the Caffe2 training code that made the zoo saved it.

Python 3's pickle cannot write that stream: it spells `str` as BINUNICODE and an array's buffer
as `_codecs.encode(text, "latin1")`, where Python 2 writes both as byte strings
(SHORT_BINSTRING, or BINSTRING from 256 bytes) that only `encoding="latin1"` turns into `str`
on reading. So `python2_pickle` writes the opcodes itself, as `cPickle.c` does, with the reduce
values of NumPy 1.x under Python 2 (`methods.c` `array_reduce`: `_reconstruct(ndarray, (0,),
'b')` and the state `(1, shape, dtype, is_fortran, raw bytes)`; `descriptor.c`
`arraydescr_reduce`: `dtype('f4', 0, 1)` and the state `(3, '<', None, None, None, -1, -1,
0)`). cPickle numbers its memo from 1 and memoises only what something else also holds: the
classes and `_reconstruct`, each dict, the `"blobs"` literal, and each object rebuilt by
REDUCE with a state (the arrays; the dtypes, one object per builtin type in NumPy, so a second
use is a BINGET). The names, shapes, buffers and reduce tuples are made fresh, held once, and
written each time. Checked once against Python 2.7.18's cPickle (NumPy's reduce values
reproduced in pure Python there): the same bytes, over 1,207 blobs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence

import numpy as np

BATCHSIZE = 1000  # cPickle's items per SETITEMS


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")  # PROTO 2
        self.memo: dict[object, int] = {}
        self.next = 1

    def put(self, key: object = None) -> None:
        """Memoise the object just written (`key`: what a later use of it is found by)."""
        if key is not None:
            self.memo[key] = self.next
        index = self.next
        self.out += b"q" + bytes([index]) if index < 256 else b"r" + struct.pack("<I", index)
        self.next += 1

    def get(self, key: object) -> bool:
        """Write a BINGET of `key`'s memo entry, if it has one."""
        if key not in self.memo:
            return False
        index = self.memo[key]
        self.out += b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index)
        return True

    def string(self, raw: bytes, *, memoise: bool = False) -> None:
        """A Python 2 `str` (`memoise`: held elsewhere too, as a literal is)."""
        if len(raw) < 256:
            self.out += b"U" + bytes([len(raw)]) + raw
        else:
            self.out += b"T" + struct.pack("<i", len(raw)) + raw
        if memoise and len(raw) > 1:
            self.put()

    def integer(self, value: int) -> None:
        if 0 <= value < 256:
            self.out += b"K" + bytes([value])
        elif 0 <= value < 65536:
            self.out += b"M" + struct.pack("<H", value)
        else:
            self.out += b"J" + struct.pack("<i", value)

    def none(self) -> None:
        self.out += b"N"

    def global_(self, module: str, name: str) -> None:
        if not self.get((module, name)):
            self.out += b"c" + f"{module}\n{name}\n".encode()
            self.put((module, name))

    def tuple_(self, *items: Callable[[], None]) -> None:
        if not items:
            self.out += b")"  # EMPTY_TUPLE, not memoised
            return
        if len(items) > 3:
            self.out += b"("
        for item in items:
            item()
        self.out += b"t" if len(items) > 3 else bytes([0x84 + len(items)])  # TUPLE, TUPLE1..3

    def dtype(self, dtype: np.dtype) -> None:
        if self.get(("dtype", dtype.str)):
            return
        endian = {"=": "<", "|": "|", "<": "<"}[dtype.byteorder]  # a little-endian host's
        kind = f"{dtype.kind}{dtype.itemsize}".encode()
        self.global_("numpy", "dtype")
        self.tuple_(lambda: self.string(kind), lambda: self.integer(0), lambda: self.integer(1))
        self.out += b"R"
        self.put(("dtype", dtype.str))
        self.tuple_(
            lambda: self.integer(3), lambda: self.string(endian.encode()), self.none, self.none,
            self.none, lambda: self.integer(-1), lambda: self.integer(-1), lambda: self.integer(0),
        )  # fmt: skip
        self.out += b"b"

    def array(self, array: np.ndarray) -> None:
        self.global_("numpy.core.multiarray", "_reconstruct")
        self.tuple_(
            lambda: self.global_("numpy", "ndarray"),
            lambda: self.tuple_(lambda: self.integer(0)),
            lambda: self.string(b"b"),
        )
        self.out += b"R"
        self.put()
        shape = [lambda n=n: self.integer(n) for n in array.shape]
        self.tuple_(
            lambda: self.integer(1),
            lambda: self.tuple_(*shape),
            lambda: self.dtype(array.dtype),
            lambda: self.out.extend(b"\x89"),  # NEWFALSE: C order
            lambda: self.string(np.ascontiguousarray(array).tobytes()),
        )
        self.out += b"b"

    def dict_(self, items: Sequence[tuple[bytes, Callable[[], None]]]) -> None:
        self.out += b"}"
        self.put()
        for start in range(0, len(items), BATCHSIZE):
            batch = items[start : start + BATCHSIZE]
            if len(batch) > 1:
                self.out += b"("
            for key, value in batch:
                self.string(key, memoise=key == b"blobs")
                value()
            self.out += b"u" if len(batch) > 1 else b"s"


def python2_pickle(blobs: Mapping[str, np.ndarray]) -> bytes:
    """`{"blobs": blobs}` as Python 2.7's cPickle writes it at protocol 2, the names as Python
    2 `str` (ASCII), the arrays as NumPy 1.x pickled them there."""
    writer = _Writer()
    inner = [
        (name.encode("ascii"), lambda value=value: writer.array(value))
        for name, value in blobs.items()
    ]
    writer.dict_([(b"blobs", lambda: writer.dict_(inner))])
    return bytes(writer.out + b".")
