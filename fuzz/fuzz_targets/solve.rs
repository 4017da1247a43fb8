//! Any bytes as a `SolveRequest`: decoding, checking and solving never
//! panic (a bad request is an error, a bad object is reported).
#![no_main]

use karpenter_proto::scheduler::v1 as pb;
use libfuzzer_sys::fuzz_target;
use prost::Message as _;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = pb::SolveRequest::decode(data) {
        let _ = karpenter_planner_wire::solve_request(&request);
    }
});
