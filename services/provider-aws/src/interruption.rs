//! Interruption events from the SQS queue EventBridge feeds: spot
//! interruption warnings, rebalance recommendations, AWS Health scheduled
//! changes and instance state changes.
//!
//! ```text
//!   SQS ──ReceiveMessage (long poll)──▶ parse ──▶ InterruptionEvent{id = SQS message id}
//!                                        │ malformed / not ours: log, count, DeleteMessage
//!   AcknowledgeInterruption(id) ──DeleteMessage──▶ SQS   (unacked: redelivered after visibility timeout)
//! ```

use karpenter_proto::provider::v1 as pb;
use pb::interruption_event::Kind;
use serde_json::Value;

/// What one message says, before instance IDs become provider IDs.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub kind: Kind,
    pub instance_ids: Vec<String>,
    pub state: String,
    pub time: Option<chrono::DateTime<chrono::Utc>>,
    pub detail: String,
}

/// Why a message was not an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("missing field {0}")]
    Missing(&'static str),
    #[error("not an event Karpenter handles: source {origin:?}, detail-type {detail_type:?}")]
    Unhandled { origin: String, detail_type: String },
}

/// State changes that interrupt a node.
const INTERRUPTING_STATES: &[&str] = &["stopping", "stopped", "shutting-down", "terminated"];

/// Parses an EventBridge message body.
pub fn parse(body: &str) -> Result<Parsed, ParseError> {
    let value: Value =
        serde_json::from_str(body).map_err(|e| ParseError::NotJson(e.to_string()))?;
    let source = value
        .get("source")
        .and_then(Value::as_str)
        .ok_or(ParseError::Missing("source"))?;
    let detail_type = value
        .get("detail-type")
        .and_then(Value::as_str)
        .ok_or(ParseError::Missing("detail-type"))?;
    let detail = value.get("detail").ok_or(ParseError::Missing("detail"))?;
    let time = value
        .get("time")
        .and_then(Value::as_str)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&chrono::Utc));
    let instance_id = || {
        detail
            .get("instance-id")
            .and_then(Value::as_str)
            .map(|s| vec![s.to_string()])
            .ok_or(ParseError::Missing("detail.instance-id"))
    };
    match (source, detail_type) {
        ("aws.ec2", "EC2 Spot Instance Interruption Warning") => Ok(Parsed {
            kind: Kind::SpotInterruption,
            instance_ids: instance_id()?,
            state: String::new(),
            time,
            detail: format!(
                "spot interruption warning: instance-action {}",
                detail
                    .get("instance-action")
                    .and_then(Value::as_str)
                    .unwrap_or("terminate")
            ),
        }),
        ("aws.ec2", "EC2 Instance Rebalance Recommendation") => Ok(Parsed {
            kind: Kind::RebalanceRecommendation,
            instance_ids: instance_id()?,
            state: String::new(),
            time,
            detail: "rebalance recommendation".into(),
        }),
        ("aws.ec2", "EC2 Instance State-change Notification") => {
            let state = detail
                .get("state")
                .and_then(Value::as_str)
                .ok_or(ParseError::Missing("detail.state"))?;
            if !INTERRUPTING_STATES.contains(&state) {
                return Err(ParseError::Unhandled {
                    origin: source.into(),
                    detail_type: format!("{detail_type} ({state})"),
                });
            }
            Ok(Parsed {
                kind: Kind::StateChange,
                instance_ids: instance_id()?,
                state: state.into(),
                time,
                detail: format!("instance state changed to {state}"),
            })
        }
        ("aws.health", "AWS Health Event") => {
            let service = detail
                .get("service")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let category = detail
                .get("eventTypeCategory")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if service != "EC2" || category != "scheduledChange" {
                return Err(ParseError::Unhandled {
                    origin: source.into(),
                    detail_type: format!("{detail_type} ({service}/{category})"),
                });
            }
            let ids: Vec<String> = detail
                .get("affectedEntities")
                .and_then(Value::as_array)
                .ok_or(ParseError::Missing("detail.affectedEntities"))?
                .iter()
                .filter_map(|e| e.get("entityValue").and_then(Value::as_str))
                .map(str::to_string)
                .collect();
            if ids.is_empty() {
                return Err(ParseError::Missing("detail.affectedEntities[].entityValue"));
            }
            let description = detail
                .get("eventDescription")
                .and_then(Value::as_array)
                .and_then(|d| d.first())
                .and_then(|d| d.get("latestDescription"))
                .and_then(Value::as_str)
                .unwrap_or("scheduled change");
            Ok(Parsed {
                kind: Kind::ScheduledChange,
                instance_ids: ids,
                state: String::new(),
                time,
                detail: format!(
                    "{}: {description}",
                    detail
                        .get("eventTypeCode")
                        .and_then(Value::as_str)
                        .unwrap_or("AWS Health")
                ),
            })
        }
        _ => Err(ParseError::Unhandled {
            origin: source.into(),
            detail_type: detail_type.into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spot_warning() {
        let body = r#"{"version":"0","id":"1","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","time":"2024-01-01T00:00:00Z","region":"us-west-2","resources":[],"detail":{"instance-id":"i-0abc","instance-action":"terminate"}}"#;
        let parsed = parse(body).expect("parses");
        assert_eq!(parsed.kind, Kind::SpotInterruption);
        assert_eq!(parsed.instance_ids, vec!["i-0abc".to_string()]);
    }

    #[test]
    fn malformed() {
        assert!(matches!(parse("{"), Err(ParseError::NotJson(_))));
        assert!(matches!(parse("{}"), Err(ParseError::Missing("source"))));
    }
}
