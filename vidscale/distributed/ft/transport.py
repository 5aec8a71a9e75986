"""A rejoining group's state from a live peer, over the groups' process group, never unpickled.

TorchFT's HTTP transport unpickles what it receives with `weights_only=False`, and its
process-group transport (`torchft.checkpointing.pg_transport.PGTransport`) sends the state's
structure with `pickle` too: a peer that can reach the port could make the receiver run code.
`JSONTransport` sends the same things over the same process group, but the structure is JSON
(containers, names, numbers, strings, and per tensor its dtype and shape), and each tensor's
bytes follow as a tensor of its own, received into a buffer of the announced size. Nothing
received is executed or imported: an unknown dtype or a malformed description is an error.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import torch
from torchft.checkpointing.transport import CheckpointTransport
from torchft.process_group import ProcessGroup

_LENGTH_TAG, _DESCRIPTION_TAG, _FIRST_TENSOR_TAG = 1, 2, 3
_SCALARS = (bool, int, float, str, type(None))


def describe(state: Any, tensors: list[torch.Tensor]) -> Any:
    """`state` as JSON-ready data, each tensor replaced by its index in `tensors` (appended)."""
    if isinstance(state, torch.Tensor):
        tensors.append(state.detach().contiguous())
        return {"tensor": len(tensors) - 1, "dtype": str(state.dtype), "shape": list(state.shape)}
    if isinstance(state, dict):
        keys = list(state)
        if not all(isinstance(k, str | int) for k in keys):
            raise TypeError(f"state keys must be str or int, got {keys!r}")
        return {"dict": [[k, describe(state[k], tensors)] for k in keys]}
    if isinstance(state, list | tuple):
        kind = "list" if isinstance(state, list) else "tuple"
        return {kind: [describe(v, tensors) for v in state]}
    if isinstance(state, _SCALARS):
        return {"value": state}
    raise TypeError(f"cannot send a {type(state).__name__} in a state dict")


def rebuild(node: Any, tensors: list[torch.Tensor]) -> Any:
    """The inverse of `describe`, given the received tensors."""
    if not isinstance(node, dict) or len(node) not in (1, 3):
        raise ValueError(f"malformed state description: {node!r:.80}")
    if "tensor" in node:
        return tensors[int(node["tensor"])]
    if "dict" in node:
        return {k: rebuild(v, tensors) for k, v in node["dict"]}
    if "list" in node:
        return [rebuild(v, tensors) for v in node["list"]]
    if "tuple" in node:
        return tuple(rebuild(v, tensors) for v in node["tuple"])
    if "value" in node and isinstance(node["value"], _SCALARS):
        return node["value"]
    raise ValueError(f"malformed state description: {node!r:.80}")


def tensor_specs(node: Any) -> list[tuple[torch.dtype, list[int]]]:
    """Each tensor's dtype and shape, in index order, checked against torch's dtypes."""
    found: dict[int, tuple[torch.dtype, list[int]]] = {}

    def walk(n: Any) -> None:
        if isinstance(n, dict) and "tensor" in n:
            dtype = getattr(torch, str(n["dtype"]).removeprefix("torch."), None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"unknown dtype in state description: {n['dtype']!r}")
            found[int(n["tensor"])] = (dtype, [int(s) for s in n["shape"]])
        elif isinstance(n, dict):
            for v in n.values():
                walk(v)
        elif isinstance(n, list):
            for v in n:
                walk(v)

    walk(node)
    if sorted(found) != list(range(len(found))):
        raise ValueError("state description: tensor indices are not 0..n-1")
    return [found[i] for i in range(len(found))]


class JSONTransport(CheckpointTransport[Any]):
    """Send and receive a state dict over `pg` (the replica groups' process group), on CPU.

    The sender sends the description's length, the description (UTF-8 JSON as bytes), then each
    tensor; `step` travels in the description and the receiver checks it.
    """

    def __init__(self, pg: ProcessGroup, timeout: timedelta) -> None:
        self._pg = pg
        self._timeout = timeout

    def metadata(self) -> str:
        return "json-over-pg"

    def send_checkpoint(
        self, dst_ranks: list[int], step: int, state_dict: Any, timeout: timedelta
    ) -> None:
        tensors: list[torch.Tensor] = []
        body = json.dumps({"step": step, "state": describe(state_dict, tensors)}).encode()
        # Copies: bytes of a tensor the trainer may change once this returns.
        raw = torch.frombuffer(bytearray(body), dtype=torch.uint8)
        payload = [t.cpu().reshape(-1).view(torch.uint8).clone() for t in tensors]
        length = torch.tensor([raw.numel()], dtype=torch.int64)
        for dst in dst_ranks:
            works = [
                self._pg.send([length], dst, tag=_LENGTH_TAG),
                self._pg.send([raw], dst, tag=_DESCRIPTION_TAG),
            ]
            works += [
                self._pg.send([t], dst, tag=_FIRST_TENSOR_TAG + i) for i, t in enumerate(payload)
            ]
            for work in works:
                work.wait(timeout)

    def recv_checkpoint(self, src_rank: int, metadata: str, step: int, timeout: timedelta) -> Any:
        length = torch.zeros(1, dtype=torch.int64)
        self._pg.recv([length], src_rank, tag=_LENGTH_TAG).wait(timeout)
        raw = torch.empty(int(length.item()), dtype=torch.uint8)
        self._pg.recv([raw], src_rank, tag=_DESCRIPTION_TAG).wait(timeout)
        message = json.loads(raw.numpy().tobytes().decode())
        if message.get("step") != step:
            raise ValueError(f"peer sent the state of step {message.get('step')}, not {step}")
        tensors = []
        for i, (dtype, shape) in enumerate(tensor_specs(message["state"])):
            t = torch.empty(shape, dtype=dtype)
            flat = t.reshape(-1).view(torch.uint8)
            self._pg.recv([flat], src_rank, tag=_FIRST_TENSOR_TAG + i).wait(timeout)
            tensors.append(t)
        return rebuild(message["state"], tensors)
