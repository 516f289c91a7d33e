#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandbox_oci::fuzzing::oci_config(data));
