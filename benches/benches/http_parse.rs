//! Response-head parsing throughput (MB/s of head bytes) for a typical S3 ranged-GET answer.
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use s3_lite::http::{Event, Limits, ResponseDecoder};

const HEAD: &[u8] = b"HTTP/1.1 206 Partial Content\r\n\
x-amz-id-2: eftixk72aD6Ap51TnqcoF8eFidJG9Z/2mkiDFu8yU9AS1ed4OpIszj7UDNEHGran\r\n\
x-amz-request-id: 318BC8BC148832E5\r\n\
Date: Sun, 29 Nov 2026 12:00:00 GMT\r\n\
Last-Modified: Sat, 28 Nov 2026 09:10:11 GMT\r\n\
ETag: \"fba9dede5f27731c9771645a39863328\"\r\n\
Accept-Ranges: bytes\r\n\
Content-Range: bytes 1048576-2097151/1073741824\r\n\
Content-Type: application/octet-stream\r\n\
x-amz-checksum-crc64nvme: rosUhgp5mIg=\r\n\
Server: AmazonS3\r\n\
Content-Length: 1048576\r\n\r\n";

fn parse_head(c: &mut Criterion) {
    let mut group = c.benchmark_group("http");
    group.throughput(Throughput::Bytes(HEAD.len() as u64));
    group.bench_function("response_head_206", |b| {
        b.iter(|| {
            let mut decoder = ResponseDecoder::new(Limits::default(), false);
            match decoder.decode(std::hint::black_box(HEAD)).unwrap().event {
                Event::Head(h) => h.status,
                _ => unreachable!("a complete head parses in one call"),
            }
        })
    });
    group.finish();
}

criterion_group!(benches, parse_head);
criterion_main!(benches);
