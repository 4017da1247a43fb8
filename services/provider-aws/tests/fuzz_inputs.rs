//! The SQS message fuzz target's seeds and regressions
//! (`fuzz/seeds/sqs_message`, `fuzz/regressions/sqs_message`): each parses
//! or is refused, never panics.

use std::path::PathBuf;

#[test]
fn interruption_messages_parse_or_are_refused() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut parsed = 0;
    for dir in ["seeds", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join("sqs_message")) else {
            continue;
        };
        for entry in entries.flatten() {
            let bytes = std::fs::read(entry.path()).expect("readable input");
            if let Ok(body) = std::str::from_utf8(&bytes)
                && provider_aws::interruption::parse(body).is_ok()
            {
                parsed += 1;
            }
        }
    }
    assert!(parsed >= 4, "the four seed kinds parse");
}
