#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandbox::fuzzing::report_explain(data));
