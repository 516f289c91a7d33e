#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandbox_daemon::fuzzing::daemon_request(data));
