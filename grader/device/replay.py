"""The replay: a call's device work run again with other inputs, everything the host made held fixed.

The data flow (grader/judge/dataflow.py) follows bytes and allocations, and judges each number a
kernel is given by its value. A number under the structural bound cannot be told from a size: a
sum the host computed, split into 16-bit integers (or launched as a grid's y and z dimensions)
and put together by a kernel that also reads the inputs, passes every rule. What tells them apart
is what the answer depends on. So the device keeps each call's requests as the runner sent them
(`Script`), and after the call the judge may ask for a replay: every request again, in order, on
memory of its own, with the uploads of the inputs replaced by other values of the same shapes
(`substitutions`, by upload number; pieces of an array assembled in one allocation are cut from
the replacement as the host cut them), and every other upload, number, grid and kernel as the
call had them. The judge then checks the replayed answer against the inputs it substituted: an
answer the host computed stays the old one.

Recorded here, per call: the requests, whether each succeeded and the handles it made; the
kernel each launch ran (the object, so a later request cannot change what is replayed); which
request and which place in it each upload's data came from; uploads that are an earlier
download's bytes copied back (the replay copies the replayed download's bytes instead: a round
trip through the host is no host computation); the data of kernel-written downloads (the judge
reads how the answer was cut from them); and a copy of each allocation made before the call, at
its first use in the call, with the handles that view it (the replay starts from that state).
The runner never sees any of it; what it sends after the call's end is never replayed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..sim.host import Allocation, SimDeviceArray
from .host_bytes import region

SCRIPT_BYTES = 256 << 20  # request data, copies of older allocations and downloads kept per call
SCRIPT_REQUESTS = 100_000  # requests kept per call (beyond: too much to replay, as beyond the bytes)
_HANDLE_KEYS = ("handle", "source", "stream", "event")
_MADE_KEYS = ("handle", "stream", "event")  # what a reply names as made


class Script:
    """One call's device requests, for a replay (see module doc)."""

    def __init__(self, call: int):
        self.call = call
        self.requests: list[dict] = []
        self.ok: list[bool] = []
        self.made: list[dict[str, int]] = []  # per request: reply key -> the handle it made
        self.kernels: dict[int, Any] = {}  # request index -> the kernel it launched
        self.slots: dict[int, tuple[int, Any]] = {}  # upload -> (request index, "data" or an argument's position)
        self.assembled: dict[int, tuple[tuple[int, ...], str, frozenset[int]]] = {}  # upload -> (shape, order, pieces)
        self.links: dict[int, int] = {}  # upload -> the download whose bytes it is
        self.downloads: list[np.ndarray | None] = []  # per download: its data, if a kernel wrote it
        self.before: dict[int, Any] = {}  # handle made before the call -> its object
        self.snapshots: dict[int, tuple[Allocation, np.ndarray, np.ndarray]] = {}  # alloc id -> (it, store, initialised)
        self.too_large = False
        self._digests: dict[str, int] = {}  # a download's digest -> its index
        self._known: set[int] = set()  # handles the call made
        self._bytes = 0

    def _count(self, nbytes: int) -> bool:
        self._bytes += nbytes
        if self._bytes > SCRIPT_BYTES:
            self.too_large = True
        return not self.too_large

    def record(self, request: dict, handles: dict[int, Any]) -> int:
        """Keep `request` before it runs (the objects it names that the call did not make, as
        they are now); its index."""
        if len(self.requests) >= SCRIPT_REQUESTS:  # a runner flooding the device: kept no more
            self.too_large = True
        if self.too_large:
            return -1
        self.requests.append(_before_the_launch(request))
        self.ok.append(False)
        self.made.append({})
        self._count(sum(a.nbytes for a in _arrays(request)))
        for handle in _references(request):
            if handle in self._known or handle in self.before or handle not in handles:
                continue
            thing = self.before[handle] = handles[handle]
            alloc = getattr(thing, "_alloc", None)
            if alloc is not None and alloc.id not in self.snapshots and self._count(alloc.store.nbytes):
                self.snapshots[alloc.id] = (alloc, alloc.store.copy(), alloc.initialised.copy())
        return len(self.requests) - 1

    def replied(self, index: int, reply: dict) -> None:
        if index < 0:
            return
        self.ok[index] = bool(reply.get("ok"))
        for key in _MADE_KEYS:
            handle = reply.get(key)
            if isinstance(handle, int) and not isinstance(handle, bool):
                self.made[index][key] = handle
                self._known.add(handle)

    def uploaded(self, upload: int, index: int, slot: Any, key: str) -> None:
        """Upload number `upload` is the data at `slot` of request `index` (digest `key`)."""
        if index < 0:
            return
        self.slots[upload] = (index, slot)
        if key in self._digests:
            self.links[upload] = self._digests[key]

    def downloaded(self, data: np.ndarray, kernel_written: bool, key: str) -> None:
        self._digests.setdefault(key, len(self.downloads))
        self.downloads.append(data if kernel_written and self._count(data.nbytes) else None)


class Replaying:
    """The state of a replay in progress, that the device's ops consult (`Device._replay`)."""

    def __init__(self, script: Script):
        self.script = script
        self.index = 0
        self.downloads: list[np.ndarray] = []

    def kernel(self):
        return self.script.kernels[self.index]


def run(device, script: Script, substitutions: dict[int, np.ndarray], wanted: list[int],
        originals: frozenset[int] = frozenset()) -> dict:
    """Replay `script` on `device` (grader.device.server.Device) with `substitutions`; the data
    of the replayed downloads `wanted`, and of those of them in `originals` as the call made
    them (None where the call's were not kept)."""
    if script.too_large:
        return {"ok": True, "diverged": f"the call made more than {SCRIPT_REQUESTS} requests of the GPU or moved "
                                        f"more than {SCRIPT_BYTES >> 20} MiB through it: too much to replay"}
    table: dict[int, int] = {}
    state = Replaying(script)
    pieces = _pieces(script, substitutions)
    by_request: dict[int, list[tuple[Any, int]]] = {}
    for upload, (index, slot) in script.slots.items():
        by_request.setdefault(index, []).append((slot, upload))
    clones = {alloc_id: _clone(*snapshot) for alloc_id, snapshot in script.snapshots.items()}
    made: list[int] = []
    placed: set[int] = set()  # substitutions put in place
    diverged = None
    try:
        for handle, thing in script.before.items():
            if hasattr(thing, "_alloc"):
                thing = _view_of(thing, clones.get(thing._alloc.id))
            table[handle] = device._keep(thing)
            made.append(table[handle])
        with device.replaying(state):
            for index, request in enumerate(script.requests):
                state.index = index
                translated = _translated(request, table)
                for slot, upload in by_request.get(index, ()):
                    data = _substitute(device, translated, slot, upload, substitutions, pieces, script, state)
                    if data is not None:
                        _put(translated, slot, data)
                        placed.add(pieces[upload][0] if upload in pieces and upload not in substitutions
                                   else upload)
                reply = device.runner(translated)
                if bool(reply.get("ok")) != script.ok[index]:
                    error = reply.get("error") or {}
                    diverged = (f"request {index + 1} ({request.get('op')}) "
                                + (f"failed: {error.get('type')}: {error.get('message')}" if not reply.get("ok")
                                   else "succeeded where the call's had failed"))
                    break
                for key, handle in script.made[index].items():
                    if isinstance(reply.get(key), int):
                        table[handle] = reply[key]
                        made.append(reply[key])
    finally:
        for handle in made:
            device.handles.pop(handle, None)
    if diverged is None and any(not 0 <= i < len(state.downloads) for i in wanted):
        diverged = f"it copied {len(state.downloads)} arrays back from the GPU, the call {len(script.downloads)}"
    if diverged is None and set(substitutions) - placed:  # (fail closed: the old input would stay)
        diverged = f"the inputs could not all be put in place (upload {min(set(substitutions) - placed)})"
    if diverged is not None:
        return {"ok": True, "diverged": diverged}
    return {"ok": True, "downloads": [state.downloads[i] for i in wanted],
            "originals": [script.downloads[i] if i in originals and 0 <= i < len(script.downloads) else None
                          for i in wanted]}


def _pieces(script: Script, substitutions: dict[int, np.ndarray]) -> dict[int, tuple[int, np.ndarray]]:
    """Per upload that wrote a piece of an array assembled in one allocation (a substituted
    upload the device logged as whole once every piece was there): (that upload, the
    replacement of the whole, flat as the allocation holds it)."""
    found = {}
    for upload, data in substitutions.items():
        if upload in script.assembled:
            shape, order, uploads = script.assembled[upload]
            flat = np.ravel(np.asarray(data).reshape(shape), order=order)
            found.update({piece: (upload, flat) for piece in uploads})
    return found


def _substitute(device, request: dict, slot: Any, upload: int, substitutions: dict[int, np.ndarray],
                pieces: dict[int, tuple[int, np.ndarray]], script: Script, state: Replaying) -> np.ndarray | None:
    """What request `request`'s data at `slot` (upload `upload`) is in the replay, or None: as
    the call sent it."""
    original = _get(script.requests[state.index], slot)
    if original is None:
        return None
    if upload in substitutions:
        data = np.asarray(substitutions[upload])
    elif upload in pieces and slot == "data" and request.get("op") in ("upload", "setitem"):
        flat = pieces[upload][1]
        target = device.handles.get(request.get("handle"))
        if not hasattr(target, "_alloc") or target._alloc.store.size != flat.size:
            return None
        data = region(flat, target)
        if "key" in request:
            from .server import _index

            data = data[_index(request["key"])]
    elif upload in script.links and script.links[upload] < len(state.downloads):
        data = state.downloads[script.links[upload]]
    else:
        return None
    original = np.asarray(original)
    if data.dtype != original.dtype or data.size != original.size:
        return None
    return np.ascontiguousarray(data).reshape(original.shape)


def _get(request: dict, slot: Any):
    """The data at `slot` of `request`: "data", or ("arg", i): a launch's argument i, a host array."""
    if slot == "data":
        return request.get("data")
    args = request.get("args")
    if isinstance(args, list) and 0 <= slot[1] < len(args) and isinstance(args[slot[1]], dict):
        return args[slot[1]].get("host")
    return None


def _put(request: dict, slot: Any, data: np.ndarray) -> None:
    """`request` (a translated copy: what it shares with the call's is copied before a change)
    with `data` at `slot`."""
    if slot == "data":
        request["data"] = data
    else:
        request["args"] = list(request["args"])
        request["args"][slot[1]] = dict(request["args"][slot[1]], host=data)


def _translated(request: dict, table: dict[int, int]) -> dict:
    """`request` with the handles it names as the replay has them (one it does not know: none)."""
    out = {key: value for key, value in request.items() if key != "free"}
    for key in _HANDLE_KEYS:
        if key in out and out[key]:  # (stream 0: the default stream)
            out[key] = table.get(_int(out[key]), -1)
    if isinstance(out.get("args"), list):
        out["args"] = [_translated_arg(a, table) for a in out["args"]]
    return out


def _translated_arg(spec: Any, table: dict[int, int]) -> Any:
    if not isinstance(spec, dict):
        return spec
    if "handle" in spec:
        return dict(spec, handle=table.get(_int(spec["handle"]), -1))
    if isinstance(spec.get("tuple"), list):
        return dict(spec, tuple=[_translated_arg(v, table) for v in spec["tuple"]])
    return spec


def _before_the_launch(request: dict) -> dict:
    """`request` as kept: a launch's host arrays copied as they are now (numba copies the kernel's
    result back into one after the launch, and the device does so into the request's own array)."""
    args = request.get("args")
    if request.get("op") != "launch" or not isinstance(args, list):
        return request
    kept = [dict(spec, host=np.array(spec["host"])) if isinstance(spec, dict)
            and isinstance(spec.get("host"), np.ndarray) else spec for spec in args]
    return dict(request, args=kept)


def _references(request: dict) -> list[int]:
    found = [_int(request[key]) for key in _HANDLE_KEYS if request.get(key)]

    def walk(spec):
        if isinstance(spec, dict):
            if "handle" in spec:
                found.append(_int(spec["handle"]))
            for item in spec.get("tuple", []) if isinstance(spec.get("tuple"), list) else ():
                walk(item)

    for spec in request.get("args", []) if isinstance(request.get("args"), list) else ():
        walk(spec)
    return [h for h in found if h is not None]


def _arrays(request: dict) -> list[np.ndarray]:
    found = [request["data"]] if isinstance(request.get("data"), np.ndarray) else []
    for spec in request.get("args", []) if isinstance(request.get("args"), list) else ():
        if isinstance(spec, dict) and isinstance(spec.get("host"), np.ndarray):
            found.append(spec["host"])
    return found


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _clone(alloc: Allocation, store: np.ndarray, initialised: np.ndarray) -> Allocation:
    """A new allocation holding what `alloc` held when the call first used it."""
    clone = Allocation(alloc.store.size, alloc.dtype, alloc.device, True)
    clone.store[...] = store
    clone.initialised[...] = initialised
    return clone


def _view_of(array, alloc: Allocation | None):
    """`array` (a handle made before the call) as the same view of `alloc`, its allocation's clone."""
    return array if alloc is None else SimDeviceArray(alloc, region(alloc.store, array), array._sim)
