//! Which instance types one launch offers EC2, as Karpenter's launch
//! filters them:
//!
//! ```text
//!   compatible with the claim, fitting its requests, with an available offering
//!     → exotic types (metal, GPUs, accelerators) dropped unless nothing else is left
//!     → spot offerings dearer than the cheapest on-demand one dropped
//!       (when the claim allows both)
//!     → spot if any spot offering is left and allowed, else on-demand
//!     → the 60 cheapest, the claim's minValues still met
//! ```
//!
//! The exotic and spot filters stand aside when the claim has minValues, so
//! as not to take away the variety it asked for.

use std::collections::BTreeSet;

use karpenter_api::aws::labels as l;
use karpenter_core::requirements::Requirements;
use karpenter_core::resources::Resources;
use karpenter_proto::provider::v1 as pv;
use karpenter_proto::types::v1 as types;

use crate::error::Error;

/// Most instance types one launch considers (the cheapest).
pub const MAX_INSTANCE_TYPES: usize = 60;

/// Resources only exotic hardware has.
const EXOTIC_RESOURCES: [&str; 5] = [
    l::RESOURCE_NVIDIA_GPU,
    l::RESOURCE_AMD_GPU,
    l::RESOURCE_AWS_NEURON,
    l::RESOURCE_AWS_NEURON_CORE,
    l::RESOURCE_HABANA_GAUDI,
];

/// A type the launch may use, with its offerings of the chosen capacity type.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub instance_type: types::InstanceType,
    pub offerings: Vec<types::Offering>,
}

impl Candidate {
    /// Pods a node of this type runs (what its user data sets as maxPods).
    pub fn pods(&self) -> i64 {
        self.instance_type
            .capacity
            .as_ref()
            .and_then(|c| c.quantities.get("pods").copied())
            .unwrap_or(0)
    }

    fn cheapest(&self) -> f64 {
        self.offerings
            .iter()
            .map(|o| o.price)
            .fold(f64::INFINITY, f64::min)
    }
}

pub fn requirements_of(list: &[types::Requirement]) -> Option<Requirements> {
    karpenter_proto::convert::requirements("", list).ok()
}

/// Bare metal, GPU or accelerator types: launched only for claims that
/// need them, as they cost far more than the CPU and memory they add.
fn is_exotic(it: &types::InstanceType) -> bool {
    let metal = it
        .requirements
        .iter()
        .any(|r| r.key == l::AWS_INSTANCE_SIZE && r.values.iter().any(|v| v.contains("metal")));
    let devices = it.capacity.as_ref().is_some_and(|c| {
        EXOTIC_RESOURCES
            .iter()
            .any(|r| c.quantities.get(*r).is_some_and(|n| *n > 0))
    });
    metal || devices
}

/// Types compatible with the claim that fit its requests, each with its
/// available offerings compatible with the claim.
fn compatible(
    claim: &pv::NodeClaim,
    requirements: &Requirements,
    requests: &Resources,
    types: &[types::InstanceType],
) -> Vec<Candidate> {
    types
        .iter()
        .filter(|it| claim.instance_types.is_empty() || claim.instance_types.contains(&it.name))
        .filter(|it| {
            requirements_of(&it.requirements).is_some_and(|r| r.intersects(requirements).is_ok())
        })
        .filter(|it| {
            requests.fits(&Resources::from_map(
                &karpenter_proto::convert::allocatable(it),
            ))
        })
        .filter_map(|it| {
            let offerings: Vec<types::Offering> = it
                .offerings
                .iter()
                .filter(|o| o.available)
                .filter(|o| {
                    requirements_of(&o.requirements)
                        .is_some_and(|r| r.intersects(requirements).is_ok())
                })
                .cloned()
                .collect();
            (!offerings.is_empty()).then(|| Candidate {
                instance_type: it.clone(),
                offerings,
            })
        })
        .collect()
}

/// Spot offerings priced above the cheapest on-demand one go (on-demand is
/// then the better deal, and more reliable); types left without an
/// offering go with them.
fn drop_dear_spot(candidates: Vec<Candidate>) -> Vec<Candidate> {
    let cheapest_on_demand = candidates
        .iter()
        .flat_map(|c| &c.offerings)
        .filter(|o| o.capacity_type == l::CAPACITY_TYPE_ON_DEMAND)
        .map(|o| o.price)
        .fold(f64::INFINITY, f64::min);
    let has_spot = candidates
        .iter()
        .flat_map(|c| &c.offerings)
        .any(|o| o.capacity_type == l::CAPACITY_TYPE_SPOT);
    if !has_spot || cheapest_on_demand.is_infinite() {
        return candidates;
    }
    candidates
        .into_iter()
        .filter_map(|mut c| {
            c.offerings.retain(|o| {
                o.capacity_type != l::CAPACITY_TYPE_SPOT || o.price <= cheapest_on_demand
            });
            (!c.offerings.is_empty()).then_some(c)
        })
        .collect()
}

/// The capacity type to launch and the types to offer, cheapest first.
pub fn select(
    claim: &pv::NodeClaim,
    requirements: &Requirements,
    requests: &Resources,
    types: &[types::InstanceType],
) -> Result<(&'static str, Vec<Candidate>), Error> {
    let allowed = |ct: &str| requirements.get(l::CAPACITY_TYPE).is_none_or(|r| r.has(ct));
    let min_values = claim
        .requirements
        .iter()
        .any(|r| r.min_values.is_some_and(|m| m > 0));
    let mut candidates = compatible(claim, requirements, requests, types);
    if !min_values {
        let ordinary: Vec<Candidate> = candidates
            .iter()
            .filter(|c| !is_exotic(&c.instance_type))
            .cloned()
            .collect();
        if !ordinary.is_empty() {
            candidates = ordinary;
        }
        if allowed(l::CAPACITY_TYPE_SPOT) && allowed(l::CAPACITY_TYPE_ON_DEMAND) {
            candidates = drop_dear_spot(candidates);
        }
    }
    let spot = allowed(l::CAPACITY_TYPE_SPOT)
        && candidates.iter().any(|c| {
            c.offerings
                .iter()
                .any(|o| o.capacity_type == l::CAPACITY_TYPE_SPOT)
        });
    let capacity_type = if spot {
        l::CAPACITY_TYPE_SPOT
    } else {
        l::CAPACITY_TYPE_ON_DEMAND
    };
    let mut candidates: Vec<Candidate> = candidates
        .into_iter()
        .filter_map(|mut c| {
            c.offerings.retain(|o| o.capacity_type == capacity_type);
            (!c.offerings.is_empty()).then_some(c)
        })
        .collect();
    candidates.sort_by(|a, b| {
        a.cheapest()
            .total_cmp(&b.cheapest())
            .then_with(|| a.instance_type.name.cmp(&b.instance_type.name))
    });
    if !claim.instance_types.is_empty() {
        candidates.sort_by_key(|c| {
            claim
                .instance_types
                .iter()
                .position(|n| *n == c.instance_type.name)
                .unwrap_or(usize::MAX)
        });
    }
    candidates.truncate(MAX_INSTANCE_TYPES);
    check_min_values(claim, &candidates)?;
    Ok((capacity_type, candidates))
}

/// minValues must still hold over the types the launch may use.
fn check_min_values(claim: &pv::NodeClaim, candidates: &[Candidate]) -> Result<(), Error> {
    for wanted in &claim.requirements {
        let Some(min) = wanted.min_values.filter(|m| *m > 0) else {
            continue;
        };
        let distinct: BTreeSet<&str> = candidates
            .iter()
            .filter_map(|c| {
                c.instance_type
                    .requirements
                    .iter()
                    .find(|r| r.key == wanted.key && r.operator == types::Operator::In as i32)
                    .and_then(|r| r.values.first())
                    .map(String::as_str)
            })
            .collect();
        if distinct.len() < min as usize {
            return Err(Error::NoCompatibleInstanceTypes(format!(
                "minValues {min} of {:?} cannot be met: the {} cheapest compatible types offer only {} value(s) {:?}",
                wanted.key,
                candidates.len(),
                distinct.len(),
                distinct
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offering(capacity_type: &str, price: f64) -> types::Offering {
        types::Offering {
            zone: "zone-a".into(),
            capacity_type: capacity_type.into(),
            price,
            available: true,
            requirements: vec![
                types::Requirement {
                    key: l::CAPACITY_TYPE.into(),
                    operator: types::Operator::In as i32,
                    values: vec![capacity_type.into()],
                    min_values: None,
                },
                types::Requirement {
                    key: l::TOPOLOGY_ZONE.into(),
                    operator: types::Operator::In as i32,
                    values: vec!["zone-a".into()],
                    min_values: None,
                },
            ],
        }
    }

    fn it(
        name: &str,
        size: &str,
        extra: &[(&str, i64)],
        offerings: Vec<types::Offering>,
    ) -> types::InstanceType {
        let mut capacity: std::collections::BTreeMap<String, i64> = [
            ("cpu".to_string(), 4000),
            ("memory".to_string(), 8 << 30),
            ("pods".to_string(), 29),
        ]
        .into();
        capacity.extend(extra.iter().map(|(k, v)| (k.to_string(), *v)));
        types::InstanceType {
            name: name.into(),
            requirements: vec![types::Requirement {
                key: l::AWS_INSTANCE_SIZE.into(),
                operator: types::Operator::In as i32,
                values: vec![size.into()],
                min_values: None,
            }],
            offerings,
            capacity: Some(types::ResourceList {
                quantities: capacity,
            }),
            overhead: None,
            price_overlaid: false,
            capacity_overlaid: false,
            volume_attachment_limits: Default::default(),
        }
    }

    fn claim(capacity_types: &[&str], min_values: Option<i32>) -> (pv::NodeClaim, Requirements) {
        let mut requirements = vec![types::Requirement {
            key: l::CAPACITY_TYPE.into(),
            operator: types::Operator::In as i32,
            values: capacity_types.iter().map(|s| s.to_string()).collect(),
            min_values: None,
        }];
        if min_values.is_some() {
            requirements.push(types::Requirement {
                key: l::AWS_INSTANCE_SIZE.into(),
                operator: types::Operator::Exists as i32,
                values: Vec::new(),
                min_values,
            });
        }
        let claim = pv::NodeClaim {
            name: "c".into(),
            requirements,
            ..Default::default()
        };
        let requirements = requirements_of(&claim.requirements).expect("requirements");
        (claim, requirements)
    }

    fn names(candidates: &[Candidate]) -> Vec<&str> {
        candidates
            .iter()
            .map(|c| c.instance_type.name.as_str())
            .collect()
    }

    #[test]
    fn exotic_types_are_offered_only_when_nothing_else_fits() {
        let types = vec![
            it(
                "g4dn.xlarge",
                "xlarge",
                &[(l::RESOURCE_NVIDIA_GPU, 1)],
                vec![offering("on-demand", 0.05)],
            ),
            it("m5.metal", "metal", &[], vec![offering("on-demand", 0.06)]),
            it(
                "m5.xlarge",
                "xlarge",
                &[],
                vec![offering("on-demand", 0.19)],
            ),
        ];
        let (claim, requirements) = claim(&["on-demand"], None);
        let (_, chosen) =
            select(&claim, &requirements, &Resources::default(), &types).expect("select");
        assert_eq!(names(&chosen), ["m5.xlarge"]);
        let (_, only_exotic) =
            select(&claim, &requirements, &Resources::default(), &types[..2]).expect("select");
        assert_eq!(names(&only_exotic), ["g4dn.xlarge", "m5.metal"]);
        let (claim, requirements) = self::claim(&["on-demand"], Some(1));
        let (_, with_min_values) =
            select(&claim, &requirements, &Resources::default(), &types).expect("select");
        assert_eq!(with_min_values.len(), 3, "minValues keeps every type");
    }

    #[test]
    fn spot_dearer_than_on_demand_is_not_launched() {
        let types = vec![
            it(
                "a.large",
                "large",
                &[],
                vec![offering("spot", 0.30), offering("on-demand", 0.20)],
            ),
            it("b.large", "large", &[], vec![offering("spot", 0.25)]),
            it(
                "c.large",
                "large",
                &[],
                vec![offering("spot", 0.10), offering("on-demand", 0.40)],
            ),
        ];
        let (claim, requirements) = claim(&["spot", "on-demand"], None);
        let (capacity_type, chosen) =
            select(&claim, &requirements, &Resources::default(), &types).expect("select");
        assert_eq!(capacity_type, "spot");
        assert_eq!(names(&chosen), ["c.large"], "spot above 0.20 dropped");
        let dear_spot_only = vec![types[0].clone(), types[1].clone()];
        let (capacity_type, chosen) = select(
            &claim,
            &requirements,
            &Resources::default(),
            &dear_spot_only,
        )
        .expect("select");
        assert_eq!(
            (capacity_type, names(&chosen)),
            ("on-demand", vec!["a.large"])
        );
        let (spot_only, requirements) = self::claim(&["spot"], None);
        let (capacity_type, chosen) =
            select(&spot_only, &requirements, &Resources::default(), &types).expect("select");
        assert_eq!(capacity_type, "spot");
        assert_eq!(
            chosen.len(),
            3,
            "a spot-only claim keeps every spot offering"
        );
    }
}
