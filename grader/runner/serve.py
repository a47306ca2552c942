"""The untrusted side: `python -m grader.runner`.

A small process that imports only the student's module and executes the calls the judge asks for,
answering with outputs and launch statistics over grader.wire. It never sees tests/,
solutions/, the seed or the results file: the judge gives it a workspace holding the student's
files and nothing else. Student output goes to this process's stdout/stderr, which the sandbox
captures; the protocol uses its own file descriptors so prints cannot forge an answer.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import traceback
from typing import Any

import numpy as np

from .. import wire
from ..backends import Kind
from ..backends.gpu import sticky_cuda_error
from ..backends.runtime import open_backend
from ..wire.messages import MAX_IMPORT_NOTES, error_reply


@contextlib.contextmanager
def _watchdog(seconds):
    """A call still running after `seconds` (just before the judge's limit kills this process)
    writes every thread's stack to stderr, which the judge reads after the kill: where the
    student's code was stuck, for the timeout's message. Feedback only: nothing graded reads it."""
    import faulthandler

    armed = isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and 0 < seconds < 1e6
    if armed:
        faulthandler.dump_traceback_later(float(seconds), file=sys.stderr)
    try:
        yield
    finally:
        if armed:
            faulthandler.cancel_dump_traceback_later()


def _renamed(module, request: dict) -> str:
    """A function of the module named close to the one the tests call (the audit's allreduce_pipeline
    for allreduce_pipelined), said as a question; "" if none."""
    import difflib

    wanted = str(request["function"])
    theirs = [name for name, value in vars(module).items()
              if callable(value) and not name.startswith("_") and not isinstance(value, type)]
    near = difflib.get_close_matches(wanted, theirs, n=1, cutoff=0.75)
    return f": is {near[0]}() it, renamed? the tests call {wanted}()" if near else ""


class Runner:
    def __init__(self, workspace: str, backend: str, devices: int, device_fd: int | None = None):
        self.workspace = os.path.realpath(workspace)
        self.modules: dict[str, Any] = {}
        sys.path.insert(0, self.workspace)
        self.backend = open_backend(backend, devices, device_fd)

    # -- errors as the student should see them ------------------------------------------------
    def _is_student_file(self, filename: str) -> bool:
        # "<frozen importlib._bootstrap>" is not a path: realpath would put it in the workspace (our cwd)
        return os.path.isabs(filename) and os.path.realpath(filename).startswith(self.workspace + os.sep)

    def _in_workspace(self, filename: str) -> str:
        """A student file's path as the student knows it: vector_add.py, not /tmp/.../vector_add.py."""
        return os.path.relpath(os.path.realpath(filename), self.workspace)

    def _student_frame(self, tb) -> str:
        """file:line of the innermost frame in the student's own files."""
        where = ""
        for frame, lineno in traceback.walk_tb(tb):
            if self._is_student_file(frame.f_code.co_filename):
                where = f"{self._in_workspace(frame.f_code.co_filename)}:{lineno} in {frame.f_code.co_name}"
        return where

    def _error(self, exc: BaseException, importing: bool) -> dict:
        kind = "exception"
        where = self._student_frame(exc.__traceback__)
        if isinstance(exc, SyntaxError) and exc.filename:
            where = f"{os.path.basename(exc.filename)}:{exc.lineno}"
        if importing:
            kind = "import"
        elif type(exc) is NotImplementedError:  # the stub's own, not a library's subclass
            kind = "not_implemented"
        elif type(exc).__module__.startswith("grader.sim"):
            kind = "simulator"
        elif sticky_cuda_error(exc):
            kind = "context_lost"
        text = self._relative(str(exc).strip())
        if kind == "context_lost":  # the student's words first, CUDA's after
            text = f"{sticky_cuda_error(exc)} ({text})"
        if isinstance(exc, NameError):
            text += _left_out_line(exc)
        refused = getattr(type(exc), "gpugrade_refusal", False) is True  # a refused file's stand-in module
        error = {
            "kind": kind,
            "type": type(exc).__name__,
            "message": _first_sentence(text)[:2000],
            "detail": text[:8000],
            "where": "" if refused else where,
            "traceback": "" if refused else self._student_traceback(exc)[-8000:],
        }
        record = getattr(exc, "record", None)
        if kind == "simulator" and callable(record):  # the inline simulator's finding, as a record
            error["finding"] = record(self._relative)
        return error

    def _student_traceback(self, exc: BaseException) -> str:
        """The traceback through the student's own frames only: the grader's are noise to them."""
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if self._is_student_file(f.filename)]
        if not frames:
            return ""
        lines = ["Traceback (your code):\n", *traceback.format_list(frames),
                 *traceback.format_exception_only(type(exc), exc)]
        return self._relative("".join(lines))

    def _relative(self, text: str) -> str:
        """Paths inside the workspace as the student knows them: vector_add.py, not /tmp/.../vector_add.py."""
        return text.replace(self.workspace + os.sep, "")

    # -- operations ---------------------------------------------------------------------------
    def _module(self, name: str):
        if name not in self.modules:
            self.modules[name] = importlib.import_module(name)
        return self.modules[name]

    def call(self, request: dict) -> dict:
        try:
            with _watchdog(request.get("watch_s")):  # (a loop at the module's top level: its line too)
                module = self._module(str(request["module"]))
        except BaseException as exc:  # noqa: BLE001 - any failure of student code is reported
            return {"ok": False, "error": self._error(exc, importing=True)}
        function = getattr(module, str(request["function"]), None)
        if not callable(function):
            message = f"{request['module']}.py has no function {request['function']}(){_renamed(module, request)}"
            return error_reply("missing", "AttributeError", message, detail=message)
        with _watchdog(request.get("watch_s")):
            if "ranks" in request:
                return self._call_ranks(function, list(request["ranks"]))
            args = list(request.get("args", []))
            launches: list = []
            try:
                with self.backend.launches() as launches:
                    returned = function(*args)
                returned = self._to_host(returned)
            except BaseException as exc:  # noqa: BLE001
                return {"ok": False, "error": self._error(exc, importing=False),
                        "launches": [r.summary() for r in launches]}
        return {"ok": True, "returned": returned, "args": [a if isinstance(a, np.ndarray) else None for a in args],
                "launches": [r.summary() for r in launches]}

    def _call_ranks(self, function, buffers: list) -> dict:
        """`function(ranks, bufs)`: one buffer per rank (the all-reduce exercise), in place; the
        reply is every rank's buffer after the call (grader/backends/ranks.py)."""
        from ..backends.rank_guard import launches_inside_their_rank, rank_guard
        from ..backends.ranks import Ranks, devices_for

        launches: list = []
        try:
            if not buffers or not all(isinstance(b, np.ndarray) for b in buffers):
                raise TypeError("a call with ranks takes one array per rank")
            ranks = Ranks(len(buffers), devices_for(len(buffers), self.backend.rank_devices()),
                          enable_peer_access=self.backend.kind == Kind.GPU)
            with self.backend.launches() as launches:
                bufs = ranks.upload(buffers)
                # on a GPU nothing else stops a kernel reading another rank's memory (the simulator's
                # device process refuses it itself)
                # (and on every backend a launch on a rank's stream is inside its `with r:`)
                with rank_guard(ranks) if self.backend.kind == Kind.GPU else launches_inside_their_rank(ranks):
                    function(ranks, list(bufs))
                ranks.synchronize()
                returned = [b.copy_to_host() for b in bufs]
        except BaseException as exc:  # noqa: BLE001
            return {"ok": False, "error": self._error(exc, importing=False),
                    "launches": [r.summary() for r in launches]}
        return {"ok": True, "returned": returned, "args": [], "launches": [r.summary() for r in launches]}

    def _to_host(self, value: Any) -> Any:
        """Returned device arrays are copied back; anything else must be plain data."""
        if hasattr(value, "copy_to_host") and not isinstance(value, np.ndarray):
            return value.copy_to_host()
        if isinstance(value, (tuple, list)):
            return [self._to_host(v) for v in value]
        if value is None or isinstance(value, (np.ndarray, np.generic, bool, int, float, str)):
            return value
        raise TypeError(f"returned a value of type {type(value).__name__}; return a NumPy array or a number")

    def time(self, request: dict) -> dict:
        """Time `function` over the judge's input sets with the backend's harness (the gpu
        backend: CUDA events); the simulator models times instead and has none."""
        try:
            module = self._module(str(request["module"]))
            function = getattr(module, str(request["function"]))
        except BaseException as exc:  # noqa: BLE001 - any failure of student code is reported
            return {"ok": False, "error": self._error(exc, importing=True)}
        timer = getattr(self.backend, "time_call", None)
        if timer is None:
            return error_reply("exception", "NotImplementedError", f"the {self.backend.kind} backend has no timing harness")
        input_sets = [list(inputs) for inputs in request.get("input_sets", [])]
        options = {k: v for k, v in dict(request.get("options", {})).items()
                   if k in ("warmup", "target", "min_repeats", "max_repeats", "cap_s", "flush_bytes")}
        try:
            timing = timer(function, input_sets, **options)
            outputs = [self._to_host(o) for o in timing.outputs]
        except BaseException as exc:  # noqa: BLE001
            return {"ok": False, "error": self._error(exc, importing=False)}
        return {"ok": True, **timing.summary(), "device": self.backend.device_name(), "outputs": outputs}

    @staticmethod
    def _collective_request(request: dict) -> tuple[int, int, int, int]:
        """(ranks, count, warmup, timed) of a `time_ranks` or `nccl_allreduce` request, bounded."""
        from ..backends.collective_timing import MAX_COUNT, MAX_TIMED, MAX_WARMUP
        from ..backends.ranks import MAX_RANKS

        values = []
        for key, low, high in (("ranks", 1, MAX_RANKS * 16), ("count", 1, MAX_COUNT), ("warmup", 0, MAX_WARMUP),
                               ("timed", 1, MAX_TIMED)):
            value = request.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{key}: {value!r} is not an integer from {low} to {high}")
            values.append(value)
        return tuple(values)

    def time_ranks(self, request: dict) -> dict:
        """Time the student's all-reduce `function(ranks, bufs)` the nccl-tests way
        (grader/backends/collective_timing.py): ranks as a call with ranks has them (one GPU per
        rank where there are enough, peer access and the rank guard on a GPU), float32 zero
        buffers of `count` elements per rank, `warmup` calls untimed, then `timed` calls each
        timed on the host until every rank is synchronised. The buffers must still be zeros."""
        from ..backends.collective_timing import first_nonzero, time_allreduce
        from ..backends.rank_guard import rank_guard
        from ..backends.ranks import Ranks, devices_for

        try:
            count_ranks, count, warmup, timed = self._collective_request(request)
        except ValueError as exc:
            return error_reply("protocol", "ProtocolError", f"time_ranks: {exc}")
        if self.backend.kind != Kind.GPU:
            return error_reply("unavailable", "Unavailable",
                               f"the {self.backend.kind} backend times nothing (its times are modelled)")
        try:
            module = self._module(str(request["module"]))
            function = getattr(module, str(request["function"]))
        except BaseException as exc:  # noqa: BLE001 - any failure of student code is reported
            return {"ok": False, "error": self._error(exc, importing=True)}
        try:
            devices = devices_for(count_ranks, self.backend.rank_devices())
            ranks = Ranks(count_ranks, devices, enable_peer_access=True)
            bufs = ranks.upload([np.zeros(count, np.float32) for _ in range(count_ranks)])
            with rank_guard(ranks):  # as in a call with ranks: kernels touch their own rank's memory
                seconds = time_allreduce(function, ranks, bufs, warmup, timed)
            ranks.synchronize()
            wrong = first_nonzero([b.copy_to_host() for b in bufs])
        except BaseException as exc:  # noqa: BLE001
            return {"ok": False, "error": self._error(exc, importing=False)}
        if wrong is not None:
            rank, index, value = wrong
            message = (f"{request['function']}() changed the zero buffers it was timed on (rank {rank}'s element "
                       f"{index} is {value!r} after {warmup + timed} calls): an all-reduce of zeros leaves zeros, "
                       f"so this is not an all-reduce")
            return error_reply("exception", "NotAnAllReduce", message, detail=message)
        return {"ok": True, "seconds": seconds, "devices": len(set(devices)), "device": self.backend.device_name()}

    def nccl_allreduce(self, request: dict) -> dict:
        """NCCL's in-place float32 all-reduce (CuPy), rank r on GPU r, timed as `time_ranks` times
        the student's: for the reference runner (trusted) only; "unavailable" where CuPy, NCCL or
        enough GPUs are missing, or on the simulator."""
        from ..backends.collective_timing import time_nccl_allreduce

        try:
            ranks, count, warmup, timed = self._collective_request(request)
        except ValueError as exc:
            return error_reply("protocol", "ProtocolError", f"nccl_allreduce: {exc}")
        def measure():
            seconds, devices = time_nccl_allreduce(ranks, count, warmup, timed)
            return {"ok": True, "seconds": seconds, "devices": devices, "device": self.backend.device_name()}
        return self._on_gpu("NCCL", measure)

    def _on_gpu(self, what: str, measure) -> dict:
        """`measure()` (the reply) on the gpu backend only: "unavailable" on another backend or
        where this machine cannot time it (TimingUnavailable: no CuPy, NCCL, GPUs)."""
        from ..backends.collective_timing import TimingUnavailable

        if self.backend.kind != Kind.GPU:
            return error_reply("unavailable", "Unavailable", f"{what} is timed on the gpu backend only, "
                                                             f"not on the {self.backend.kind} backend")
        try:
            return measure()
        except TimingUnavailable as exc:
            return error_reply("unavailable", "Unavailable", exc.reason)
        except BaseException as exc:  # noqa: BLE001
            return {"ok": False, "error": self._error(exc, importing=False)}

    def library_time(self, request: dict) -> dict:
        """A library's median ms on the same problem (cuBLAS SGEMM, CuPy's sum; through CuPy): for
        the reference runner (trusted) only; "unavailable" without CuPy or a GPU, or on the simulator."""
        from ..backends.library_baselines import check_request, library_ms

        try:
            what, shape = str(request.get("what")), check_request(str(request.get("what")), request.get("shape"))
        except ValueError as exc:
            return error_reply("protocol", "ProtocolError", f"library_time: {exc}")
        return self._on_gpu("a library baseline", lambda: {"ok": True, "ms": library_ms(what, shape)})

    def rank_devices(self) -> dict:
        """How many GPUs (or virtual devices) an all-reduce's ranks can be spread over."""
        try:
            return {"ok": True, "devices": int(self.backend.rank_devices())}
        except BaseException as exc:  # noqa: BLE001
            return {"ok": False, "error": self._error(exc, importing=False)}

    def copy_bandwidth(self, request: dict) -> dict:
        """The median ms of a device-to-device copy of `nbytes` (the streaming kernels' ceiling)."""
        measure = getattr(self.backend, "copy_ms", None)
        if measure is None:
            return error_reply("exception", "NotImplementedError", f"the {self.backend.kind} backend measures no copies")
        try:
            return {"ok": True, "ms": float(measure(min(int(request.get("nbytes", 0)), 4 << 30)))}
        except BaseException as exc:  # noqa: BLE001
            return {"ok": False, "error": self._error(exc, importing=False)}

    def import_module(self, request: dict) -> dict:
        try:
            with _watchdog(request.get("watch_s")):  # (a loop at the module's top level: where it was)
                module = self._module(str(request["module"]))
        except BaseException as exc:  # noqa: BLE001 - any failure of student code is reported
            return {"ok": False, "error": self._error(exc, importing=True)}
        failed = self._failed_at_import(module)
        return {"ok": True, **({"notes": failed} if failed else {})}

    def _failed_at_import(self, module) -> list[str]:
        """What a notebook's guarded top-level code raised as it was imported (grader.course.scratch:
        the module's `_gpugrade_failed`), each as `<module>.py:<line>: <type>: <message>` at the
        first line of the module's own it went through: feedback for the results' notes."""
        failed = getattr(module, "_gpugrade_failed", None)
        notes: list[str] = []
        for exc in failed[:MAX_IMPORT_NOTES] if isinstance(failed, list) else ():
            if not isinstance(exc, BaseException):
                continue
            frames = [f for f in traceback.extract_tb(exc.__traceback__) if self._is_student_file(f.filename)]
            where = f"{self._in_workspace(frames[0].filename)}:{frames[0].lineno}" if frames else \
                f"{module.__name__}.py"
            if len(frames) > 1:  # where it raised, in a function the statement called
                where += f" (in {frames[-1].name}, {self._in_workspace(frames[-1].filename)}:{frames[-1].lineno})"
            text = _first_sentence(self._relative(str(exc).strip()))[:300]
            notes.append(f"{where}: {type(exc).__name__}{': ' + text if text else ''} (as the notebook was imported "
                         f"for grading: that statement was skipped, the rest was graded)")
        return notes

    def configure(self, request: dict) -> dict:
        """Settings the judge may change: the compile check (off for its trusted reference runner),
        and the attributes of the GPU the device process runs on (`device`)."""
        if "compile_check" in request:
            self.backend.configure(compile_check=bool(request["compile_check"]))
        if isinstance(request.get("device"), dict) and hasattr(self.backend, "describe"):
            self.backend.describe(request["device"])
        return {"ok": True}

    def serve(self, inp, out) -> None:
        while True:
            try:
                request = wire.receive(inp)
            except EOFError:
                return
            op = request.get("op") if isinstance(request, dict) else None
            if op == "call":
                reply = self.call(request)
            elif op == "ping":
                reply = {"ok": True, "backend": str(self.backend.kind)}
            elif op == "configure":
                reply = self.configure(request)
            elif op == "import":
                reply = self.import_module(request)
            elif op == "time":
                reply = self.time(request)
            elif op == "copy_bandwidth":
                reply = self.copy_bandwidth(request)
            elif op == "time_ranks":
                reply = self.time_ranks(request)
            elif op == "nccl_allreduce":
                reply = self.nccl_allreduce(request)
            elif op == "rank_devices":
                reply = self.rank_devices()
            elif op == "library_time":
                reply = self.library_time(request)
            else:
                reply = error_reply("protocol", "ProtocolError", f"unknown op {op!r}")
            sys.stdout.flush()
            sys.stderr.flush()
            wire.send(out, reply)


def _left_out_line(exc: NameError) -> str:
    """Where a notebook's top-level line that would have set the missing name was left out or not
    run (its module's `_gpugrade_unset`: grader.course.scratch), said with the NameError: the
    notes say it too, but the failure is what a student reads first."""
    tb, where = exc.__traceback__, None
    while tb is not None:
        unset = tb.tb_frame.f_globals.get("_gpugrade_unset")
        if isinstance(unset, dict):
            where = unset
        tb = tb.tb_next
    name = getattr(exc, "name", None)
    if not where or not isinstance(name, str) or not isinstance(where.get(name), str):
        return ""
    return (f" (the notebook sets it at {where[name]}, a top-level statement left out or not run as the notebook "
            f"is graded: see the notes; set a constant the functions use without an import the grader refuses or "
            f"a name such a statement sets)")


def _first_sentence(text: str) -> str:
    """An exception's first line, and the line after it where the first ends in a colon (numba's
    "Kernel launch configuration was not specified. Use the syntax:" says the syntax next)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m grader.runner")
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--backend", choices=[k.value for k in Kind], required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--in-fd", type=int)
    parser.add_argument("--out-fd", type=int)
    parser.add_argument("--device-fd", type=int, help="a socket to the device process (the simulated GPU)")
    parser.add_argument("--device-socket", help="the device process's socket path, to connect to")
    parser.add_argument("--stdio", action="store_true",
                        help="the protocol on stdin/stdout (a container's attach stream); prints go to stderr")
    args = parser.parse_args(argv)
    if args.stdio:
        inp, out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)  # the student's prints can no longer reach the protocol stream
        sys.stdout.reconfigure(line_buffering=True)  # and reach the output tail even before an os._exit
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    elif args.in_fd is None or args.out_fd is None:
        parser.error("give --in-fd and --out-fd, or --stdio")
    else:
        inp, out = os.fdopen(args.in_fd, "rb"), os.fdopen(args.out_fd, "wb")
    device_fd = args.device_fd
    if args.device_socket:
        import socket

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(args.device_socket)
        device_fd = sock.detach()
    os.chdir(args.workspace)
    Runner(args.workspace, args.backend, args.devices, device_fd).serve(inp, out)


if __name__ == "__main__":
    main()
