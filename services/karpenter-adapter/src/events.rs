//! Kubernetes events, as Karpenter publishes them: core/v1 Events from the
//! `karpenter` component, the same event (same object, reason and dedupe
//! values) not sent again within its window (two minutes unless the event
//! says otherwise), and `Nominated` limited to 5 per second (bursts of 10)
//! so a batch of thousands of pods does not flood the API server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use karpenter_core::rate::TokenBucket;
use kube::Resource;
use kube::api::{Api, PostParams};

/// The default dedupe window.
pub const DEDUPE: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Normal,
    Warning,
}

/// One event to publish.
#[derive(Clone, Debug)]
pub struct Event {
    pub involved: ObjectReference,
    pub kind: Kind,
    pub reason: String,
    pub message: String,
    /// How long an identical event is suppressed.
    pub dedupe: Duration,
    /// What makes two events of the same object and reason different
    /// (by default nothing: one per window).
    pub dedupe_values: Vec<String>,
}

impl Event {
    pub fn new<K: Resource<DynamicType = ()>>(
        object: &K,
        kind: Kind,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        Event {
            involved: object.object_ref(&()),
            kind,
            reason: reason.to_owned(),
            message: message.into(),
            dedupe: DEDUPE,
            dedupe_values: Vec::new(),
        }
    }

    /// Events that differ in `value` are not duplicates of each other.
    pub fn dedupe_on(mut self, value: impl Into<String>) -> Self {
        self.dedupe_values.push(value.into());
        self
    }

    pub fn dedupe_for(mut self, window: Duration) -> Self {
        self.dedupe = window;
        self
    }
}

/// Events per second (and burst) by reason: one per pod can be thousands
/// at once. Karpenter limits `Nominated` to 5/s; the rest keep the API
/// server safe from a flood.
const RATES: &[(&str, f64, f64)] = &[("Nominated", 5.0, 10.0), ("FailedScheduling", 10.0, 100.0)];
/// Every other reason, together.
const OTHER_RATE: (f64, f64) = (50.0, 500.0);
/// How often expired dedupe entries are dropped.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Sent {
    /// Dedupe key → (sent at, window).
    at: HashMap<String, (Instant, Duration)>,
    swept: Option<Instant>,
    buckets: HashMap<String, TokenBucket>,
}

impl Sent {
    fn sweep(&mut self, now: Instant) {
        if self
            .swept
            .is_some_and(|at| now.duration_since(at) < SWEEP_EVERY)
        {
            return;
        }
        self.at
            .retain(|_, (at, window)| now.duration_since(*at) < *window);
        self.swept = Some(now);
    }

    fn within_rate(&mut self, reason: &str, now: Instant) -> bool {
        let (name, rate, burst) = RATES
            .iter()
            .find(|(r, _, _)| *r == reason)
            .map_or(("", OTHER_RATE.0, OTHER_RATE.1), |(r, rate, burst)| {
                (*r, *rate, *burst)
            });
        self.buckets
            .entry(name.to_owned())
            .or_insert_with(|| TokenBucket::new(rate, burst, now))
            .take(now)
            .is_none()
    }
}

/// Publishes events; cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    sent: Arc<Mutex<Sent>>,
    host: String,
}

impl Recorder {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            sent: Arc::default(),
            host: std::env::var("HOSTNAME").unwrap_or_default(),
        }
    }

    /// Whether `event` is new within its window and within its rate (and
    /// remembers it).
    fn admit(&self, event: &Event) -> bool {
        let key = format!(
            "{}/{}/{}/{}|{}|{}",
            event.involved.kind.as_deref().unwrap_or_default(),
            event.involved.namespace.as_deref().unwrap_or_default(),
            event.involved.name.as_deref().unwrap_or_default(),
            event.involved.uid.as_deref().unwrap_or_default(),
            event.reason.to_lowercase(),
            event.dedupe_values.join("-")
        );
        let now = Instant::now();
        let mut sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        sent.sweep(now);
        if let Some((at, window)) = sent.at.get(&key)
            && now.duration_since(*at) < *window
        {
            return false;
        }
        if !sent.within_rate(&event.reason, now) {
            return false;
        }
        sent.at.insert(key, (now, event.dedupe));
        true
    }

    /// Publishes `event` in the background unless it was just published;
    /// failures are logged, never returned (an event is never worth failing
    /// a reconcile or waiting for).
    pub fn emit(&self, event: Event) {
        if !self.admit(&event) {
            return;
        }
        let recorder = self.clone();
        tokio::spawn(async move { recorder.send(event).await });
    }

    async fn send(&self, event: Event) {
        let namespace = event
            .involved
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let object_name = event.involved.name.clone().unwrap_or_default();
        let body = CoreEvent {
            metadata: ObjectMeta {
                generate_name: Some(format!("{object_name}.")),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: event.involved.clone(),
            reason: Some(event.reason.clone()),
            message: Some(event.message.clone()),
            type_: Some(match event.kind {
                Kind::Normal => "Normal".to_owned(),
                Kind::Warning => "Warning".to_owned(),
            }),
            source: Some(EventSource {
                component: Some("karpenter".to_owned()),
                host: Some(self.host.clone()).filter(|h| !h.is_empty()),
            }),
            reporting_component: Some("karpenter".to_owned()),
            reporting_instance: Some(self.host.clone()).filter(|h| !h.is_empty()),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..CoreEvent::default()
        };
        let api: Api<CoreEvent> = Api::namespaced(self.client.clone(), &namespace);
        if let Err(error) = api.create(&PostParams::default(), &body).await {
            tracing::debug!(%error, reason = %event.reason, object = %object_name, "publishing an event failed");
        }
    }
}

/// An event about an object of a kind known only at run time (the
/// provider's node class).
pub fn dynamic(
    object: &kube::api::DynamicObject,
    resource: &kube::api::ApiResource,
    kind: Kind,
    reason: &str,
    message: impl Into<String>,
) -> Event {
    Event {
        involved: object.object_ref(resource),
        kind,
        reason: reason.to_owned(),
        message: message.into(),
        dedupe: DEDUPE,
        dedupe_values: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_one_reason_is_cut_to_its_rate() {
        let mut sent = Sent::default();
        let now = Instant::now();
        let admitted = (0..50)
            .filter(|_| sent.within_rate("Nominated", now))
            .count();
        assert_eq!(admitted, 10, "the burst");
        assert!(
            sent.within_rate("FailedScheduling", now),
            "other reasons have their own"
        );
        assert!(
            sent.within_rate("Nominated", now + Duration::from_millis(200)),
            "5 per second"
        );
    }
}
