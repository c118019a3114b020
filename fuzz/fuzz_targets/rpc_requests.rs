//! Bytes -> one request message of one RPC -> the real handler (decoding,
//! conversion, validation, service, SQLite store). No panic, no INTERNAL.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    taskbroker_fuzz::harness::rpc_request(data);
});
