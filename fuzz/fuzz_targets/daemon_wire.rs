#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| engine::fuzzing::daemon_wire(data));
