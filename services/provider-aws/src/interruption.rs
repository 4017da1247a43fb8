//! Interruption events from the SQS queue EventBridge feeds: spot
//! interruption warnings, rebalance recommendations, AWS Health scheduled
//! changes and instance state changes.
//!
//! ```text
//!   SQS ──ReceiveMessage (long poll)──▶ parse ──▶ InterruptionEvent{id = SQS message id}
//!                                        │ an event Karpenter does not act on: count as ignored, DeleteMessage
//!                                        │ malformed: log, count as malformed, DeleteMessage
//!   AcknowledgeInterruption(id) ──DeleteMessage──▶ SQS   (unacked: redelivered after visibility timeout)
//! ```

use karpenter_proto::provider::v1 as pv;
use pv::interruption_event::Kind;
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

/// Why a message could not be read as an event at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("missing field {0}")]
    Missing(&'static str),
}

/// State changes that interrupt a node.
const INTERRUPTING_STATES: &[&str] = &["stopping", "stopped", "shutting-down", "terminated"];

/// Parses an EventBridge message body: the event, `None` for one Karpenter
/// does not act on (another source or detail type, a state change to a
/// running state, another service's health event), or why it is malformed.
pub fn parse(body: &str) -> Result<Option<Parsed>, ParseError> {
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
    let instance_ids = || {
        detail
            .get("instance-id")
            .and_then(Value::as_str)
            .map(|s| vec![s.to_string()])
            .ok_or(ParseError::Missing("detail.instance-id"))
    };
    let warning = |kind: Kind, what: &str| -> Result<Option<Parsed>, ParseError> {
        let action = detail
            .get("instance-action")
            .and_then(Value::as_str)
            .unwrap_or("terminate");
        Ok(Some(Parsed {
            kind,
            instance_ids: instance_ids()?,
            state: String::new(),
            time,
            detail: format!("{what}: instance-action {action}"),
        }))
    };
    match (source, detail_type) {
        ("aws.ec2", "EC2 Spot Instance Interruption Warning") => {
            warning(Kind::SpotInterruption, "spot interruption warning")
        }
        ("aws.ec2", "EC2 Instance Rebalance Recommendation") => Ok(Some(Parsed {
            kind: Kind::RebalanceRecommendation,
            instance_ids: instance_ids()?,
            state: String::new(),
            time,
            detail: "rebalance recommendation".into(),
        })),
        ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning") => warning(
            Kind::CapacityReservationInterruption,
            "capacity reservation interruption warning",
        ),
        ("aws.ec2", "EC2 Instance State-change Notification") => {
            let state = detail
                .get("state")
                .and_then(Value::as_str)
                .ok_or(ParseError::Missing("detail.state"))?
                .to_ascii_lowercase();
            if !INTERRUPTING_STATES.contains(&state.as_str()) {
                return Ok(None);
            }
            Ok(Some(Parsed {
                kind: Kind::StateChange,
                instance_ids: instance_ids()?,
                detail: format!("instance state changed to {state}"),
                state,
                time,
            }))
        }
        ("aws.health", "AWS Health Event") => scheduled_change(detail, time),
        _ => Ok(None),
    }
}

/// An AWS Health scheduled change for EC2 instances; other services' and
/// categories' events are not Karpenter's.
fn scheduled_change(
    detail: &Value,
    time: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<Option<Parsed>, ParseError> {
    let text = |key: &str| detail.get(key).and_then(Value::as_str);
    if text("service") != Some("EC2") || text("eventTypeCategory") != Some("scheduledChange") {
        return Ok(None);
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
        return Ok(None);
    }
    let description = detail
        .get("eventDescription")
        .and_then(Value::as_array)
        .and_then(|d| d.first())
        .and_then(|d| d.get("latestDescription"))
        .and_then(Value::as_str)
        .unwrap_or("scheduled change");
    Ok(Some(Parsed {
        kind: Kind::ScheduledChange,
        instance_ids: ids,
        state: String::new(),
        time,
        detail: format!(
            "{}: {description}",
            text("eventTypeCode").unwrap_or("AWS Health")
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(detail_type: &str, detail: &str) -> String {
        format!(
            r#"{{"version":"0","id":"1","detail-type":"{detail_type}","source":"aws.ec2","time":"2024-01-01T00:00:00Z","region":"us-west-2","resources":[],"detail":{detail}}}"#
        )
    }

    /// The event parsed from a message of `detail_type` with `detail`,
    /// which must be one acted on.
    fn event(detail_type: &str, detail: &str) -> Parsed {
        parse(&message(detail_type, detail))
            .expect("parses")
            .expect("an event")
    }

    #[test]
    fn spot_and_capacity_reservation_warnings() {
        for (detail_type, id, kind) in [
            (
                "EC2 Spot Instance Interruption Warning",
                "i-0abc",
                Kind::SpotInterruption,
            ),
            (
                "EC2 Capacity Reservation Instance Interruption Warning",
                "i-0def",
                Kind::CapacityReservationInterruption,
            ),
        ] {
            let parsed = event(
                detail_type,
                &format!(r#"{{"instance-id":"{id}","instance-action":"terminate"}}"#),
            );
            assert_eq!(parsed.kind, kind);
            assert_eq!(parsed.instance_ids, vec![id.to_string()]);
        }
    }

    #[test]
    fn states_are_read_whatever_their_case() {
        let parsed = event(
            "EC2 Instance State-change Notification",
            r#"{"instance-id":"i-0abc","state":"STOPPING"}"#,
        );
        assert_eq!(
            (parsed.kind, parsed.state.as_str()),
            (Kind::StateChange, "stopping")
        );
        let running = parse(&message(
            "EC2 Instance State-change Notification",
            r#"{"instance-id":"i-0abc","state":"Running"}"#,
        ));
        assert_eq!(running, Ok(None), "a running instance is no interruption");
    }

    #[test]
    fn events_not_acted_on_are_ignored_and_broken_ones_malformed() {
        assert_eq!(
            parse(
                r#"{"source":"aws.autoscaling","detail-type":"EC2 Instance Launch Successful","detail":{}}"#
            ),
            Ok(None)
        );
        assert_eq!(
            parse(
                r#"{"source":"aws.health","detail-type":"AWS Health Event","detail":{"service":"EC2","eventTypeCategory":"scheduledChange","affectedEntities":[]}}"#
            ),
            Ok(None),
            "a scheduled change naming no instance"
        );
        assert!(matches!(parse("{"), Err(ParseError::NotJson(_))));
        assert!(matches!(parse("{}"), Err(ParseError::Missing("source"))));
        assert!(matches!(
            parse(&message("EC2 Spot Instance Interruption Warning", "{}")),
            Err(ParseError::Missing("detail.instance-id"))
        ));
    }
}
