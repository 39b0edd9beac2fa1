#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fallow_client::fuzzing::check_resp_reply(data);
    fallow_bench::fuzzing::check_bulk_reply(data);
});
