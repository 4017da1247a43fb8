//! Leader election with a `coordination.k8s.io/v1` Lease, as
//! controller-runtime does it: the holder renews the lease every
//! `retry`; another replica takes it once `lease_duration` has passed
//! without a renewal. A leader that cannot renew within `renew_deadline`
//! stops leading (the process then exits, and its replica restarts as a
//! standby), so two replicas never act at once for longer than that.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

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

pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
}

/// What one attempt found.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Held,
    HeldByOther(String),
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
        }
    }

    fn now() -> MicroTime {
        MicroTime(Timestamp::now())
    }

    fn seconds(d: Duration) -> i32 {
        i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// One try to take or renew the lease.
    async fn attempt(&self) -> Result<Attempt, kube::Error> {
        let existing = self.api.get_opt(&self.name).await?;
        let Some(mut lease) = existing else {
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
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Held),
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    Ok(Attempt::HeldByOther(String::new()))
                }
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let mine = holder == self.identity;
        if !mine && !holder.is_empty() {
            let duration = spec
                .lease_duration_seconds
                .map_or(self.timing.lease_duration, |s| {
                    Duration::from_secs(u64::try_from(s).unwrap_or(0))
                });
            let renewed = spec.renew_time.as_ref().map(|t| t.0);
            let expired = renewed.is_none_or(|t| {
                let age = Timestamp::now().duration_since(t);
                age.as_secs_f64() > duration.as_secs_f64()
            });
            if !expired {
                return Ok(Attempt::HeldByOther(holder));
            }
        }
        if !mine {
            spec.acquire_time = Some(Self::now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
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
            Ok(_) => Ok(Attempt::Held),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::HeldByOther(holder)),
            Err(e) => Err(e),
        }
    }

    /// Waits until this replica holds the lease.
    pub async fn acquire(&self) {
        let mut logged = String::new();
        loop {
            match self.attempt().await {
                Ok(Attempt::Held) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "acquired the leader lease");
                    return;
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

    /// Renews the lease until a renewal fails for longer than the renew
    /// deadline (or another replica took it); returns then.
    pub async fn hold(&self) {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.timing.retry).await;
            match self.attempt().await {
                Ok(Attempt::Held) => last_renewal = tokio::time::Instant::now(),
                Ok(Attempt::HeldByOther(holder)) => {
                    tracing::error!(%holder, "another replica holds the leader lease");
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, "renewing the leader lease failed");
                    if last_renewal.elapsed() > self.timing.renew_deadline {
                        tracing::error!("could not renew the leader lease in time");
                        return;
                    }
                }
            }
        }
    }

    /// Gives the lease up (on shutdown), so a standby takes over at once.
    pub async fn release(&self) {
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
    }
}
