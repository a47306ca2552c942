"""Stream order on the simulated GPUs (grader/sim/streams.py): what CUDA's streams and events
order, and the races where nothing does, although the simulator runs everything in issue order."""

import re
import sys

import numpy as np
import pytest
from numba import cuda

from grader import sim


@cuda.jit
def add(dst, src):
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] += src[i]


@pytest.fixture
def gpus():
    with sim.installed(devices=2) as simulator:
        yield simulator


def _arrays():
    a = cuda.to_device(np.ones(64, np.float32))
    with cuda.gpus[1]:
        b = cuda.to_device(np.ones(64, np.float32))
        scratch = cuda.device_array(64, np.float32)
        copies, adds = cuda.stream(), cuda.stream()  # (STREAMS_MADE_AT)
    return a, b, scratch, copies, adds


STREAMS_MADE_AT = _arrays.__code__.co_firstlineno + 5


def test_an_event_orders_a_copy_before_the_kernel_that_reads_it(gpus):
    a, b, scratch, copies, adds = _arrays()
    with cuda.gpus[1]:
        scratch.copy_to_device(a, stream=copies)
        done = cuda.event()
        done.record(copies)
        done.wait(adds)
        add[1, 64, adds](b, scratch)
        adds.synchronize()
    np.testing.assert_array_equal(b.copy_to_host(), 2)


def test_a_missing_event_wait_is_a_race_although_the_result_is_right(gpus):
    a, b, scratch, copies, adds = _arrays()
    with cuda.gpus[1]:
        copied_at = sys._getframe().f_lineno + 1
        scratch.copy_to_device(a, stream=copies)
        with pytest.raises(sim.StreamRaceError) as found:
            launched_at = sys._getframe().f_lineno + 1
            add[1, 64, adds](b, scratch)
    message = str(found.value)
    assert "read after write" in message and "'src'" in message and "copy device 0 -> device 1" in message
    assert "e.record" in message
    # both operations named with the student's line that issued them
    test = "test_a_missing_event_wait_is_a_race_although_the_result_is_right"
    assert f"kernel 'add' (launched at {__file__}:{launched_at} in {test}" in message  # (then pytest's frames)
    assert f"copy device 0 -> device 1 (at {__file__}:{copied_at} in {test}" in message
    assert "they can run at the same time" in message  # not "they run": they may not


def test_a_race_names_each_stream_by_the_line_that_made_it_or_the_graders_name_for_it(gpus):
    """"stream 93 of device 1" alone tells a student nothing: the line of theirs that made it, or
    what the grader calls a stream it made for them (a rank's r.stream)."""
    a, b, scratch, copies, adds = _arrays()
    adds.name_as("r.stream of rank 1")
    with cuda.gpus[1]:
        scratch.copy_to_device(a, stream=copies)
        with pytest.raises(sim.StreamRaceError) as found:
            add[1, 64, adds](b, scratch)
    message = str(found.value)
    assert f"on stream {adds.id} of device 1 (r.stream of rank 1)" in message, message
    assert f"on stream {copies.id} of device 1 (made at {__file__}:{STREAMS_MADE_AT})" in message, message


def test_an_event_recorded_on_the_wrong_stream_is_named_in_the_race(gpus):
    """The event the add waits for was recorded on the add's own stream, not the copy's: a race,
    and the message says which stream the event came from."""
    a, b, scratch, copies, adds = _arrays()
    with cuda.gpus[1]:
        scratch.copy_to_device(a, stream=copies)
        done = cuda.event()
        done.record(adds)  # the wrong stream: the copy runs on `copies`
        done.wait(adds)
        with pytest.raises(sim.StreamRaceError) as found:
            add[1, 64, adds](b, scratch)
    assert "Its stream did wait for events, recorded on stream" in str(found.value) and "but none on stream" in \
        str(found.value) and "where the copy device 0 -> device 1 runs: record the event on that stream, after it" \
        in str(found.value), str(found.value)


def test_reusing_a_scratch_buffer_before_the_kernel_reading_it_is_ordered_is_a_race(gpus):
    a, b, scratch, copies, adds = _arrays()
    with cuda.gpus[1]:
        scratch.copy_to_device(a, stream=copies)
        ready = cuda.event()
        ready.record(copies)
        ready.wait(adds)
        add[1, 64, adds](b, scratch)
        with pytest.raises(sim.StreamRaceError, match="write after read"):
            scratch.copy_to_device(a, stream=copies)  # the add may still be reading it


def test_a_wait_issued_after_the_launch_it_was_to_order_is_named(gpus):
    """(audit) the event recorded after the copy, but waited for after the add's launch: a race,
    and the message says the wait came too late (a wait orders only what is issued after it)."""
    a, b, scratch, copies, adds = _arrays()
    with cuda.gpus[1]:
        scratch.copy_to_device(a, stream=copies)
        arrived = cuda.event()
        arrived.record(copies)
        with pytest.raises(sim.StreamRaceError) as found:
            add[1, 64, adds](b, scratch)
    assert "An event was recorded on stream" in str(found.value) and "had not waited for it when this was issued: " \
        "a wait orders only the work issued after it" in str(found.value), str(found.value)


def test_a_wait_issued_on_another_stream_than_the_readers_is_named(gpus):
    """(all-reduce audit) `arrived.wait(sends[q])`, the receiver's copy stream, where its adds run on
    q.stream: the message said to call the wait before the launch, which the student had done; it
    now names the stream that waited, and the record by its own line."""
    a, b, scratch, copies, adds = _arrays()
    with cuda.gpus[1]:
        other = cuda.stream()
        scratch.copy_to_device(a, stream=copies)
        arrived = cuda.event()
        arrived.record(copies)
        arrived.wait(other)  # the wrong stream: the add runs on `adds`
        with pytest.raises(sim.StreamRaceError) as found:
            add[1, 64, adds](b, scratch)
    text = str(found.value)
    assert re.search(r"An event was recorded on stream \d+ of device 1 \(made at [^)]*\) after the copy device "
                     r"0 -> device 1 \(recorded at \S*test_streams\.py:\d+ in test_a_wait_issued_on_another[^)]*\), "
                     r"and stream \d+ of device 1 \(made at \S*test_streams\.py:\d+\) waited for it \(at "
                     r"\S*test_streams\.py:\d+ in [^)]*\), but not stream \d+ of device 1 \(made at [^)]*\), on "
                     r"which this runs: a wait orders only its own stream's later work", text), text
    assert "call e.wait(stream) before the launch" not in text


def test_an_event_recorded_before_the_copy_it_was_to_follow_is_named(gpus):
    """(all-reduce audit) `arrived.record(copies)` issued above the copy: the add waited for it, and
    the race was told only in general; the message now says the record came before the copy."""
    a, b, scratch, copies, adds = _arrays()
    with cuda.gpus[1]:
        arrived = cuda.event()
        arrived.record(copies)
        arrived.wait(adds)
        scratch.copy_to_device(a, stream=copies)
        with pytest.raises(sim.StreamRaceError) as found:
            add[1, 64, adds](b, scratch)
    text = str(found.value)
    assert re.search(r"waited for an event \(at \S*test_streams\.py:\d+ in [^)]*\) recorded on stream \d+ of "
                     r"device 1 \(made at [^)]*\) \(recorded at \S*test_streams\.py:\d+ in [^)]*\) before the copy "
                     r"device 0 -> device 1 was issued there, and no event was recorded after it: an event marks the "
                     r"work issued before its record, so record it after the copy device 0 -> device 1, then wait "
                     r"for it", text), text


def test_a_wait_issued_before_the_record_it_was_to_wait_for_is_named(gpus):
    """(audit) `arrived.wait(adds)` above the copy and `arrived.record(copies)`: in CUDA that wait
    waits for nothing (or the record before). The race said "call e.wait(stream) before the
    launch", which the student had done; it now names the wait and the record, in that order."""
    a, b, scratch, copies, adds = _arrays()
    with cuda.gpus[1]:
        arrived = cuda.event()
        waited_at = sys._getframe().f_lineno + 1
        arrived.wait(adds)
        scratch.copy_to_device(a, stream=copies)
        arrived.record(copies)
        with pytest.raises(sim.StreamRaceError) as found:
            add[1, 64, adds](b, scratch)
    message = str(found.value)
    assert f"waited for an event (at {__file__}:{waited_at} in " in message, message
    assert "before the event was recorded on stream" in message and "record the event first, then wait for it" in \
        message and "call e.wait(stream) before the launch" not in message, message


def test_an_event_recorded_on_another_devices_stream_is_refused_where_it_was_recorded(gpus):
    with cuda.gpus[1]:
        made_on_1 = cuda.event()
    stream_0 = cuda.stream()
    recorded_at = sys._getframe().f_lineno + 2
    with pytest.raises(sim.WrongDeviceError) as found:
        made_on_1.record(stream_0)
    assert f"event.record(stream) (at {__file__}:{recorded_at} in " in str(found.value), str(found.value)
    assert "the event was created on device 1 and the stream is device 0's" in str(found.value)


def test_disjoint_slices_on_two_streams_do_not_race(gpus):
    a, b, scratch, copies, adds = _arrays()
    with cuda.gpus[1]:
        scratch[32:].copy_to_device(a[32:])  # synchronous: the host waits
        scratch[:32].copy_to_device(a[:32], stream=copies)
        add[1, 64, adds](b[32:], scratch[32:])  # other elements of the same allocation: no race


def test_a_host_synchronisation_orders_everything_issued_after_it(gpus):
    a, b, scratch, copies, adds = _arrays()
    with cuda.gpus[1]:
        scratch.copy_to_device(a, stream=copies)
        copies.synchronize()
        add[1, 64, adds](b, scratch)  # ordered: the host waited for the copy before issuing it
        with pytest.raises(sim.StreamRaceError, match="write after read"):
            scratch.copy_to_device(a, stream=copies)  # but nothing waited for the add
    assert gpus.streams.host_syncs >= 1


def test_cuda_synchronize_orders_the_kernel_before_the_next_copy(gpus):
    a, b, scratch, copies, adds = _arrays()
    with cuda.gpus[1]:
        scratch.copy_to_device(a, stream=copies)
        cuda.synchronize()
        add[1, 64, adds](b, scratch)
        cuda.synchronize()
        scratch.copy_to_device(a, stream=copies)


def test_the_legacy_default_stream_waits_for_the_blocking_streams_of_its_device(gpus):
    a, b, scratch, copies, adds = _arrays()
    with cuda.gpus[1]:
        scratch.copy_to_device(a, stream=copies)
        add[1, 64](b, scratch)  # the default stream: after the copy on a blocking stream
        add[1, 64, adds](b, scratch)  # a blocking stream: after the default stream's kernel


def test_an_event_recorded_on_a_blocking_stream_covers_the_default_streams_earlier_kernel(gpus):
    """(audit) adds on device 1's legacy default stream, then an event recorded on a blocking
    stream of device 1 and waited for on device 0: the record runs after the add (the legacy
    stream's rule), so a copy ordered after the event does not race the add. It was reported as a
    write-after-read race: recording took only the blocking stream's own clock."""
    a, b, scratch, copies, adds = _arrays()
    with cuda.gpus[1]:
        scratch.copy_to_device(a)
        add[1, 64](b, scratch)  # the default stream
        done = cuda.event()
        done.record(adds)
    send = cuda.stream()  # device 0's
    done.wait(send)
    scratch.copy_to_device(a, stream=send)  # refills what the add read: ordered after it by the event
    send.synchronize()
    with cuda.gpus[1]:
        late = cuda.event()
        late.record(adds)  # before the next add: covers nothing of it
        add[1, 64](b, scratch)
    late.wait(send)
    with pytest.raises(sim.StreamRaceError, match="write after read"):
        scratch.copy_to_device(a, stream=send)


def test_a_launch_on_another_devices_stream_fails_as_in_cuda(gpus):
    """(audit) `add[grid, block, stream_of_device_1]` with device 0 current ran on device 1; CUDA
    fails such a launch, so the ring that forgot `with r:` scored full marks for code that crashes
    on a multi-GPU machine."""
    _, b, scratch, _, adds = _arrays()
    with pytest.raises(sim.LaunchConfigError, match="launched on device 0, the current one, with a stream of device 1"):
        add[1, 64, adds](b, scratch)


def test_an_event_records_only_on_its_own_devices_streams(gpus):
    _, _, _, copies, _ = _arrays()
    made_on_0 = cuda.event()
    with pytest.raises(sim.WrongDeviceError, match="created on device 0"):
        made_on_0.record(copies)


def test_the_operations_log_names_streams_links_and_orders(gpus):
    a, b, scratch, copies, adds = _arrays()
    gpus.streams.take_log()
    with cuda.gpus[1]:
        scratch.copy_to_device(a, stream=copies)
        done = cuda.event()
        done.record(copies)
        done.wait(adds)
        add[1, 64, adds](b, scratch)
    log, truncated = gpus.streams.take_log()
    copy, kernel = log
    assert not truncated
    assert (copy["kind"], copy["src"], copy["dst"], copy["nbytes"]) == ("copy", 0, 1, 256)
    assert kernel["kind"] == "kernel" and kernel["launch"] == 0 and kernel["stream"] != copy["stream"]
    assert [copy["stream"], copy["tick"]] in kernel["after"]


def test_to_device_of_a_device_array_returns_it_on_its_own_device(gpus):
    a = cuda.to_device(np.ones(8, np.float32))
    with cuda.gpus[1]:
        assert cuda.to_device(a) is a


def test_assigning_another_devices_array_is_a_remote_read(gpus):
    a = cuda.to_device(np.ones(8, np.float32))
    with cuda.gpus[1]:
        b = cuda.device_array(8, np.float32)
        with pytest.raises(sim.WrongDeviceError, match="copy_to_device"):
            b[:] = a


def test_peer_access_is_recorded_once(gpus):
    context = cuda.current_context()
    peer = cuda.gpus[1]
    context.enable_peer_access(peer)
    with pytest.raises(RuntimeError, match="ALREADY_ENABLED"):
        context.enable_peer_access(peer)


def test_elapsed_time_is_measured_between_events_of_one_device(gpus):
    start = cuda.event()
    start.record()
    with cuda.gpus[1]:
        end = cuda.event()
        end.record()
    with pytest.raises(sim.WrongDeviceError, match="one device only"):
        start.elapsed_time(end)


def test_numbas_device_to_device_copies_between_simulated_devices(gpus):
    from numba.cuda.cudadrv import driver

    a = cuda.to_device(np.arange(8, dtype=np.float32))
    with cuda.gpus[1]:
        b = cuda.device_array(8, np.float32)
    driver.device_to_device(b, a, a.nbytes)
    np.testing.assert_array_equal(b.copy_to_host(), np.arange(8))
    assert gpus.devices.links()[(0, 1)].bytes == 32
