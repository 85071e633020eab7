#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| s3_lite::fuzzing::s3xml::list_buckets(data));
