#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fallow_server::fuzzing::check_config_file(data));
