"""The instrument's counters, one concern per module (what `Instrument.finish` reports; keys in
docs/SIMULATOR_DESIGN.md):

- names: the counters' keys
- coalescing: global memory, distinct 32-byte sectors per warp request
- banks: shared memory, wavefronts per warp request (bank conflicts)
- vector: the counters of the SIMT path, one instruction's lanes at a time (a mixin)
- access_log: the counters of the per-thread path, from a log of its accesses (a mixin)
- lines: requests and their cost per source line (a mixin)
- row_keys: one int64 key per row of several columns (numpy's unique takes one)
"""
