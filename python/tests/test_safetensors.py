"""hipobj.load_safetensors and `hipobj load` against real servers."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import hipobj
import hipobj._safetensors as loader
from conftest import ACCESS_KEY, REGION, SECRET_KEY
from st_format import encode, sample


def upload(engine, url, data: bytes):
    engine.put_from(url, data)


def load(engine, url, **kw):
    kw.setdefault("framework", "numpy")
    kw.setdefault("device", "cpu")
    return engine.load_safetensors(url, **kw)


def assert_same(got: dict, want: dict):
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype, k
        assert got[k].shape == v.shape, k
        assert got[k].tobytes() == v.tobytes(), k


def test_single_file_loads_exactly(server, engine, bucket):
    want = sample()
    upload(engine, f"s3://{bucket}/m/model.safetensors", encode(want, {"format": "pt"}))
    for url in (f"s3://{bucket}/m/", f"s3://{bucket}/m", f"s3://{bucket}/m/model.safetensors"):
        got = load(engine, url)
        assert_same(got, want)
    report = engine.last_load_report
    assert report["files"][0]["metadata"] == {"format": "pt"}
    assert report["bytes"] == sum(v.nbytes for v in want.values())
    verification = report["files"][0]["verification"]
    # Our gateway proves every range; s3s-fs keeps the CRC64NVME the engine's PUT sent.
    assert verification == ("range-checksums" if server.name == "gateway" else "object-checksum")


def test_dtype_cast_and_module_function(server, engine, bucket):
    want = {"w": np.arange(12, dtype=np.float32).reshape(3, 4)}
    upload(engine, f"s3://{bucket}/c/model.safetensors", encode(want))
    got = hipobj.load_safetensors(f"s3://{bucket}/c/", device="cpu", dtype=np.float64, framework="numpy",
                                  endpoint=server.url, access_key=ACCESS_KEY, secret_key=SECRET_KEY,
                                  region=REGION)
    assert got["w"].dtype == np.float64 and np.array_equal(got["w"], want["w"])


def shard_model(engine, bucket, prefix="s"):
    a, b = sample(1, big=200_000), {"z.last": np.arange(1000, dtype=np.int16)}
    b.update({f"extra.{i}": np.full(i + 1, i, dtype=np.int32) for i in range(5)})
    upload(engine, f"s3://{bucket}/{prefix}/model-00001-of-00002.safetensors", encode(a))
    upload(engine, f"s3://{bucket}/{prefix}/model-00002-of-00002.safetensors", encode(b))
    weight_map = {k: "model-00001-of-00002.safetensors" for k in a}
    weight_map.update({k: "model-00002-of-00002.safetensors" for k in b})
    return {**a, **b}, weight_map


def test_sharded_model_through_its_index(engine, bucket):
    want, weight_map = shard_model(engine, bucket)
    upload(engine, f"s3://{bucket}/s/model.safetensors.index.json",
           json.dumps({"metadata": {}, "weight_map": weight_map}).encode())
    assert_same(load(engine, f"s3://{bucket}/s/"), want)
    assert_same(load(engine, f"s3://{bucket}/s/model.safetensors.index.json"), want)
    assert len(engine.last_load_report["files"]) == 2


def test_index_that_disagrees_with_the_shards(engine, bucket):
    _, weight_map = shard_model(engine, bucket, "bad")
    weight_map["z.last"] = "model-00001-of-00002.safetensors"
    upload(engine, f"s3://{bucket}/bad/model.safetensors.index.json", json.dumps({"weight_map": weight_map}).encode())
    with pytest.raises(hipobj.SafetensorsError, match="z.last"):
        load(engine, f"s3://{bucket}/bad/")
    upload(engine, f"s3://{bucket}/esc/model.safetensors.index.json",
           json.dumps({"weight_map": {"t": "../../etc/passwd"}}).encode())
    with pytest.raises(hipobj.SafetensorsError, match="relative"):
        load(engine, f"s3://{bucket}/esc/")


def corruptions():
    good = encode({"a": np.arange(10, dtype=np.float32), "b": np.arange(3, dtype=np.int64)})
    (n,) = struct.unpack("<Q", good[:8])
    header = json.loads(good[8:8 + n])
    data = good[8 + n:]

    def with_header(h):
        j = json.dumps(h).encode()
        return struct.pack("<Q", len(j)) + j + data

    hole = json.loads(json.dumps(header))
    hole["b"]["data_offsets"] = [48, 72]
    wrong_shape = json.loads(json.dumps(header))
    wrong_shape["a"]["shape"] = [11]
    bad_dtype = json.loads(json.dumps(header))
    bad_dtype["a"]["dtype"] = "F33"
    return {
        "length past the end": struct.pack("<Q", len(good)) + good[8:],
        "zero length": struct.pack("<Q", 0) + good[8:],
        "not json": struct.pack("<Q", n) + b"{" * n + data,
        "a hole": with_header(hole),
        "shape and offsets disagree": with_header(wrong_shape),
        "unknown dtype": with_header(bad_dtype),
        "truncated data": good[:-5],
        "shorter than the prefix": b"abc",
    }


@pytest.mark.parametrize("case", sorted(corruptions()))
def test_corrupt_header_is_refused_before_anything_is_allocated(engine, bucket, case, monkeypatch):
    good = encode({"g": np.arange(100, dtype=np.float32)})
    upload(engine, f"s3://{bucket}/k/model-00001-of-00002.safetensors", good)
    upload(engine, f"s3://{bucket}/k/model-00002-of-00002.safetensors", corruptions()[case])
    upload(engine, f"s3://{bucket}/k/model.safetensors.index.json", json.dumps({"weight_map": {
        "g": "model-00001-of-00002.safetensors", "a": "model-00002-of-00002.safetensors",
        "b": "model-00002-of-00002.safetensors"}}).encode())
    allocations = []
    real = loader._allocator

    def counting(*args):
        alloc = real(*args)
        return lambda n, i: allocations.append(n) or alloc(n, i)

    monkeypatch.setattr(loader, "_allocator", counting)
    with pytest.raises(hipobj.SafetensorsError) as e:
        load(engine, f"s3://{bucket}/k/")
    assert "corrupt safetensors header" in str(e.value) or "not a safetensors file" in str(e.value)
    assert e.value.path == f"s3://{bucket}/k/model-00002-of-00002.safetensors"
    assert allocations == [], "nothing may be allocated before every header is valid"


def test_missing_model(engine, bucket):
    with pytest.raises(hipobj.S3Error) as e:
        load(engine, f"s3://{bucket}/nothing-here/")
    assert e.value.code == "NoSuchKey"
    with pytest.raises(hipobj.S3Error) as e:
        load(engine, f"s3://{bucket}/nothing-here/x.safetensors")
    assert e.value.code == "NoSuchKey"


def test_cpu_torch_tensors(engine, bucket):
    torch = pytest.importorskip("torch")
    want = sample(3)
    upload(engine, f"s3://{bucket}/t/model.safetensors", encode(want))
    got = engine.load_safetensors(f"s3://{bucket}/t/", device="cpu", framework="torch")
    for k, v in want.items():
        assert torch.equal(got[k], torch.from_numpy(v.copy())), k


def test_cross_check_with_the_safetensors_package(engine, bucket):
    st = pytest.importorskip("safetensors.numpy")
    want = sample(4)
    data = st.save(want)
    upload(engine, f"s3://{bucket}/x/model.safetensors", data)
    assert_same(load(engine, f"s3://{bucket}/x/"), st.load(data))


def test_cli_load_prints_tensors_bytes_and_rate(server, engine, bucket):
    want, weight_map = shard_model(engine, bucket, "cli")
    upload(engine, f"s3://{bucket}/cli/model.safetensors.index.json", json.dumps({"weight_map": weight_map}).encode())
    out = server.cli("load", f"s3://{bucket}/cli/", "--device", "cpu", "--json", "--tensors")
    report = json.loads(out.stdout)
    assert report["tensors"] == len(want)
    assert report["bytes"] == sum(v.nbytes for v in want.values())
    assert report["seconds"] > 0 and report["gb_per_s"] > 0
    listed = {t["name"]: t for t in report["tensor_list"]}
    assert listed["z.last"]["shape"] == [1000] and listed["z.last"]["dtype"] == "I16"
    human = server.cli("load", f"s3://{bucket}/cli/")
    assert f"loaded {len(want)} tensors from 2 file(s) into cpu" in human.stdout and "GB/s" in human.stdout
    bad = server.cli("load", f"s3://{bucket}/nothing/", check=False)
    assert bad.returncode == 1 and "no model.safetensors.index.json or model.safetensors" in bad.stderr


def test_empty_objects_are_refused_not_crashed_on(engine, bucket, server):
    # put_from refuses empty buffers; the CLI uploads an empty file.
    import tempfile, os
    with tempfile.NamedTemporaryFile(delete=False) as f:
        path = f.name
    try:
        server.cli("put", path, f"s3://{bucket}/e/model.safetensors")
        server.cli("put", path, f"s3://{bucket}/ei/model.safetensors.index.json")
    finally:
        os.unlink(path)
    with pytest.raises(hipobj.SafetensorsError, match="shorter than the 8-byte header length"):
        load(engine, f"s3://{bucket}/e/")
    with pytest.raises(hipobj.SafetensorsError, match="model.safetensors.index.json"):
        load(engine, f"s3://{bucket}/ei/")


def test_interrupted_load_returns_promptly():
    import _thread
    import threading
    import time

    from conftest import SilentPeer, ctrl_c_reaches_python, make_engine

    peer = SilentPeer()
    try:
        with make_engine(peer.url, fabric="http") as eng:
            timer = threading.Timer(0.5, _thread.interrupt_main)
            start = time.monotonic()
            timer.start()
            try:
                with ctrl_c_reaches_python(), pytest.raises(KeyboardInterrupt):
                    eng.load_safetensors("s3://bucket/model/", device="cpu", framework="numpy")
            finally:
                timer.cancel()
            assert time.monotonic() - start < 5
    finally:
        peer.close()


def test_streaming_yields_every_tensor_once_as_loaded(server, engine, bucket):
    want, weight_map = shard_model(engine, bucket, prefix="st")
    upload(engine, f"s3://{bucket}/st/model.safetensors.index.json",
           json.dumps({"metadata": {}, "weight_map": weight_map}).encode())
    got = {}
    for name, t in engine.stream_safetensors(f"s3://{bucket}/st/", device="cpu", framework="numpy"):
        assert name not in got, f"{name} yielded twice"
        # Each tensor is complete when it is yielded, before the iteration ends.
        assert t.tobytes() == want[name].tobytes(), name
        got[name] = t
    assert_same(got, want)
    report = engine.last_load_report
    assert report["bytes"] == sum(v.nbytes for v in want.values())
    assert 0 < report["first_tensor_seconds"] <= report["seconds"]
    assert [f["verification"] for f in report["files"]] == \
        [("range-checksums" if server.name == "gateway" else "object-checksum")] * 2
    # The module-level form, with an engine of its own.
    names = [n for n, _ in hipobj.stream_safetensors(
        f"s3://{bucket}/st/", device="cpu", framework="numpy", endpoint=server.url,
        access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION)]
    assert sorted(names) == sorted(want)


def test_leaving_a_stream_early_stops_it_and_the_engine_goes_on(engine, bucket):
    want, weight_map = shard_model(engine, bucket, prefix="se")
    upload(engine, f"s3://{bucket}/se/model.safetensors.index.json",
           json.dumps({"metadata": {}, "weight_map": weight_map}).encode())
    for _name, _t in engine.stream_safetensors(f"s3://{bucket}/se/", device="cpu", framework="numpy"):
        break
    assert_same(load(engine, f"s3://{bucket}/se/"), want)
    with pytest.raises(hipobj.S3Error):
        for _ in engine.stream_safetensors(f"s3://{bucket}/missing/", device="cpu", framework="numpy"):
            pass
