//! Bytes -> a TOML config file and an auth tokens file -> load, validate, print.
//! No panic; every error one line.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    taskbroker_fuzz::harness::config_file(data);
});
