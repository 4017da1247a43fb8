//! Leader election against local-apiserver: expiry is judged by when a
//! replica observed the lease change, never by the holder's clock.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use karpenter_adapter::leader::{Elector, Timing};
use kube::api::{Api, PostParams};
use local_apiserver::{Config, LocalApiServer};

const LEASE: &str = "karpenter-leader-election";

/// A renewal by a holder whose clock runs an hour behind this one.
async fn renew_skewed(api: &Api<Lease>) {
    let behind = Timestamp::now() - SignedDuration::from_hours(1);
    let Ok(Some(mut lease)) = api.get_opt(LEASE).await else {
        return;
    };
    if let Some(spec) = lease.spec.as_mut() {
        spec.renew_time = Some(MicroTime(behind));
    }
    let _ = api.replace(LEASE, &PostParams::default(), &lease).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_its_holder_renews_is_not_taken_whatever_the_holders_clock_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let server = LocalApiServer::start(Config {
        kubeconfig: Some(kubeconfig.clone()),
        ..Config::default()
    })
    .await
    .expect("local-apiserver");
    let config = karpenter_kube::from_kubeconfig(&kubeconfig)
        .await
        .expect("kubeconfig");
    let client = karpenter_kube::client(config).expect("client");
    let api: Api<Lease> = Api::namespaced(client.clone(), "default");
    let behind = Timestamp::now() - SignedDuration::from_hours(1);
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(LEASE.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("skewed-holder".to_owned()),
            lease_duration_seconds: Some(2),
            renew_time: Some(MicroTime(behind)),
            ..LeaseSpec::default()
        }),
    };
    api.create(&PostParams::default(), &lease)
        .await
        .expect("lease");
    let timing = Timing {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_secs(1),
        retry: Duration::from_millis(200),
    };
    let elector = Elector::new(client, "default", LEASE, "standby", timing);

    // The holder renews every 300 ms for 4 s (twice the lease duration):
    // its renewTime is always an hour old by this replica's clock.
    let renewing = {
        let api = api.clone();
        tokio::spawn(async move {
            let until = tokio::time::Instant::now() + Duration::from_secs(4);
            while tokio::time::Instant::now() < until {
                renew_skewed(&api).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    let taken = tokio::time::timeout(Duration::from_secs(4), elector.acquire()).await;
    assert!(
        taken.is_err(),
        "a lease renewed within its duration is not taken"
    );
    renewing.await.expect("renewer");

    // Once the holder stops renewing, the lease is taken a lease duration
    // after the last change this replica observed.
    tokio::time::timeout(Duration::from_secs(5), elector.acquire())
        .await
        .expect("taken once no longer renewed");
    let holder = api
        .get(LEASE)
        .await
        .expect("lease")
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), Some("standby"));
    drop(server);
}
