//! Any text as an SQS interruption message body: parsing never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = std::str::from_utf8(data) {
        let _ = provider_aws::interruption::parse(body);
    }
});
