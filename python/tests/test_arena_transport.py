"""Port of the reference's test/rust/test_arena_transport.py: the shared-memory arena
("arena" transport) — staging into segments, reading from a separate manager, reclaim, growth,
spill to files, strict mode, transport mismatch, the factory flag, instance-unique names, the
orphan sweep, peer-segment eviction, the TTL backstop and cleanup at interpreter exit.

Where the reference inspects its manager's private fields (_arena_locs, _shm_files,
_peer_segments), the port reads the same facts from arena_stats() and the shm directory.
"""
import os
import subprocess
import sys
import time

import pytest
import torch

import mstar_c


@pytest.fixture
def arena(make, monkeypatch):
    monkeypatch.setenv("MSTAR_SHM_ARENA_SEGMENT_MB", "1")
    monkeypatch.setenv("MSTAR_SHM_ARENA_MAX_SEGMENTS", "4")

    def factory(entity):
        return make(entity, "arena")
    return factory


def _stage(mgr, rid, tensors):
    infos = mgr.store_and_return_tensor_info(rid, tensors)
    flat = [i for il in infos.values() for i in il]
    for i in flat:
        mgr.increment_ref(i.uuid)  # one consumer
    mgr.register_for_send(rid, flat)
    return infos


def _read(cons, rid, name, infos):
    edge = mstar_c.GraphEdge(next_node="B", name=name, tensor_info=infos)
    cons.start_read_tensors(rid, [edge])
    ready = cons.get_ready_tensors()
    return {i.uuid: torch.from_dlpack(cons.get_tensor(rid, i.uuid)).clone()
            for e in ready[rid] for i in e.tensor_info}


def test_producer_to_consumer_roundtrip(arena):
    prod, cons = arena("w0"), arena("w1")
    tensors = {"hidden": [torch.randn(4, 8), torch.arange(32, dtype=torch.int64)],
               "empty": [torch.empty(0, 3)]}
    infos = _stage(prod, "r1", tensors)
    for il in infos.values():
        for info in il:
            assert info.shm_segment is not None and info.shm_segment.startswith("mstar_arena_w0")
    for name, originals in tensors.items():
        got = _read(cons, "r1", name, infos[name])
        for original, info in zip(originals, infos[name]):
            assert torch.equal(got[info.uuid], original), name


def test_reclaim_frees_arena_slots(arena):
    prod = arena("w2")
    (info,) = _stage(prod, "r2", {"x": [torch.randn(16)]})["x"]
    assert prod.arena_stats()["live_slots"] == 1
    prod.dereference(info.uuid)  # the consumer's ACK
    assert prod.arena_stats()["live_slots"] == 0


def test_arena_grows_then_spills(arena, monkeypatch, shm_dir):
    monkeypatch.setenv("MSTAR_SHM_ARENA_SPILL_AFTER_S", "0.05")
    prod = arena("w3")
    _stage(prod, "r3", {"big": [torch.zeros(300_000, dtype=torch.uint8) for _ in range(12)]})
    st = prod.arena_stats()
    assert st["segments"] > 1
    assert 0 < st["largest_free_block"] <= st["free_bytes"]
    vals = [torch.full((300_000,), i, dtype=torch.uint8) for i in range(6)]
    more = _stage(prod, "r3", {"more": vals})["more"]
    spilled = [i for i in more if i.shm_segment is None]
    assert spilled, "expected at least one spill past the cap"
    assert prod.arena_stats()["spill_files"] == len(spilled)
    files_before = set(os.listdir(shm_dir))
    cons = arena("w4")
    got = _read(cons, "r3", "more", more)
    for val, info in zip(vals, more):
        assert torch.equal(got[info.uuid], val)
    for info in spilled:
        prod.dereference(info.uuid)
    assert prod.arena_stats()["spill_files"] == 0
    assert len(set(os.listdir(shm_dir))) == len(files_before) - len(spilled) + 1  # + cons seg


def test_mixed_edge_and_fragmentation_signature(arena, monkeypatch, capfd):
    monkeypatch.setenv("MSTAR_SHM_ARENA_SPILL_AFTER_S", "0.05")
    prod = arena("w6")
    fill = _stage(prod, "r6", {"fill": [torch.zeros(300_000, dtype=torch.uint8)
                                        for _ in range(12)]})["fill"]
    for info in fill[::2]:
        prod.dereference(info.uuid)
    st = prod.arena_stats()
    assert st["free_bytes"] > 500_000 > st["largest_free_block"]
    small = torch.arange(1000, dtype=torch.int32).to(torch.uint8)
    big = torch.full((500_000,), 7, dtype=torch.uint8)
    s_info, b_info = _stage(prod, "r6", {"mixed": [small, big]})["mixed"]
    assert s_info.shm_segment is not None
    assert b_info.shm_segment is None
    assert "fragmented" in capfd.readouterr().err
    cons = arena("w7")
    got = _read(cons, "r6", "mixed", [s_info, b_info])
    assert torch.equal(got[s_info.uuid], small) and torch.equal(got[b_info.uuid], big)


def test_strict_mode_backpressures_then_fails(arena, monkeypatch):
    monkeypatch.setenv("MSTAR_SHM_ARENA_SPILL", "0")
    monkeypatch.setenv("MSTAR_SHM_ARENA_FULL_TIMEOUT_S", "0.2")
    prod = arena("w5")
    _stage(prod, "r5", {"big": [torch.zeros(300_000, dtype=torch.uint8) for _ in range(12)]})
    more = prod.store_and_return_tensor_info(
        "r5", {"more": [torch.zeros(300_000, dtype=torch.uint8) for _ in range(6)]})
    with pytest.raises(mstar_c.NoSpaceError, match="arena"):
        prod.register_for_send("r5", more["more"])
    with pytest.raises(RuntimeError):  # the reference's check: every mstar_c.Error is one
        prod.register_for_send("r5", more["more"])


def test_transport_mismatch_fails_loudly(arena, make):
    arena_prod = arena("mx0")
    file_cons = make("mx1", "files")
    infos = _stage(arena_prod, "rm", {"x": [torch.randn(4)]})["x"]
    edge = mstar_c.GraphEdge(next_node="B", name="x", tensor_info=infos)
    with pytest.raises(mstar_c.Error, match="MSTAR_SHM_ARENA"):
        file_cons.start_read_tensors("rm", [edge])
    # The reverse interoperates: a files descriptor is what a spill looks like.
    file_prod = make("mx2", "files")
    arena_cons = arena("mx3")
    y = torch.randn(4)
    infos = _stage(file_prod, "rm2", {"y": [y]})["y"]
    got = _read(arena_cons, "rm2", "y", infos)
    assert torch.equal(got[infos[0].uuid], y)


def test_factory_flag(shm_dir, monkeypatch):
    def make(value):
        monkeypatch.setenv("MSTAR_SHM_ARENA", value)
        return mstar_c.create_tensor_communication_manager(
            protocol="shm", my_entity_id=f"f_{value}", shm_dir=shm_dir)

    for value, want in (("0", "files"), ("1", "arena"), ("AUTO", "arena")):
        with make(value) as m:
            assert m.transport == want
    with pytest.raises(mstar_c.InvalidArgumentError, match="MSTAR_SHM_ARENA"):
        make("yes")
    with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError too
        make("yes")


def test_instance_unique_names_no_collision(arena, shm_dir):
    a = arena("dup")
    x = torch.arange(64, dtype=torch.uint8)
    infos = _stage(a, "r", {"x": [x]})["x"]
    segs_a = set(os.listdir(shm_dir))
    b = arena("dup")  # same entity, second instance
    segs_b = set(os.listdir(shm_dir)) - segs_a
    assert len(segs_b) == 1 and segs_b.isdisjoint(segs_a)
    cons = arena("dupc")
    assert torch.equal(_read(cons, "r", "x", infos)[infos[0].uuid], x)
    b.close()


def test_orphan_sweep(arena, shm_dir):
    dead = os.path.join(shm_dir, "mstar_arena_zombie_999999999_deadbeef.seg0")
    keep = os.path.join(shm_dir, f"mstar_arena_alive_{os.getppid()}_cafebabe.seg0")
    for path, size in ((dead, 64), (keep, 1)):
        with open(path, "wb") as f:
            f.write(b"x" * size)
    try:
        arena("sweeper")
        assert not os.path.exists(dead), "dead-owner orphan not swept"
        assert os.path.exists(keep), "live-owner file wrongly swept"
    finally:
        for path in (dead, keep):
            if os.path.exists(path):
                os.unlink(path)


def test_dead_peer_segments_evicted(arena, monkeypatch, shm_dir):
    monkeypatch.setenv("MSTAR_SHM_ARENA_PEER_SWEEP_S", "0")
    prod = arena("evp")
    x = torch.arange(64, dtype=torch.uint8)
    infos = _stage(prod, "re", {"x": [x]})["x"]
    cons = arena("evc")
    _read(cons, "re", "x", infos)
    assert cons.arena_stats()["peer_segments"] == 1
    seg = infos[0].shm_segment
    prod.close()  # the producer goes away: its segments are unlinked
    assert not os.path.exists(os.path.join(shm_dir, seg))
    cons.start_read_tensors("re", [])  # a pass of the consumer's sweep
    cons.get_ready_tensors()
    assert cons.arena_stats()["peer_segments"] == 0


def test_ttl_backstop_reclaims_abort_orphans(arena, monkeypatch, capfd):
    monkeypatch.setenv("MSTAR_SHM_ARENA_SLOT_TTL_S", "0.05")
    prod = arena("wt")
    _stage(prod, "rt", {"x": [torch.zeros(300_000, dtype=torch.uint8)]})
    assert prod.arena_stats()["live_slots"] == 1
    time.sleep(1.1)  # the backstop runs at most once a second, on the next staging
    _stage(prod, "rt2", {"y": [torch.zeros(16, dtype=torch.uint8)]})
    assert "older than MSTAR_SHM_ARENA_SLOT_TTL_S" in capfd.readouterr().err
    assert prod.arena_stats()["live_slots"] == 1  # only the fresh one


def test_segments_unlinked_at_interpreter_exit(shm_dir):
    code = f"""
import os
os.environ["MSTAR_SHM_ARENA_SEGMENT_MB"] = "1"
os.environ["MSTAR_SHM_ARENA_MAX_SEGMENTS"] = "2"
import torch, mstar_c
m = mstar_c.CommunicationManager("exitcase", transport="arena", shm_dir={shm_dir!r})
infos = m.store_and_return_tensor_info("r", {{"x": [torch.arange(64, dtype=torch.uint8)]}})
m.increment_ref(infos["x"][0].uuid)
m.register_for_send("r", infos["x"])
print(sorted(os.listdir({shm_dir!r})))
KEEP_ALIVE = m   # a global reference that lives to interpreter exit
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-800:]
    assert "mstar_arena_exitcase_" in out.stdout
    assert os.listdir(shm_dir) == [], "segment survived interpreter exit"
