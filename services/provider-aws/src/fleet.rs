//! One instant CreateFleet per launch attempt: each launch template with
//! its instance types x the zone's subnet with the most free addresses,
//! priced, tagged (fleet, instance, volumes), in the node class's context.
//! The launched instance is read from the fleet's answer: EC2 may not
//! describe a new instance for a few seconds.

use std::collections::BTreeMap;
use std::time::SystemTime;

use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetType, Instance, InstanceLifecycleType, InstanceState,
    InstanceStateName, InstanceType as Ec2InstanceType, OnDemandOptionsRequest, Placement,
    ResourceType, SpotAllocationStrategy, SpotOptionsRequest, TagSpecification,
    TargetCapacitySpecificationRequest,
};
use karpenter_api::aws::labels as l;
use karpenter_proto::provider::v1 as pv;

use crate::candidates::Candidate;
use crate::error::{Error, error_code};
use crate::nodeclass::{NodeClass, fnv64};
use crate::provider::Provider;
use crate::templates::{self, ec2_tags};

/// Fleet error codes that mean "this offering has no capacity now".
pub const CAPACITY_ERRORS: &[&str] = &[
    "InsufficientInstanceCapacity",
    "UnfulfillableCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
];

/// Annotation on a claim whose minValues were relaxed: its launch goes
/// without the node class's context (reservations it names may not have
/// the variety).
pub const MIN_VALUES_RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";

/// EC2's limit on client tokens.
const MAX_CLIENT_TOKEN: usize = 64;

/// A launch template and the candidates launched with it.
pub struct Group<'a> {
    pub template: templates::Spec,
    pub candidates: Vec<&'a Candidate>,
}

/// What one fleet did.
pub enum Launch {
    /// The instance, as the fleet's answer describes it, and offerings the
    /// fleet skipped for capacity.
    Launched(Box<Instance>, Vec<pv::FailedOffering>),
    InsufficientCapacity(Vec<pv::FailedOffering>),
    /// A launch template was deleted (by a janitor) before the fleet used
    /// it; the launch may be tried again.
    TemplateGone,
    /// The fleet launched nothing for another reason (EC2's words).
    Failed(String),
}

/// The claim's idempotency token for one attempt: the cluster (hashed)
/// and the claim's UID (its name when a caller sends no UID), hashed when
/// too long for EC2. Two clusters in one account, or a claim name used
/// again after its claim was deleted, never share a token.
pub fn client_token(cluster: &str, claim_uid: &str, attempt: usize) -> String {
    let claim = format!("{:08x}-{claim_uid}", fnv64(cluster.as_bytes()) as u32);
    let token = if attempt == 0 {
        claim
    } else {
        format!("{claim}-{attempt}")
    };
    if token.len() <= MAX_CLIENT_TOKEN {
        return token;
    }
    let hash = format!("{:016x}", fnv64(token.as_bytes()));
    let keep = MAX_CLIENT_TOKEN - hash.len() - 1;
    let prefix: String = token.chars().take(keep).collect();
    format!("{prefix}-{hash}")
}

/// The subnet of each zone a launch uses: the node class's with the most
/// free addresses (its status lists subnets most-free first).
fn subnet_by_zone(nc: &NodeClass) -> BTreeMap<&str, &str> {
    let mut by_zone = BTreeMap::new();
    for subnet in &nc.status.subnets {
        by_zone
            .entry(subnet.zone.as_str())
            .or_insert(subnet.id.as_str());
    }
    by_zone
}

fn overrides(
    group: &Group<'_>,
    subnets: &BTreeMap<&str, &str>,
) -> Vec<FleetLaunchTemplateOverridesRequest> {
    let mut out = Vec::new();
    for candidate in &group.candidates {
        for offering in &candidate.offerings {
            let Some(subnet) = subnets.get(offering.zone.as_str()) else {
                continue;
            };
            out.push(
                FleetLaunchTemplateOverridesRequest::builder()
                    .instance_type(Ec2InstanceType::from(candidate.instance_type.name.as_str()))
                    .subnet_id(*subnet)
                    .availability_zone(&offering.zone)
                    .image_id(&group.template.ami)
                    .priority(offering.price)
                    .build(),
            );
        }
    }
    out
}

impl Provider {
    /// Launches one instance for `claim` with the groups' templates.
    pub(crate) async fn fleet(
        &self,
        claim: &pv::NodeClaim,
        nc: &NodeClass,
        capacity_type: &'static str,
        groups: &[Group<'_>],
        token: &str,
    ) -> Result<Launch, Error> {
        let subnets = subnet_by_zone(nc);
        let mut configs = Vec::new();
        for group in groups {
            let overrides = overrides(group, &subnets);
            if overrides.is_empty() {
                continue;
            }
            configs.push(
                FleetLaunchTemplateConfigRequest::builder()
                    .launch_template_specification(
                        FleetLaunchTemplateSpecificationRequest::builder()
                            .launch_template_name(&group.template.name)
                            .version("$Latest")
                            .build(),
                    )
                    .set_overrides(Some(overrides))
                    .build(),
            );
        }
        if configs.is_empty() {
            return Err(Error::NoCompatibleInstanceTypes(
                "no subnet of the node class is in a zone the compatible offerings are in".into(),
            ));
        }
        let mut tags = templates::launch_tags(&self.settings, nc, &claim.node_pool);
        tags.insert(l::TAG_NODE_CLAIM.into(), claim.name.clone());
        let tag_spec = |kind: ResourceType| {
            TagSpecification::builder()
                .resource_type(kind)
                .set_tags(Some(ec2_tags(&tags)))
                .build()
        };
        let spot = capacity_type == l::CAPACITY_TYPE_SPOT;
        let relaxed = claim
            .annotations
            .get(MIN_VALUES_RELAXED)
            .map(String::as_str)
            == Some("true");
        let mut request = self
            .clients
            .ec2
            .create_fleet()
            .r#type(FleetType::Instant)
            .client_token(token)
            .set_context(nc.spec.context.clone().filter(|_| !relaxed))
            .target_capacity_specification(
                TargetCapacitySpecificationRequest::builder()
                    .total_target_capacity(1)
                    .default_target_capacity_type(if spot {
                        DefaultTargetCapacityType::Spot
                    } else {
                        DefaultTargetCapacityType::OnDemand
                    })
                    .build(),
            )
            .set_launch_template_configs(Some(configs))
            .tag_specifications(tag_spec(ResourceType::Instance))
            .tag_specifications(tag_spec(ResourceType::Volume))
            .tag_specifications(tag_spec(ResourceType::Fleet));
        request = if spot {
            request.spot_options(
                SpotOptionsRequest::builder()
                    .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                    .build(),
            )
        } else {
            request.on_demand_options(
                OnDemandOptionsRequest::builder()
                    .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
                    .build(),
            )
        };
        let out = match request.send().await {
            Ok(out) => out,
            // EC2 can refuse the whole call, not only an override, for a
            // template deleted since it was looked up (another replica's
            // janitor): made again, like a per-override answer.
            Err(e) if error_code(&e).as_deref().is_some_and(template_not_found) => {
                return Ok(Launch::TemplateGone);
            }
            Err(e) => return Err(Error::aws("ec2:CreateFleet", &e)),
        };
        Ok(answer(&out, capacity_type, &tags, &subnets))
    }
}

/// EC2's codes for a launch template that does not exist (any more):
/// `InvalidLaunchTemplateName.NotFoundException`,
/// `InvalidLaunchTemplateId.NotFound`.
fn template_not_found(code: &str) -> bool {
    code.contains("LaunchTemplate") && code.contains("NotFound")
}

/// What the fleet's answer says: the instance, or why there is none.
fn answer(
    out: &aws_sdk_ec2::operation::create_fleet::CreateFleetOutput,
    capacity_type: &'static str,
    tags: &BTreeMap<String, String>,
    subnets: &BTreeMap<&str, &str>,
) -> Launch {
    let zone_of_subnet = |subnet: &str| {
        subnets
            .iter()
            .find(|(_, id)| **id == subnet)
            .map(|(zone, _)| zone.to_string())
    };
    let mut ice = Vec::new();
    let mut other = Vec::new();
    for error in out.errors() {
        let code = error.error_code().unwrap_or_default();
        let overrides = error
            .launch_template_and_overrides()
            .and_then(|lt| lt.overrides());
        if CAPACITY_ERRORS.contains(&code) {
            ice.push(pv::FailedOffering {
                instance_type: overrides
                    .and_then(|o| o.instance_type())
                    .map(|t| t.as_str().to_string())
                    .unwrap_or_default(),
                zone: overrides
                    .and_then(|o| o.availability_zone().map(str::to_string))
                    .or_else(|| {
                        overrides
                            .and_then(|o| o.subnet_id())
                            .and_then(zone_of_subnet)
                    })
                    .unwrap_or_default(),
                capacity_type: capacity_type.to_string(),
            });
        } else if template_not_found(code) {
            return Launch::TemplateGone;
        } else {
            other.push(format!(
                "{code}: {}",
                error.error_message().unwrap_or_default()
            ));
        }
    }
    if let Some(instance) = launched(out, capacity_type, tags, &zone_of_subnet) {
        // Offerings the fleet skipped for capacity are remembered even
        // when another one launched.
        return Launch::Launched(Box::new(instance), ice);
    }
    if ice.is_empty() {
        let message = if other.is_empty() {
            "the fleet launched nothing and reported no error".to_string()
        } else {
            other.join("; ")
        };
        return Launch::Failed(message);
    }
    Launch::InsufficientCapacity(ice)
}

/// The instance the fleet launched, from its answer alone.
fn launched(
    out: &aws_sdk_ec2::operation::create_fleet::CreateFleetOutput,
    capacity_type: &str,
    tags: &BTreeMap<String, String>,
    zone_of_subnet: &dyn Fn(&str) -> Option<String>,
) -> Option<Instance> {
    let fleet_instance = out
        .instances()
        .iter()
        .find(|i| !i.instance_ids().is_empty())?;
    let id = fleet_instance.instance_ids().first()?;
    let overrides = fleet_instance
        .launch_template_and_overrides()
        .and_then(|lt| lt.overrides());
    let zone = overrides
        .and_then(|o| o.availability_zone().map(str::to_string))
        .or_else(|| {
            overrides
                .and_then(|o| o.subnet_id())
                .and_then(zone_of_subnet)
        })
        .unwrap_or_default();
    let spot = fleet_instance
        .lifecycle()
        .map(|l| l.as_str() == "spot")
        .unwrap_or(capacity_type == l::CAPACITY_TYPE_SPOT);
    Some(
        Instance::builder()
            .instance_id(id)
            .set_instance_type(
                fleet_instance
                    .instance_type()
                    .or_else(|| overrides.and_then(|o| o.instance_type()))
                    .cloned(),
            )
            .placement(Placement::builder().availability_zone(zone).build())
            .set_subnet_id(overrides.and_then(|o| o.subnet_id()).map(str::to_string))
            .set_image_id(overrides.and_then(|o| o.image_id()).map(str::to_string))
            .set_instance_lifecycle(spot.then_some(InstanceLifecycleType::Spot))
            .set_tags(Some(ec2_tags(tags)))
            .launch_time(aws_sdk_ec2::primitives::DateTime::from(SystemTime::now()))
            .state(
                InstanceState::builder()
                    .name(InstanceStateName::Pending)
                    .build(),
            )
            .build(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_tokens_fit_ec2s_limit_and_stay_distinct() {
        let uid = "0b6a1f52-3c1e-4a8e-9d7e-5f1b2c3d4e5f";
        let first = client_token("prod", uid, 0);
        assert!(first.ends_with(uid), "{first}");
        assert_eq!(client_token("prod", uid, 2), format!("{first}-2"));
        assert_ne!(
            first,
            client_token("staging", uid, 0),
            "another cluster in the account"
        );
        assert_ne!(
            first,
            client_token("prod", "1c2d3e4f-0000-4a8e-9d7e-5f1b2c3d4e5f", 0),
            "a claim of the same name made again has another UID"
        );
        let long = "a".repeat(63);
        let first = client_token("prod", &long, 0);
        let second = client_token("prod", &long, 1);
        assert!(first.len() <= 64 && second.len() <= 64);
        assert_ne!(first, second);
        assert_eq!(
            first,
            client_token("prod", &long, 0),
            "stable across retries"
        );
    }
}
