#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = clink_kafka_wire::group::fuzzing::group(data);
});
