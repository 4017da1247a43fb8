//! Node repair policies (Karpenter v1.15's reason-aware repair): which of a
//! Node's conditions make it unhealthy, since when, how it is repaired and
//! how long its pods may take to drain. Resolved once here, for the
//! snapshot the scheduler plans repairs from and for the legacy
//! `node.health` controller.
//!
//! ```text
//!   each node condition (type, status) with policies:
//!     policies whose reason_regex matches its reason ── if any: these
//!     else the fallback (empty reason_regex)
//!   each match: eligible at lastTransitionTime (or the end of the node's
//!     last reboot, if later) + toleration
//!   eligible matches: most disruptive action (replace > reboot), then
//!     priority, then the earliest eligible; drain bound: the shortest
//!   none eligible: the match due first, not yet eligible
//! ```
//!
//! A reason-specific policy that matches but is still within its
//! toleration suppresses its condition's fallback, so a fault with a
//! narrower remedy is not replaced early by the broad rule.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition};

/// A reboot-repaired fault that comes back this many times within
/// [`REBOOT_HISTORY_SECONDS`] is replaced instead.
pub const REBOOTS_BEFORE_REPLACEMENT: usize = 2;
/// How far back reboots count toward [`REBOOTS_BEFORE_REPLACEMENT`].
pub const REBOOT_HISTORY_SECONDS: i64 = 24 * 60 * 60;

/// A node's reboots for repair, as the adapter remembers them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RebootHistory {
    /// When each reboot was requested (Unix seconds).
    pub requested: Vec<i64>,
    /// When the last one finished: conditions count from then.
    pub finished: Option<i64>,
}

/// On a NodeClaim: when its reboots for repair were requested (Unix
/// seconds, comma-separated, the last day's).
pub const REBOOT_REQUESTED_ANNOTATION: &str = "karpenter.sh/reboot-requested";
/// On a NodeClaim: when its last reboot for repair finished (Unix seconds).
pub const REBOOT_FINISHED_ANNOTATION: &str = "karpenter.sh/reboot-finished";
/// The most reboot times a claim keeps.
const REBOOTS_KEPT: usize = 8;

impl RebootHistory {
    /// A claim's history, from its annotations (what does not parse is
    /// left out).
    pub fn from_annotations(annotations: Option<&BTreeMap<String, String>>) -> RebootHistory {
        let Some(annotations) = annotations else {
            return RebootHistory::default();
        };
        let mut requested: Vec<i64> = annotations
            .get(REBOOT_REQUESTED_ANNOTATION)
            .map(|list| {
                list.split(',')
                    .take(REBOOTS_KEPT.saturating_mul(4))
                    .filter_map(|t| t.trim().parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        // The latest few count.
        requested.drain(..requested.len().saturating_sub(REBOOTS_KEPT));
        let finished = annotations
            .get(REBOOT_FINISHED_ANNOTATION)
            .and_then(|t| t.trim().parse().ok());
        RebootHistory {
            requested,
            finished,
        }
    }

    /// The requested annotation's value with a reboot at `now` added (the
    /// last day's, at most a few).
    pub fn requested_with(&self, now: i64) -> String {
        let mut times: Vec<i64> = self
            .requested
            .iter()
            .copied()
            .filter(|at| (0..REBOOT_HISTORY_SECONDS).contains(&now.saturating_sub(*at)))
            .collect();
        times.push(now);
        let skip = times.len().saturating_sub(REBOOTS_KEPT);
        times[skip..]
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Reboots requested within the history window before `now` (a time
    /// in the future is not believed).
    pub fn recent(&self, now: i64) -> usize {
        self.requested
            .iter()
            .filter(|at| (0..REBOOT_HISTORY_SECONDS).contains(&now.saturating_sub(**at)))
            .count()
    }
}

/// The longest reason pattern a policy may have.
pub const MAX_REASON_REGEX_BYTES: usize = 1024;
/// The compiled size a reason pattern may reach.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// How a node is repaired, the less disruptive first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    Reboot,
    Replace,
}

/// One repair policy, as a provider states it.
#[derive(Clone, Debug)]
pub struct Policy {
    pub condition_type: String,
    pub condition_status: String,
    /// Empty: the condition's fallback.
    pub reason_regex: String,
    pub toleration: Duration,
    pub action: Action,
    /// `None`: the claim's own terminationGracePeriod.
    pub termination_grace_period: Option<Duration>,
    pub priority: i32,
}

/// A policy set a provider may not give.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("repair policy {index} ({condition}): {message}")]
pub struct PolicyError {
    pub index: usize,
    pub condition: String,
    pub message: String,
}

struct Compiled {
    policy: Policy,
    reason: Option<regex::Regex>,
    rank: usize,
}

/// A provider's policies, checked and compiled.
pub struct Policies {
    compiled: Vec<Compiled>,
}

/// What a node's conditions resolve to at a given time.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub condition_type: String,
    pub condition_reason: String,
    /// The policy's toleration has passed.
    pub eligible: bool,
    /// Unix seconds at which it is (or was) eligible.
    pub eligible_at: i64,
    pub action: Action,
    pub termination_grace_period: Option<Duration>,
    /// The largest, over the matches, of the priority's dense rank plus the
    /// time past toleration in aging units.
    pub score: f64,
}

impl Policies {
    /// Checks the set as upstream does: statuses are condition statuses,
    /// priorities 0..=100, patterns compile within bounds, and each
    /// condition type and status has at most one fallback, which replaces.
    pub fn new(policies: Vec<Policy>) -> Result<Policies, PolicyError> {
        let mut priorities: Vec<i32> = policies.iter().map(|p| p.priority).collect();
        priorities.sort_unstable();
        priorities.dedup();
        let mut fallbacks: BTreeMap<(String, String), usize> = BTreeMap::new();
        let mut compiled = Vec::with_capacity(policies.len());
        for (index, policy) in policies.into_iter().enumerate() {
            let error = |message: String| PolicyError {
                index,
                condition: format!("{}={}", policy.condition_type, policy.condition_status),
                message,
            };
            if !["True", "False", "Unknown"].contains(&policy.condition_status.as_str()) {
                return Err(error(
                    "condition status must be True, False or Unknown".into(),
                ));
            }
            if !(0..=100).contains(&policy.priority) {
                return Err(error(format!(
                    "priority {} is not in 0..100",
                    policy.priority
                )));
            }
            let reason = if policy.reason_regex.is_empty() {
                if policy.action != Action::Replace {
                    return Err(error("a fallback policy (no reason) must replace".into()));
                }
                let group = (
                    policy.condition_type.clone(),
                    policy.condition_status.clone(),
                );
                if fallbacks.insert(group, index).is_some() {
                    return Err(error("a second fallback for the same condition".into()));
                }
                None
            } else {
                if policy.reason_regex.len() > MAX_REASON_REGEX_BYTES {
                    return Err(error(format!(
                        "reason_regex is longer than {MAX_REASON_REGEX_BYTES} bytes"
                    )));
                }
                let regex = regex::RegexBuilder::new(&policy.reason_regex)
                    .size_limit(REGEX_SIZE_LIMIT)
                    .build()
                    .map_err(|e| error(format!("reason_regex: {e}")))?;
                Some(regex)
            };
            let rank = priorities.binary_search(&policy.priority).unwrap_or(0);
            compiled.push(Compiled {
                policy,
                reason,
                rank,
            });
        }
        Ok(Policies { compiled })
    }

    /// No policy: nothing is ever repaired.
    pub fn none() -> Policies {
        Policies {
            compiled: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.compiled.is_empty()
    }

    /// Only the policies that replace (the legacy controller cannot reboot).
    pub fn replacing_only(&self) -> Policies {
        let kept = self
            .compiled
            .iter()
            .filter(|c| c.policy.action == Action::Replace)
            .map(|c| c.policy.clone())
            .collect();
        // A subset of a valid set is valid.
        Policies::new(kept).unwrap_or_else(|_| Policies::none())
    }

    /// What `node`'s conditions resolve to at `now` (Unix seconds), if any
    /// matches a policy. After a reboot its conditions count from the
    /// reboot's end; a node rebooted [`REBOOTS_BEFORE_REPLACEMENT`] times
    /// lately is replaced instead of rebooted again.
    pub fn resolve(
        &self,
        node: &Node,
        now: i64,
        history: Option<&RebootHistory>,
    ) -> Option<Resolved> {
        // A reboot that says it finished in the future finished now.
        let finished = history.and_then(|h| h.finished).map(|at| at.min(now));
        let mut resolved = self.resolve_after(node, now, finished)?;
        if resolved.action == Action::Reboot
            && history.is_some_and(|h| h.recent(now) >= REBOOTS_BEFORE_REPLACEMENT)
        {
            resolved.action = Action::Replace;
        }
        Some(resolved)
    }

    fn resolve_after(&self, node: &Node, now: i64, not_before: Option<i64>) -> Option<Resolved> {
        let conditions = node.status.as_ref()?.conditions.as_deref()?;
        let floor = not_before.unwrap_or(i64::MIN);
        // A condition that says not since when counts from the node's
        // creation (or now), never from the beginning of time.
        let unknown_since = node
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(now, |t| t.0.as_second());
        let matches: Vec<Match<'_>> = conditions
            .iter()
            .flat_map(|condition| self.matches(condition, floor, unknown_since, now))
            .collect();
        let eligible: Vec<&Match<'_>> = matches.iter().filter(|m| m.eligible_at <= now).collect();
        let chosen = match eligible.iter().copied().max_by(|a, b| {
            (a.policy().action, a.policy().priority)
                .cmp(&(b.policy().action, b.policy().priority))
                .then(b.eligible_at.cmp(&a.eligible_at))
                .then(b.condition.type_.cmp(&a.condition.type_))
        }) {
            Some(chosen) => chosen,
            None => matches.iter().min_by_key(|m| m.eligible_at)?,
        };
        let termination_grace_period = eligible
            .iter()
            .filter_map(|m| m.policy().termination_grace_period)
            .min()
            .or(chosen.policy().termination_grace_period);
        let score = matches
            .iter()
            .map(|m| {
                let age = now.saturating_sub(m.eligible_at).max(0) as f64;
                m.compiled.rank as f64 + age / karpenter_core::repair::AGING_SECONDS
            })
            .fold(0.0, f64::max);
        Some(Resolved {
            condition_type: chosen.condition.type_.clone(),
            condition_reason: chosen.condition.reason.clone().unwrap_or_default(),
            eligible: chosen.eligible_at <= now,
            eligible_at: chosen.eligible_at,
            action: chosen.policy().action,
            termination_grace_period,
            score,
        })
    }

    /// The policies `condition` matches: those for its reason and its
    /// type's fallback, the fallback left out while a policy for its reason
    /// is still within its toleration.
    fn matches<'p>(
        &'p self,
        condition: &'p NodeCondition,
        floor: i64,
        unknown_since: i64,
        now: i64,
    ) -> Vec<Match<'p>> {
        let since = condition
            .last_transition_time
            .as_ref()
            .map_or(unknown_since, |t| t.0.as_second())
            .max(floor);
        let reason = condition.reason.as_deref().unwrap_or_default();
        let matched = |compiled: &'p Compiled| Match {
            compiled,
            condition,
            eligible_at: since.saturating_add(
                i64::try_from(compiled.policy.toleration.as_secs()).unwrap_or(i64::MAX),
            ),
        };
        let group = self.compiled.iter().filter(|c| {
            c.policy.condition_type == condition.type_
                && c.policy.condition_status == condition.status
        });
        let (fallbacks, specific): (Vec<&Compiled>, Vec<&Compiled>) =
            group.partition(|c| c.reason.is_none());
        let mut matches: Vec<Match<'p>> = specific
            .into_iter()
            .filter(|c| c.reason.as_ref().is_some_and(|r| r.is_match(reason)))
            .map(matched)
            .collect();
        if matches.iter().all(|m| m.eligible_at <= now) {
            matches.extend(fallbacks.into_iter().map(matched));
        }
        matches
    }
}

struct Match<'p> {
    compiled: &'p Compiled,
    condition: &'p NodeCondition,
    eligible_at: i64,
}

impl Match<'_> {
    fn policy(&self) -> &Policy {
        &self.compiled.policy
    }
}

/// Whether `annotations` hold `karpenter.sh/do-not-repair: "true"`.
pub fn do_not_repair(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(karpenter_core::labels::DO_NOT_REPAIR))
        .is_some_and(|v| v == "true")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn policy(condition: &str, status: &str, reason: &str, minutes: u64, action: Action) -> Policy {
        Policy {
            condition_type: condition.into(),
            condition_status: status.into(),
            reason_regex: reason.into(),
            toleration: Duration::from_secs(minutes * 60),
            action,
            termination_grace_period: Some(Duration::from_secs(600)),
            priority: 0,
        }
    }

    /// A node created long ago with `(type, status, reason, minutes ago)`.
    fn node(conditions: &[(&str, &str, &str, i64)]) -> Node {
        let at = |seconds: i64| {
            k8s_openapi::jiff::Timestamp::from_second(seconds)
                .expect("time")
                .to_string()
        };
        let conditions: Vec<_> = conditions
            .iter()
            .map(|(t, s, r, minutes)| {
                serde_json::json!({"type": t, "status": s, "reason": r,
                    "lastTransitionTime": at(NOW - minutes * 60)})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "creationTimestamp": at(NOW - 86_400)},
            "status": {"conditions": conditions}}))
        .expect("node")
    }

    fn aws_like() -> Policies {
        Policies::new(vec![
            policy("Ready", "False", "", 30, Action::Replace),
            policy(
                "AcceleratedHardwareReady",
                "False",
                "XID(46|48)Error$",
                10,
                Action::Reboot,
            ),
            policy(
                "AcceleratedHardwareReady",
                "False",
                "XID79Error$",
                10,
                Action::Replace,
            ),
            policy("AcceleratedHardwareReady", "False", "", 30, Action::Replace),
        ])
        .expect("valid")
    }

    #[test]
    fn not_repaired_before_the_toleration_elapses() {
        let resolved = aws_like()
            .resolve(
                &node(&[("Ready", "False", "KubeletNotReady", 20)]),
                NOW,
                None,
            )
            .expect("matches");
        assert!(!resolved.eligible);
        assert_eq!(resolved.eligible_at, NOW + 10 * 60);
        let resolved = aws_like()
            .resolve(
                &node(&[("Ready", "False", "KubeletNotReady", 31)]),
                NOW,
                None,
            )
            .expect("matches");
        assert!(resolved.eligible);
        assert!(
            aws_like()
                .resolve(&node(&[("Ready", "True", "", 60)]), NOW, None)
                .is_none()
        );
    }

    #[test]
    fn a_matching_reason_specific_policy_is_used_instead_of_the_fallback() {
        let n = node(&[("AcceleratedHardwareReady", "False", "NvidiaXID46Error", 11)]);
        let resolved = aws_like().resolve(&n, NOW, None).expect("matches");
        assert_eq!(resolved.action, Action::Reboot);
        assert!(resolved.eligible);
        let n = node(&[("AcceleratedHardwareReady", "False", "NvidiaXID79Error", 11)]);
        assert_eq!(
            aws_like().resolve(&n, NOW, None).expect("matches").action,
            Action::Replace
        );
        // Still there when the fallback's toleration has passed: replaced.
        let n = node(&[("AcceleratedHardwareReady", "False", "NvidiaXID46Error", 31)]);
        assert_eq!(
            aws_like().resolve(&n, NOW, None).expect("matches").action,
            Action::Replace
        );
        // XID460 is not XID46.
        let n = node(&[("AcceleratedHardwareReady", "False", "NvidiaXID460Error", 11)]);
        let resolved = aws_like().resolve(&n, NOW, None).expect("fallback");
        assert!(!resolved.eligible, "the fallback waits 30 minutes");
    }

    #[test]
    fn a_waiting_reason_specific_policy_suppresses_an_eligible_fallback() {
        let policies = Policies::new(vec![
            policy("Ready", "False", "", 5, Action::Replace),
            policy("Ready", "False", "^Slow$", 60, Action::Replace),
        ])
        .expect("valid");
        let resolved = policies
            .resolve(&node(&[("Ready", "False", "Slow", 10)]), NOW, None)
            .expect("matches");
        assert!(!resolved.eligible);
        // An unknown reason takes the fallback.
        let resolved = policies
            .resolve(&node(&[("Ready", "False", "Other", 10)]), NOW, None)
            .expect("matches");
        assert!(resolved.eligible);
    }

    #[test]
    fn replace_wins_over_reboot_and_the_shortest_drain_bound_applies() {
        let mut reboot = policy("Kernel", "False", "", 1, Action::Replace);
        reboot.termination_grace_period = Some(Duration::from_secs(30));
        let policies = Policies::new(vec![
            policy("Ready", "False", "", 5, Action::Replace),
            policy("GPU", "False", "x", 5, Action::Reboot),
            reboot,
        ])
        .expect("valid");
        let n = node(&[
            ("GPU", "False", "x", 10),
            ("Ready", "False", "", 10),
            ("Kernel", "False", "", 10),
        ]);
        let resolved = policies.resolve(&n, NOW, None).expect("matches");
        assert_eq!(resolved.action, Action::Replace);
        assert_eq!(
            resolved.termination_grace_period,
            Some(Duration::from_secs(30))
        );
    }

    #[test]
    fn a_reboot_restarts_the_toleration() {
        let n = node(&[("Ready", "False", "", 40)]);
        let history = RebootHistory {
            requested: vec![NOW - 120],
            finished: Some(NOW - 60),
        };
        let resolved = aws_like()
            .resolve(&n, NOW, Some(&history))
            .expect("matches");
        assert!(!resolved.eligible);
    }

    /// Karpenter: "should escalate to replacement when the fault recurs
    /// after two successful reboots" and "should reboot again once earlier
    /// reboots age out of the window".
    #[test]
    fn a_fault_that_recurs_after_two_reboots_is_replaced() {
        let n = node(&[("AcceleratedHardwareReady", "False", "NvidiaXID46Error", 11)]);
        let history = |requested: Vec<i64>| RebootHistory {
            requested,
            finished: Some(NOW - 20 * 60),
        };
        let once = aws_like().resolve(&n, NOW, Some(&history(vec![NOW - 3600])));
        assert_eq!(once.expect("matches").action, Action::Reboot);
        let twice = aws_like().resolve(&n, NOW, Some(&history(vec![NOW - 7200, NOW - 3600])));
        assert_eq!(twice.expect("matches").action, Action::Replace);
        let aged = aws_like().resolve(
            &n,
            NOW,
            Some(&history(vec![NOW - REBOOT_HISTORY_SECONDS - 1, NOW - 3600])),
        );
        assert_eq!(aged.expect("matches").action, Action::Reboot);
    }

    #[test]
    fn the_score_ranks_priority_then_age() {
        let mut high = policy("Ready", "False", "", 0, Action::Replace);
        high.priority = 90;
        let policies = Policies::new(vec![high, policy("Disk", "False", "", 0, Action::Replace)])
            .expect("valid");
        let fresh_high = policies
            .resolve(&node(&[("Ready", "False", "", 0)]), NOW, None)
            .expect("matches");
        let old_low = policies
            .resolve(&node(&[("Disk", "False", "", 90)]), NOW, None)
            .expect("matches");
        assert!((fresh_high.score - 1.0).abs() < 1e-9);
        assert!((old_low.score - 3.0).abs() < 1e-9, "{}", old_low.score);
    }

    #[test]
    fn a_condition_without_its_time_counts_from_the_nodes_creation() {
        let mut n = node(&[("Ready", "False", "", 0)]);
        if let Some(c) = n
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
            .and_then(|c| c.first_mut())
        {
            c.last_transition_time = None;
        }
        let resolved = aws_like().resolve(&n, NOW, None).expect("matches");
        assert_eq!(resolved.eligible_at, NOW - 86_400 + 30 * 60);
        n.metadata.creation_timestamp = None;
        let resolved = aws_like().resolve(&n, NOW, None).expect("matches");
        assert!(!resolved.eligible, "without a creation time, from now");
    }

    #[test]
    fn the_history_round_trips_through_annotations() {
        let history = RebootHistory {
            requested: vec![NOW - REBOOT_HISTORY_SECONDS - 5, NOW - 60],
            finished: Some(NOW - 30),
        };
        let annotations = BTreeMap::from([
            (
                REBOOT_REQUESTED_ANNOTATION.to_owned(),
                history.requested_with(NOW),
            ),
            (REBOOT_FINISHED_ANNOTATION.to_owned(), "garbage".to_owned()),
        ]);
        let read = RebootHistory::from_annotations(Some(&annotations));
        assert_eq!(read.requested, vec![NOW - 60, NOW], "the old one dropped");
        assert_eq!(read.finished, None, "what does not parse is left out");
        assert_eq!(read.recent(NOW), 2);
    }

    #[test]
    fn times_from_the_future_are_not_believed() {
        let n = node(&[("AcceleratedHardwareReady", "False", "NvidiaXID46Error", 11)]);
        let history = RebootHistory {
            requested: vec![NOW + 3600, NOW + 7200],
            finished: Some(NOW + 86_400),
        };
        assert_eq!(history.recent(NOW), 0);
        let resolved = aws_like()
            .resolve(&n, NOW, Some(&history))
            .expect("matches");
        assert_eq!(resolved.action, Action::Reboot, "not escalated");
        assert!(!resolved.eligible, "counted from now, not from tomorrow");
        let many: Vec<String> = (0..20).map(|i| (NOW - 100 + i).to_string()).collect();
        let annotations =
            BTreeMap::from([(REBOOT_REQUESTED_ANNOTATION.to_owned(), many.join(","))]);
        let read = RebootHistory::from_annotations(Some(&annotations));
        assert_eq!(read.requested.len(), REBOOTS_KEPT);
        assert_eq!(read.requested.last(), Some(&(NOW - 81)), "the latest kept");
    }

    #[test]
    fn bad_policy_sets_are_refused() {
        let two_fallbacks = Policies::new(vec![
            policy("Ready", "False", "", 5, Action::Replace),
            policy("Ready", "False", "", 10, Action::Replace),
        ]);
        assert!(two_fallbacks.is_err());
        let rebooting_fallback =
            Policies::new(vec![policy("Ready", "False", "", 5, Action::Reboot)]);
        assert!(rebooting_fallback.is_err());
        let bad_status = Policies::new(vec![policy("Ready", "Maybe", "", 5, Action::Replace)]);
        assert!(bad_status.is_err());
        let huge = Policies::new(vec![policy(
            "Ready",
            "False",
            &"a".repeat(2000),
            5,
            Action::Reboot,
        )]);
        assert!(huge.is_err());
        let broken = Policies::new(vec![policy("Ready", "False", "(", 5, Action::Reboot)]);
        assert!(broken.is_err());
    }
}
