//! In-memory storage with the apiserver's write semantics.
//!
//! ```text
//!   write (create/update/patch/delete) ──lock──▶ State
//!       ├─ resourceVersion = ++rv (one counter for everything, like etcd)
//!       ├─ history ring (last N events) ──▶ watch from an old version, 410 past it
//!       ├─ broadcast ──▶ live watchers
//!       ├─ uid index + owner index ──▶ background garbage collection
//!       └─ PDB status recomputed on pod / PDB writes (the disruption controller)
//! ```
//!
//! Every write runs under one lock, so patches never see a stale object and
//! events leave in resourceVersion order.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use crd_validation::CrdValidator;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::patch::{Managers, changed_paths};
use super::resources::{self, ResourceInfo};
use super::selectors::{FieldSelector, LabelSelector};

/// An error the API answers with, as a `metav1.Status`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<Box<Value>>,
    /// `metadata.continue` of the Status: the token to go on with after a
    /// continue token expired.
    pub continue_token: Option<String>,
}

impl ApiError {
    fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            continue_token: None,
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
        }
    }
    /// The details kube-apiserver gives an error about one object.
    fn about(mut self, res: &ResourceInfo, name: &str) -> Self {
        self.details = Some(Box::new(
            json!({"name": name, "group": res.group, "kind": res.plural}),
        ));
        self
    }
    pub fn not_found(res: &ResourceInfo, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", res.group_resource()),
        )
        .about(res, name)
    }
    pub fn not_found_path(msg: impl Into<String>) -> Self {
        Self::new(404, "NotFound", msg)
    }
    pub fn already_exists(res: &ResourceInfo, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", res.group_resource()),
        )
        .about(res, name)
    }
    pub fn conflict(res: &ResourceInfo, name: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                res.group_resource()
            ),
        );
        e.details = Some(Box::new(
            json!({"name": name, "group": res.group, "kind": res.plural}),
        ));
        e
    }
    pub fn conflict_with_causes(message: String, causes: Vec<Value>) -> Self {
        let mut e = Self::new(409, "Conflict", message);
        e.details = Some(Box::new(json!({"causes": causes})));
        e
    }
    /// apierrors.NewConflict: `Operation cannot be fulfilled on
    /// {resource} "{name}": {why}`. `resource` is a group-resource as the
    /// caller names it (a precondition names the kind: `ConfigMap`).
    pub fn conflict_because(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let qualified = if group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{group}")
        };
        let mut e = Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {qualified} \"{name}\": {why}"),
        );
        e.details = Some(Box::new(
            json!({"name": name, "group": group, "kind": resource}),
        ));
        e
    }
    /// apierrors.NewForbidden: `{resource} "{name}" is forbidden: {why}`
    /// (`{resource} is forbidden` when the name is not known yet).
    pub fn forbidden(res: &ResourceInfo, name: &str, why: &str) -> Self {
        let message = if name.is_empty() {
            format!("{} is forbidden: {why}", res.group_resource())
        } else {
            format!("{} \"{name}\" is forbidden: {why}", res.group_resource())
        };
        Self::new(403, "Forbidden", message).about(res, name)
    }
    /// 422 for invalid request options (`CreateOptions`, `ListOptions`,
    /// `PatchOptions`...), as the handlers answer them: the kind in group
    /// `meta.k8s.io` with an empty name.
    pub fn invalid_options(kind: &str, errors: &[crate::validation::FieldError]) -> Self {
        let text: Vec<String> = errors.iter().map(|e| e.text()).collect();
        let joined = if text.len() == 1 {
            text[0].clone()
        } else {
            format!("[{}]", text.join(", "))
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{kind}.meta.k8s.io \"\" is invalid: {joined}"),
        );
        e.details = Some(Box::new(json!({
            "name": "", "group": "meta.k8s.io", "kind": kind,
            "causes": errors.iter().map(|e| json!({"reason": e.reason, "message": e.body, "field": e.field})).collect::<Vec<_>>(),
        })));
        e
    }
    /// 422 for an update without `metadata.resourceVersion` of a kind
    /// whose strategy refuses unconditional updates (leases, custom
    /// resources). Store.Update names the group-resource as the kind.
    pub fn unconditional_update(res: &ResourceInfo, name: &str) -> Self {
        let body = "Invalid value: 0: must be specified for an update";
        let mut e = Self::new(
            422,
            "Invalid",
            format!(
                "{} \"{name}\" is invalid: metadata.resourceVersion: {body}",
                res.group_resource()
            ),
        );
        e.details = Some(Box::new(json!({
            "name": name, "group": res.group, "kind": res.plural,
            "causes": [{"reason": "FieldValueInvalid", "message": body, "field": "metadata.resourceVersion"}],
        })));
        e
    }
    /// 504 for a resourceVersion the store has not reached.
    pub fn too_large_resource_version(asked: u64, current: u64) -> Self {
        let mut e = Self::new(
            504,
            "Timeout",
            format!("Too large resource version: {asked}, current: {current}"),
        );
        e.details = Some(Box::new(
            json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
        ));
        e
    }
    pub fn bad_request(msg: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", msg)
    }
    pub fn unprocessable(msg: impl Into<String>) -> Self {
        Self::new(422, "Invalid", msg)
    }
    pub fn invalid(
        res: &ResourceInfo,
        name: &str,
        causes: Vec<(String, String)>,
        text: Vec<String>,
    ) -> Self {
        let message = format!(
            "{} \"{name}\" is invalid: {}",
            res.kind_group(),
            if text.len() == 1 {
                text[0].clone()
            } else {
                format!("[{}]", text.join(", "))
            }
        );
        let mut e = Self::new(422, "Invalid", message);
        e.details = Some(Box::new(json!({
            "name": name, "group": res.group, "kind": res.kind,
            "causes": causes.into_iter().map(|(field, message)| json!({"reason": "FieldValueInvalid", "message": message, "field": field})).collect::<Vec<_>>(),
        })));
        e
    }
    /// 422 for field errors as kube-apiserver words them.
    pub fn invalid_fields(
        res: &ResourceInfo,
        name: &str,
        errors: &[crate::validation::FieldError],
    ) -> Self {
        // ErrorList.ToAggregate: the message names each distinct error
        // once; the causes keep them all.
        let mut text: Vec<String> = Vec::new();
        for t in errors.iter().map(|e| e.text()) {
            if !text.contains(&t) {
                text.push(t);
            }
        }
        let mut e = Self::invalid(res, name, Vec::new(), text);
        e.details = Some(Box::new(json!({
            "name": name, "group": res.group, "kind": res.kind,
            "causes": errors.iter().map(|e| json!({"reason": e.reason, "message": e.body, "field": e.field})).collect::<Vec<_>>(),
        })));
        e
    }
    pub fn gone(msg: impl Into<String>) -> Self {
        Self::new(410, "Expired", msg)
    }
    pub fn method_not_allowed(msg: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", msg)
    }
    pub fn unsupported_media(msg: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", msg)
    }
    /// 500 of unknown reason: what kube-apiserver answers for an error that
    /// is not a Status (`ErrorToAPIStatus`).
    pub fn unknown(msg: impl Into<String>) -> Self {
        Self::new(500, "", msg)
    }
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(500, "InternalError", msg)
    }

    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = (**d).clone();
        }
        if let Some(token) = &self.continue_token {
            s["metadata"]["continue"] = json!(token);
        }
        s
    }

    /// 410 Expired for a continue token whose list version is compacted
    /// away, with a token that goes on from the same place at the latest
    /// version (an inconsistent remainder), as the etcd3 store answers.
    fn continue_expired(token: String) -> Self {
        let mut e = Self::new(
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
        );
        e.continue_token = Some(token);
        e
    }
}

impl ResourceInfo {
    /// `NodePool.karpenter.sh` (how validation errors name a kind).
    pub fn kind_group(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

/// ADDED / MODIFIED / DELETED.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as watchers see it.
#[derive(Debug)]
pub struct StoredEvent {
    pub rv: u64,
    pub resource: String,
    pub namespace: String,
    pub kind: EventType,
    pub object: Arc<Value>,
    /// The object as stored before a modification or deletion (selector
    /// watches; lists as of an older version).
    pub old: Option<Arc<Value>>,
}

/// Replayed events, the live receiver and the version they start from.
pub type Subscription = (
    Vec<Arc<StoredEvent>>,
    broadcast::Receiver<Arc<StoredEvent>>,
    u64,
);

/// Identifies one stored object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    pub resource: String,
    pub namespace: String,
    pub name: String,
}

/// `group/plural`, the storage key of a resource.
pub fn resource_key(group: &str, plural: &str) -> String {
    format!("{group}/{plural}")
}

#[derive(Clone)]
struct State {
    rv: u64,
    resources: BTreeMap<String, Arc<ResourceInfo>>,
    objects: HashMap<String, BTreeMap<(String, String), Arc<Value>>>,
    history: VecDeque<Arc<StoredEvent>>,
    /// The oldest resourceVersion a watch may start from.
    compacted: u64,
    uids: HashMap<String, ObjKey>,
    dependents: HashMap<String, BTreeSet<ObjKey>>,
    seed: u64,
}

/// Options of a list.
#[derive(Debug, Default, Clone)]
pub struct ListOptions {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    /// `resourceVersion` as asked (only `continue` and `Exact` use it).
    pub resource_version: Option<String>,
    /// `resourceVersionMatch=Exact`: the list as of `resource_version`.
    pub exact: bool,
}

/// One page of a list.
#[derive(Debug)]
pub struct ListPage {
    pub items: Vec<Value>,
    /// The version the list is served at.
    pub resource_version: u64,
    /// The continue token of the next page.
    pub next: Option<String>,
    /// How many items follow this page (`remainingItemCount`), for lists
    /// without selectors.
    pub remaining: Option<u64>,
}

/// What a DELETE asks for (`DeleteOptions`).
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// Precondition: the object's uid.
    pub uid: Option<String>,
    /// Precondition: the object's resourceVersion.
    pub resource_version: Option<String>,
    pub propagation: Propagation,
    /// A pod's grace period; its `terminationGracePeriodSeconds` if unset.
    pub grace_period: Option<i64>,
}

impl DeleteOptions {
    /// Background propagation with this grace period.
    pub fn grace(grace_period: Option<i64>) -> Self {
        DeleteOptions {
            grace_period,
            ..DeleteOptions::default()
        }
    }
}

/// How a delete treats dependents.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

/// The in-memory cluster state.
pub struct Store {
    state: Mutex<State>,
    events: broadcast::Sender<Arc<StoredEvent>>,
    history_limit: usize,
}

/// The finalizer of an owner waiting for its dependents.
const FOREGROUND_DELETION: &str = "foregroundDeletion";

/// The finalizer of an owner whose dependents are being orphaned.
const ORPHAN: &str = "orphan";

pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl Store {
    pub fn new(history_limit: usize) -> Arc<Self> {
        let mut resources = BTreeMap::new();
        for r in resources::builtins() {
            resources.insert(resource_key(&r.group, &r.plural), Arc::new(r));
        }
        let seed = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(7) as u64 | 1;
        let store = Arc::new(Store {
            state: Mutex::new(State {
                rv: 1,
                resources,
                objects: HashMap::new(),
                history: VecDeque::new(),
                compacted: 1,
                uids: HashMap::new(),
                dependents: HashMap::new(),
                seed,
            }),
            events: broadcast::channel(65536).0,
            history_limit: history_limit.max(1),
        });
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let _ = store.create(
                &store.resource("", "v1", "namespaces").expect("builtin"),
                "",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                "kube-apiserver",
            );
        }
        store
    }

    /// A copy of the whole store that nobody watches: a `dryRun=All`
    /// write runs there, validated and defaulted as a real one, and is
    /// dropped with it.
    pub fn scratch(&self) -> Arc<Store> {
        Arc::new(Store {
            state: Mutex::new(self.lock().clone()),
            events: broadcast::channel(16).0,
            history_limit: self.history_limit,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every event from now on (controllers wake on them).
    pub fn subscribe_all(&self) -> broadcast::Receiver<Arc<StoredEvent>> {
        self.events.subscribe()
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// A served resource by group, version and plural.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.lock()
            .resources
            .get(&resource_key(group, plural))
            .filter(|r| r.versions.iter().any(|v| v == version))
            .cloned()
    }

    /// Every resource (discovery).
    pub fn resources(&self) -> Vec<Arc<ResourceInfo>> {
        self.lock().resources.values().cloned().collect()
    }

    /// Subscribes to events, replaying those after `rv` (None: from now):
    /// the replayed events, the live receiver and the current version.
    pub fn subscribe(
        &self,
        res: &ResourceInfo,
        from: Option<u64>,
    ) -> Result<Subscription, ApiError> {
        let st = self.lock();
        let key = resource_key(&res.group, &res.plural);
        let rx = self.events.subscribe();
        let mut replay = Vec::new();
        if let Some(from) = from {
            if from < st.compacted {
                return Err(ApiError::gone(format!(
                    "too old resource version: {from} ({})",
                    st.compacted
                )));
            }
            replay = st
                .history
                .iter()
                .filter(|e| e.rv > from && e.resource == key)
                .cloned()
                .collect();
        }
        Ok((replay, rx, st.rv))
    }

    pub fn get(&self, res: &ResourceInfo, ns: &str, name: &str) -> Result<Value, ApiError> {
        let st = self.lock();
        st.existing(res, ns, name)
    }

    /// Lists objects (all namespaces when `ns` is None). Returns the items,
    /// the list's resourceVersion and the continue token (see
    /// [`Store::list_page`]).
    pub fn list(
        &self,
        res: &ResourceInfo,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<(Vec<Value>, u64, Option<String>), ApiError> {
        let page = self.list_page(res, ns, opts)?;
        Ok((page.items, page.resource_version, page.next))
    }

    /// One page of a list. Every page of a paged list is served as of the
    /// first page's version (rolled back through the event history), as
    /// etcd serves them, and so is a list with `resourceVersionMatch=Exact`;
    /// a version older than the history is 410 Expired.
    pub fn list_page(
        &self,
        res: &ResourceInfo,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ListPage, ApiError> {
        let st = self.lock();
        let key = resource_key(&res.group, &res.plural);
        let (start, list_rv) = st.list_start(opts)?;
        let empty = BTreeMap::new();
        let objects = st.objects.get(&key).unwrap_or(&empty);
        let lower = match &start {
            Some(start) => std::ops::Bound::Excluded(start.clone()),
            None => std::ops::Bound::Unbounded,
        };
        let in_scope =
            |obj: &Value| ns.is_none_or(|n| Some(n) == obj["metadata"]["namespace"].as_str());
        let mut items: Vec<Value> = Vec::new();
        let mut next = None;
        let mut remaining = None;
        let mut objects = st.as_of(&key, objects, list_rv, lower);
        while let Some(obj) = objects.next() {
            if !in_scope(&obj) || !opts.labels.matches(&obj) || !opts.fields.matches(&obj) {
                continue;
            }
            if opts.limit.is_some_and(|l| l > 0 && items.len() >= l) {
                let (lns, lname) = last_key(&items);
                next = Some(encode_continue(&lns, &lname, list_rv));
                // etcd counts what is left under the key prefix, so the
                // count is only given for a list without selectors.
                if opts.labels.is_empty() && opts.fields.is_empty() {
                    let rest = objects.filter(|o| in_scope(o)).count();
                    remaining = Some(1 + rest as u64);
                }
                break;
            }
            items.push((*obj).clone());
        }
        Ok(ListPage {
            items,
            resource_version: list_rv,
            next,
            remaining,
        })
    }

    /// Creates an object (POST).
    pub fn create(
        &self,
        res: &ResourceInfo,
        ns: &str,
        mut obj: Value,
        manager: &str,
    ) -> Result<Value, ApiError> {
        check_shape(&obj)?;
        let mut st = self.lock();
        st.prepare_create(res, ns, &mut obj)?;
        if !res.has_status() || matches!(res.plural.as_str(), "nodes" | "namespaces") {
            // Nodes and namespaces keep the status they are created with.
        } else if let Some(m) = obj.as_object_mut() {
            m.remove("status");
        }
        st.defaults_on_create(res, &mut obj);
        st.validate(res, &mut obj, None, None)?;
        let mut managers = Managers::default();
        managers.record_update(
            manager,
            &res.api_version(&res.versions[0]),
            "",
            changed_paths(None, &obj, res.crd.is_none()),
        );
        managers.write(&mut obj, &now());
        self.insert(&mut st, res, obj, None)
    }

    /// Inserts an object that passed validation (new or replacing).
    fn insert(
        &self,
        st: &mut State,
        res: &ResourceInfo,
        mut obj: Value,
        old: Option<Value>,
    ) -> Result<Value, ApiError> {
        if res.plural == "customresourcedefinitions" {
            st.register_crd(&mut obj)?;
        }
        let (ns, shared) = self.write(st, res, obj, old);
        let obj = (*shared).clone();
        if res.plural == "pods" || res.plural == "poddisruptionbudgets" {
            self.refresh_pdbs(st, &ns);
        }
        Ok(obj)
    }

    /// Stores `obj` (replacing `old`, when there was one) under the next
    /// resourceVersion, indexes it and tells the watchers; its namespace
    /// and the stored object. Without [`Self::insert`]'s hooks, so the PDB
    /// refresher writes budgets' status with it.
    fn write(
        &self,
        st: &mut State,
        res: &ResourceInfo,
        mut obj: Value,
        old: Option<Value>,
    ) -> (String, Arc<Value>) {
        st.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let key = ObjKey {
            resource: resource_key(&res.group, &res.plural),
            namespace: ns.clone(),
            name: name.clone(),
        };
        if let Some(old) = &old {
            st.unindex(old, &key);
        }
        st.index(&obj, &key);
        let shared = Arc::new(obj);
        let previous = st
            .objects
            .entry(key.resource.clone())
            .or_default()
            .insert((ns.clone(), name), shared.clone());
        let kind = if old.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        let previous = previous.or_else(|| old.map(Arc::new));
        self.emit(st, key.resource, ns.clone(), kind, shared.clone(), previous);
        (ns, shared)
    }

    fn emit(
        &self,
        st: &mut State,
        resource: String,
        namespace: String,
        kind: EventType,
        object: Arc<Value>,
        old: Option<Arc<Value>>,
    ) {
        let ev = Arc::new(StoredEvent {
            rv: st.rv,
            resource,
            namespace,
            kind,
            object,
            old,
        });
        st.history.push_back(ev.clone());
        while st.history.len() > self.history_limit {
            if let Some(e) = st.history.pop_front() {
                st.compacted = e.rv;
            }
        }
        let _ = self.events.send(ev);
    }

    /// Replaces an object (PUT), or its status (`sub == Some("status")`).
    pub fn update(
        &self,
        res: &ResourceInfo,
        ns: &str,
        name: &str,
        obj: Value,
        sub: Option<&str>,
        manager: &str,
    ) -> Result<Value, ApiError> {
        self.put(res, ns, name, obj, sub, manager)
            .map(|(object, _)| object)
    }

    /// A PUT, as Store.Update does it: replaces the object, or creates it
    /// (the `bool`) when it is missing and the kind allows create on
    /// update (leases, events, services, RBAC; never a subresource).
    pub fn put(
        &self,
        res: &ResourceInfo,
        ns: &str,
        name: &str,
        mut obj: Value,
        sub: Option<&str>,
        manager: &str,
    ) -> Result<(Value, bool), ApiError> {
        if res.namespaced
            && let Some(body_ns) = obj["metadata"]["namespace"].as_str()
            && !body_ns.is_empty()
            && body_ns != ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if let Some(body_name) = obj["metadata"]["name"].as_str()
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let mut st = self.lock();
        let Some(old) = st.get(res, ns, name).cloned() else {
            if sub.is_some() || !allows_create_on_update(res) {
                return Err(ApiError::not_found(res, name));
            }
            drop(st);
            check_shape(&obj)?;
            obj["metadata"]["name"] = json!(name);
            return self.create(res, ns, obj, manager).map(|o| (o, true));
        };
        check_uid_precondition(res, &obj, &old)?;
        let asked_version = obj["metadata"]["resourceVersion"]
            .as_str()
            .filter(|s| !s.is_empty());
        if asked_version.is_none() && !allows_unconditional_update(res) {
            return Err(ApiError::unconditional_update(res, name));
        }
        if let Some(rv) = asked_version
            && Some(rv) != old["metadata"]["resourceVersion"].as_str()
        {
            return Err(ApiError::conflict(res, name));
        }
        self.commit_update(&mut st, res, old, obj, sub, manager)
            .map(|o| (o, false))
    }

    /// Changes an object with `f` under the lock (PATCH). `f` gets the
    /// current object and returns the new one.
    pub fn modify(
        &self,
        res: &ResourceInfo,
        ns: &str,
        name: &str,
        sub: Option<&str>,
        manager: &str,
        f: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Value, ApiError> {
        let mut st = self.lock();
        let old = st.existing(res, ns, name)?;
        let new = f(&old)?;
        // The patch handler's checkName: a patch may not rename.
        let patched_name = new["metadata"]["name"].as_str().unwrap_or_default();
        if patched_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({patched_name}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(rv) = new["metadata"]["resourceVersion"]
            .as_str()
            .filter(|s| !s.is_empty())
            && Some(rv) != old["metadata"]["resourceVersion"].as_str()
        {
            return Err(ApiError::conflict(res, name));
        }
        self.commit_update(&mut st, res, old, new, sub, manager)
    }

    /// Server-side apply: `f` gets the live object (None if absent) and
    /// returns the merged one; creates when absent (the `bool`).
    pub fn apply(
        &self,
        res: &ResourceInfo,
        ns: &str,
        name: &str,
        sub: Option<&str>,
        f: impl FnOnce(Option<&Value>) -> Result<Value, ApiError>,
    ) -> Result<(Value, bool), ApiError> {
        let mut st = self.lock();
        match st.get(res, ns, name).cloned() {
            Some(old) => {
                let mut new = f(Some(&old))?;
                // No managedFields left means none, not "keep the old ones"
                // (what an update without the field means).
                if new["metadata"].is_object() && new["metadata"]["managedFields"].is_null() {
                    new["metadata"]["managedFields"] = json!([]);
                }
                self.commit_update(&mut st, res, old, new, sub, "")
                    .map(|o| (o, false))
            }
            None => {
                if sub.is_some() {
                    return Err(ApiError::not_found(res, name));
                }
                let mut obj = f(None)?;
                check_shape(&obj)?;
                if let Some(uid) = obj["metadata"]["uid"].as_str().filter(|u| !u.is_empty()) {
                    return Err(ApiError::conflict_because(
                        &res.group,
                        &res.plural,
                        name,
                        &format!(
                            "uid mismatch: the provided object specified uid {uid}, and no existing object was found"
                        ),
                    ));
                }
                obj["metadata"]["name"] = json!(name);
                let managed = obj["metadata"]["managedFields"].take();
                st.prepare_create(res, ns, &mut obj)?;
                if !managed.is_null() {
                    obj["metadata"]["managedFields"] = managed;
                }
                if res.has_status()
                    && !matches!(res.plural.as_str(), "nodes" | "namespaces")
                    && let Some(m) = obj.as_object_mut()
                {
                    m.remove("status");
                }
                st.defaults_on_create(res, &mut obj);
                st.validate(res, &mut obj, None, None)?;
                self.insert(&mut st, res, obj, None).map(|o| (o, true))
            }
        }
    }

    fn commit_update(
        &self,
        st: &mut State,
        res: &ResourceInfo,
        old: Value,
        mut new: Value,
        sub: Option<&str>,
        manager: &str,
    ) -> Result<Value, ApiError> {
        check_shape(&new)?;
        let name = old["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match sub {
            Some("status") => {
                let status = new.get("status").cloned();
                let mut merged = old.clone();
                match status {
                    Some(s) => merged["status"] = s,
                    None => {
                        if let Some(m) = merged.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                // Status writes may carry managedFields changes only.
                merged["metadata"]["managedFields"] = new["metadata"]["managedFields"].clone();
                new = merged;
            }
            Some(other) => {
                return Err(ApiError::not_found_path(format!(
                    "subresource {other} not supported"
                )));
            }
            None => {
                if res.has_status() {
                    match old.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(m) = new.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
            }
        }
        restore_server_fields(&old, &mut new);
        if new["metadata"]["managedFields"].is_null() {
            new["metadata"]["managedFields"] = old["metadata"]["managedFields"].clone();
        }
        new["apiVersion"] = old["apiVersion"].clone();
        new["kind"] = old["kind"].clone();
        // None left (or an update clearing them with `[]`): the field goes.
        if let Some(m) = new["metadata"].as_object_mut()
            && m.get("managedFields")
                .is_some_and(|v| v.is_null() || v.as_array().is_some_and(Vec::is_empty))
        {
            m.remove("managedFields");
        }
        if res.has_generation && spec_changed(&old, &new) {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(1);
            new["metadata"]["generation"] = json!(g + 1);
        }
        st.validate(res, &mut new, Some(&old), sub)?;
        if !manager.is_empty() {
            let mut managers = Managers::from_object(&new);
            let api_version = new["apiVersion"].as_str().unwrap_or_default().to_string();
            managers.record_update(
                manager,
                &api_version,
                sub.unwrap_or_default(),
                changed_paths(Some(&old), &new, res.crd.is_none()),
            );
            managers.write(&mut new, &now());
        }
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        if strip_times(&new) == strip_times(&old) {
            return Ok(old);
        }
        // A pod in its grace period stays until the kubelet lets it go.
        if new["metadata"].get("deletionTimestamp").is_some()
            && strings(&new["metadata"]["finalizers"]).is_empty()
            && new["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .is_none_or(|g| g == 0)
        {
            let ns = old["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            return Ok(self.remove(st, res, &ns, &name, new, Propagation::Background));
        }
        self.insert(st, res, new, Some(old))
    }

    /// Deletes an object: marks it if finalizers remain, removes it otherwise.
    pub fn delete(
        &self,
        res: &ResourceInfo,
        ns: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let mut st = self.lock();
        let mut obj = st.existing(res, ns, name)?;
        check_preconditions(res, name, &obj, options)?;
        if res.group.is_empty() && res.plural == "pods" {
            return Ok(self.delete_pod(&mut st, res, ns, name, obj, options.grace_period));
        }
        // The namespace REST turns a namespace Terminating on its first
        // delete; its content goes once it is removed (here, at once when
        // no finalizer holds it: `spec.finalizers` is this server's own).
        if res.group.is_empty() && res.plural == "namespaces" && obj["status"].is_object() {
            obj["status"]["phase"] = json!("Terminating");
        }
        Ok(self.delete_locked(&mut st, res, ns, name, obj, options.propagation))
    }

    /// Graceful pod deletion, as kube-apiserver does it: a pod on a node
    /// gets `deletionTimestamp` = now + its grace period (the request's,
    /// else `terminationGracePeriodSeconds`) and stays until the kubelet
    /// removes it; an unbound or finished pod, or a grace period of 0,
    /// goes at once (finalizers permitting). A later delete may only
    /// shorten the wait.
    fn delete_pod(
        &self,
        st: &mut State,
        res: &ResourceInfo,
        ns: &str,
        name: &str,
        pod: Value,
        grace_period: Option<i64>,
    ) -> Value {
        let bound = pod["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty());
        let finished = matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        );
        let grace = if bound && !finished {
            grace_period
                .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
                .unwrap_or(30)
        } else {
            0
        };
        // CheckGracefulDelete: a negative period is one second.
        let grace = if grace < 0 { 1 } else { grace };
        let marked = pod["metadata"].get("deletionTimestamp").is_some();
        let current = pod["metadata"]["deletionGracePeriodSeconds"].as_i64();
        if marked && current.is_some_and(|c| c <= grace) {
            return pod;
        }
        if grace == 0 && !marked {
            return self.delete_locked(st, res, ns, name, pod, Propagation::Background);
        }
        if grace == 0 && strings(&pod["metadata"]["finalizers"]).is_empty() {
            return self.remove(st, res, ns, name, pod, Propagation::Background);
        }
        let mut new = pod.clone();
        let at = seconds_after(chrono::Utc::now(), grace);
        new["metadata"]["deletionTimestamp"] =
            json!(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        new["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        self.insert(st, res, new, Some(pod))
            .unwrap_or_else(|e| e.status())
    }

    fn delete_locked(
        &self,
        st: &mut State,
        res: &ResourceInfo,
        ns: &str,
        name: &str,
        obj: Value,
        propagation: Propagation,
    ) -> Value {
        let uid = obj["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if propagation == Propagation::Foreground
            && obj["metadata"].get("deletionTimestamp").is_none()
            && st.dependents.get(&uid).is_some_and(|d| !d.is_empty())
        {
            return self.delete_in_foreground(st, res, obj, &uid);
        }
        if propagation == Propagation::Orphan && obj["metadata"].get("deletionTimestamp").is_none()
        {
            return self.delete_orphaning(st, res, ns, name, obj, &uid);
        }
        if !strings(&obj["metadata"]["finalizers"]).is_empty() {
            if obj["metadata"].get("deletionTimestamp").is_some() {
                return obj;
            }
            let mut new = obj.clone();
            new["metadata"]["deletionTimestamp"] = json!(now());
            new["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            return self
                .insert(st, res, new, Some(obj))
                .unwrap_or_else(|e| e.status());
        }
        self.remove(st, res, ns, name, obj, propagation)
    }

    /// Removes an object for good and collects its dependents.
    fn remove(
        &self,
        st: &mut State,
        res: &ResourceInfo,
        ns: &str,
        name: &str,
        mut obj: Value,
        propagation: Propagation,
    ) -> Value {
        let key = ObjKey {
            resource: resource_key(&res.group, &res.plural),
            namespace: ns.to_string(),
            name: name.to_string(),
        };
        if let Some(objs) = st.objects.get_mut(&key.resource) {
            objs.remove(&(ns.to_string(), name.to_string()));
        }
        st.unindex(&obj, &key);
        let stored = Arc::new(obj.clone());
        st.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        self.emit(
            st,
            key.resource.clone(),
            ns.to_string(),
            EventType::Deleted,
            Arc::new(obj.clone()),
            Some(stored),
        );
        if res.plural == "customresourcedefinitions" {
            st.unregister_crd(&obj, self);
        }
        if res.plural == "namespaces" {
            let keys: Vec<(Arc<ResourceInfo>, String)> = st
                .resources
                .values()
                .filter(|r| r.namespaced)
                .flat_map(|r| {
                    st.objects
                        .get(&resource_key(&r.group, &r.plural))
                        .into_iter()
                        .flat_map(|m| m.keys())
                        .filter(|(n, _)| n == name)
                        .map(|(_, o)| (r.clone(), o.clone()))
                        .collect::<Vec<_>>()
                })
                .collect();
            for (r, o) in keys {
                if let Some(child) = st.get(&r, name, &o).cloned() {
                    self.delete_locked(st, &r, name, &o, child, Propagation::Background);
                }
            }
        }
        if let Some(uid) = obj["metadata"]["uid"].as_str() {
            self.collect_dependents(st, uid, propagation);
        }
        self.release_foreground_owners(st, &obj);
        if res.plural == "pods" || res.plural == "poddisruptionbudgets" {
            self.refresh_pdbs(st, ns);
        }
        obj
    }

    /// `propagationPolicy=Orphan`: the owner is marked deleted with the
    /// `orphan` finalizer, as the store does, and the garbage collector's
    /// part follows at once: the dependents lose their reference to it,
    /// the finalizer goes, and with no other finalizer so does the owner.
    /// Answers with the marked owner, as the DELETE does.
    fn delete_orphaning(
        &self,
        st: &mut State,
        res: &ResourceInfo,
        ns: &str,
        name: &str,
        obj: Value,
        uid: &str,
    ) -> Value {
        let marked = marked_for_deletion(&obj, ORPHAN);
        let answer = match self.insert(st, res, marked, Some(obj)) {
            Ok(answer) => answer,
            Err(e) => return e.status(),
        };
        self.collect_dependents(st, uid, Propagation::Orphan);
        let mut released = answer.clone();
        if let Some(list) = released["metadata"]["finalizers"].as_array_mut() {
            list.retain(|f| f != ORPHAN);
        }
        if strings(&released["metadata"]["finalizers"]).is_empty() {
            if let Some(meta) = released["metadata"].as_object_mut() {
                meta.remove("finalizers");
            }
            self.remove(st, res, ns, name, released, Propagation::Orphan);
        } else {
            let _ = self.insert(st, res, released, Some(answer.clone()));
        }
        answer
    }

    /// `propagationPolicy=Foreground`: the owner is marked deleted with the
    /// `foregroundDeletion` finalizer and stays until its dependents are
    /// gone (see [`Store::release_foreground_owners`]).
    fn delete_in_foreground(
        &self,
        st: &mut State,
        res: &ResourceInfo,
        obj: Value,
        uid: &str,
    ) -> Value {
        let marked = marked_for_deletion(&obj, FOREGROUND_DELETION);
        let result = self
            .insert(st, res, marked, Some(obj))
            .unwrap_or_else(|e| e.status());
        let dependents: Vec<ObjKey> = st
            .dependents
            .get(uid)
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default();
        for dep in dependents {
            let Some(dep_res) = st.resources.get(&dep.resource).cloned() else {
                continue;
            };
            if let Some(child) = st.get(&dep_res, &dep.namespace, &dep.name).cloned() {
                self.delete_locked(
                    st,
                    &dep_res,
                    &dep.namespace,
                    &dep.name,
                    child,
                    Propagation::Foreground,
                );
            }
        }
        result
    }

    /// After a dependent is removed: an owner waiting in foreground
    /// deletion whose dependents are all gone loses its
    /// `foregroundDeletion` finalizer (and, with no other, goes itself).
    fn release_foreground_owners(&self, st: &mut State, removed: &Value) {
        let owners: Vec<String> = removed["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["uid"].as_str().map(str::to_owned))
            .collect();
        for owner_uid in owners {
            if st.dependents.get(&owner_uid).is_some_and(|d| !d.is_empty()) {
                continue;
            }
            let Some(key) = st.uids.get(&owner_uid).cloned() else {
                continue;
            };
            let Some(res) = st.resources.get(&key.resource).cloned() else {
                continue;
            };
            let Some(owner) = st.get(&res, &key.namespace, &key.name).cloned() else {
                continue;
            };
            if !strings(&owner["metadata"]["finalizers"]).contains(FOREGROUND_DELETION) {
                continue;
            }
            let mut released = owner.clone();
            if let Some(list) = released["metadata"]["finalizers"].as_array_mut() {
                list.retain(|f| f != FOREGROUND_DELETION);
            }
            if strings(&released["metadata"]["finalizers"]).is_empty() {
                self.remove(
                    st,
                    &res,
                    &key.namespace,
                    &key.name,
                    released,
                    Propagation::Background,
                );
            } else {
                let _ = self.insert(st, &res, released, Some(owner));
            }
        }
    }

    /// Background garbage collection: a dependent whose owners are all gone
    /// is deleted (orphaned instead with `propagationPolicy=Orphan`).
    fn collect_dependents(&self, st: &mut State, uid: &str, propagation: Propagation) {
        let Some(deps) = st.dependents.remove(uid) else {
            return;
        };
        for dep in deps {
            let Some(res) = st.resources.get(&dep.resource).cloned() else {
                continue;
            };
            let Some(obj) = st.get(&res, &dep.namespace, &dep.name).cloned() else {
                continue;
            };
            if propagation == Propagation::Orphan {
                let mut new = obj.clone();
                drop_owner_reference(&mut new, uid);
                let _ = self.insert(st, &res, new, Some(obj));
                continue;
            }
            let alive = obj["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["uid"].as_str())
                .any(|u| st.uids.contains_key(u));
            if !alive {
                self.delete_locked(
                    st,
                    &res,
                    &dep.namespace,
                    &dep.name,
                    obj,
                    Propagation::Background,
                );
            }
        }
    }

    /// Creates a pod binding (POST pods/NAME/binding), as BindingREST does:
    /// an unassigned, ungated pod that is not being deleted gets the node
    /// and the binding's annotations.
    pub fn bind(
        &self,
        res: &ResourceInfo,
        ns: &str,
        name: &str,
        node: &str,
        annotations: &Map<String, Value>,
    ) -> Result<(), ApiError> {
        let mut st = self.lock();
        let old = st.existing(res, ns, name)?;
        let refuse = |why: String| ApiError::conflict_because("", "pods/binding", name, &why);
        if old["metadata"].get("deletionTimestamp").is_some() {
            return Err(refuse(format!(
                "pod {name} is being deleted, cannot be assigned to a host"
            )));
        }
        if let Some(current) = old["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            return Err(refuse(format!(
                "pod {name} is already assigned to node {current:?}"
            )));
        }
        if old["spec"]["schedulingGates"]
            .as_array()
            .is_some_and(|g| !g.is_empty())
        {
            return Err(refuse(format!(
                "pod {name} has non-empty .spec.schedulingGates"
            )));
        }
        let mut new = old.clone();
        new["spec"]["nodeName"] = json!(node);
        for (key, value) in annotations {
            new["metadata"]["annotations"][key] = value.clone();
        }
        set_condition(&mut new, "PodScheduled", "True", "", "");
        self.insert(&mut st, res, new, Some(old))?;
        Ok(())
    }

    /// The Eviction API (`EvictionREST.Create`): a terminal, pending or
    /// terminating pod goes whatever the budgets say; otherwise the one
    /// PodDisruptionBudget selecting it must allow a disruption (429 if
    /// not), which is recorded in its `disruptedPods`. An unready pod is
    /// spared the check while its budget has the healthy pods it wants (or
    /// always, with `unhealthyPodEvictionPolicy: AlwaysAllow`). The pod
    /// then gets the `DisruptionTarget` condition and is deleted with the
    /// eviction's `deleteOptions`. Every step runs under the store's lock,
    /// so the resourceVersion preconditions the apiserver adds against
    /// races always hold here.
    pub fn evict(
        &self,
        pods: &ResourceInfo,
        ns: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let mut st = self.lock();
        let pod = st.existing(pods, ns, name)?;
        let ok = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
        let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
        let can_ignore_budgets = matches!(phase, "Succeeded" | "Failed" | "Pending")
            || pod["metadata"].get("deletionTimestamp").is_some();
        if !can_ignore_budgets {
            let pdbs = st.budgets_selecting(&pod, ns);
            if pdbs.len() > 1 {
                return Err(ApiError::internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ));
            }
            if let Some(pdb) = pdbs.first() {
                let status = st.pdb_status(pdb);
                let current = status["currentHealthy"].as_i64().unwrap_or(0);
                let desired = status["desiredHealthy"].as_i64().unwrap_or(0);
                let always =
                    pdb["spec"]["unhealthyPodEvictionPolicy"].as_str() == Some("AlwaysAllow");
                let spared = !is_ready(&pod) && (always || (current >= desired && desired > 0));
                if !spared {
                    check_disruption_allowed(pdb, &status)?;
                    // The budget counts the pod as disrupted until its
                    // deletion shows (the disruption controller's record).
                    st.record_disruption(pdb, name, self);
                }
            }
        }
        self.add_condition_and_delete(&mut st, pods, ns, name, pod, options)?;
        Ok(ok)
    }

    /// `addConditionAndDeletePod`: the `DisruptionTarget` condition, then
    /// the deletion with the eviction's options (preconditions checked
    /// against the pod as it was).
    fn add_condition_and_delete(
        &self,
        st: &mut State,
        pods: &ResourceInfo,
        ns: &str,
        name: &str,
        pod: Value,
        options: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        check_preconditions(pods, name, &pod, options)?;
        let mut marked = pod.clone();
        set_condition(
            &mut marked,
            "DisruptionTarget",
            "True",
            "EvictionByEvictionAPI",
            "Eviction API: evicting",
        );
        let marked = if marked == pod {
            pod
        } else {
            self.insert(st, pods, marked, Some(pod))?
        };
        Ok(self.delete_pod(st, pods, ns, name, marked, options.grace_period))
    }

    /// The disruption controller: recomputes the status of the namespace's PDBs.
    fn refresh_pdbs(&self, st: &mut State, ns: &str) {
        let Some(pdb_res) = st.budget_resource() else {
            return;
        };
        let pdbs: Vec<Value> = st.budgets_in(ns).cloned().collect();
        for pdb in pdbs {
            let mut status = st.pdb_status(&pdb);
            status["conditions"] = json!([{
                "type": "DisruptionAllowed",
                "status": if status["disruptionsAllowed"].as_i64().unwrap_or(0) > 0 { "True" } else { "False" },
                "reason": if status["disruptionsAllowed"].as_i64().unwrap_or(0) > 0 { "SufficientPods" } else { "InsufficientPods" },
                "message": "",
                "observedGeneration": pdb["metadata"]["generation"],
                "lastTransitionTime": pdb["status"]["conditions"][0]["lastTransitionTime"].as_str().map_or_else(now, str::to_string),
            }]);
            if pdb["status"] != status {
                let mut new = pdb.clone();
                new["status"] = status;
                self.write(st, &pdb_res, new, Some(pdb));
            }
        }
    }

    /// Every stored object, for saving to a file.
    pub fn snapshot(&self) -> Value {
        let st = self.lock();
        let mut crds = Vec::new();
        let mut rest = Vec::new();
        for (key, objs) in &st.objects {
            for obj in objs.values() {
                if key == "apiextensions.k8s.io/customresourcedefinitions" {
                    crds.push((**obj).clone());
                } else {
                    rest.push((**obj).clone());
                }
            }
        }
        crds.extend(rest);
        json!({"resourceVersion": st.rv, "items": crds})
    }

    /// Loads objects saved by [`snapshot`](Self::snapshot) (CRDs first).
    pub fn restore(&self, snapshot: &Value) -> Result<usize, ApiError> {
        let mut n = 0;
        for obj in snapshot["items"].as_array().into_iter().flatten() {
            let api_version = obj["apiVersion"].as_str().unwrap_or_default();
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let kind = obj["kind"].as_str().unwrap_or_default();
            let Some(res) = self.resources().into_iter().find(|r| {
                r.group == group && r.kind == kind && r.versions.iter().any(|v| v == version)
            }) else {
                continue;
            };
            let ns = obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let mut st = self.lock();
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            let old = st.get(&res, &ns, name).cloned();
            self.insert(&mut st, &res, obj.clone(), old)?;
            n += 1;
        }
        Ok(n)
    }
}

/// The namespace lifecycle admission's 403 for content created in a
/// namespace being deleted, with its NamespaceTerminating cause.
fn namespace_terminating(res: &ResourceInfo, name: &str, ns: &str) -> ApiError {
    let mut e = ApiError::forbidden(
        res,
        name,
        &format!("unable to create new content in namespace {ns} because it is being terminated"),
    );
    if let Some(details) = e.details.as_deref_mut() {
        details["causes"] = json!([{
            "reason": "NamespaceTerminating",
            "message": format!("namespace {ns} is being terminated"),
            "field": "metadata.namespace",
        }]);
    }
    e
}

/// Removes the owner reference to `owner` (the garbage collector
/// orphaning a dependent); an emptied list goes, as the Go types omit it.
fn drop_owner_reference(obj: &mut Value, owner: &str) {
    let Some(meta) = obj["metadata"].as_object_mut() else {
        return;
    };
    if let Some(refs) = meta
        .get_mut("ownerReferences")
        .and_then(Value::as_array_mut)
    {
        refs.retain(|r| r["uid"].as_str() != Some(owner));
        if refs.is_empty() {
            meta.remove("ownerReferences");
        }
    }
}

/// DeleteOptions preconditions, worded as rest.BeforeDelete words them
/// (the namespace REST checks the uid itself, in its own words).
fn check_preconditions(
    res: &ResourceInfo,
    name: &str,
    obj: &Value,
    options: &DeleteOptions,
) -> Result<(), ApiError> {
    let uid = obj["metadata"]["uid"].as_str().unwrap_or_default();
    let rv = obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    let namespaces = res.group.is_empty() && res.plural == "namespaces";
    if let Some(want) = options.uid.as_deref().filter(|u| *u != uid) {
        let why = if namespaces {
            format!("Precondition failed: UID in precondition: {want}, UID in object meta: {uid}")
        } else {
            format!(
                "the UID in the precondition ({want}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
            )
        };
        let resource = if namespaces { &res.plural } else { &res.kind };
        return Err(ApiError::conflict_because(&res.group, resource, name, &why));
    }
    if let Some(want) = options.resource_version.as_deref().filter(|v| *v != rv) {
        let why = format!(
            "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({rv}). The object might have been modified"
        );
        return Err(ApiError::conflict_because(
            &res.group, &res.kind, name, &why,
        ));
    }
    Ok(())
}

/// Whether a PUT of a missing object creates it (the registry strategy's
/// AllowCreateOnUpdate).
fn allows_create_on_update(res: &ResourceInfo) -> bool {
    res.crd.is_none()
        && matches!(
            (res.group.as_str(), res.plural.as_str()),
            ("coordination.k8s.io", "leases")
                | ("", "events")
                | ("events.k8s.io", "events")
                | ("", "services")
                | ("rbac.authorization.k8s.io", _)
        )
}

/// Whether a PUT may leave out `metadata.resourceVersion` (the strategy's
/// AllowUnconditionalUpdate): not for leases, whose holders must
/// compare-and-swap, nor for custom resources.
fn allows_unconditional_update(res: &ResourceInfo) -> bool {
    res.crd.is_none() && !(res.group == "coordination.k8s.io" && res.plural == "leases")
}

/// Whether DELETE answers with the deleted object (the registry's
/// ReturnDeletedObject) rather than a `Status` naming it, once the object
/// is gone. An object kept by finalizers or a grace period is always
/// answered with.
pub fn returns_deleted_object(res: &ResourceInfo) -> bool {
    res.crd.is_none()
        && res.group.is_empty()
        && matches!(
            res.plural.as_str(),
            "pods"
                | "namespaces"
                | "serviceaccounts"
                | "persistentvolumes"
                | "persistentvolumeclaims"
                | "services"
        )
}

/// A PUT's uid is a precondition (`DefaultUpdatedObjectInfo`): another
/// object's uid fails it as the etcd store does.
fn check_uid_precondition(res: &ResourceInfo, obj: &Value, old: &Value) -> Result<(), ApiError> {
    let asked = obj["metadata"]["uid"].as_str().unwrap_or_default();
    let stored = old["metadata"]["uid"].as_str().unwrap_or_default();
    if asked.is_empty() || asked == stored {
        return Ok(());
    }
    // The etcd key the object is stored under.
    let prefix = match (res.crd.is_some(), res.group.is_empty(), res.plural.as_str()) {
        (true, _, plural) => format!("{}/{plural}", res.group),
        (false, true, "nodes") => "minions".to_owned(),
        (false, true, "services") => "services/specs".to_owned(),
        (false, true, "replicationcontrollers") => "controllers".to_owned(),
        (false, _, plural) => plural.to_owned(),
    };
    let name = old["metadata"]["name"].as_str().unwrap_or_default();
    let key = match old["metadata"]["namespace"].as_str() {
        Some(ns) if res.namespaced => format!("/registry/{prefix}/{ns}/{name}"),
        _ => format!("/registry/{prefix}/{name}"),
    };
    Err(ApiError::conflict_because(
        &res.group,
        &res.plural,
        name,
        &format!(
            "StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {asked}, UID in object meta: {stored}"
        ),
    ))
}

/// `rest.BeforeUpdate`: the name, namespace, generation and creation time
/// stay the stored ones, and so do a uid left out and a deletion under way
/// (its grace period too, when left out). Whatever else an update does to
/// them, validation refuses.
fn restore_server_fields(old: &Value, new: &mut Value) {
    if !new["metadata"].is_object() {
        new["metadata"] = json!({});
    }
    let before = &old["metadata"];
    let Some(meta) = new["metadata"].as_object_mut() else {
        return;
    };
    let mut keep = |field: &str| match before.get(field) {
        Some(v) => meta.insert(field.to_owned(), v.clone()),
        None => meta.remove(field),
    };
    for field in ["name", "namespace", "generation", "creationTimestamp"] {
        keep(field);
    }
    let given = |meta: &Map<String, Value>, field: &str| {
        meta.get(field)
            .is_some_and(|v| !v.is_null() && v.as_str() != Some(""))
    };
    if !given(meta, "uid") {
        meta.insert("uid".into(), before["uid"].clone());
    }
    if before.get("deletionTimestamp").is_some() {
        meta.insert(
            "deletionTimestamp".into(),
            before["deletionTimestamp"].clone(),
        );
    }
    let grace = "deletionGracePeriodSeconds";
    if before.get(grace).is_some() && !given(meta, grace) {
        meta.insert(grace.into(), before[grace].clone());
    }
    // A null is no value (as Go decodes it).
    meta.retain(|_, v| !v.is_null());
}

/// Rejects bodies whose top-level shape the server indexes into (an object
/// with object `metadata`, `spec` and `status`, string maps for labels and
/// annotations), so malformed input is a 400 rather than a panic.
pub fn check_shape(obj: &Value) -> Result<(), ApiError> {
    let bad = |what: &str| {
        ApiError::bad_request(format!(
            "the body of the request is not a valid object: {what}"
        ))
    };
    let Some(m) = obj.as_object() else {
        return Err(bad("not a JSON object"));
    };
    for field in ["metadata", "spec", "status"] {
        if m.get(field).is_some_and(|v| !v.is_object() && !v.is_null()) {
            return Err(bad(&format!("{field} must be an object")));
        }
    }
    for field in ["labels", "annotations"] {
        let v = &obj["metadata"][field];
        if !v.is_null()
            && !v
                .as_object()
                .is_some_and(|m| m.values().all(Value::is_string))
        {
            return Err(bad(&format!(
                "metadata.{field} must map strings to strings"
            )));
        }
    }
    for field in ["finalizers", "ownerReferences"] {
        let v = &obj["metadata"][field];
        if !v.is_null() && !v.is_array() {
            return Err(bad(&format!("metadata.{field} must be a list")));
        }
    }
    Ok(())
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn strip_times(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(mf) = v["metadata"]["managedFields"].as_array_mut() {
        for e in mf {
            if let Some(m) = e.as_object_mut() {
                m.remove("time");
            }
        }
    }
    v
}

fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("metadata");
            m.remove("status");
        }
        v
    };
    strip(old) != strip(new)
}

pub fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Sets a status condition, keeping lastTransitionTime when the status holds.
pub fn set_condition(obj: &mut Value, kind: &str, status: &str, reason: &str, message: &str) {
    if !obj["status"].is_object() {
        obj["status"] = json!({});
    }
    if !obj["status"]["conditions"].is_array() {
        obj["status"]["conditions"] = json!([]);
    }
    let now = now();
    if let Some(conds) = obj["status"]["conditions"].as_array_mut() {
        match conds.iter_mut().find(|c| c["type"] == kind) {
            Some(c) => {
                if c["status"] != status {
                    c["lastTransitionTime"] = json!(now);
                }
                c["status"] = json!(status);
                c["reason"] = json!(reason);
                c["message"] = json!(message);
                c["lastProbeTime"] = Value::Null;
            }
            None => conds.push(json!({"type": kind, "status": status, "reason": reason, "message": message, "lastProbeTime": null, "lastTransitionTime": now})),
        }
    }
}

fn last_key(items: &[Value]) -> (String, String) {
    items.last().map_or_else(Default::default, |o| {
        (
            o["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    })
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

fn encode_continue(ns: &str, name: &str, rv: u64) -> String {
    format!("{rv}.{}.{}", hex(ns), hex(name))
}

fn decode_continue(tok: &str) -> Result<((String, String), u64), ApiError> {
    let bad = || {
        ApiError::bad_request(format!(
            "invalid continue token: continue key is not valid: {tok}"
        ))
    };
    let mut parts = tok.splitn(3, '.');
    let rv = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    let ns = parts.next().and_then(unhex).ok_or_else(bad)?;
    let name = parts.next().and_then(unhex).ok_or_else(bad)?;
    Ok(((ns, name), rv))
}

impl State {
    /// Where a list starts and the version it is served at: after a
    /// continue token's key at its version, at an `Exact` version, or at
    /// the latest (storage's ValidateListOptions and its errors).
    fn list_start(&self, opts: &ListOptions) -> Result<(Option<(String, String)>, u64), ApiError> {
        let rv = opts.resource_version.as_deref().filter(|v| !v.is_empty());
        let Some(tok) = &opts.continue_token else {
            let Some(exact) = rv.filter(|_| opts.exact) else {
                return Ok((None, self.rv));
            };
            let at: u64 = exact.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version {exact:?}"))
            })?;
            if at > self.rv {
                return Err(ApiError::too_large_resource_version(at, self.rv));
            }
            if at < self.rv && at < self.compacted {
                return Err(ApiError::gone(
                    "The resourceVersion for the provided list is too old.",
                ));
            }
            return Ok((None, at));
        };
        let (start, token_rv) = decode_continue(tok)?;
        if rv.is_some_and(|v| v != "0") {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        // Version 0: go on at the latest version (the token an expired one
        // is answered with).
        let list_rv = if token_rv == 0 { self.rv } else { token_rv };
        if list_rv > self.rv {
            return Err(ApiError::bad_request(
                "invalid continue token: continue key is not valid: a resource version from the future",
            ));
        }
        if list_rv < self.rv && list_rv < self.compacted {
            let (sns, sname) = start;
            return Err(ApiError::continue_expired(encode_continue(&sns, &sname, 0)));
        }
        Ok((Some(start), list_rv))
    }

    /// The objects of `key` after `lower`, in key order, as they were at
    /// version `at`: the live ones, read lazily, unless the history holds
    /// changes after `at` in that range; those are rolled back (the caller
    /// checked that the history reaches back to `at`).
    fn as_of<'a>(
        &self,
        key: &str,
        objects: &'a BTreeMap<(String, String), Arc<Value>>,
        at: u64,
        lower: std::ops::Bound<(String, String)>,
    ) -> Box<dyn Iterator<Item = Arc<Value>> + 'a> {
        let range = (lower, std::ops::Bound::Unbounded);
        let mut before: BTreeMap<(String, String), Option<Arc<Value>>> = BTreeMap::new();
        if at < self.rv {
            for event in self
                .history
                .iter()
                .filter(|e| e.rv > at && e.resource == key)
            {
                let name = event.object["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let id = (event.namespace.clone(), name);
                if !std::ops::RangeBounds::contains(&range, &id) {
                    continue;
                }
                // The first change after `at` tells what was there at `at`.
                before.entry(id).or_insert_with(|| match event.kind {
                    EventType::Added => None,
                    EventType::Modified | EventType::Deleted => event.old.clone(),
                });
            }
        }
        let live = objects.range(range);
        if before.is_empty() {
            return Box::new(live.map(|(_, obj)| obj.clone()));
        }
        let mut view: BTreeMap<(String, String), Arc<Value>> =
            live.map(|(id, obj)| (id.clone(), obj.clone())).collect();
        for (id, then) in before {
            match then {
                Some(obj) => view.insert(id, obj),
                None => view.remove(&id),
            };
        }
        Box::new(view.into_values())
    }

    /// The stored object, or the 404 naming it.
    fn existing(&self, res: &ResourceInfo, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.get(res, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(res, name))
    }

    fn get(&self, res: &ResourceInfo, ns: &str, name: &str) -> Option<&Value> {
        let ns = if res.namespaced { ns } else { "" };
        self.objects
            .get(&resource_key(&res.group, &res.plural))?
            .get(&(ns.to_string(), name.to_string()))
            .map(|a| &**a)
    }

    fn random(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.seed;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.seed = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn uid(&mut self) -> String {
        let a = self.random();
        let b = self.random();
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            b >> 52,
            b & 0xffff_ffff_ffff
        )
    }

    fn prepare_create(
        &mut self,
        res: &ResourceInfo,
        ns: &str,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request was not an object",
            ));
        }
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        let api_version = res.api_version(&res.versions[0]);
        if obj["apiVersion"].as_str().is_none_or(str::is_empty) {
            obj["apiVersion"] = json!(api_version);
        }
        if obj["kind"].as_str().is_none_or(str::is_empty) {
            obj["kind"] = json!(res.kind);
        }
        // Admission sees the name asked for (empty with generateName).
        let requested_name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if obj["metadata"]["name"].as_str().is_none_or(str::is_empty) {
            match obj["metadata"]["generateName"].as_str() {
                Some(prefix) if !prefix.is_empty() => {
                    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
                    // SimpleNameGenerator: 63 characters at most with the suffix.
                    let prefix = prefix.get(..58).unwrap_or(prefix).to_string();
                    loop {
                        let mut r = self.random();
                        let suffix: String = (0..5)
                            .map(|_| {
                                let c = ALPHABET[(r % ALPHABET.len() as u64) as usize] as char;
                                r /= ALPHABET.len() as u64;
                                c
                            })
                            .collect();
                        let name = format!("{prefix}{suffix}");
                        if self.get(res, ns, &name).is_none() {
                            obj["metadata"]["name"] = json!(name);
                            break;
                        }
                    }
                }
                _ => {
                    return Err(ApiError::invalid(
                        res,
                        "",
                        vec![(
                            "metadata.name".into(),
                            "Required value: name or generateName is required".into(),
                        )],
                        vec![
                            "metadata.name: Required value: name or generateName is required"
                                .into(),
                        ],
                    ));
                }
            }
        }
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if res.namespaced {
            if let Some(body_ns) = obj["metadata"]["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                && body_ns != ns
            {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            obj["metadata"]["namespace"] = json!(ns);
            let ns_res = self.resources.get("/namespaces").cloned();
            if let Some(ns_res) = ns_res {
                match self.get(&ns_res, "", ns) {
                    None => return Err(ApiError::not_found(&ns_res, ns)),
                    Some(n) if n["metadata"].get("deletionTimestamp").is_some() => {
                        return Err(namespace_terminating(res, &requested_name, ns));
                    }
                    _ => {}
                }
            }
        } else if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        if self.get(res, ns, &name).is_some() {
            return Err(ApiError::already_exists(res, &name));
        }
        let uid = self.uid();
        let meta = obj["metadata"]
            .as_object_mut()
            .expect("metadata is an object");
        meta.insert("uid".into(), json!(uid));
        meta.insert("creationTimestamp".into(), json!(now()));
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        meta.remove("resourceVersion");
        meta.remove("managedFields");
        if res.has_generation {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
        Ok(())
    }

    fn defaults_on_create(&self, res: &ResourceInfo, obj: &mut Value) {
        match (res.group.as_str(), res.plural.as_str()) {
            ("", "pods") => {
                obj["status"] = json!({"phase": "Pending", "qosClass": qos_class(obj)});
                if obj["spec"]["schedulerName"].is_null() {
                    obj["spec"]["schedulerName"] = json!("default-scheduler");
                }
                if obj["spec"]["priority"].is_null() {
                    obj["spec"]["priority"] = json!(0);
                }
                if obj["spec"]["restartPolicy"].is_null() {
                    obj["spec"]["restartPolicy"] = json!("Always");
                }
                if obj["spec"]["terminationGracePeriodSeconds"].is_null() {
                    obj["spec"]["terminationGracePeriodSeconds"] = json!(30);
                }
            }
            ("", "namespaces") => {
                obj["status"] = json!({"phase": "Active"});
                // The namespace strategy requires the `kubernetes`
                // finalizer on create (the namespace controller's; this
                // server empties a namespace itself when it goes).
                let mut finalizers: Vec<Value> = obj["spec"]["finalizers"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                if !finalizers.iter().any(|f| f == "kubernetes") {
                    finalizers.push(json!("kubernetes"));
                }
                if !obj["spec"].is_object() {
                    obj["spec"] = json!({});
                }
                obj["spec"]["finalizers"] = Value::Array(finalizers);
                obj["metadata"]["labels"][karpenter_core::labels::NAMESPACE_NAME] =
                    obj["metadata"]["name"].clone();
            }
            ("apps", "deployments") | ("apps", "replicasets") | ("apps", "statefulsets")
                if obj["spec"]["replicas"].is_null() =>
            {
                obj["spec"]["replicas"] = json!(1);
            }
            _ => {}
        }
    }

    fn validate(
        &self,
        res: &ResourceInfo,
        obj: &mut Value,
        old: Option<&Value>,
        sub: Option<&str>,
    ) -> Result<(), ApiError> {
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if res.crd.is_none() {
            super::defaults::apply(&res.group, &res.plural, obj)?;
        }
        let mut errors = crate::validation::object(res, obj, old, sub);
        errors.extend(crate::group_rules::check(res, obj, old, sub));
        if !errors.is_empty() {
            return Err(ApiError::invalid_fields(res, &name, &errors));
        }
        crate::custom::validate(res, obj, old, sub == Some("status"))?;
        if res.plural == "customresourcedefinitions"
            && let Err(e) = CrdValidator::new(obj)
        {
            return Err(ApiError::invalid(
                res,
                &name,
                vec![("spec".into(), e.to_string())],
                vec![e.to_string()],
            ));
        }
        Ok(())
    }

    fn register_crd(&mut self, obj: &mut Value) -> Result<(), ApiError> {
        let validator =
            CrdValidator::new(obj).map_err(|e| ApiError::unprocessable(e.to_string()))?;
        let names = obj["spec"]["names"].clone();
        let mut accepted = names.clone();
        if accepted["singular"].is_null() {
            accepted["singular"] = json!(validator.kind().to_lowercase());
        }
        if accepted["listKind"].is_null() {
            accepted["listKind"] = json!(format!("{}List", validator.kind()));
        }
        let stored: Vec<String> = validator
            .storage_version()
            .map(|v| v.name.clone())
            .into_iter()
            .collect();
        let t = now();
        obj["status"] = json!({
            "acceptedNames": accepted,
            "storedVersions": stored,
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": t},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": t},
            ],
        });
        let info = resources::from_crd(validator, obj.clone());
        let key = resource_key(&info.group, &info.plural);
        // A CRD that serves no version registers no resource (its objects,
        // if any, are kept but not served), as kube-apiserver does.
        if info.versions.is_empty() {
            self.resources.remove(&key);
        } else {
            self.resources.insert(key, Arc::new(info));
        }
        Ok(())
    }

    fn unregister_crd(&mut self, obj: &Value, store: &Store) {
        let group = obj["spec"]["group"].as_str().unwrap_or_default();
        let plural = obj["spec"]["names"]["plural"].as_str().unwrap_or_default();
        let key = resource_key(group, plural);
        if let Some(objs) = self.objects.remove(&key) {
            for ((ns, _), o) in objs {
                let k = ObjKey {
                    resource: key.clone(),
                    namespace: ns.clone(),
                    name: o["metadata"]["name"].as_str().unwrap_or_default().into(),
                };
                self.unindex(&o, &k);
                self.rv += 1;
                let stored = o.clone();
                let mut o = (*o).clone();
                o["metadata"]["resourceVersion"] = json!(self.rv.to_string());
                store.emit(
                    self,
                    key.clone(),
                    ns,
                    EventType::Deleted,
                    Arc::new(o),
                    Some(stored),
                );
            }
        }
        self.resources.remove(&key);
    }

    fn index(&mut self, obj: &Value, key: &ObjKey) {
        if let Some(uid) = obj["metadata"]["uid"].as_str() {
            self.uids.insert(uid.to_string(), key.clone());
        }
        for r in obj["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(owner) = r["uid"].as_str() {
                self.dependents
                    .entry(owner.to_string())
                    .or_default()
                    .insert(key.clone());
            }
        }
    }

    fn unindex(&mut self, obj: &Value, key: &ObjKey) {
        if let Some(uid) = obj["metadata"]["uid"].as_str() {
            self.uids.remove(uid);
        }
        for r in obj["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(owner) = r["uid"].as_str()
                && let Some(set) = self.dependents.get_mut(owner)
            {
                set.remove(key);
                if set.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
    }

    /// The namespace's PodDisruptionBudgets whose selector matches `pod`
    /// (`LabelSelectorAsSelector`: none for a null selector, all for an
    /// empty one).
    fn budgets_selecting(&self, pod: &Value, ns: &str) -> Vec<Value> {
        self.budgets_in(ns)
            .filter(|pdb| {
                LabelSelector::from_object(&pdb["spec"]["selector"]).is_some_and(|s| s.matches(pod))
            })
            .cloned()
            .collect()
    }

    /// The namespace's PodDisruptionBudgets.
    fn budgets_in<'a>(&'a self, ns: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects
            .get(&resource_key("policy", "poddisruptionbudgets"))
            .into_iter()
            .flat_map(|m| m.iter())
            .filter(move |((n, _), _)| n == ns)
            .map(|(_, v)| &**v)
    }

    /// The PodDisruptionBudget resource, unless it is not served.
    fn budget_resource(&self) -> Option<Arc<ResourceInfo>> {
        self.resources
            .get(&resource_key("policy", "poddisruptionbudgets"))
            .cloned()
    }

    /// A PodDisruptionBudget's status as the disruption controller computes
    /// it from the pods it selects (an empty selector selects them all).
    /// Expected pods: with an integer `minAvailable`, the pods the selector
    /// matches, terminating ones included; otherwise (a percentage, or
    /// `maxUnavailable`) the scale of their controllers (pods without one
    /// left out; a controller that cannot be found makes the budget allow
    /// nothing). Healthy: ready pods that are not being deleted and were
    /// not evicted in the last two minutes (`disruptedPods`). No pods
    /// expected, no disruption allowed.
    fn pdb_status(&self, pdb: &Value) -> Value {
        let ns = pdb["metadata"]["namespace"].as_str().unwrap_or_default();
        let selector = LabelSelector::from_object(&pdb["spec"]["selector"]);
        let pods: Vec<&Value> = self
            .objects
            .get(&resource_key("", "pods"))
            .into_iter()
            .flat_map(|m| m.iter())
            .filter(|((n, _), p)| n == ns && selector.as_ref().is_some_and(|s| s.matches(p)))
            .map(|(_, p)| &**p)
            .collect();
        let disrupted = recently_disrupted(pdb);
        let healthy = pods
            .iter()
            .filter(|p| p["metadata"].get("deletionTimestamp").is_none() && is_ready(p))
            .filter(|p| {
                !p["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| disrupted.contains_key(n))
            })
            .count() as i64;
        let min_available = &pdb["spec"]["minAvailable"];
        let by_count = min_available.is_i64() || min_available.is_u64();
        let expected = if by_count {
            Some(pods.len() as i64)
        } else {
            self.controllers_scale(ns, &pods)
        };
        let Some(expected) = expected else {
            // A pod without a controller: the budget cannot be computed.
            return json!({
                "observedGeneration": pdb["metadata"]["generation"],
                "currentHealthy": healthy,
                "desiredHealthy": 0,
                "expectedPods": 0,
                "disruptionsAllowed": 0,
                "disruptedPods": disrupted,
            });
        };
        let scaled = |v: &Value| -> Option<i64> {
            match v {
                Value::Number(n) => n.as_i64(),
                Value::String(s) => {
                    let pct: f64 = s.strip_suffix('%')?.parse().ok()?;
                    Some((pct * expected as f64 / 100.0).ceil() as i64)
                }
                _ => None,
            }
        };
        let desired = if let Some(min) = scaled(min_available) {
            min
        } else if let Some(max) = scaled(&pdb["spec"]["maxUnavailable"]) {
            (expected - max).max(0)
        } else {
            0
        };
        json!({
            "observedGeneration": pdb["metadata"]["generation"],
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "disruptionsAllowed": if expected > 0 { (healthy - desired).max(0) } else { 0 },
            "disruptedPods": disrupted,
        })
    }

    /// Writes `pod` into `pdb`'s `status.disruptedPods`, as the eviction
    /// subresource does before it deletes the pod.
    fn record_disruption(&mut self, pdb: &Value, pod: &str, store: &Store) {
        let Some(res) = self.budget_resource() else {
            return;
        };
        // The pod's deletion that follows recomputes the budget's status,
        // disruptionsAllowed included, with the pod counted as disrupted.
        let mut new = pdb.clone();
        new["status"]["disruptedPods"][pod] = json!(now());
        store.write(self, &res, new, Some(pdb.clone()));
    }

    /// The summed scale of the controllers of `pods` (each counted once):
    /// a ReplicaSet's (its Deployment's, when it has one), a StatefulSet's
    /// or a ReplicationController's `spec.replicas`. Pods without a
    /// controller are left out (the controller only warns of them); `None`
    /// when a pod's controller is not one the disruption controller knows.
    fn controllers_scale(&self, ns: &str, pods: &[&Value]) -> Option<i64> {
        let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
        let mut total = 0i64;
        for pod in pods {
            let Some(owner) = controller_of(pod) else {
                continue;
            };
            let (group, plural) = match owner.0.as_str() {
                "ReplicaSet" => ("apps", "replicasets"),
                "StatefulSet" => ("apps", "statefulsets"),
                "ReplicationController" => ("", "replicationcontrollers"),
                _ => return None,
            };
            let object = self
                .objects
                .get(&resource_key(group, plural))?
                .get(&(ns.to_owned(), owner.1.clone()))?;
            // A ReplicaSet of a Deployment counts as the Deployment.
            let (key, scaled) = match controller_of(object) {
                Some((kind, name)) if owner.0 == "ReplicaSet" && kind == "Deployment" => {
                    let deployment = self
                        .objects
                        .get(&resource_key("apps", "deployments"))?
                        .get(&(ns.to_owned(), name.clone()))?;
                    (("Deployment".to_owned(), name), deployment.clone())
                }
                _ => (owner, object.clone()),
            };
            if seen.insert(key) {
                total = total.saturating_add(scaled["spec"]["replicas"].as_i64().unwrap_or(1));
            }
        }
        Some(total)
    }
}

/// The eviction's `checkAndDecrement` of a budget's (computed) status: a
/// negative allowance is forbidden, none left is 429 with the budget as
/// the cause.
fn check_disruption_allowed(pdb: &Value, status: &Value) -> Result<(), ApiError> {
    let name = pdb["metadata"]["name"].as_str().unwrap_or_default();
    let allowed = status["disruptionsAllowed"].as_i64().unwrap_or(0);
    if allowed < 0 {
        return Err(ApiError::new(
            403,
            "Forbidden",
            format!(
                "poddisruptionbudget.policy \"{name}\" is forbidden: pdb disruptions allowed is negative"
            ),
        ));
    }
    if allowed > 0 {
        return Ok(());
    }
    let mut e = ApiError::new(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
    );
    e.details = Some(Box::new(json!({"causes": [{
        "reason": "DisruptionBudget",
        "message": format!(
            "The disruption budget {name} needs {} healthy pods and has {} currently",
            status["desiredHealthy"].as_i64().unwrap_or(0),
            status["currentHealthy"].as_i64().unwrap_or(0)
        ),
    }]})));
    Err(e)
}

/// The kind and name of an object's controller (its owner reference with
/// `controller: true`).
fn controller_of(object: &Value) -> Option<(String, String)> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or_default().to_owned(),
                r["name"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

/// How long an evicted pod is kept out of a budget's healthy count while
/// its deletion goes on (the disruption controller's DeletionTimeout).
const DISRUPTION_TIMEOUT: chrono::TimeDelta = chrono::TimeDelta::minutes(2);

/// `status.disruptedPods` of a budget, less the entries older than
/// [`DISRUPTION_TIMEOUT`].
fn recently_disrupted(pdb: &Value) -> serde_json::Map<String, Value> {
    let now = chrono::Utc::now();
    pdb["status"]["disruptedPods"]
        .as_object()
        .map(|pods| {
            pods.iter()
                .filter(|(_, at)| {
                    at.as_str()
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                        .is_some_and(|t| now.signed_duration_since(t) < DISRUPTION_TIMEOUT)
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        let req = &c["resources"]["requests"];
        let lim = &c["resources"]["limits"];
        if req.as_object().is_some_and(|m| !m.is_empty())
            || lim.as_object().is_some_and(|m| !m.is_empty())
        {
            any = true;
        }
        for r in ["cpu", "memory"] {
            let l = &lim[r];
            let q = if req[r].is_null() { l } else { &req[r] };
            if l.is_null() || q != l {
                guaranteed = false;
            }
        }
    }
    if guaranteed {
        "Guaranteed"
    } else if any {
        "Burstable"
    } else {
        "BestEffort"
    }
}

/// Unused-variable guard for maps built on the fly.
#[allow(dead_code)]
fn empty() -> Map<String, Value> {
    Map::new()
}

/// The object marked deleted now, held by the garbage collector's
/// `finalizer` (added once) until its dependents are dealt with.
fn marked_for_deletion(obj: &Value, finalizer: &str) -> Value {
    let mut marked = obj.clone();
    marked["metadata"]["deletionTimestamp"] = json!(now());
    marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    let mut finalizers: Vec<Value> = marked["metadata"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !finalizers.iter().any(|f| f == finalizer) {
        finalizers.push(json!(finalizer));
    }
    marked["metadata"]["finalizers"] = Value::Array(finalizers);
    marked
}

/// `at` plus `seconds`, kept within what every client parses (years 1 to
/// 9999; Rust's time crates stop a day short of its end): a grace period or
/// toleration taken from a request may be any int64, and chrono panics
/// past its own range.
pub(crate) fn seconds_after(
    at: chrono::DateTime<chrono::Utc>,
    seconds: i64,
) -> chrono::DateTime<chrono::Utc> {
    let bound = |year, month, day, h, m, s| {
        chrono::NaiveDate::from_ymd_opt(year, month, day)
            .and_then(|d| d.and_hms_opt(h, m, s))
            .map(|t| t.and_utc())
    };
    let (Some(earliest), Some(latest)) = (bound(1, 1, 1, 0, 0, 0), bound(9999, 12, 30, 0, 0, 0))
    else {
        return at;
    };
    chrono::TimeDelta::try_seconds(seconds)
        .and_then(|delta| at.checked_add_signed(delta))
        .unwrap_or(if seconds < 0 { earliest } else { latest })
        .clamp(earliest, latest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_bodies_are_bad_requests_not_panics() {
        let store = Store::new(100);
        let deploys = store
            .resource("apps", "v1", "deployments")
            .expect("builtin");
        for body in [
            json!("just a string"),
            json!({"metadata": "x"}),
            json!({"metadata": {"name": "d", "labels": {"a": 1}}}),
            json!({"metadata": {"name": "d"}, "spec": "x"}),
        ] {
            let err = store
                .create(&deploys, "default", body.clone(), "t")
                .unwrap_err();
            assert_eq!(err.code, 400, "{body}");
        }
        store
            .create(
                &deploys,
                "default",
                json!({"metadata": {"name": "d"}, "spec": {}}),
                "t",
            )
            .expect("valid");
        let err = store
            .modify(&deploys, "default", "d", None, "t", |_| {
                Ok(json!({"spec": [1]}))
            })
            .unwrap_err();
        assert_eq!(err.code, 400);
    }
}
