"""The learner -> policy workers weights hand-off (nodes.sampling.weights): the seqlock never lets a reader
keep half-written weights, never copies what it already has, and works across processes."""
import torch
import torch.multiprocessing as mp
from torch import nn

from nodes.sampling.weights import SharedWeights, WeightsReader


def model(value):
    m = nn.Linear(3, 2)
    m.register_buffer("stat", torch.zeros(2))  # observation statistics travel with the weights
    with torch.no_grad():
        for t in list(m.parameters()) + list(m.buffers()):
            t.fill_(value)
    return m


def values(m):
    return torch.cat([t.detach().reshape(-1) for t in list(m.parameters()) + list(m.buffers())])


def test_a_published_version_reaches_the_reader_parameters_and_buffers():
    writer, reader_model = model(1.0), model(0.0)
    shared = SharedWeights(writer)
    reader = WeightsReader(shared, reader_model)
    shared.publish(writer, 7)
    assert reader.maybe_update() and reader.version == 7 and shared.version == 7
    assert torch.equal(values(reader_model), values(writer))


def test_the_same_version_is_not_copied_again():
    writer, reader_model = model(1.0), model(0.0)
    shared = SharedWeights(writer)
    reader = WeightsReader(shared, reader_model)
    shared.publish(writer, 1)
    assert reader.maybe_update()
    with torch.no_grad():
        reader_model.weight.fill_(5.0)
    assert not reader.maybe_update()
    assert (reader_model.weight == 5.0).all()


def test_a_read_during_a_write_is_refused():
    writer, reader_model = model(1.0), model(0.0)
    shared = SharedWeights(writer)
    reader = WeightsReader(shared, reader_model)
    shared.publish(writer, 1)
    shared.meta[0] += 1  # the learner is in the middle of the next publish: odd sequence number
    shared.meta[1] = 2
    assert not reader.maybe_update()
    assert reader.version == -1 and (values(reader_model) == 0.0).all()


def test_a_write_that_overlaps_the_copy_discards_it():
    writer, reader_model = model(1.0), model(0.0)
    shared = SharedWeights(writer)
    reader = WeightsReader(shared, reader_model)
    shared.publish(writer, 1)
    real_buf = reader._buf

    class OverlappingWrite:
        """The reader's copy, during which the learner publishes the next version."""

        def copy_(self, src):
            real_buf.copy_(src)
            shared.publish(model(2.0), 2)
            return real_buf

    reader._buf = OverlappingWrite()
    assert not reader.maybe_update()
    assert reader.version == -1 and (values(reader_model) == 0.0).all()
    reader._buf = real_buf
    assert reader.maybe_update() and reader.version == 2 and (values(reader_model) == 2.0).all()


def _read_in_child(shared, out):
    reader_model = model(0.0)
    reader = WeightsReader(shared, reader_model)
    while not reader.maybe_update():  # version 1, published before this process started
        pass
    out.put(("started", reader.version))
    while reader.version != 4:
        reader.maybe_update()
    out.put((reader.version, values(reader_model).tolist()))


def test_a_reader_in_another_process_sees_what_is_published_after_it_started():
    shared = SharedWeights(model(0.0))
    shared.publish(model(1.0), 1)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_read_in_child, args=(shared, out))
    child.start()
    assert out.get(timeout=60) == ("started", 1)
    writer = model(3.0)
    shared.publish(writer, 4)
    version, got = out.get(timeout=60)
    child.join(30)
    assert version == 4 and got == values(writer).tolist()
