"""The messages between a student's notebook and the grader process: JSON lines, never pickle.

Everything that crosses the boundary is plain data. The grader decodes what the
student's process sends into ``None``, ``bool``, ``int``, ``float``, ``str``,
lists, string-keyed dicts, ``torch.dtype`` and CPU tensors built from raw bytes,
and nothing else: no object the student defined ever reaches the grader, so no
``__eq__``, ``__float__`` or lazy value of theirs runs there. Pickle is never
used, since unpickling runs code chosen by whoever wrote the bytes.

A lab may name dataclasses its functions receive (``Op`` in the roofline lab);
they are sent as ``{"$dataclass": name, "fields": ...}`` and rebuilt only on the
student's side, from the lab's own class.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import socket
from typing import Any, Mapping

import torch

from brrr.checks.dtypes import DTYPES
from brrr.checks.dtypes import dtype_name

MAX_MESSAGE_BYTES = 64 << 20


class WireError(ValueError):
    """A message that is not one the other side may send."""


def encode(value: Any) -> Any:
    """``value`` as JSON-ready data (numbers, strings, lists, dicts, dtypes, tensors, dataclasses)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
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
        f"cannot send a {type(value).__name__} to the grader: return numbers, strings, tuples or tensors"
    )


def decode(
    data: Any, *, dataclasses_by_name: Mapping[str, type] | None = None, depth: int = 0
) -> Any:
    """The plain value ``data`` stands for. Only the types in the module docstring come out."""
    if depth > 32:
        raise WireError("message nested too deeply")
    if data is None or isinstance(data, (bool, int, str)):
        return data
    if isinstance(data, float):
        return data
    if isinstance(data, list):
        return [decode(v, dataclasses_by_name=dataclasses_by_name, depth=depth + 1) for v in data]
    if not isinstance(data, dict):
        raise WireError(f"unexpected {type(data).__name__} in a message")
    if "$float" in data:
        text = data["$float"]
        if text not in ("nan", "inf", "-inf"):
            raise WireError(f"not a float: {text!r}")
        return float(text)
    if "$dtype" in data:
        if data["$dtype"] not in DTYPES:
            raise WireError(f"unknown dtype {data['$dtype']!r}")
        return DTYPES[data["$dtype"]]
    if "$tensor" in data:
        return _decode_tensor(data["$tensor"])
    if "$dataclass" in data:
        cls = (dataclasses_by_name or {}).get(data["$dataclass"])
        if cls is None:
            raise WireError(f"unexpected dataclass {data['$dataclass']!r}")
        fields = decode(
            data.get("fields", {}), dataclasses_by_name=dataclasses_by_name, depth=depth + 1
        )
        for name, value in fields.items():
            if isinstance(value, list):
                fields[name] = tuple(value)
        return cls(**fields)
    return {
        str(k): decode(v, dataclasses_by_name=dataclasses_by_name, depth=depth + 1)
        for k, v in data.items()
    }


def _decode_tensor(spec: Any) -> torch.Tensor:
    if not isinstance(spec, dict) or spec.get("dtype") not in DTYPES:
        raise WireError("malformed tensor")
    dtype = DTYPES[spec["dtype"]]
    shape = spec.get("shape")
    if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
        raise WireError("malformed tensor shape")
    raw = base64.b64decode(spec.get("data", ""), validate=True)
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
        message = json.loads(line)
        if not isinstance(message, dict):
            raise WireError("a message must be a JSON object")
        return message

    def close(self) -> None:
        for closing in (self.reader.close, self.sock.close):
            try:
                closing()
            except OSError:
                pass
