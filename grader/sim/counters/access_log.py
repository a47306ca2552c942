"""Counters of the scalar path (the per-thread executor): a log of its accesses, counted when
its block ends (`flush`).

Accesses arrive one thread at a time, so a warp's request is only known afterwards: requests
are the n-th execution of one line on one array and kind by the lanes of one warp. Each log
entry is (global thread id, site = line << 32 | slot code, flat position); a handle's slot
code is its number * 4 + its access code (CODES: the load's; a store's is + 1).
"""

from __future__ import annotations

import numpy as np

from ..geometry import WARP
from .banks import wavefronts, wavefronts_rows, wavefronts_sorted
from .coalescing import sectors_of_requests, sectors_of_rows
from .names import COUNT_KEYS, REQUEST_KEYS
from .row_keys import combine

CODES = (("global", "load"), ("global", "store"), ("shared", "load"), ("shared", "store"))
CODE = {sk: i for i, sk in enumerate(CODES)}


class AccessLog:
    """Mixin of `memory.Instrument` (reads tpb, wpb, counts, per_thread, read, written; notes
    lines through `_note_line`)."""

    def _init_access_log(self) -> None:
        # the recorders hold these lists' append methods: cleared in place, never replaced
        self._log_g: list[int] = []
        self._log_site: list[int] = []  # line << 32 | (handle slot * 4 + access code)
        self._log_flat: list[int] = []
        self._slots: dict[int, int] = {}
        self._slot_info: list[tuple[int, int, int]] = []  # (address, itemsize, block stride)
        self._slot_global: dict[int, object] = {}  # slot number -> handle, global arrays

    def slot(self, space, handle) -> int:
        """A handle's code in the access logs: its number * 4 + its load code (store = +1),
        registered on first use."""
        slot = self._slots.get(handle.buffer_id)
        return self._new_slot(space, handle) if slot is None else slot

    def _new_slot(self, space, handle) -> int:
        k = len(self._slot_info)
        stride = getattr(handle, "block_stride", 0) if space == "shared" else 0
        self._slot_info.append((handle.address, handle.dtype.itemsize, stride))
        if space == "global":
            self._slot_global[k] = handle
        slot = self._slots[handle.buffer_id] = k * 4 + CODE[space, "load"]
        return slot

    def pending(self) -> int:
        """Accesses of the scalar path logged and not yet counted (`flush`)."""
        return len(self._log_g)

    def flush(self, sites=None) -> None:
        """Turn the scalar path's access log into requests, sectors, wavefronts and per-thread
        counts. Requests: the n-th execution of one line on one array by the lanes of one warp.
        `sites`: the per-thread executor's compiled accesses (`_count_sites`)."""
        g = [np.array(self._log_g, np.int64)]
        site = [np.array(self._log_site, np.int64)]
        flat = [np.array(self._log_flat, np.int64)]
        for lst in (self._log_g, self._log_site, self._log_flat):
            lst.clear()  # the same lists: recorders hold their append methods
        if sites:
            more = self._count_sites(sites)
            g, site, flat = g + more[0], site + more[1], flat + more[2]
        g, site, flat = np.concatenate(g), np.concatenate(site), np.concatenate(flat)
        if not g.shape[0]:
            return
        line, hc = site >> 32, site & 0xFFFFFFFF
        info = np.array(self._slot_info, np.int64).reshape(-1, 3)
        code, slot = hc % 4, hc // 4
        base, item, stride = info[slot, 0], info[slot, 1], info[slot, 2]
        within = np.where(stride > 0, flat % np.maximum(stride, 1), flat)
        addr = base + within * item
        n = g.shape[0]
        # nth execution of (thread, array and kind, line): rank within each group, in log order
        group = combine(g, hc, line)
        order = np.argsort(group, kind="stable")
        sorted_group = group[order]
        starts = np.flatnonzero(np.r_[True, sorted_group[1:] != sorted_group[:-1]])
        nth = np.empty(n, np.int64)
        nth[order] = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
        warp = g // self.tpb * self.wpb + (g % self.tpb) // WARP
        g0 = int(g.min())
        loads = code == CODE["global", "load"]
        if loads.any():
            self.read.update(self._slot_global[k].name for k in np.unique(slot[loads]).tolist())
        for c, (space, kind) in enumerate(CODES):
            m = code == c
            if not m.any():
                continue
            key = COUNT_KEYS[space, kind]
            self.counts[key] += int(m.sum())
            per_g = np.bincount(g[m] - g0)  # only the threads logged (one block, usually)
            self.per_thread[key][g0:g0 + per_g.shape[0]] += per_g
            rk, uk = REQUEST_KEYS[space, kind]
            for ln in np.unique(line[m]).tolist():  # a request never spans two lines
                ml = m & (line == ln)
                _, req = np.unique(combine(nth[ml], warp[ml], hc[ml]), return_inverse=True)
                req = req.reshape(-1)
                n_req = int(req.max()) + 1
                if space == "global":
                    units = sectors_of_requests(req, addr[ml])
                else:
                    items = item[ml]
                    size = int(items[0])
                    units = (wavefronts_sorted(req, n_req, addr[ml], size) if (items == size).all()
                             else wavefronts(req, addr[ml], items))
                self.counts[rk] += n_req
                self.counts[uk] += units
                self._note_line(space, kind, ln, n_req, int(units),
                                lambda: (req, g[ml] % self.tpb, addr[ml], int(item[ml][0])))

    def _count_sites(self, sites) -> tuple:
        """Count the per-thread executor's compiled accesses: `sites` holds (global thread id,
        line, slot code, list of flat positions) per site and thread (grader.sim.thread.access). Where
        every lane of a warp that reached a site did so equally often, the n-th entries of its
        lanes are one request, counted for many warps at once; the rest is returned as the
        (g, site, flat) arrays of the general count."""
        gs, lines, codes, logs = zip(*sites)
        lengths = np.fromiter(map(len, logs), np.int64, len(logs))
        g = np.array(gs, np.int64)
        key = np.array(lines, np.int64) << 32 | np.array(codes, np.int64)
        used = np.flatnonzero(lengths)
        if not used.shape[0]:
            return [], [], []
        order = used[np.lexsort((g[used], key[used]))]
        k_s, g_s = key[order], g[order]
        if ((k_s[1:] == k_s[:-1]) & (g_s[1:] == g_s[:-1])).any():
            # a site reached more than once by a thread (a device function called again):
            # its lists, in the order they were made, are one
            merged: dict = {}
            for i in order.tolist():
                merged.setdefault((int(key[i]), int(g[i])), []).extend(logs[i])
            logs = list(merged.values())
            k_s = np.array([k for k, _ in merged], np.int64)
            g_s = np.array([x for _, x in merged], np.int64)
            lengths = np.fromiter(map(len, logs), np.int64, len(logs))
            order = np.arange(len(logs))
        lengths = lengths[order]
        rest_g, rest_site, rest_flat = [], [], []
        bounds = np.flatnonzero(np.r_[True, k_s[1:] != k_s[:-1], True])
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            site = int(k_s[a])
            line, hc = site >> 32, site & 0xFFFFFFFF
            gg, ll, rows = g_s[a:b], lengths[a:b], order[a:b].tolist()
            warp = gg // self.tpb * self.wpb + (gg % self.tpb) // WARP
            starts = np.flatnonzero(np.r_[True, warp[1:] != warp[:-1]])
            ends = np.r_[starts[1:], gg.shape[0]].tolist()
            same = (np.minimum.reduceat(ll, starts) == np.maximum.reduceat(ll, starts)).tolist()
            batches: dict = {}
            ragged: list = []
            for s0, s1, uniform in zip(starts.tolist(), ends, same):
                if uniform:
                    batches.setdefault((s1 - s0, int(ll[s0])), []).append((s0, s1))
                else:
                    ragged.append((s0, s1))
            for (n_l, n), spans in batches.items():
                picked = [i for s0, s1 in spans for i in range(s0, s1)]
                if n == 1:  # (numpy converts a list of one-element lists slowly)
                    flat = np.array([logs[rows[i]][0] for i in picked], np.int64)
                else:
                    flat = np.array([logs[rows[i]] for i in picked], np.int64)
                flat = flat.reshape(-1, n_l, n)
                self._count_columns(line, hc, flat, gg[picked])
            if ragged:
                picked = [i for s0, s1 in ragged for i in range(s0, s1)]
                flat = np.array([v for i in picked for v in logs[rows[i]]], np.int64)
                self._mark_stores(hc, flat)
                rest_g.append(np.repeat(gg[picked], ll[picked]))
                rest_site.append(np.full(flat.shape[0], site, np.int64))
                rest_flat.append(flat)
        return rest_g, rest_site, rest_flat

    def _count_columns(self, line: int, hc: int, flat: np.ndarray, g: np.ndarray) -> None:
        """One site's `flat` positions, (warps, lanes, n): request k of a warp is column k of
        its lanes; `g`: the lanes' global thread ids, warp by warp."""
        n_w, n_l, n = flat.shape
        space, kind = CODES[hc % 4]
        base, item, stride = self._slot_info[hc // 4]
        within = flat % stride if stride > 0 else flat
        addr = (base + within * item).transpose(0, 2, 1)  # (warps, n, lanes): a row a request
        if space == "global":
            units = sectors_of_rows(addr)
        else:
            units = wavefronts_rows(addr, item)
        rk, uk = REQUEST_KEYS[space, kind]
        self.counts[rk] += n_w * n
        self.counts[uk] += units
        self._note_line(space, kind, line, n_w * n, units,
                        lambda: (np.repeat(np.arange(n_w * n), n_l),
                                 np.broadcast_to((g % self.tpb).reshape(n_w, 1, n_l), addr.shape),
                                 addr, item))
        key = COUNT_KEYS[space, kind]
        self.counts[key] += n_w * n_l * n
        self.per_thread[key][g] += n
        self._mark_stores(hc, flat.reshape(-1))

    def _mark_stores(self, hc: int, flat: np.ndarray) -> None:
        """What the recorders mark for a global store: the elements written, and the array;
        for a global load, the array as read."""
        if hc % 4 == CODE["global", "store"]:
            handle = self._slot_global[hc // 4]
            handle.initialised[flat] = True
            self.written.add(handle.name)
            if handle.stored is not None:
                handle.stored[flat] = True
        elif hc % 4 == CODE["global", "load"] and flat.size:
            self.read.add(self._slot_global[hc // 4].name)
