"""Reads one scalar's series out of the TensorBoard event files a fleetrl run writes
(`OUT/tb/events.out.tfevents.*`, runtime/src/telemetry/tensorboard.rs): TFRecord framing around
`tensorflow.Event` protos. Only the fields fleetrl writes are decoded (wall_time, step and
scalar summaries), so no TensorFlow or TensorBoard is needed; the CRCs are not checked.

    scalars(OUT, "episode_return") -> [(env steps, unix seconds, value), ...] in file order

The learner writes `episode_return` (the mean of the last 100 training episodes) at every
on-policy update, with the env steps trained so far as the step.
"""

import glob
import os
import struct


def _varint(buf, at):
    value = shift = 0
    while True:
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _fields(buf):
    """(field number, raw value) pairs of one protobuf message: varints as ints, the rest as bytes."""
    at = 0
    while at < len(buf):
        key, at = _varint(buf, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(buf, at)
        elif wire == 2:
            size, at = _varint(buf, at)
            value, at = buf[at:at + size], at + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, at = buf[at:at + size], at + size
        else:
            raise ValueError(f"protobuf wire type {wire} is not one fleetrl writes")
        yield number, value


def _records(data):
    """TFRecord payloads: u64 length, u32 length CRC, payload, u32 payload CRC."""
    at = 0
    while at + 12 <= len(data):
        (size,) = struct.unpack_from("<Q", data, at)
        if at + 16 + size > len(data):  # a record still being written
            return
        yield data[at + 12:at + 12 + size]
        at += 16 + size


def scalars(run_dir, tag):
    want = tag.encode()
    series = []
    for path in sorted(glob.glob(os.path.join(run_dir, "tb", "events.out.tfevents.*"))):
        for record in _records(open(path, "rb").read()):
            wall = step = None
            for number, value in _fields(record):
                if number == 1:  # Event.wall_time
                    (wall,) = struct.unpack("<d", value)
                elif number == 2:  # Event.step
                    step = value
                elif number == 5:  # Event.summary: repeated Summary.Value
                    for _, entry in _fields(value):
                        entry = dict(_fields(entry))
                        if entry.get(1) == want and 2 in entry:  # tag, simple_value
                            series.append((step, wall, struct.unpack("<f", entry[2])[0]))
    return series
