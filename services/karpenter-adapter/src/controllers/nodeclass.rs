//! Node classes of the provider's kind (EC2NodeClass, KWOKNodeClass, ...):
//! the provider resolves each one (`ResolveNodeClass`) into its status and
//! conditions, which are written to the status subresource; its hash goes
//! on the class as annotations (the provider names the keys), for drift.
//! A class carries the finalizer `<group>/termination`; once deleted it
//! waits until no NodeClaim uses it, then the provider releases what it
//! made for it (`FinalizeNodeClass`) and the finalizer goes.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use karpenter_proto::provider::v1 as pv;
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use crate::controllers::runner::{Reconciler, fingerprint};
use crate::controllers::{Context, Requeue};
use crate::error::{Error, Result};
use crate::events::{self, Kind};
use crate::objects::claim::wire_node_class;
use crate::objects::finalizers;
use crate::objects::patch;
use crate::state::index::{Index, Key};
use crate::state::watch::Versions;

/// How often a class that waits for its claims is looked at again.
const WAIT_FOR_CLAIMS: Duration = Duration::from_secs(10);

/// The node-class controller.
pub struct NodeClasses {
    pub ctx: Context,
}

impl NodeClasses {
    fn finalizer(&self) -> String {
        let group = self
            .ctx
            .info
            .node_class
            .as_ref()
            .map_or("", |gvk| gvk.group.as_str());
        format!("{group}/termination")
    }

    /// Names of the claims launched from `class`.
    fn claims_of(&self, index: &Index, class: &str) -> Vec<String> {
        let kind = self.ctx.node_class_kind();
        index
            .node_claims
            .iter()
            .filter(|c| c.spec.node_class_ref.kind == kind && c.spec.node_class_ref.name == class)
            .map(|c| c.name_any())
            .collect()
    }
}

impl Reconciler for NodeClasses {
    const NAME: &'static str = "nodeclass";

    fn relevant(versions: &Versions) -> u64 {
        versions.node_classes + versions.node_claims
    }

    fn keys(&self, index: &Index) -> Vec<(Key, u64)> {
        index
            .node_classes
            .iter()
            .map(|class| {
                let name = class.name_any();
                // A deleted class waits for its claims: their count matters.
                let claims = if class.meta().deletion_timestamp.is_some() {
                    self.claims_of(index, &name).len().to_string()
                } else {
                    String::new()
                };
                let print = fingerprint([
                    class.meta().resource_version.as_deref(),
                    Some(claims.as_str()),
                ]);
                ((String::new(), name), print)
            })
            .collect()
    }

    async fn reconcile(&self, key: Key, index: Arc<Index>) -> Result<Requeue> {
        let Some(stored) = index.node_classes.named(&key.1).cloned() else {
            return Ok(None);
        };
        let api = self.ctx.node_classes();
        let finalizer = self.finalizer();
        if stored.meta().deletion_timestamp.is_some() {
            return self.finalize(&index, &stored, &finalizer).await;
        }
        let current = finalizers::add(&api, stored.as_ref(), &finalizer).await?;
        let resolved = self
            .ctx
            .clients
            .resolve_node_class(wire_node_class(&current))
            .await
            .map_err(Error::peer("ResolveNodeClass"))?;
        let current = self.write_hash(&current, &resolved).await?;
        self.rehash_claims(&index, &key.1, &resolved).await?;
        let status = resolved_status(&current, &resolved)?;
        if current.data.get("status") != Some(&status) {
            patch::merge_status(&api, &current, status).await?;
        }
        Ok(Some(self.ctx.timing.resolve_every))
    }
}

impl NodeClasses {
    async fn write_hash(
        &self,
        class: &DynamicObject,
        resolved: &pv::ResolveNodeClassResponse,
    ) -> Result<DynamicObject> {
        let info = &self.ctx.info;
        if info.node_class_hash_annotation.is_empty() || resolved.hash.is_empty() {
            return Ok(class.clone());
        }
        let mut wanted = serde_json::Map::new();
        wanted.insert(
            info.node_class_hash_annotation.clone(),
            json!(resolved.hash),
        );
        if !info.node_class_hash_version_annotation.is_empty() {
            wanted.insert(
                info.node_class_hash_version_annotation.clone(),
                json!(resolved.hash_version),
            );
        }
        let annotations = class.annotations();
        if wanted
            .iter()
            .all(|(k, v)| annotations.get(k).map(|a| json!(a)) == Some(v.clone()))
        {
            return Ok(class.clone());
        }
        patch::merge(
            &self.ctx.node_classes(),
            class,
            json!({"metadata": {"annotations": wanted}}),
        )
        .await
    }

    /// When the provider's hash version changed (it hashes differently
    /// now), each claim of the class takes the new version, and the new
    /// hash unless it has a Drifted condition already (Karpenter's hash
    /// controller): the old hash cannot be compared with the new one, and
    /// without the new one a claim could never drift again.
    async fn rehash_claims(
        &self,
        index: &Index,
        class: &str,
        resolved: &pv::ResolveNodeClassResponse,
    ) -> Result<()> {
        let info = &self.ctx.info;
        let (hash_key, version_key) = (
            &info.node_class_hash_annotation,
            &info.node_class_hash_version_annotation,
        );
        if hash_key.is_empty() || version_key.is_empty() || resolved.hash_version.is_empty() {
            return Ok(());
        }
        let kind = self.ctx.node_class_kind();
        let stale = index.node_claims.iter().filter(|c| {
            c.spec.node_class_ref.kind == kind
                && c.spec.node_class_ref.name == class
                && self.ctx.acts_on(c)
                && c.annotations().get(version_key) != Some(&resolved.hash_version)
        });
        for claim in stale {
            let mut annotations = serde_json::Map::new();
            annotations.insert(version_key.clone(), json!(resolved.hash_version));
            let drifted = claim
                .conditions()
                .iter()
                .any(|c| c.type_ == karpenter_api::nodeclaim::CONDITION_DRIFTED);
            if !drifted {
                annotations.insert(hash_key.clone(), json!(resolved.hash));
            }
            let body = json!({"metadata": {"annotations": annotations}});
            match patch::merge(&self.ctx.node_claims(), claim.as_ref(), body).await {
                Ok(_) => {}
                // A claim that changed or went is looked at next time.
                Err(error) if error.is_conflict() || error.is_not_found() => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    async fn finalize(
        &self,
        index: &Index,
        class: &DynamicObject,
        finalizer: &str,
    ) -> Result<Requeue> {
        if !finalizers::holds(class, finalizer) {
            return Ok(None);
        }
        let claims = self.claims_of(index, &class.name_any());
        if !claims.is_empty() {
            let shown: Vec<&str> = claims.iter().take(5).map(String::as_str).collect();
            let more = claims.len() - shown.len();
            let mut message = format!("Waiting on NodeClaim termination for {}", shown.join(", "));
            if more > 0 {
                message.push_str(&format!(" and {more} other(s)"));
            }
            self.ctx.recorder.emit(events::dynamic(
                class,
                &self.ctx.node_class,
                Kind::Normal,
                "WaitingOnNodeClaimTermination",
                message,
            ));
            return Ok(Some(WAIT_FOR_CLAIMS));
        }
        self.ctx
            .clients
            .finalize_node_class(wire_node_class(class))
            .await
            .map_err(Error::peer("FinalizeNodeClass"))?;
        finalizers::remove(&self.ctx.node_classes(), class, finalizer).await?;
        tracing::info!("finalized node class");
        Ok(None)
    }
}

/// The class's status: what the provider resolved, and its conditions with
/// transition times kept while their status stays.
fn resolved_status(
    class: &DynamicObject,
    resolved: &pv::ResolveNodeClassResponse,
) -> Result<Value> {
    let mut status: Value = if resolved.status_json.is_empty() {
        json!({})
    } else {
        serde_json::from_str(&resolved.status_json).map_err(|e| {
            Error::Invalid(format!(
                "{} {}: the provider's resolved status is not JSON: {e}",
                class.types.as_ref().map_or("", |t| t.kind.as_str()),
                class.name_any()
            ))
        })?
    };
    if !status.is_object() {
        status = json!({});
    }
    let previous = class
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let generation = class.meta().generation.unwrap_or(0);
    let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let conditions: Vec<Value> = resolved
        .conditions
        .iter()
        .map(|c| {
            let before = previous.iter().find(|p| p["type"] == c.r#type.as_str());
            let since = before
                .filter(|p| p["status"] == c.status.as_str())
                .and_then(|p| p["lastTransitionTime"].as_str())
                .map_or_else(|| now.clone(), str::to_owned);
            let reason = if c.reason.is_empty() {
                c.r#type.clone()
            } else {
                c.reason.clone()
            };
            json!({
                "type": c.r#type,
                "status": c.status,
                "reason": reason,
                "message": c.message,
                "lastTransitionTime": since,
                "observedGeneration": generation,
            })
        })
        .collect();
    status["conditions"] = Value::Array(conditions);
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolved_conditions_keep_their_transition_time_while_unchanged() {
        let class: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
            "metadata": {"name": "default", "generation": 3},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let resolved = pv::ResolveNodeClassResponse {
            status_json: r#"{"images": ["x"]}"#.into(),
            conditions: vec![pv::Condition {
                r#type: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let status = resolved_status(&class, &resolved).expect("status");
        assert_eq!(status["images"][0], "x");
        assert_eq!(
            status["conditions"][0]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(status["conditions"][0]["reason"], "Ready");
        assert_eq!(status["conditions"][0]["observedGeneration"], 3);
        let broken = pv::ResolveNodeClassResponse {
            status_json: "{".into(),
            ..Default::default()
        };
        assert!(resolved_status(&class, &broken).is_err());
    }
}
