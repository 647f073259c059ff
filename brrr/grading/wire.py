"""The messages between a student's notebook and the grader process: JSON lines, never pickle.

Everything that crosses the boundary is plain data. The grader decodes what the
student's process sends into ``None``, ``bool``, ``int``, ``float``, ``str``,
lists, string-keyed dicts, ``torch.dtype`` and CPU tensors built from raw bytes,
and nothing else: no object the student defined ever reaches the grader, so no
``__eq__``, ``__float__`` or lazy value of theirs runs there. Pickle is never
used, since unpickling runs code chosen by whoever wrote the bytes.

The student's process writes the bytes, so they are checked as they are read:
nesting at most :data:`MAX_DEPTH` deep, whole numbers within ``int64``
(:data:`MAX_INT`: a larger one overflows ``float()`` in a check), strings of at
most :data:`MAX_TEXT` characters, tensors of at most :data:`MAX_DIMS` dimensions
whose sizes fit the message, valid base64 of the right length. Anything else is
a :class:`WireError`, which the grader reports as the student's failure, with
what was wrong; it never reaches a check as a value the check did not expect.
Floats may be NaN or infinite: a check says why a NaN answer is wrong.

A lab may name dataclasses its functions receive (``Op`` in the roofline lab);
they are sent as ``{"$dataclass": name, "fields": ...}`` and rebuilt only on the
student's side, from the lab's own class.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
import socket
from typing import Any, Mapping

import torch

from brrr.checks.dtypes import DTYPES
from brrr.checks.dtypes import dtype_name

MAX_MESSAGE_BYTES = 64 << 20
MAX_DEPTH = 32
MAX_INT = 2**63 - 1  # whole numbers in [-2**63, 2**63 - 1], int64's range
MAX_TEXT = 1 << 20
MAX_DIMS = 8


class WireError(ValueError):
    """A message that is not one the other side may send."""


def encode(value: Any) -> Any:
    """``value`` as JSON-ready data (numbers, strings, lists, dicts, dtypes, tensors,
    dataclasses)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return _whole(int(value))
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, torch.dtype):
        return {"$dtype": dtype_name(value)}
    if isinstance(value, torch.Tensor):
        tensor = value.detach().to("cpu").contiguous()
        if tensor.dtype == torch.bfloat16:
            raw = tensor.view(torch.int16).numpy().tobytes()
        else:
            raw = tensor.numpy().tobytes()
        return {
            "$tensor": {
                "dtype": dtype_name(tensor.dtype),
                "shape": list(tensor.shape),
                "data": base64.b64encode(raw).decode("ascii"),
            }
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            "$dataclass": type(value).__name__,
            "fields": {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)},
        }
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    # numpy and torch scalars, and anything else that is honestly a number
    if hasattr(value, "item") and callable(value.item):
        return encode(value.item())
    raise WireError(
        f"cannot send a {type(value).__name__} to the grader: return numbers, strings, tuples or "
        "tensors"
    )


def decode(
    data: Any, *, dataclasses_by_name: Mapping[str, type] | None = None, depth: int = 0
) -> Any:
    """The plain value ``data`` stands for. Only the types in the module docstring come out;
    anything else, or out of the limits there, raises :class:`WireError`."""
    try:
        return _decode(data, dataclasses_by_name or {}, depth)
    except WireError:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError, RuntimeError) as error:
        raise WireError(f"malformed value ({type(error).__name__}: {str(error)[:200]})") from None


def _whole(value: int) -> int:
    if not -MAX_INT - 1 <= value <= MAX_INT:
        digits = len(str(abs(value))) if abs(value) < 10**4000 else "thousands of"
        raise WireError(
            f"a whole number of {digits} digits: numbers must lie within ±2**63 (int64's range)"
        )
    return value


def _decode(data: Any, dataclasses_by_name: Mapping[str, type], depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError(f"a value nested more than {MAX_DEPTH} levels deep")
    if data is None or isinstance(data, (bool, float)):
        return data
    if isinstance(data, int):
        return _whole(data)
    if isinstance(data, str):
        if len(data) > MAX_TEXT:
            raise WireError(f"a string of {len(data):,} characters (at most {MAX_TEXT:,})")
        return data
    if isinstance(data, list):
        return [_decode(v, dataclasses_by_name, depth + 1) for v in data]
    if not isinstance(data, dict):
        raise WireError(f"unexpected {type(data).__name__} in a message")
    if "$float" in data:
        text = data["$float"]
        if not isinstance(text, str) or text not in ("nan", "inf", "-inf"):
            raise WireError(f"not a float: {str(text)[:40]!r}")
        return float(text)
    if "$dtype" in data:
        name = data["$dtype"]
        if not isinstance(name, str) or name not in DTYPES:
            raise WireError(f"unknown dtype {str(name)[:40]!r}")
        return DTYPES[name]
    if "$tensor" in data:
        return _decode_tensor(data["$tensor"])
    if "$dataclass" in data:
        name = data["$dataclass"]
        cls = dataclasses_by_name.get(name) if isinstance(name, str) else None
        if cls is None:
            raise WireError(f"unexpected dataclass {str(name)[:40]!r}")
        fields = _decode(data.get("fields", {}), dataclasses_by_name, depth + 1)
        if not isinstance(fields, dict):
            raise WireError("a dataclass's fields must be a dict")
        for name, value in fields.items():
            if isinstance(value, list):
                fields[name] = tuple(value)
        return cls(**fields)
    return {str(k): _decode(v, dataclasses_by_name, depth + 1) for k, v in data.items()}


def _decode_tensor(spec: Any) -> torch.Tensor:
    if not isinstance(spec, dict) or not isinstance(spec.get("dtype"), str):
        raise WireError("malformed tensor")
    if spec["dtype"] not in DTYPES:
        raise WireError(f"a tensor of unknown dtype {spec['dtype'][:40]!r}")
    dtype = DTYPES[spec["dtype"]]
    shape = spec.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS:
        raise WireError(f"a tensor's shape must be a list of at most {MAX_DIMS} sizes")
    if not all(
        isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_MESSAGE_BYTES
        for s in shape
    ):
        raise WireError(
            f"a tensor of shape {str(shape)[:80]}: each size must be a whole number from 0 to "
            f"{MAX_MESSAGE_BYTES:,}"
        )
    text = spec.get("data", "")
    if not isinstance(text, str):
        raise WireError("a tensor's data must be base64 text")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise WireError("a tensor's data is not valid base64") from None
    count = math.prod(shape)
    storage_dtype = torch.int16 if dtype == torch.bfloat16 else dtype
    if len(raw) != count * torch.empty((), dtype=storage_dtype).element_size():
        raise WireError("tensor data does not match its shape")
    tensor = (
        torch.frombuffer(bytearray(raw), dtype=storage_dtype)
        if count
        else torch.empty(0, dtype=storage_dtype)
    )
    tensor = tensor.reshape(shape).clone()
    return tensor.view(torch.bfloat16) if dtype == torch.bfloat16 else tensor


class Channel:
    """One connection: send and receive JSON objects, one per line."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.reader = sock.makefile("rb")

    def send(self, message: Mapping[str, Any]) -> None:
        self.sock.sendall(json.dumps(message, allow_nan=False).encode() + b"\n")

    def receive(self, timeout_s: float | None = None) -> dict:
        self.sock.settimeout(timeout_s)
        line = self.reader.readline(MAX_MESSAGE_BYTES + 1)
        if not line:
            raise ConnectionError("the other side closed the connection")
        if len(line) > MAX_MESSAGE_BYTES:
            raise WireError("message too large")
        try:
            message = json.loads(line)
        except RecursionError:
            raise WireError("a message nested too deeply to read") from None
        except ValueError as error:  # not JSON, not UTF-8, a number of thousands of digits
            raise WireError(f"a message that is not JSON ({str(error)[:120]})") from None
        if not isinstance(message, dict):
            raise WireError("a message must be a JSON object")
        return message

    def close(self) -> None:
        for closing in (self.reader.close, self.sock.close):
            try:
                closing()
            except OSError:
                pass
