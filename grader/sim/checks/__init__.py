"""The instrument's checkers, one concern per module (the ones with state are mixins of
`memory.Instrument`):

- findings: how a finding is reported (kernel, file:line, block, thread, array, index)
- bounds: flat positions of kernel indices, out-of-bounds accesses
- uninitialised: loads of elements never written since allocation
- ordering: what orders two accesses (barrier and syncwarp epochs, fences, acquires)
- races: the race shadow and rule, for vector and scalar accesses
- silent_stores: stores that change no bits, which the race rule leaves out

`errors.Checks` turns them on and off (bounds always runs: memory safety needs it).
"""
