//! Any bytes as a `PlanDisruptionRequest`: decoding, checking and planning
//! never panic.
#![no_main]

use karpenter_proto::scheduler::v1 as pb;
use libfuzzer_sys::fuzz_target;
use prost::Message as _;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = pb::PlanDisruptionRequest::decode(data) {
        let _ = karpenter_planner_wire::plan_disruption_request(&request);
    }
});
