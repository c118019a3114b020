//! Bytes -> one Submit combining fan-out, dependencies, labels and metadata ->
//! the real handler. No panic, no INTERNAL, and never more than the limits
//! counted after expansion allow.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    taskbroker_fuzz::harness::submit_expansion(data);
});
