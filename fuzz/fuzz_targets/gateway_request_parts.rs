#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hipobj_gateway::fuzzing::request_parts(data));
