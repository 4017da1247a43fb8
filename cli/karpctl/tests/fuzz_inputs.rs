//! The manifest fuzz target's seeds and regressions (`fuzz/seeds/manifests`,
//! `fuzz/regressions/manifests`) read as a plan would: an input error is a
//! fine answer, a panic is not.

use std::path::PathBuf;

#[test]
fn manifest_inputs_are_read_or_refused() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let now = prost_types::Timestamp {
        seconds: 1_800_000_000,
        nanos: 0,
    };
    let mut seen = 0;
    for dir in ["seeds", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join("manifests")) else {
            continue;
        };
        for entry in entries.flatten() {
            let bytes = std::fs::read(entry.path()).expect("readable input");
            if let Ok(text) = std::str::from_utf8(&bytes) {
                let _ = karpctl::snapshot::from_text("fuzz.yaml", text, now);
            }
            seen += 1;
        }
    }
    assert!(seen > 0, "the seeds are there");
}
