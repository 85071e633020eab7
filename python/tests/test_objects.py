"""Engine.list / head / delete / create_bucket against our gateway and s3s-fs."""

from __future__ import annotations

import uuid

import pytest

import hipobj
from conftest import ACCESS_KEY, REGION, make_engine


def new_bucket(engine) -> str:
    name = "o" + uuid.uuid4().hex[:12]
    engine.create_bucket(f"s3://{name}")
    return name


def test_create_bucket_then_put_head_list_delete(engine, server):
    b = new_bucket(engine)
    # Creating a bucket these credentials own already is no error.
    engine.create_bucket(f"s3://{b}")
    engine.create_bucket(f"s3://{b}/")
    data = bytes(range(256)) * 40
    engine.put_from(f"s3://{b}/dir/a.bin", data)
    engine.put_from(f"s3://{b}/dir/sub/b.bin", b"xyz")
    engine.put_from(f"s3://{b}/top.bin", b"t")

    head = engine.head(f"s3://{b}/dir/a.bin")
    assert head["size"] == len(data)
    assert isinstance(head["etag"], str) and head["etag"]
    assert isinstance(head["last_modified"], str) and head["last_modified"]
    assert "content_type" in head
    if "checksum_crc64nvme" in head:
        assert isinstance(head["checksum_crc64nvme"], str)

    everything = engine.list(f"s3://{b}")
    assert [o["key"] for o in everything] == ["dir/a.bin", "dir/sub/b.bin", "top.bin"]
    assert [o["size"] for o in everything] == [len(data), 3, 1]
    # s3s-fs lists no ETags; our gateway lists the HEAD's.
    if server.name == "gateway":
        assert everything[0]["etag"].strip('"') == head["etag"].strip('"')
    assert all(set(o) == {"key", "size", "etag", "last_modified"} for o in everything)
    assert all(o["last_modified"] for o in everything)

    under = engine.list(f"s3://{b}/dir/")
    assert [o["key"] for o in under] == ["dir/a.bin", "dir/sub/b.bin"]
    shallow = engine.list(f"s3://{b}/dir/", recursive=False)
    assert [(o["key"], o["size"], o["etag"]) for o in shallow] == [
        ("dir/a.bin", len(data), everything[0]["etag"]), ("dir/sub/", 0, None)]
    assert engine.list(f"s3://{b}/nothing-here/") == []

    engine.delete(f"s3://{b}/dir/a.bin")
    with pytest.raises(hipobj.S3Error) as e:
        engine.head(f"s3://{b}/dir/a.bin")
    assert e.value.code == "NoSuchKey"
    assert e.value.path == f"s3://{b}/dir/a.bin"
    # A repeat delete (of a key that is gone) succeeds, as on S3.
    engine.delete(f"s3://{b}/dir/a.bin")
    assert [o["key"] for o in engine.list(f"s3://{b}")] == ["dir/sub/b.bin", "top.bin"]


def test_list_follows_every_page(engine):
    # Servers answer at most 1000 keys a page: 1003 objects take two.
    b = new_bucket(engine)
    keys = [f"k/{i:05d}" for i in range(1003)]
    for k in keys:
        engine.put_from(f"s3://{b}/{k}", b"1")
    listed = engine.list(f"s3://{b}/k/")
    assert [o["key"] for o in listed] == keys
    assert all(o["size"] == 1 for o in listed)


def test_missing_objects_and_buckets_carry_the_s3_code(engine):
    b = new_bucket(engine)
    missing = "m" + uuid.uuid4().hex[:12]
    with pytest.raises(hipobj.S3Error) as e:
        engine.head(f"s3://{b}/no-such-key")
    assert e.value.code == "NoSuchKey"
    with pytest.raises(hipobj.S3Error) as e:
        engine.head(f"s3://{missing}/k")
    assert e.value.code == "NoSuchBucket", e.value
    with pytest.raises(hipobj.S3Error) as e:
        engine.list(f"s3://{missing}/")
    assert e.value.code == "NoSuchBucket"
    assert missing in str(e.value)


def test_bad_urls_raise_invalid_url(engine):
    for call, url in [
        (engine.head, "s3://bucket-only"),
        (engine.head, "http://b/k"),
        (engine.delete, "s3://b"),
        (engine.list, "b/k"),
        (engine.create_bucket, "s3://b/with/key"),
        (engine.create_bucket, "s3:///k"),
    ]:
        with pytest.raises(hipobj.InvalidURLError):
            call(url)


def test_wrong_secret_is_the_servers_code(server):
    with make_engine(server.url, secret_key="not-the-secret") as eng:
        with pytest.raises(hipobj.S3Error) as e:
            eng.list("s3://anything/")
    assert e.value.code == "SignatureDoesNotMatch"
    assert not isinstance(e.value, hipobj.TimedOutError)


def test_calls_after_close_raise_closed_error(server):
    eng = make_engine(server.url)
    eng.close()
    for call, url in [(eng.list, "s3://bkt/"), (eng.head, "s3://bkt/k"), (eng.delete, "s3://bkt/k"),
                      (eng.create_bucket, "s3://bkt")]:
        with pytest.raises(hipobj.ClosedError):
            call(url)


def test_refused_connection_is_named():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with hipobj.Engine(endpoint=f"http://127.0.0.1:{port}", access_key=ACCESS_KEY,
                       secret_key="x", region=REGION, fabric="http") as eng:
        with pytest.raises(hipobj.S3Error) as e:
            eng.head("s3://bkt/k")
    assert e.value.code == "ConnectionRefused"
