//! Any text as a manifest file for `karpctl plan`: reading, converting
//! older versions and building the snapshot never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let now = prost_types::Timestamp {
        seconds: 1_800_000_000,
        nanos: 0,
    };
    let _ = karpctl::snapshot::from_text("fuzz.yaml", text, now);
});
