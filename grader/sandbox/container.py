"""`--sandbox docker`: each runner in its own container, driven through the Docker SDK.

The container holds the runner image (python, numba, numba-cuda, the grader; never the course)
and the student's workspace, mounted read-only at /workspace; nothing else of the host. It has no
network, a read-only root with a small tmpfs /tmp, memory (swap included), pids, CPU and CPU-time
limits, no capabilities, no new privileges, its own IPC and cgroup namespaces, a uid of its own
(never nobody, never shared with another runner: grader.sandbox.base), and GPUs only when asked for (`--gpus`).
The protocol runs over the container's stdin/stdout (`python -m grader.runner --stdio`); docker's
attach stream multiplexes stdout and stderr in frames, which `_AttachStream` takes apart: stdout
frames are the protocol, stderr frames (the student's prints and tracebacks) feed the output tail.
A timed-out call kills the container; a dead container says why (out of memory, signal, exit).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

from .. import wire
from ..backends import Kind
from ..errors import RunnerError, UsageError
from .base import Limits, death_reason, exchange_within, runner_uid

WORKSPACE = "/workspace"
DEVICE = "/device"  # the folder of the socket to the device process (the simulated GPU)
RUNNER_LABEL = "gpugrade.runner"


@dataclass(frozen=True)
class DockerSettings:
    image: str = "gpugrade-runner:latest"
    gpus: str = ""                     # "" = no GPU; "all" or device ids "0,1"
    memory_bytes: int = 2 << 30        # RAM, and RAM + swap: no swap at all
    pids: int = 128                    # processes + threads in the container (a fork bomb stops here)
    cpus: float = 2.0
    tmpfs_bytes: int = 64 << 20        # /tmp, the only writable place (counts against memory)
    user: str = ""                     # "" = a fresh uid per container (grader.sandbox.base); else "uid:gid"
    python: str = "python"             # the runner image's interpreter (on its PATH)
    start_timeout_s: float = 60.0      # docker API calls


def _client(timeout: float = 60.0):
    try:
        import docker

        client = docker.from_env(timeout=int(timeout))
        client.ping()
        return client
    except ImportError:
        raise UsageError("--sandbox docker needs the 'docker' Python package (pip install docker)") from None
    except Exception as exc:  # noqa: BLE001 - any failure here means "no engine to talk to"
        raise UsageError(f"--sandbox docker: no docker engine reachable ({type(exc).__name__}: {exc})") from None


def check_available(image: str) -> None:
    """Fail early, as a usage error, when the engine or the runner image is missing."""
    import docker.errors

    client = _client(10)
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise UsageError(f"docker image {image!r} not found: build it with docker/build-images.sh "
                         f"(or name another with --docker-image)") from None
    finally:
        client.close()


class _AttachStream:
    """The container's stdout as a plain byte stream, read on demand from docker's attach socket.

    Each frame is an 8-byte header (stream 1 = stdout, 2 = stderr; big-endian payload size) and its
    payload. Stdout payloads are returned by read(); stderr payloads are kept, capped, for messages.
    """

    def __init__(self, sock: socket.socket, tail_bytes: int):
        self._sock = sock
        self._file = sock.makefile("rb")
        self._left = 0  # unread bytes of the current stdout frame
        self._tail_bytes = tail_bytes
        self.tail = bytearray()

    def _keep(self, data: bytes) -> None:
        self.tail += data
        del self.tail[:-self._tail_bytes]

    def read(self, n: int) -> bytes:
        try:
            while self._left == 0:
                header = self._file.read(8)
                if len(header) < 8:
                    return b""
                size = int.from_bytes(header[4:8], "big")
                if header[0] == 1:
                    self._left = size
                else:  # stderr (or stdin echo): output for the student's messages
                    self._keep(self._file.read(size))
            chunk = self._file.read(min(n, self._left))
        except (OSError, ValueError):  # the socket was shut down under us: end of stream
            return b""
        self._left -= len(chunk)
        return chunk

    def drain(self) -> None:
        """Read to the end, keeping the stderr tail (after the container is gone)."""
        while self.read(1 << 16):
            pass


class _SocketWriter:
    def __init__(self, sock: socket.socket):
        self._sock = sock

    def write(self, data: bytes) -> int:
        self._sock.sendall(data)
        return len(data)

    def flush(self) -> None:
        pass


class DockerRunner:
    """One live runner in one container: request(), output_tail(), kill(), close()."""

    def __init__(self, client, workspace: str, backend: str, devices: int, limits: Limits,
                 settings: DockerSettings, trusted: bool = False, device: str | None = None):
        import docker.types

        self.limits, self.settings = limits, settings
        self._api = client.api
        threads = str(max(1, int(settings.cpus)))
        uid = runner_uid(trusted)
        host_config = self._api.create_host_config(
            binds={workspace: {"bind": WORKSPACE, "mode": "ro"},
                   **({os.path.dirname(device): {"bind": DEVICE, "mode": "ro"}} if device else {})},
            network_mode="none",
            read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,noexec,size={settings.tmpfs_bytes}"},
            mem_limit=settings.memory_bytes,
            memswap_limit=settings.memory_bytes,
            pids_limit=settings.pids,
            nano_cpus=int(settings.cpus * 1e9),
            # SIGXCPU at the soft limit (reported as such); SIGKILL a second later if it is ignored
            ulimits=[docker.types.Ulimit(name="cpu", soft=limits.cpu_time_s, hard=limits.cpu_time_s + 1),
                     docker.types.Ulimit(name="fsize", soft=limits.file_size_bytes, hard=limits.file_size_bytes),
                     docker.types.Ulimit(name="core", soft=0, hard=0)],
            cap_drop=["ALL"],
            ipc_mode="private",     # no System V or POSIX shared memory with any other container
            cgroupns="private",     # its own cgroup tree (and it is mounted read-only)
            security_opt=["no-new-privileges"],
            init=True,  # python is not pid 1: signals and exit codes as on a host, zombies reaped
            log_config=docker.types.LogConfig(type="none"),  # output is read here, never piles up on disk
            # GPUs for a runner of the gpu backend only: a simulator's runner, or one whose device is
            # the GPU's device process on the host, never holds one
            device_requests=_gpu_requests(settings.gpus) if backend == Kind.GPU else [],
        )
        env = {"HOME": "/tmp", "TMPDIR": "/tmp", "NUMBA_CACHE_DIR": "/tmp/numba", "GPUGRADE_CACHE_DIR": "/tmp",
               "PYTHONDONTWRITEBYTECODE": "1",
               "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
               **self.limits.runner_env(backend)}
        created = self._api.create_container(
            settings.image,
            entrypoint=[settings.python, "-I", "-m", "grader.runner"],
            command=["--workspace", WORKSPACE, "--backend", backend, "--devices", str(devices), "--stdio",
                     *(["--device-socket", f"{DEVICE}/{os.path.basename(device)}"] if device else [])],
            user=settings.user or f"{uid}:{uid}", working_dir=WORKSPACE, environment=env, labels={RUNNER_LABEL: "1"},
            stdin_open=True, tty=False, network_disabled=True, host_config=host_config,  # stdin closes with us
        )
        self.id = created["Id"]
        try:
            attached = self._api.attach_socket(self.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            self._sock: socket.socket = getattr(attached, "_sock", attached)
            self._attached = attached  # keeps the HTTP response (and so the socket) alive
            self._sock.settimeout(None)
            self._stream = _AttachStream(self._sock, limits.output_tail_bytes)
            self._to = _SocketWriter(self._sock)
            self._api.start(self.id)
        except BaseException:
            self._remove()
            raise
        self._dead = False

    def output_tail(self) -> str:
        return bytes(self._stream.tail).decode(errors="replace")

    def request(self, message: Any, timeout: float | None = None, bounds: wire.Bounds = wire.Bounds()) -> Any:
        timeout = self.limits.call_timeout_s if timeout is None else timeout
        result = exchange_within(lambda: wire.exchange(self._to, self._stream, message, bounds), timeout, self)
        if isinstance(result, BaseException):
            reason = self._death_reason(result)
            raise RunnerError(reason, self.output_tail())
        return result

    def _death_reason(self, exc: BaseException) -> str:
        if not isinstance(exc, (EOFError, OSError)):  # alive and talking nonsense: no need to wait for it
            self.kill()
            return f"the runner broke the protocol: {exc}"
        try:
            code = int(self._api.wait(self.id, timeout=10)["StatusCode"])
            state = self._api.inspect_container(self.id)["State"]
        except Exception:  # noqa: BLE001 - still running (it broke the protocol) or the engine failed
            self.kill()
            return f"the runner broke the protocol: {exc}"
        self._dead = True
        self._stream.drain()
        if state.get("OOMKilled"):
            return f"killed: out of memory (limit {self.settings.memory_bytes >> 20} MiB)"
        return death_reason(code, self.limits, signalled_as_128_plus=True)  # docker-init is pid 1

    def kill(self) -> None:
        if not self._dead:
            # First the attach stream: a runner blocked writing a reply nobody reads would
            # otherwise keep the engine's kill waiting on that stream.
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                self._api.kill(self.id)
            except Exception:  # noqa: BLE001 - already gone
                pass
            self._dead = True

    def _remove(self) -> None:
        try:
            self._api.remove_container(self.id, force=True)
        except Exception:  # noqa: BLE001 - already gone; nothing else to do
            pass

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._remove()


def _gpu_requests(gpus: str) -> list:
    if not gpus:
        return []
    import docker.types

    if gpus == "all":
        return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return [docker.types.DeviceRequest(device_ids=[g.strip() for g in gpus.split(",") if g.strip()],
                                       capabilities=[["gpu"]])]


class DockerSandbox:
    name = "docker"

    def __init__(self, limits: Limits = Limits(), settings: DockerSettings = DockerSettings()):
        self.limits, self.settings = limits, settings
        self._client = None
        self._lock = threading.Lock()

    @property
    def hosts_device(self) -> bool:
        """The device process runs on this host, confined by bubblewrap; the container reaches it
        through a socket in a folder of its own, mounted at /device."""
        from .bubblewrap import unavailable

        return unavailable() is None

    def start_device(self, devices: int, runner_workspace: str, trusted: bool = False, gpu: bool = False,
                     sources: dict[str, str] | None = None):
        from .process import ProcessSandbox

        folder = tempfile.mkdtemp(prefix="gpugrade-device-")
        os.chmod(folder, 0o711)  # enterable, not listable: the socket's name is the secret
        path = os.path.join(folder, f"device-{secrets.token_hex(8)}.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(path)
            os.chmod(path, 0o777)  # the container's own uid connects
            listener.listen(1)
            device = ProcessSandbox(self.limits).device_process(devices, WORKSPACE, trusted, "--listen-fd",
                                                                listener.detach(), gpu, sources)
        except BaseException:
            listener.close()
            shutil.rmtree(folder, ignore_errors=True)
            raise
        device.on_close.append(lambda: shutil.rmtree(folder, ignore_errors=True))
        return device, path

    def start(self, workspace: str, backend: str, devices: int = 1, trusted: bool = False,
              device: str | None = None) -> DockerRunner:
        with self._lock:
            if self._client is None:
                try:
                    self._client = _client(self.settings.start_timeout_s)
                except UsageError as exc:
                    raise RunnerError(str(exc)) from None
        try:
            return DockerRunner(self._client, workspace, backend, devices, self.limits, self.settings, trusted,
                                device)
        except Exception as exc:  # noqa: BLE001 - the engine refused: this call fails, the next may not
            raise RunnerError(f"could not start the runner container: {type(exc).__name__}: {exc}") from None
