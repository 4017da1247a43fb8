//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go's
//! `leaderelection` does it:
//!
//! ```text
//!   standby: get lease ──record changed?──▶ observed = (record, now)
//!            holder set and observed + leaseDuration > now ──▶ wait `retry`
//!            else ──update (resourceVersion CAS)──▶ leader
//!   leader:  every `retry`: renew, each try bounded by last renewal + renewDeadline
//!            deadline passed ──▶ stop leading (controllers stopped, process exits)
//! ```
//!
//! Two rules keep two replicas from ever acting at once:
//!
//! - expiry is judged by when *this* replica observed the record change,
//!   never by comparing the holder's `renewTime` with the local clock, so
//!   clock skew between nodes cannot make a live lease look expired;
//! - every call has a deadline, and the leader steps down once
//!   `renew_deadline` (shorter than `lease_duration`) has passed without a
//!   renewal, so it has stopped before any standby can take the lease, even
//!   when its connection to the API server hangs without closing.
//!
//! The lease goes through its own client (see [`lease_client`]): no rate
//! limit shared with the controllers, and short timeouts.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::time::Instant;

/// Timing of the election.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry: Duration,
}

impl Default for Timing {
    /// controller-runtime's defaults.
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }
}

impl Timing {
    /// Checked as client-go checks a leader elector's timing: the lease
    /// outlasts the renew deadline, which outlasts 1.2 retry periods, so a
    /// leader stops acting before a standby may take the lease.
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry: Duration,
    ) -> Result<Self, String> {
        if lease_duration.subsec_nanos() != 0 {
            // The Lease keeps whole seconds, and standbys judge by what it keeps.
            return Err(format!(
                "the leader election lease duration ({lease_duration:?}) must be whole seconds, as a Lease stores it"
            ));
        }
        if lease_duration <= renew_deadline {
            return Err(format!(
                "the leader election lease duration ({lease_duration:?}) must be longer than its renew deadline ({renew_deadline:?})"
            ));
        }
        if retry.is_zero() || renew_deadline.as_millis() * 5 <= retry.as_millis() * 6 {
            return Err(format!(
                "the leader election renew deadline ({renew_deadline:?}) must be longer than 1.2 retry periods ({retry:?}), which must not be zero"
            ));
        }
        Ok(Self {
            lease_duration,
            renew_deadline,
            retry,
        })
    }
}

/// A client for the lease alone: not behind the controllers' rate limit
/// (a renewal must not queue behind a burst of evictions), and with
/// timeouts, so a connection that stops answering fails the call instead
/// of holding it forever.
pub fn lease_client(
    mut config: kube::Config,
    timing: Timing,
) -> Result<kube::Client, karpenter_kube::KubeError> {
    let bound = timing.renew_deadline.max(Duration::from_secs(1));
    config.connect_timeout = Some(bound);
    config.read_timeout = Some(bound);
    config.write_timeout = Some(bound);
    config.reset_reader_on_write = true;
    karpenter_kube::client(config)
}

/// The lease record as last observed, and when (this replica's clock).
struct Observed {
    spec: Option<LeaseSpec>,
    at: Instant,
}

pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    observed: Mutex<Option<Observed>>,
}

/// What one attempt found.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Held,
    HeldByOther(String),
}

/// Why an attempt did not get an answer.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error("no answer from the API server in time")]
    TimedOut,
}

impl Elector {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: Timing,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            timing,
            observed: Mutex::new(None),
        }
    }

    fn now() -> MicroTime {
        MicroTime(Timestamp::now())
    }

    fn seconds(d: Duration) -> i32 {
        i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// Records `spec` as observed now if it differs from the last record
    /// seen; returns when the current record was first observed.
    fn observe(&self, spec: Option<&LeaseSpec>) -> Instant {
        let mut observed = self.observed.lock().unwrap_or_else(|p| p.into_inner());
        match observed.as_ref() {
            Some(seen) if seen.spec.as_ref() == spec => seen.at,
            _ => {
                let at = Instant::now();
                *observed = Some(Observed {
                    spec: spec.cloned(),
                    at,
                });
                at
            }
        }
    }

    /// One try to take or renew the lease, given up at `deadline`.
    async fn attempt_until(&self, deadline: Instant) -> Result<Attempt, AttemptError> {
        match tokio::time::timeout_at(deadline, self.attempt()).await {
            Ok(result) => result.map_err(AttemptError::from),
            Err(_) => Err(AttemptError::TimedOut),
        }
    }

    /// One try to take or renew the lease.
    async fn attempt(&self) -> Result<Attempt, kube::Error> {
        let existing = self.api.get_opt(&self.name).await?;
        let Some(mut lease) = existing else {
            return self.create().await;
        };
        let observed_at = self.observe(lease.spec.as_ref());
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let mine = holder == self.identity;
        if !mine && !holder.is_empty() {
            let duration = spec
                .lease_duration_seconds
                .map_or(self.timing.lease_duration, |s| {
                    Duration::from_secs(u64::try_from(s).unwrap_or(0))
                });
            // Expired only once the record has stayed the same for a whole
            // lease duration as this replica saw it.
            if observed_at.elapsed() < duration {
                return Ok(Attempt::HeldByOther(holder));
            }
        }
        if !mine {
            spec.acquire_time = Some(Self::now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(Self::seconds(self.timing.lease_duration));
        spec.renew_time = Some(Self::now());
        // The resourceVersion makes this a compare-and-swap.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observe(written.spec.as_ref());
                Ok(Attempt::Held)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::HeldByOther(holder)),
            Err(e) => Err(e),
        }
    }

    async fn create(&self) -> Result<Attempt, kube::Error> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(Self::seconds(self.timing.lease_duration)),
                acquire_time: Some(Self::now()),
                renew_time: Some(Self::now()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(written) => {
                self.observe(written.spec.as_ref());
                Ok(Attempt::Held)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::HeldByOther(String::new())),
            Err(e) => Err(e),
        }
    }

    /// Waits until this replica holds the lease; returns when the winning
    /// attempt started (the renewal it wrote is no older than that).
    pub async fn acquire(&self) -> Instant {
        let mut logged = String::new();
        loop {
            let started = Instant::now();
            let deadline = started + self.timing.renew_deadline;
            match self.attempt_until(deadline).await {
                Ok(Attempt::Held) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "acquired the leader lease");
                    return started;
                }
                Ok(Attempt::HeldByOther(holder)) => {
                    if holder != logged {
                        tracing::info!(lease = %self.name, %holder, "waiting for the leader lease");
                        logged = holder;
                    }
                }
                Err(error) => tracing::warn!(%error, "trying the leader lease failed"),
            }
            tokio::time::sleep(self.timing.retry).await;
        }
    }

    /// Renews the lease every `retry` from `since` (when the renewal last
    /// written was sent) until no renewal succeeded within the renew
    /// deadline (a hung call counts: each is cut at the deadline) or
    /// another replica took it; returns then, and the caller stops leading.
    /// A renewal counts from when it was sent, not answered.
    pub async fn hold(&self, since: Instant) {
        let mut last_renewal = since;
        loop {
            let deadline = last_renewal + self.timing.renew_deadline;
            tokio::time::sleep_until((Instant::now() + self.timing.retry).min(deadline)).await;
            let started = Instant::now();
            match self.attempt_until(deadline).await {
                Ok(Attempt::Held) => last_renewal = started,
                Ok(Attempt::HeldByOther(holder)) => {
                    tracing::error!(%holder, "another replica holds the leader lease");
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, "renewing the leader lease failed");
                    if Instant::now() >= deadline {
                        tracing::error!(
                            renew_deadline = ?self.timing.renew_deadline,
                            "could not renew the leader lease in time; stepping down"
                        );
                        return;
                    }
                }
            }
        }
    }

    /// Gives the lease up (on shutdown), so a standby takes over at once.
    pub async fn release(&self) {
        let deadline = Instant::now() + self.timing.renew_deadline;
        let released = tokio::time::timeout_at(deadline, async {
            if let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await
                && let Some(spec) = lease.spec.as_mut()
                && spec.holder_identity.as_deref() == Some(self.identity.as_str())
            {
                spec.holder_identity = None;
                spec.renew_time = None;
                if let Err(error) = self
                    .api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
                {
                    tracing::warn!(%error, "releasing the leader lease failed");
                }
            }
        })
        .await;
        if released.is_err() {
            tracing::warn!("releasing the leader lease timed out");
        }
    }
}
