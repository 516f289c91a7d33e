#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandbox::fuzzing::proxy_request(data));
