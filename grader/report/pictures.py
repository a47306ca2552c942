"""Pictures for the feedback, as inline SVG text (matplotlib, the `pictures` extra): the ranks'
traffic as a ring with bytes per link, a modelled timeline of copies and adds per stream, a
performance test's time (and missed counter) against the reference's as bars, one warp's request
as lanes to sectors (global) or lanes to banks (shared), and a wrong matrix's wrong elements.
Readable without colour: links carry their byte counts as text, copies, the student's bars and
conflicted banks are hatched, kernels and the reference's bars solid, wrong elements black. Without matplotlib every function returns "" and the page says how to get them."""

from __future__ import annotations

import io
import math


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(width: float, height: float):
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure  # no pyplot: no global figure state in the judge

    return Figure(figsize=(width, height))


def _svg(fig) -> str:
    import matplotlib

    out = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "gpugrade"}):  # text stays text
        fig.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = out.getvalue()
    return text[text.find("<svg"):]  # inline: no XML prologue or doctype


def ring_svg(traffic: dict) -> str:
    """`traffic`: {"ranks": N, "links": [[src, dst, bytes, messages], ...]} -> the ring: ranks on a
    circle, one arrow per link that carried bytes (off-ring links too), labelled with its bytes
    and messages, thicker for more bytes."""
    if not available():
        return ""
    count = int(traffic.get("ranks", 0))
    links = [tuple(link) for link in traffic.get("links", [])]
    if count < 2:
        return ""
    fig = _figure(4.2, 4.2)
    ax = fig.add_subplot()
    ax.set_aspect("equal")
    ax.axis("off")
    where = [(math.cos(math.pi / 2 - 2 * math.pi * r / count), math.sin(math.pi / 2 - 2 * math.pi * r / count))
             for r in range(count)]
    heaviest = max((link[2] for link in links), default=1) or 1
    for src, dst, nbytes, messages in links:
        (x0, y0), (x1, y1) = where[src], where[dst]
        ring = dst == (src + 1) % count
        bend = 0.15 if ring else 0.35
        ax.annotate("", xy=(x1 * 0.85, y1 * 0.85), xytext=(x0 * 0.85, y0 * 0.85),
                    arrowprops={"arrowstyle": "-|>", "lw": 0.8 + 3.2 * nbytes / heaviest,
                                "linestyle": "-" if ring else "--", "color": "black",
                                "connectionstyle": f"arc3,rad={bend}"})
        mx, my = (x0 + x1) / 2, (y0 + y1) / 2
        nx, ny = (y1 - y0), -(x1 - x0)  # the side the arc bends to
        ax.text(mx * 0.85 + nx * bend * 0.5, my * 0.85 + ny * bend * 0.5, f"{_bytes(nbytes)}\n{messages} msg",
                fontsize=6.5, ha="center", va="center",
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none"})
    for r, (x, y) in enumerate(where):
        ax.add_patch(_circle(fig, x, y))
        ax.text(x, y, f"rank {r}", fontsize=8, ha="center", va="center")
    ax.set_xlim(-1.3, 1.3)
    ax.set_ylim(-1.3, 1.3)
    ax.set_title("bytes between ranks (dashed: not a ring link)", fontsize=8)
    return _svg(fig)


def _circle(fig, x: float, y: float):
    from matplotlib.patches import Circle

    return Circle((x, y), 0.17, fc="white", ec="black", lw=1.2)


def timeline_svg(spans: list, title: str) -> str:
    """`spans`: [[kind, device, stream, start_us, end_us], ...] -> one row per stream (named by its
    device), copies hatched, kernels solid, time in microseconds."""
    if not available() or not spans:
        return ""
    rows = sorted({(int(s[1]), int(s[2])) for s in spans})
    index = {row: i for i, row in enumerate(rows)}
    fig = _figure(7.5, 0.4 + 0.28 * len(rows))
    ax = fig.add_subplot()
    for kind, device, stream, start, end in spans:
        y = index[(int(device), int(stream))]
        copy = kind == "copy"
        ax.broken_barh([(start, max(end - start, 1e-3))], (y - 0.38, 0.76), facecolors="white" if copy else "0.35",
                       edgecolors="black", linewidth=0.4, hatch="////" if copy else None)
    ax.set_yticks(range(len(rows)), [f"device {d}, stream {s}" for d, s in rows], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("modelled time (us); hatched: copies, solid: kernels", fontsize=7)
    ax.tick_params(axis="x", labelsize=6)
    ax.set_title(title, fontsize=8)
    return _svg(fig)


def time_bars_svg(timing: dict, criterion: tuple | None = None) -> str:
    """A performance test's time against the reference's as bars (`timing`: seconds,
    reference_seconds, source, gpu, max_time_ratio), the time full credit allows as a dashed line;
    beside it, the counter `criterion` (label, yours, the reference's, the limit) it missed, if any.
    Readable without colour: the student's bar hatched, the reference's solid, values written."""
    if not available() or not timing or "seconds" not in timing or "reference_seconds" not in timing:
        return ""
    where = f", {timing['source']} on {timing['gpu']}" if timing.get("source") and timing.get("gpu") else ""
    panels = [(f"time per call (us){where}", timing["seconds"] * 1e6, timing["reference_seconds"] * 1e6,
               timing["reference_seconds"] * 1e6 * timing["max_time_ratio"] if timing.get("max_time_ratio") else None,
               "full credit")]
    if criterion:
        label, yours, theirs, limit = criterion
        panels.append((label, yours, theirs, limit, "allowed"))
    fig = _figure(3.0 * len(panels) + 0.6, 2.3)
    for k, (label, yours, theirs, limit, limit_name) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        bars = ax.bar([0, 1], [yours, theirs], width=0.6, color=["white", "0.45"], edgecolor="black", linewidth=0.8)
        bars[0].set_hatch("////")
        top = max(yours, theirs, limit or 0) or 1.0
        for x, value in ((0, yours), (1, theirs)):
            ax.text(x, value + top * 0.02, f"{value:.3g}", ha="center", va="bottom", fontsize=7)
        if limit is not None:
            ax.axhline(limit, color="black", linestyle="--", linewidth=0.8)
            ax.text(1.45, limit, f"{limit_name}\n{limit:.3g}", fontsize=6, va="center", ha="left")
        ax.set_xticks([0, 1], ["yours", "reference"], fontsize=7)
        ax.set_xlim(-0.6, 1.9)
        ax.set_ylim(0, top * 1.2)
        ax.tick_params(axis="y", labelsize=6)
        ax.set_title(_wrap(label, 38), fontsize=7.5)
        ax.set_xlabel("hatched: yours, solid: the reference", fontsize=6)
    return _svg(fig)


def sectors_svg(request: dict) -> str:
    """One warp's global request (`request`: lanes, addresses in bytes from a sector boundary,
    itemsize, line, kind) -> its lanes on top, the 32-byte sectors they touched below, a line from
    each lane to its sector: a coalesced warp draws a few sectors under the lanes, a strided one a
    fan of 32."""
    if not available() or not request.get("lanes"):
        return ""
    lanes, addresses, item = request["lanes"], request["addresses"], int(request.get("itemsize", 4))
    sectors = sorted({a // 32 for a in addresses})
    slot = {s: i for i, s in enumerate(sectors)}
    width = max(len(sectors), 32)
    fig = _figure(7.5, 2.4)
    ax = fig.add_subplot()
    ax.axis("off")
    for lane, address in zip(lanes, addresses):
        x_sector = (slot[address // 32] + 0.5) * width / len(sectors)
        ax.plot([lane + 0.5, x_sector], [2.0, 0.6], color="black", linewidth=0.5)
    for lane in lanes:
        ax.add_patch(_box(lane + 0.1, 2.0, 0.8, 0.45, "white"))
        ax.text(lane + 0.5, 2.22, str(lane), fontsize=5, ha="center", va="center")
    step = width / len(sectors)
    for i, sector in enumerate(sectors):
        ax.add_patch(_box(i * step + 0.05 * step, 0.15, 0.9 * step, 0.45, "0.8", "////"))
        if len(sectors) <= 16 or i % max(1, len(sectors) // 8) == 0:
            ax.text((i + 0.5) * step, 0.0, f"+{sector * 32}", fontsize=5, ha="center", va="top")
    ax.text(-0.4, 2.22, "lanes", fontsize=6, ha="right", va="center")
    ax.text(-0.4, 0.38, "sectors", fontsize=6, ha="right", va="center")
    ax.set_xlim(-2.5, width + 0.5)
    ax.set_ylim(-0.4, 2.6)
    ideal = -(-len(lanes) * item // 32)
    ax.set_title(f"{_line(request)}, one warp's global {request.get('kind', 'access')}: "
                 f"{len(lanes)} lanes touch {len(sectors)} sectors of 32 bytes "
                 f"({ideal} for consecutive {item}-byte items); byte offsets below", fontsize=7.5)
    return _svg(fig)


def _line(request: dict) -> str:
    """The request's line, in its notebook cell where it has one (grader.course.cell_lines)."""
    line = f"line {request.get('line', '?')}"
    return f"cell {request['cell']}, {line}" if "cell" in request else line


BANK_LEVELS = 8  # words drawn per bank at most; a deeper bank ends with a "+N more" box


def banks_svg(request: dict) -> str:
    """One warp's shared-memory request -> the 32 banks across, each distinct word a bank holds
    stacked above it with the lanes that read it: a bank with more than one word is hatched and
    marked "xN" (its words are served one pass after another)."""
    if not available() or not request.get("lanes"):
        return ""
    item = int(request.get("itemsize", 4))
    words: dict[int, dict[int, list[int]]] = {}  # bank -> word -> lanes
    for lane, address in zip(request["lanes"], request["addresses"]):
        for word in range(address // 4, (address + max(item, 4) - 1) // 4 + 1):
            words.setdefault(word % 32, {}).setdefault(word, []).append(lane)
    depth = max(len(w) for w in words.values())
    shown = min(depth, BANK_LEVELS)
    fig = _figure(7.5, 1.2 + 0.3 * shown)
    ax = fig.add_subplot()
    ax.axis("off")
    for bank in range(32):
        held = sorted(words.get(bank, {}).items())
        conflict = len(held) > 1
        for level, (word, lanes) in enumerate(held[:shown]):
            ax.add_patch(_box(bank + 0.05, level, 0.9, 0.9, "0.75" if conflict else "white",
                              "////" if conflict else None))
            label = ",".join(str(x) for x in lanes[:3]) + ("+" if len(lanes) > 3 else "")
            if level == shown - 1 and len(held) > shown:  # the deepest bank's rest, as a count
                label = f"+{len(held) - shown + 1}"
            ax.text(bank + 0.5, level + 0.45, label, fontsize=5.5, ha="center", va="center",
                    bbox={"boxstyle": "square,pad=0.05", "fc": "white", "ec": "none"} if conflict else None)
        if conflict:
            ax.text(bank + 0.5, min(len(held), shown) + 0.15, f"x{len(held)}", fontsize=6, ha="center",
                    va="bottom", fontweight="bold")
        ax.text(bank + 0.5, -0.3, str(bank), fontsize=5, ha="center", va="top")
    ax.text(-0.3, -0.3, "bank", fontsize=6, ha="right", va="top")
    ax.set_xlim(-1.5, 32.5)
    ax.set_ylim(-1.0, shown + 1.0)
    ax.set_title(f"{_line(request)}, one warp's shared {request.get('kind', 'access')}: "
                 f"{depth} pass{'es' if depth > 1 else ''} (1 without bank conflicts); each box one 4-byte word, "
                 f"the lanes that use it written in it", fontsize=7.5)
    return _svg(fig)


def mask_svg(wrong: dict) -> str:
    """A matrix's wrong elements (`wrong`: shape, cell, rows of '#'/'.') -> black cells wrong,
    white right, axes in element indices: a missed tile, edge or stripe shows at a glance."""
    if not available() or not wrong.get("rows"):
        return ""
    import numpy as np

    cells = np.array([[c == "#" for c in row] for row in wrong["rows"]], float)
    rows, cols = wrong["shape"]
    fig = _figure(3.4, 3.4 * min(2.0, max(0.4, cells.shape[0] / max(cells.shape[1], 1))))
    ax = fig.add_subplot()
    ax.imshow(cells, cmap="gray_r", vmin=0, vmax=1, interpolation="nearest", extent=(0, cols, rows, 0))
    ax.tick_params(labelsize=6)
    ax.set_xlabel("column", fontsize=7)
    ax.set_ylabel("row", fontsize=7)
    cell_r, cell_c = wrong.get("cell", [1, 1])
    per = f"; a cell is {cell_r}x{cell_c} elements" if (cell_r, cell_c) != (1, 1) else ""
    ax.set_title(f"wrong elements (black) of the {rows}x{cols} output{per}", fontsize=7.5)
    return _svg(fig)


def _box(x: float, y: float, w: float, h: float, face: str, hatch: str | None = None):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, fc=face, ec="black", lw=0.5, hatch=hatch)


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)[:3]) or text


def histogram_svg(scores: list[float], maximum: float, title: str) -> str:
    """A class's scores of one exercise or stage: how many students in each tenth of the maximum."""
    if not available() or maximum <= 0:
        return ""
    fig = _figure(3.6, 2.0)
    ax = fig.add_subplot()
    edges = [maximum * i / 10 for i in range(11)]
    ax.hist([min(s, maximum) for s in scores], bins=edges, color="0.55", edgecolor="black", linewidth=0.5)
    ax.set_xlim(0, maximum)
    ax.set_xlabel(f"score (of {maximum:g})", fontsize=7)
    ax.set_ylabel("students", fontsize=7)
    ax.tick_params(labelsize=6)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(title, fontsize=8)
    return _svg(fig)


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} GB"


__all__ = ["available", "histogram_svg", "ring_svg", "time_bars_svg", "timeline_svg"]
