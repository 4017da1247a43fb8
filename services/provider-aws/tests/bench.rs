//! The figures in BENCHMARKS.md: `GetInstanceTypes` over moto's full catalog
//! (cold and cached) and `Create`, measured against moto through the test
//! proxy. Ignored by default; run with
//! `cargo test -p provider-aws --test bench -- --ignored --nocapture`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use karpenter_proto::provider::v1 as pv;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run explicitly"]
async fn bench_get_instance_types_and_create() {
    let mut world = World::start().await;
    let (node_class, _) = resolved(&mut world, seed_node_class()).await;
    let request = pv::GetInstanceTypesRequest {
        node_pool: "default".into(),
        node_class: Some(node_class.clone()),
    };
    let started = Instant::now();
    let types = world
        .client
        .get_instance_types(request.clone())
        .await
        .unwrap()
        .into_inner();
    let cold = started.elapsed();
    let mut cached = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        let again = world
            .client
            .get_instance_types(request.clone())
            .await
            .unwrap()
            .into_inner();
        cached.push(started.elapsed());
        assert_eq!(again.instance_types.len(), types.instance_types.len());
    }
    let mut creates = Vec::new();
    for i in 0..5 {
        let claim = seed_node_claim(&format!("bench-{i}"), &node_class);
        let started = Instant::now();
        world
            .client
            .create(pv::CreateRequest {
                node_claim: Some(claim),
            })
            .await
            .unwrap();
        creates.push(started.elapsed());
    }
    println!(
        "types={} bytes={} cold={:?} cached_median={:?} cached_min={:?} create_median={:?} create_min={:?} create_max={:?}",
        types.instance_types.len(),
        prost::Message::encoded_len(&types),
        cold,
        median(cached.clone()),
        cached.iter().min().unwrap(),
        median(creates.clone()),
        creates.iter().min().unwrap(),
        creates.iter().max().unwrap(),
    );
    world.assert_least_privilege();
}
