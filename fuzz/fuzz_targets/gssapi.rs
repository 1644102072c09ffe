#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    clink_kafka_wire::fuzzing::gssapi(data);
});
