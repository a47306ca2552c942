"""The counters' keys, as `Instrument.finish` reports them (docs/SIMULATOR_DESIGN.md)."""

from __future__ import annotations

COUNTERS = (
    "global_loads", "global_stores", "global_load_requests", "global_store_requests",
    "global_load_sectors", "global_store_sectors", "shared_loads", "shared_stores",
    "shared_requests", "bank_conflict_wavefronts", "atomics", "shared_atomics", "barriers", "warp_ops")
PER_THREAD = ("global_loads", "global_stores", "shared_loads", "shared_stores")


def _request_keys(space: str, kind: str) -> tuple[str, str]:
    """The counters of requests and of their cost (sectors or wavefronts) for an access kind."""
    if space == "global":
        return f"global_{kind}_requests", f"global_{kind}_sectors"
    return "shared_requests", "bank_conflict_wavefronts"


REQUEST_KEYS = {(s, k): _request_keys(s, k) for s in ("global", "shared")
                for k in ("load", "store", "atomic")}
COUNT_KEYS = {(s, k): f"{s}_{'loads' if k == 'load' else 'stores'}"
              for s in ("global", "shared") for k in ("load", "store")}
