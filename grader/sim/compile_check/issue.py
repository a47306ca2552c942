"""Instruction issue from numba's PTX: how many warp instructions a launch issued, estimated.

The simulator runs the kernel's Python, not its machine code, so it cannot count instructions;
the compiler decides them (an unrolled loop's constant offsets against a rolled one's index
arithmetic: on an H200 that made the coarsened matmul 0.77x of the tiled one, docs/PERF_MODEL.md).
This joins the two: `profile` reads the kernel's PTX, compiled with line info, into basic blocks
(their instructions, the loops that hold them, and the memory instructions and warp collectives
of each source line); `warp_instructions` weighs each block by how often it ran, which those
tell (`block_runs`): a block holding a line's loads ran as often as the simulator counted warp requests of that
line, divided by the copies of those loads the compiler made (16 in a loop it unrolled 16 times).

The same weights count a launch's DRAM round trips (`load_round_trips`): a warp issues global
loads until an instruction needs one's value, then waits, in order. Loads that ptxas may hoist
above that wait (no global store, atomic or barrier between, an address that does not depend on
a pending load) are one round trip: a grid-stride vector add stores each element before it loads
the next (`out` may alias `a`), one round trip an element; a sum's unrolled loop loads four
elements, then adds them: one round trip for four.

What it cannot see: a loop with no memory access or warp collective runs once per run of what
holds it (its trip count is unknown), a device function left uninlined counts as its call only,
and ptxas's own rewriting (PTX to SASS) is not modelled: on the H200's matmuls SASS had 0.94-0.97x the PTX's
instructions per multiply-add. Round trips are counted within one iteration of a loop (the next
iteration never overlaps this one's loads: ptxas does not pipeline loops).
"""

from __future__ import annotations

import os
import re
from collections import Counter

# PTX statements: a guard predicate, a label, a line directive, a file, a branch
_GUARD = re.compile(r"^@!?%\w+\s+")
_LABEL = re.compile(r"^(\$?[\w$]+):$")
_LOC = re.compile(r"^\.loc\s+(\d+)\s+(\d+)")
_FILE = re.compile(r'^\.file\s+(\d+)\s+"([^"]*)"')
_BRANCH = re.compile(r"^bra(?:\.uni)?\s+(\$?[\w$]+)$")
_MEMORY_KIND = {"ld": "load", "ldu": "load", "st": "store"}
_ENDS_BLOCK = ("bra", "ret", "exit", "brx")
_WARP_OPS = ("shfl.sync", "vote.sync", "match.", "bar.warp.sync")  # what the simulator counts as warp ops
_REGISTER = re.compile(r"%[A-Za-z_]\w*")
_NO_DESTINATION = ("st", "red", "bar", "barrier", "membar", "fence", "bra", "ret", "exit", "call", "brx", "trap")
# moving a 64-bit float is no float64 arithmetic: loads, stores, moves, shuffles, selects
_NOT_FP64_MATH = ("ld", "ldu", "st", "mov", "shfl", "selp", "atom", "red", "cvta")


def profile(ptx: str, filename: str) -> dict | None:
    """The first `.entry` function of `ptx` as basic blocks, JSON-able:
    {"blocks": [[instructions, loop, {anchor: count}, round trips, float64 arithmetic, float64 conversions]],
    "loops": [parent]}, an anchor
    being a source line's global or shared loads or stores ("shared load 42") or its warp
    collectives ("warp op 42"): `loop` indexes "loops" (-1: in no loop), a loop's parent likewise;
    only lines of `filename` (the kernel's source file) are kept as anchors; round trips: the
    groups of global loads a thread waits on, one after another, in one run of the block
    (`_RoundTrips`); float64 arithmetic and conversions: instructions of the FP64 units, which most GPUs
    have far fewer of than float32 lanes (`_fp64`). None when `ptx` has no entry function."""
    files = {m.group(1): os.path.abspath(m.group(2))
             for m in map(_FILE.match, (s.strip() for s in ptx.splitlines())) if m}
    filename = os.path.abspath(filename)
    body = _entry_body(ptx)
    if body is None:
        return None
    blocks: list[list] = []   # [instructions, {anchor: count}, [(opcode, operands, guard)]], in layout order
    labels: dict[str, int] = {}
    branches: list[tuple[int, str]] = []  # (block, target label)
    current: list | None = None
    here_file, here_line = None, 0
    previous_shuffle: list[str] | None = None
    for statement in _statements(body):
        label = _LABEL.match(statement)
        if label:
            current = None
            labels[label.group(1)] = len(blocks)
            continue
        loc = _LOC.match(statement)
        if loc:
            here_file, here_line = loc.group(1), int(loc.group(2))
            continue
        if statement.startswith((".", "{", "}")) or not statement:
            continue  # declarations, scopes
        if current is None:
            current = [0, {}, []]
            blocks.append(current)
        current[0] += 1
        op = _GUARD.sub("", statement)
        opcode, _, operands = op.partition(" ")
        current[2].append((opcode, operands, statement[:len(statement) - len(op)]))
        line = here_line if files.get(here_file) == filename else 0
        if opcode.startswith(_WARP_OPS):
            # numba shuffles a 64-bit value as two 32-bit halves: the same lane, clamp and mask
            tail = [o.strip() for o in operands.split(",")][2:]
            anchor = None if tail == previous_shuffle or line <= 0 else (f"warp op {line}", 1)
            previous_shuffle = tail if opcode.startswith("shfl") else None
        else:
            anchor = _anchor(opcode, line)
            previous_shuffle = None
        if anchor is not None:
            key, weight = anchor
            current[1][key] = current[1].get(key, 0) + weight
        branch = _BRANCH.match(op)
        if branch:
            branches.append((len(blocks) - 1, branch.group(1)))
        if opcode.split(".", 1)[0] in _ENDS_BLOCK:
            current = None
    loops = _loops(branches, labels)
    innermost = [-1] * len(blocks)
    for i, (start, end) in enumerate(loops):  # outer loops first: an inner one overwrites
        for b in range(start, end + 1):
            innermost[b] = i
    parents = [_parent(i, loops) for i in range(len(loops))]
    trips = _round_trips([code for _, _, code in blocks], loops, innermost)
    fp64 = [Counter(map(_fp64, code)) for _, _, code in blocks]
    return {"blocks": [[n, innermost[b], anchors, trips[b], fp64[b]["math"], fp64[b]["conversion"]]
                       for b, (n, anchors, _) in enumerate(blocks)],
            "loops": parents}


def _fp64(instruction: tuple) -> str | None:
    """"math" for float64 arithmetic (`fma.rn.f64`, `setp.lt.f64`), "conversion" for a conversion to
    or from float64 (`cvt.f64.f32`): work of the FP64 units, at their own rates; None otherwise."""
    parts = instruction[0].split(".")
    if "f64" not in parts[1:] or parts[0] in _NOT_FP64_MATH:
        return None
    return "conversion" if parts[0] == "cvt" else "math"


def _round_trips(code: list[list[tuple]], loops: list[tuple[int, int]], innermost: list[int]) -> list[int]:
    """Each block's groups of global loads (`_RoundTrips`), counted in the block that opens them. A
    group goes on into the next block of the same loop iteration (ptxas predicates the short arms
    of an `if`, as around a tile's guarded loads, and hoists loads across them), not across a
    loop's first or last block."""
    firsts, lasts = {s for s, _ in loops}, {e for _, e in loops}
    counts: list[int] = []
    state = _RoundTrips()
    for b, instructions in enumerate(code):
        if b in firsts or (b - 1) in lasts or (b and innermost[b] != innermost[b - 1]):
            state = _RoundTrips()
        before = state.groups
        for opcode, operands, guard in instructions:
            state.step(opcode, operands, guard)
        counts.append(state.groups - before)
    return counts


_COLUMN = {None: 0, "fp64 math": 4, "fp64 conversions": 5}  # of a block in `profile`


def warp_instructions(prof: dict, runs: list[float], loops_only: bool = False, only: str | None = None) -> int:
    """Warp instructions a launch issued, estimated from its PTX `prof` (`profile`) and how often
    each block ran (`runs`: `block_runs`); `loops_only`: those its loops issued; `only`: of them,
    its "fp64 math" or its "fp64 conversions"."""
    column = _COLUMN[only]
    return int(round(sum(block[column] * run for block, run in zip(prof["blocks"], runs)
                         if block[1] >= 0 or not loops_only)))


def load_round_trips(prof: dict, runs: list[float]) -> int:
    """The DRAM round trips a launch's warps waited on, one after another in each warp, summed over
    its warps: each block's groups of global loads (`profile`) times its runs (`block_runs`)."""
    return int(round(sum(block[3] * run for block, run in zip(prof["blocks"], runs))))


def block_runs(prof: dict, lines: list[dict], warp_ops: dict[int, int], warps: int) -> list[float]:
    """How often each block of `prof` ran, summed over the launch's warps, from the simulator's
    per-line requests (`lines`: the launch record's), its warp collectives by line (`warp_ops`:
    shuffles, votes, one a warp) and the warps it launched. A block with memory
    instructions of lines the simulator saw ran (requests of the line) / (that line's memory
    instructions in the whole kernel) times, averaged over its lines (stores only where it has
    nothing else); a block without ran as often as the most-run such block of its loop, or, in a
    loop with none, as its parent loop; outside loops, once a warp."""
    requests: dict[str, float] = {}
    for entry in lines:
        if entry.get("kind") in ("load", "store"):
            key = f"{entry.get('space')} {entry['kind']} {entry.get('line')}"
            requests[key] = requests.get(key, 0.0) + float(entry.get("requests", 0))
    for line, n in warp_ops.items():
        requests[f"warp op {line}"] = float(n)
    static: dict[str, float] = {}
    for _, _, anchors, *_ in prof["blocks"]:
        for key, n in anchors.items():
            static[key] = static.get(key, 0.0) + n
    runs: list[float | None] = []
    for _, _, anchors, *_ in prof["blocks"]:
        # stores last: the compiler merges the stores of both arms of an `if` into one (its line
        # then often lost), which leaves a line fewer copies than it ran
        keys = [key for key in anchors if key in requests]
        keys = [key for key in keys if not key.startswith(("global store", "shared store"))] or keys
        seen = [requests[key] / static[key] for key in keys]
        runs.append(sum(seen) / len(seen) if seen else None)
    loops = prof["loops"]
    loop_runs: list[float | None] = [None] * len(loops)
    for (_, loop, *_), run in zip(prof["blocks"], runs):
        if run is not None and loop >= 0:
            loop_runs[loop] = max(loop_runs[loop] or 0.0, run)

    def of_loop(i: int) -> float:
        while i >= 0 and loop_runs[i] is None:
            i = loops[i]
        return float(warps) if i < 0 else float(loop_runs[i])

    return [run if run is not None else of_loop(loop) for (_, loop, *_), run in zip(prof["blocks"], runs)]


class _RoundTrips:
    """The groups of global loads a warp waits on, read instruction by instruction (over the blocks
    of one loop iteration: `_round_trips`). A warp issues in order and stalls at the first instruction that needs a pending
    load's value; ptxas moves independent loads above such a use, but not above a global store,
    an atomic or a barrier (a store may alias what is loaded next), nor a load whose address
    needs the pending value. So a group ends at such a fence that needs a pending value (or at
    any barrier), and at a load whose address does; `pending` holds the registers that depend on
    the open group's loads."""

    def __init__(self) -> None:
        self.groups = 0
        self.open = False
        self.pending: set[str] = set()

    def step(self, opcode: str, operands: str, guard: str) -> None:
        parts = opcode.split(".")
        defs, uses = _registers(parts[0], operands)
        needs_pending = bool(self.pending) and any(r in self.pending for r in uses + _REGISTER.findall(guard))
        if parts[0] in ("ld", "ldu") and "global" in parts[1:]:
            if needs_pending or not self.open:
                self.groups, self.open = self.groups + 1, True
                if needs_pending:
                    self.pending = set()
            self.pending.update(defs)
        elif _fence(parts):
            if needs_pending or parts[0] in ("bar", "barrier", "membar", "fence"):
                self.open, self.pending = False, set()
        elif needs_pending:
            self.pending.update(defs)


def _fence(parts: list[str]) -> bool:
    """Whether ptxas keeps a later global load below this instruction: a store that may reach
    global memory, an atomic, a block barrier or a memory fence (not a warp's `bar.warp.sync`)."""
    if parts[0] == "st":
        return not any(p in ("shared", "local", "param") for p in parts[1:])
    if parts[0] in ("bar", "barrier"):
        return len(parts) < 2 or parts[1] != "warp"
    return parts[0] in ("atom", "red", "membar", "fence")


def _registers(op: str, operands: str) -> tuple[list[str], list[str]]:
    """(registers written, registers read) of one PTX instruction: the first operand is the
    destination (`{%f1, %f2}` a vector's, `%r1|%p1` a pair's) except for stores, barriers and
    branches, which write none."""
    if op in _NO_DESTINATION:
        return [], _REGISTER.findall(operands)
    text = operands.strip()
    if text.startswith("{"):
        head, _, rest = text[1:].partition("}")
    else:
        head, _, rest = text.partition(",")
    return _REGISTER.findall(head), _REGISTER.findall(rest)


def _entry_body(ptx: str) -> str | None:
    """The text between the braces of the first `.entry` (PTX nests braces for call scopes)."""
    at = ptx.find(".entry")
    if at < 0:
        return None
    start = ptx.find("{", ptx.find(")", at))
    if start < 0:
        return None
    depth = 0
    for i in range(start, len(ptx)):
        if ptx[i] == "{":
            depth += 1
        elif ptx[i] == "}":
            depth -= 1
            if depth == 0:
                return ptx[start + 1:i]
    return None


def _statements(body: str):
    """Labels, `.loc` directives and instructions, one each (an instruction may span lines)."""
    pending = ""
    for raw in body.splitlines():
        text = raw.split("//", 1)[0].strip()
        if not text:
            continue
        if pending:
            pending += " " + text
            if pending.endswith(";"):
                yield pending[:-1].strip()
                pending = ""
            continue
        if text.endswith(":") or text.startswith((".loc", ".file", "{", "}")):
            yield text
        elif text.endswith(";"):
            yield text[:-1].strip()
        else:
            pending = text
    if pending:
        yield pending


def _anchor(opcode: str, line: int) -> tuple[str, int] | None:
    """("space kind line", accesses) of a global or shared load or store, None for any other
    instruction; a vector access (`.v2`, `.v4`) counts as that many, as the simulator counts them."""
    parts = opcode.split(".")
    kind = _MEMORY_KIND.get(parts[0])
    if kind is None or line <= 0:
        return None
    if any(p in ("local", "param", "const") for p in parts[1:]):
        return None
    space = "shared" if "shared" in parts[1:] else "global"
    width = next((int(p[1:]) for p in parts[1:] if p in ("v2", "v4", "v8")), 1)
    return f"{space} {kind} {line}", width


def _loops(branches: list[tuple[int, str]], labels: dict[str, int]) -> list[tuple[int, int]]:
    """Loops as (first block, last block), outer first: a branch back to a label at or before it.
    Back edges to one header merge (a `continue`); LLVM lays a loop's blocks out contiguously."""
    spans: dict[int, int] = {}
    for block, target in branches:
        head = labels.get(target)
        if head is not None and head <= block:
            spans[head] = max(spans.get(head, block), block)
    return sorted(spans.items(), key=lambda s: (s[0], -s[1]))


def _parent(i: int, loops: list[tuple[int, int]]) -> int:
    """The innermost loop that holds loop `i` (-1: none)."""
    start, end = loops[i]
    best = -1
    for j, (s, e) in enumerate(loops):
        if j != i and s <= start and end <= e and (s, e) != (start, end):
            if best < 0 or (loops[best][1] - loops[best][0]) > (e - s):
                best = j
    return best


__all__ = ["block_runs", "load_round_trips", "profile", "warp_instructions"]
