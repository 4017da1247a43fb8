//! The fuzz targets' seeds and every input that ever crashed them
//! (`fuzz/seeds/`, `fuzz/regressions/`), replayed through the same path:
//! decoding, checking and planning answer, never panic.

use std::path::PathBuf;

use karpenter_proto::scheduler::v1 as sched;
use prost::Message as _;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut out = Vec::new();
    for dir in ["seeds", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join(target)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_file() {
                let bytes = std::fs::read(&path).expect("readable input");
                out.push((path, bytes));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn solve_inputs_answer() {
    let inputs = inputs("solve");
    assert!(!inputs.is_empty(), "the seeds are there");
    for (path, bytes) in inputs {
        if let Ok(request) = sched::SolveRequest::decode(bytes.as_slice()) {
            // An error is a fine answer; a panic fails the test.
            let _ = karpenter_planner_wire::solve_request(&request);
        }
        eprintln!("ok {}", path.display());
    }
}

#[test]
fn plan_disruption_inputs_answer() {
    let inputs = inputs("plan_disruption");
    assert!(!inputs.is_empty(), "the seeds are there");
    for (path, bytes) in inputs {
        if let Ok(request) = sched::PlanDisruptionRequest::decode(bytes.as_slice()) {
            let _ = karpenter_planner_wire::plan_disruption_request(&request);
        }
        eprintln!("ok {}", path.display());
    }
}
