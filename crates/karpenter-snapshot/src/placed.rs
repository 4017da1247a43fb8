//! Pods placed in a snapshot without being copied into it.
//!
//! ```text
//!   caller's index ── PreparedPod (Arc<sched::Pod>) ──┐
//!                                                     ├─▶ PlacedPod { base: shared, finish }
//!   this build ── priority, volumes, do-not-disrupt, ─┘        │
//!                 default spread constraints                    │
//!                                                               ├─ into_pod(): the wire pod (materialized)
//!                                                               └─ written straight into the request's bytes
//! ```
//!
//! A caller that keeps its pods prepared (the adapter's index) would
//! otherwise copy every pod into each snapshot only to encode the copy and
//! drop it: at 20,000 pods that copy was about a fifth of the adapter's
//! peak memory. A placed pod shares the prepared wire pod and carries only
//! what this build decided, and [`Built::encode_request`] writes the two
//! one after the other: protobuf decodes a message's fields in any order,
//! and the prepared pod leaves the finished fields at their defaults, so
//! the bytes decode to exactly the finished pod.

use std::sync::Arc;

use karpenter_proto::scheduler::v1 as sched;
use prost::Message as _;

use crate::Built;

/// `ClusterSnapshot.pending_pods`, `ClusterSnapshot.nodes` and
/// `StateNode.pods` (cluster.proto); the round-trip tests hold them to it.
const PENDING_PODS_FIELD: u32 = 1;
const NODES_FIELD: u32 = 2;
const NODE_PODS_FIELD: u32 = 10;

/// What a build decides for a prepared pod (see [`crate::PreparedPod`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Finish {
    pub priority: i32,
    pub volumes: Vec<sched::Volume>,
    pub do_not_disrupt: bool,
    pub do_not_disrupt_until: Option<prost_types::Timestamp>,
    /// The scheduler's default topology spread constraints, for a pod with
    /// none of its own (so the prepared pod has none either).
    pub spread: Vec<sched::TopologySpreadConstraint>,
}

impl Finish {
    /// The finished fields alone: a pod message whose other fields are at
    /// their defaults, which protobuf does not write.
    fn as_pod(&self) -> sched::Pod {
        sched::Pod {
            priority: self.priority,
            volumes: self.volumes.clone(),
            do_not_disrupt: self.do_not_disrupt,
            do_not_disrupt_until: self.do_not_disrupt_until,
            topology_spread_constraints: self.spread.clone(),
            ..sched::Pod::default()
        }
    }
}

/// A pod of a snapshot: the prepared wire pod, shared, and this build's
/// [`Finish`].
#[derive(Clone, Debug)]
pub struct PlacedPod {
    base: Arc<sched::Pod>,
    finish: Finish,
}

impl PlacedPod {
    pub(crate) fn new(base: Arc<sched::Pod>, finish: Finish) -> Self {
        Self { base, finish }
    }

    /// The pod but for its priority, volumes and do-not-disrupt (what
    /// readers during a build look at: names, labels, owner, node, phase).
    pub fn base(&self) -> &sched::Pod {
        &self.base
    }

    /// The finished wire pod (copied only if the prepared pod is shared).
    pub fn into_pod(self) -> sched::Pod {
        let Finish {
            priority,
            volumes,
            do_not_disrupt,
            do_not_disrupt_until,
            spread,
        } = self.finish;
        let mut pod = sched::Pod {
            priority,
            volumes,
            do_not_disrupt,
            do_not_disrupt_until,
            ..Arc::unwrap_or_clone(self.base)
        };
        if !spread.is_empty() {
            pod.topology_spread_constraints = spread;
        }
        pod
    }

    /// The finished wire pod, leaving this one as it is.
    pub fn to_pod(&self) -> sched::Pod {
        self.clone().into_pod()
    }

    /// The finished pod's encoded length.
    fn encoded_len(&self) -> usize {
        self.base.encoded_len() + self.finish.as_pod().encoded_len()
    }
}

/// A finished pod, split: the finished fields go to the [`Finish`], so the
/// base keeps them at their defaults as a prepared pod does.
impl From<sched::Pod> for PlacedPod {
    fn from(mut pod: sched::Pod) -> Self {
        let finish = Finish {
            priority: std::mem::take(&mut pod.priority),
            volumes: std::mem::take(&mut pod.volumes),
            do_not_disrupt: std::mem::take(&mut pod.do_not_disrupt),
            do_not_disrupt_until: pod.do_not_disrupt_until.take(),
            spread: Vec::new(),
        };
        Self::new(Arc::new(pod), finish)
    }
}

/// The pods a build placed and has not yet put into its snapshot: pending,
/// and by node (parallel to the snapshot's `nodes`).
#[derive(Debug, Default)]
pub struct PlacedPods {
    pub pending: Vec<PlacedPod>,
    pub on_nodes: Vec<Vec<PlacedPod>>,
}

impl PlacedPods {
    pub(crate) fn push_on_node(&mut self, node: usize, pod: PlacedPod) {
        if self.on_nodes.len() <= node {
            self.on_nodes.resize_with(node + 1, Vec::new);
        }
        self.on_nodes[node].push(pod);
    }

    /// Every placed pod's base, pending first.
    pub fn bases(&self) -> impl Iterator<Item = &sched::Pod> {
        self.all().map(PlacedPod::base)
    }

    pub(crate) fn all(&self) -> impl Iterator<Item = &PlacedPod> {
        self.pending.iter().chain(self.on_nodes.iter().flatten())
    }

    fn on_node(&self, node: usize) -> &[PlacedPod] {
        self.on_nodes.get(node).map_or(&[], Vec::as_slice)
    }
}

/// A request that carries a [`sched::ClusterSnapshot`] as field
/// `CLUSTER_FIELD` (scheduler.proto).
pub trait ClusterRequest: prost::Message {
    const CLUSTER_FIELD: u32;
}

impl ClusterRequest for sched::SolveRequest {
    const CLUSTER_FIELD: u32 = 1;
}

impl ClusterRequest for sched::PlanDisruptionRequest {
    const CLUSTER_FIELD: u32 = 1;
}

/// The length of field `field` holding `len` bytes, key and length included.
fn delimited_len(field: u32, len: usize) -> usize {
    prost::length_delimiter_len(key(field)) + prost::length_delimiter_len(len) + len
}

/// A length-delimited field's key (a varint like a length).
fn key(field: u32) -> usize {
    // Wire type 2, length-delimited; field numbers are below 2^29.
    ((field as usize) << 3) | 2
}

fn write_delimiter(field: u32, len: usize, buf: &mut Vec<u8>) -> Result<(), prost::EncodeError> {
    prost::encode_length_delimiter(key(field), buf)?;
    prost::encode_length_delimiter(len, buf)
}

impl Built {
    /// Pending pods, placed or already in the snapshot.
    pub fn pending_pod_count(&self) -> usize {
        self.snapshot.pending_pods.len() + self.pods.pending.len()
    }

    /// Puts the placed pods into the snapshot.
    pub fn materialize(&mut self) {
        let pods = std::mem::take(&mut self.pods);
        let snapshot = &mut self.snapshot;
        snapshot
            .pending_pods
            .extend(pods.pending.into_iter().map(PlacedPod::into_pod));
        for (node, placed) in snapshot.nodes.iter_mut().zip(pods.on_nodes) {
            node.pods
                .extend(placed.into_iter().map(PlacedPod::into_pod));
        }
    }

    /// `request` (its cluster left unset) with this build's snapshot as
    /// its cluster, encoded: what `request.encode_to_vec()` would give after
    /// [`Built::materialize`], written from the shared prepared pods.
    ///
    /// # Errors
    /// Never for a `Vec` (prost's encoder only fails short of space).
    pub fn encode_request<R: ClusterRequest>(
        mut self,
        request: &R,
    ) -> Result<Vec<u8>, prost::EncodeError> {
        let nodes = std::mem::take(&mut self.snapshot.nodes);
        let pods = std::mem::take(&mut self.pods);
        let pending_lens: Vec<usize> = pods.pending.iter().map(PlacedPod::encoded_len).collect();
        let node_pod_lens: Vec<Vec<usize>> = (0..nodes.len())
            .map(|i| pods.on_node(i).iter().map(PlacedPod::encoded_len).collect())
            .collect();
        let fields_len = |lens: &[usize], field: u32| -> usize {
            lens.iter().map(|len| delimited_len(field, *len)).sum()
        };
        let node_lens: Vec<usize> = nodes
            .iter()
            .zip(&node_pod_lens)
            .map(|(node, lens)| node.encoded_len() + fields_len(lens, NODE_PODS_FIELD))
            .collect();
        let cluster_len = self.snapshot.encoded_len()
            + fields_len(&pending_lens, PENDING_PODS_FIELD)
            + fields_len(&node_lens, NODES_FIELD);
        let mut buf = Vec::with_capacity(
            request.encoded_len() + delimited_len(R::CLUSTER_FIELD, cluster_len),
        );
        request.encode(&mut buf)?;
        write_delimiter(R::CLUSTER_FIELD, cluster_len, &mut buf)?;
        self.snapshot.encode(&mut buf)?;
        write_pods(&pods.pending, &pending_lens, PENDING_PODS_FIELD, &mut buf)?;
        for (i, node) in nodes.iter().enumerate() {
            write_delimiter(NODES_FIELD, node_lens[i], &mut buf)?;
            node.encode(&mut buf)?;
            write_pods(
                pods.on_node(i),
                &node_pod_lens[i],
                NODE_PODS_FIELD,
                &mut buf,
            )?;
        }
        Ok(buf)
    }
}

fn write_pods(
    pods: &[PlacedPod],
    lens: &[usize],
    field: u32,
    buf: &mut Vec<u8>,
) -> Result<(), prost::EncodeError> {
    for (pod, len) in pods.iter().zip(lens) {
        write_delimiter(field, *len, buf)?;
        pod.base.encode(buf)?;
        pod.finish.as_pod().encode(buf)?;
    }
    Ok(())
}
