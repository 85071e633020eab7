#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| s3_lite::fuzzing::exchange::exchange(data));
