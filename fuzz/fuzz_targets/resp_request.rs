#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fallow_proto::fuzzing::check_resp_request(data));
