"""Thread geometry: a launch's grid and blocks (`LaunchConfig`), and the warps of the lanes of
one vector access (`Lanes`), which every per-warp checker and counter reads."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WARP = 32
_WARP_SHIFT = WARP.bit_length() - 1  # x >> shift == x // WARP (int64)


@dataclass(frozen=True)
class LaunchConfig:
    """A validated launch configuration (3-tuples, x first)."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0
    stream: object = 0
    device: int = 0

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def n_blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def warps_per_block(self) -> int:
        return (self.threads_per_block + WARP - 1) // WARP

    def block_xyz(self, b: int) -> tuple[int, int, int]:
        gx, gy, _ = self.grid
        return (b % gx, b // gx % gy, b // (gx * gy))

    def thread_xyz(self, t: int) -> tuple[int, int, int]:
        bx, by, _ = self.block
        return (t % bx, t // bx % by, t // (bx * by))


class Lanes:
    """The lanes of one vector access and their warp geometry, computed once per set of active
    lanes (the SIMT executor keeps one per mask and passes it along).

    `block`, `thread`: int64 vectors; `act`: the lanes' positions in the executor's full lane
    vectors (None: all of them). `g`: global thread ids; `warp`: global warp ids; `ordered`: g
    strictly increasing (then each warp is one run of lanes, starting at `starts`); `g0`: the
    first id when the ids are also consecutive; `rows`: every run is a whole warp of 32 lanes.
    """

    __slots__ = ("block", "thread", "act", "n", "g", "warp", "ordered", "starts", "n_req", "g0",
                 "rows", "ridx", "blkoff", "ep_ver", "ep", "wep", "neg_block")

    def __init__(self, block, thread, tpb: int, wpb: int, act=None):
        block = np.asarray(block, np.int64)
        thread = np.broadcast_to(np.asarray(thread, np.int64), block.shape)
        self.block, self.thread, self.act = block, thread, act
        n = self.n = block.shape[0]
        g = self.g = block * tpb + thread
        self.warp = w = block * wpb + (thread >> _WARP_SHIFT)  # thread // WARP
        self.ordered = n <= 1 or bool((g[1:] > g[:-1]).all())
        self.g0 = int(g[0]) if self.ordered and n and int(g[-1]) - int(g[0]) == n - 1 else None
        if self.ordered:
            self.starts = np.flatnonzero(w[1:] != w[:-1]) + 1 if n else np.zeros(0, np.int64)
            self.starts = np.concatenate((np.zeros(min(n, 1), np.int64), self.starts))
            self.n_req = int(self.starts.shape[0])
        else:
            self.starts = None
            self.n_req = int(np.unique(w).shape[0])
        self.rows = self.ordered and n == WARP * self.n_req
        self.ridx = None  # request number of each lane (ordered lanes), made when needed
        self.blkoff: dict = {}  # (first_block, block_stride) -> offset of each lane's block copy
        self.ep_ver, self.ep, self.wep = -1, None, None  # epochs (Ordering._lane_epochs)
        self.neg_block = None  # -block - 2: "several readers of this block" in the race shadow

    def request_index(self) -> np.ndarray:
        if self.ridx is None:
            lengths = np.diff(np.append(self.starts, self.n))
            self.ridx = np.repeat(np.arange(self.n_req, dtype=np.int64), lengths)
        return self.ridx

    def block_offset(self, handle) -> np.ndarray:
        key = (handle.first_block, handle.block_stride)
        off = self.blkoff.get(key)
        if off is None:
            off = self.blkoff[key] = (self.block - handle.first_block) * handle.block_stride
        return off
