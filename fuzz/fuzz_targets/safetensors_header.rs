#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hipobj_safetensors::fuzzing::safetensors_header(data));
