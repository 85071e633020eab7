#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ring_api::fuzzing::ops(data));
