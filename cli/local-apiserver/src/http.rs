//! The REST front: routes `/api`, `/apis`, `/openapi`, `/version` and every
//! resource path to the store.
//!
//! ```text
//!   /api/v1[/namespaces/NS]/PLURAL[/NAME[/SUB]]
//!   /apis/GROUP/VERSION[/namespaces/NS]/PLURAL[/NAME[/SUB]]
//!     GET (get, list, ?watch) POST (create, binding, eviction) PUT PATCH DELETE
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tracing::Instrument;

use super::calls::{ApiCall, CallLog, verb};
use super::openapi;
use super::options;
use super::patch;
use super::resources::ResourceInfo;
use super::selectors::{FieldSelector, LabelSelector};
use super::store::{
    ApiError, DeleteOptions, EventType, ListOptions, Propagation, Store, StoredEvent,
};
use super::tables;
use super::validation::FieldError;

/// Shared by every request.
pub struct App {
    pub store: Arc<Store>,
    /// How often an idle watch with `allowWatchBookmarks` gets a bookmark.
    pub bookmark_interval: Duration,
    /// The resource requests made, as RBAC sees them.
    pub calls: Arc<CallLog>,
}

pub fn router(app: Arc<App>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(app)
}

fn json_response(code: u16, body: &Value) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

fn error_response(e: &ApiError) -> Response {
    json_response(e.code, &e.status())
}

async fn handle(
    State(app): State<Arc<App>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let span = tracing::info_span!("request", %method, path = %uri.path());
    async move {
        let query: HashMap<String, String> = Query::try_from_uri(&uri)
            .map(|q: Query<HashMap<String, String>>| q.0)
            .unwrap_or_default();
        let result = route(&app, &method, uri.path(), &query, &headers, &body).await;
        let resp = match result {
            Ok(r) => r,
            Err(e) => error_response(&e),
        };
        tracing::debug!(status = resp.status().as_u16(), "done");
        resp
    }
    .instrument(span)
    .await
}

/// A parsed resource path.
struct Target {
    res: Arc<ResourceInfo>,
    version: String,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn parse_target(store: &Store, path: &str) -> Result<Option<Target>, ApiError> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Ok(None),
    };
    if rest.is_empty() {
        return Ok(None);
    }
    let lookup = |plural: &str| store.resource(group, version, plural);
    // /namespaces/NS/PLURAL...
    if rest[0] == "namespaces"
        && rest.len() >= 3
        && let Some(res) = lookup(rest[2]).filter(|r| r.namespaced)
    {
        {
            return Ok(Some(Target {
                res,
                version: version.to_string(),
                namespace: Some(rest[1].to_string()),
                name: rest.get(3).map(|s| s.to_string()),
                sub: rest.get(4).map(|s| s.to_string()),
            }));
        }
    }
    let res = lookup(rest[0]).ok_or_else(no_such_path)?;
    if rest.len() > 3 {
        return Err(no_such_path());
    }
    Ok(Some(Target {
        res,
        version: version.to_string(),
        namespace: None,
        name: rest.get(1).map(|s| s.to_string()),
        sub: rest.get(2).map(|s| s.to_string()),
    }))
}

/// `dryRun` of DeleteOptions in a body (a DELETE's, or an Eviction's).
fn dry_run_in_body(body: &[u8]) -> Option<String> {
    if body.is_empty() {
        return None;
    }
    let options = parse_body(body).ok()?;
    let values = options
        .get("dryRun")
        .or_else(|| options["deleteOptions"].get("dryRun"))?;
    values.as_array()?.first()?.as_str().map(str::to_owned)
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    if body.starts_with(super::protobuf::MAGIC) {
        return super::protobuf::decode(body);
    }
    serde_json::from_slice(body).or_else(|_| {
        let text = std::str::from_utf8(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
        serde_yaml::from_str(text).map_err(|e| {
            ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
        })
    })
}

fn manager(query: &HashMap<String, String>, headers: &HeaderMap) -> String {
    query.get("fieldManager").cloned().unwrap_or_else(|| {
        headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(|ua| ua.split('/').next().unwrap_or(ua).to_string())
            .unwrap_or_else(|| "unknown".into())
    })
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

/// Puts apiVersion/kind of the requested version on an object.
fn as_version(res: &ResourceInfo, version: &str, mut obj: Value) -> Value {
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(res.api_version(version)));
    }
    super::custom::default_on_read(res, version, &mut obj);
    obj
}

/// The 404 of a path the server has no handler for.
fn no_such_path() -> ApiError {
    ApiError::not_found_path("the server could not find the requested resource")
}

/// The 405 of a method a resource path does not take.
fn method_refused() -> ApiError {
    ApiError::method_not_allowed("the server does not allow this method on the requested resource")
}

async fn route(
    app: &Arc<App>,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    if let Some(answer) = non_resource(&app.store, path) {
        return answer;
    }
    let target = parse_target(&app.store, path)?.ok_or_else(no_such_path)?;
    resource_request(app, method, &target, query, headers, body)
}

/// The paths that are not resources: health checks, `/version`,
/// discovery and OpenAPI. None for a path that may name a resource.
fn non_resource(store: &Store, path: &str) -> Option<Result<Response, ApiError>> {
    match path.trim_end_matches('/') {
        "/healthz" | "/readyz" | "/livez" => {
            return Some(Ok((StatusCode::OK, "ok").into_response()));
        }
        "/version" => return Some(Ok(json_response(200, &version_info()))),
        "/api" => {
            return Some(Ok(json_response(
                200,
                &json!({
                    "kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]
                }),
            )));
        }
        "/apis" => return Some(Ok(json_response(200, &group_list(store)))),
        "/openapi/v3" => {
            return Some(Ok(json_response(
                200,
                &openapi::index(&store.resources(), store.current_rv()),
            )));
        }
        // Only OpenAPI v3 is served.
        "/openapi/v2" | "/swagger-2.0.0.pb-v1" => return Some(Err(no_such_path())),
        _ => {}
    }
    if let Some(gv) = path.strip_prefix("/openapi/v3/") {
        let gvs = openapi::group_versions(&store.resources());
        return Some(
            gvs.get(gv.trim_end_matches('/'))
                .ok_or_else(no_such_path)
                .map(|res| json_response(200, &openapi::document(gv, res))),
        );
    }
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segs.as_slice() {
        ["api", v] => Some(resource_list(store, "", v)),
        ["apis", g] => Some(api_group(store, g)),
        ["apis", g, v] => Some(resource_list(store, g, v)),
        _ => None,
    }
}

/// `/version`: the kube-apiserver release this server answers as.
fn version_info() -> Value {
    json!({
        "major": "1", "minor": "32", "gitVersion": "v1.32.0", "gitCommit": "local-apiserver",
        "gitTreeState": "clean", "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23.3",
        "compiler": "gc", "platform": "linux/amd64"
    })
}

/// `/apis/GROUP`: the group's entry of the group list.
fn api_group(store: &Store, group: &str) -> Result<Response, ApiError> {
    let list = group_list(store);
    let found = list["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|x| x["name"] == group)
        .cloned();
    found
        .map(|g| json_response(200, &g))
        .ok_or_else(no_such_path)
}

/// A request on a resource path: recorded for RBAC, its dry run settled,
/// then handed to the handler of its method and path.
fn resource_request(
    app: &Arc<App>,
    method: &Method,
    target: &Target,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let res = target.res.clone();
    let ns = if res.namespaced {
        target.namespace.clone().unwrap_or_default()
    } else {
        String::new()
    };
    let watching = is_watch(query);
    record_call(app, method, target, &ns, watching, headers);
    let mgr = manager(query, headers);
    // A dry run writes to a scratch copy of the store that is then dropped.
    let scratch;
    let dry_run = query
        .get("dryRun")
        .cloned()
        .or_else(|| dry_run_in_body(body));
    let store = if options::dry_run(method, dry_run.as_deref())? {
        scratch = app.store.scratch();
        &scratch
    } else {
        &app.store
    };
    let object_call = |name| ObjectCall {
        store,
        res: &res,
        version: &target.version,
        ns: &ns,
        name,
        query,
        body,
        manager: &mgr,
    };
    match (
        method.clone(),
        target.name.as_deref(),
        target.sub.as_deref(),
    ) {
        // A watch reads the real store (a GET is never a dry run).
        (Method::GET, None, _) if watching => watch(app, target, query, headers),
        (Method::GET, None, _) => list(store, target, query, headers),
        (method, Some(name), Some("scale")) if res.subresources.iter().any(|s| s == "scale") => {
            scale(&object_call(name), &method, headers)
        }
        (Method::GET, Some(name), sub) => get_object(&object_call(name), headers, sub),
        (Method::POST, None, _) => create_object(&object_call(""), target),
        (Method::POST, Some(name), Some("binding")) if res.plural == "pods" => {
            bind(store, &res, &ns, name, body)
        }
        (Method::POST, Some(name), Some("eviction")) if res.plural == "pods" => {
            let options = super::policy::eviction(&parse_body(body)?, name)?;
            let status = store.evict(&res, &ns, name, &options)?;
            Ok(json_response(201, &status))
        }
        (Method::PUT, Some(name), sub) => put_object(&object_call(name), sub),
        (Method::PATCH, Some(name), sub) => {
            check_sub(&res, sub)?;
            patch_object(&object_call(name), headers, sub)
        }
        (Method::DELETE, Some(name), None) => delete_object(&object_call(name)),
        (Method::DELETE, None, _) => delete_collection(store, target, query),
        _ => Err(method_refused()),
    }
}

fn is_watch(query: &HashMap<String, String>) -> bool {
    query.get("watch").is_some_and(|w| w == "true" || w == "1")
}

/// Logs the request as RBAC sees it (verb, resource/subresource, object).
fn record_call(
    app: &App,
    method: &Method,
    target: &Target,
    ns: &str,
    watching: bool,
    headers: &HeaderMap,
) {
    let res = &target.res;
    app.calls.record(ApiCall {
        user_agent: headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        verb: verb(method, target.name.is_some(), watching).to_string(),
        group: res.group.clone(),
        resource: match &target.sub {
            Some(sub) => format!("{}/{sub}", res.plural),
            None => res.plural.clone(),
        },
        namespace: ns.to_owned(),
        name: target.name.clone().unwrap_or_default(),
    });
}

/// A `Table` of `items` (`Accept: ...;as=Table`), with the objects when
/// `includeObject=Object`.
fn table_response(
    res: &ResourceInfo,
    version: &str,
    items: &[Value],
    rv: &str,
    cont: Option<&str>,
    query: &HashMap<String, String>,
) -> Response {
    let include_object = query.get("includeObject").is_some_and(|v| v == "Object");
    json_response(
        200,
        &tables::table(res, version, items, rv, cont, include_object),
    )
}

/// GET of one object (or its status), as JSON or as a Table.
fn get_object(
    c: &ObjectCall<'_>,
    headers: &HeaderMap,
    sub: Option<&str>,
) -> Result<Response, ApiError> {
    check_sub(c.res, sub)?;
    let obj = as_version(c.res, c.version, c.store.get(c.res, c.ns, c.name)?);
    if wants_table(headers) {
        let rv = obj["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        return Ok(table_response(c.res, c.version, &[obj], &rv, None, c.query));
    }
    Ok(json_response(200, &obj))
}

/// POST to a collection (`c.name` unused).
fn create_object(c: &ObjectCall<'_>, target: &Target) -> Result<Response, ApiError> {
    let res = c.res;
    if res.namespaced && target.namespace.is_none() {
        // The custom resource handler has no such route at all.
        if res.crd.is_some() {
            return Err(ApiError::not_found_path("404 page not found"));
        }
        return Err(method_refused());
    }
    let obj = parse_body(c.body)?;
    check_kind(res, c.version, &obj)?;
    strict_fields(res, c.version, &obj, c.query)?;
    let created = c.store.create(res, c.ns, obj, c.manager)?;
    Ok(json_response(201, &as_version(res, c.version, created)))
}

/// PUT of an object or its status: 201 when it creates the object.
fn put_object(c: &ObjectCall<'_>, sub: Option<&str>) -> Result<Response, ApiError> {
    check_sub(c.res, sub)?;
    let obj = parse_body(c.body)?;
    check_kind(c.res, c.version, &obj)?;
    strict_fields(c.res, c.version, &obj, c.query)?;
    let (updated, created) = c.store.put(c.res, c.ns, c.name, obj, sub, c.manager)?;
    let code = if created { 201 } else { 200 };
    Ok(json_response(code, &as_version(c.res, c.version, updated)))
}

/// DELETE of a collection: each selected object deleted with the default
/// options, the deleted ones listed.
fn delete_collection(
    store: &Store,
    target: &Target,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let (res, version) = (&target.res, &target.version);
    let (labels, fields) = selectors(res, query)?;
    let opts = ListOptions {
        labels,
        fields,
        ..Default::default()
    };
    let (items, _, _) = store.list(res, target.namespace.as_deref(), &opts)?;
    let mut deleted = Vec::new();
    for item in items {
        let n = item["metadata"]["name"].as_str().unwrap_or_default();
        let ins = item["metadata"]["namespace"].as_str().unwrap_or_default();
        if let Ok(d) = store.delete(res, ins, n, &DeleteOptions::default()) {
            deleted.push(as_version(res, version, d));
        }
    }
    Ok(json_response(
        200,
        &json!({"kind": format!("{}List", res.kind), "apiVersion": res.api_version(version), "metadata": {}, "items": deleted}),
    ))
}

/// One request on one object (on a collection, for a create, with the
/// name empty).
struct ObjectCall<'a> {
    store: &'a Store,
    res: &'a ResourceInfo,
    version: &'a str,
    ns: &'a str,
    name: &'a str,
    query: &'a HashMap<String, String>,
    body: &'a [u8],
    manager: &'a str,
}

/// The patch content types of a resource, in the order a 415 lists them
/// (strategic merge only for built-in kinds).
fn patch_types(res: &ResourceInfo) -> Vec<&'static str> {
    let mut types = vec![
        "application/json-patch+json",
        "application/merge-patch+json",
    ];
    if res.crd.is_none() {
        types.push("application/strategic-merge-patch+json");
    }
    types.push("application/apply-patch+yaml");
    types
}

/// PATCH, in the handler's order: the content type (415), the
/// PatchOptions (422), a body that is JSON (400), then the patch.
fn patch_object(
    c: &ObjectCall<'_>,
    headers: &HeaderMap,
    sub: Option<&str>,
) -> Result<Response, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let ct = ct.split(';').next().unwrap_or_default().trim();
    let apply = matches!(
        ct,
        "application/apply-patch+yaml" | "application/apply-patch+cbor"
    );
    let types = patch_types(c.res);
    if !apply && !types.contains(&ct) {
        return Err(ApiError::unsupported_media(format!(
            "the body of the request was in an unknown format - accepted media types include: {}",
            types.join(", ")
        )));
    }
    options::patch(c.query, apply)?;
    if apply {
        return apply_object(c, sub);
    }
    let p: Value =
        serde_json::from_slice(c.body).map_err(|_| ApiError::bad_request("invalid JSON patch"))?;
    let updated = c.store.modify(c.res, c.ns, c.name, sub, c.manager, |old| {
        let mut new = old.clone();
        match ct {
            "application/merge-patch+json" => patch::merge_patch(&mut new, &p),
            "application/json-patch+json" => patch::json_patch(&mut new, &p)?,
            _ => patch::strategic_merge(&mut new, &p)?,
        }
        Ok(new)
    })?;
    Ok(json_response(200, &as_version(c.res, c.version, updated)))
}

/// Server-side apply (PATCH `application/apply-patch+yaml`): 201 when it
/// creates the object.
fn apply_object(c: &ObjectCall<'_>, sub: Option<&str>) -> Result<Response, ApiError> {
    let manager = c.query.get("fieldManager").map_or("", String::as_str);
    let force = c.query.get("force").is_some_and(|f| f == "true");
    let p = parse_body(c.body)?;
    super::store::check_shape(&p)?;
    check_kind(c.res, c.version, &p)?;
    let keyed = c.res.crd.is_none();
    let now = super::store::now();
    let (name, ns) = (c.name, c.ns);
    let (applied, created) = c.store.apply(c.res, ns, name, sub, |live| {
        let mut applied = p.clone();
        if let Some(body_name) = applied["metadata"]["name"].as_str()
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if c.res.namespaced {
            applied["metadata"]["namespace"] = json!(ns);
        }
        let sub = sub.unwrap_or_default();
        patch::server_side_apply(live, &applied, manager, sub, force, keyed, &now)
    })?;
    let code = if created { 201 } else { 200 };
    Ok(json_response(code, &as_version(c.res, c.version, applied)))
}

/// DELETE of one object, with DeleteOptions from the body or the query.
fn delete_object(c: &ObjectCall<'_>) -> Result<Response, ApiError> {
    let opts = if c.body.is_empty() {
        json!({})
    } else {
        parse_body(c.body)?
    };
    let policy = opts["propagationPolicy"]
        .as_str()
        .or(c.query.get("propagationPolicy").map(String::as_str));
    let propagation = match policy {
        Some("Orphan") => Propagation::Orphan,
        Some("Foreground") => Propagation::Foreground,
        _ if opts["orphanDependents"] == true => Propagation::Orphan,
        _ => Propagation::Background,
    };
    let grace = opts["gracePeriodSeconds"].as_i64().or_else(|| {
        c.query
            .get("gracePeriodSeconds")
            .and_then(|g| g.parse().ok())
    });
    let options = DeleteOptions {
        uid: opts["preconditions"]["uid"].as_str().map(str::to_owned),
        resource_version: opts["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_owned),
        propagation,
        grace_period: grace,
    };
    let deleted = c.store.delete(c.res, c.ns, c.name, &options)?;
    Ok(json_response(
        200,
        &delete_answer(c.res, c.version, deleted),
    ))
}

/// What a DELETE answers: the object while finalizers keep it, or for the
/// kinds that return the deleted object; otherwise a `Status` naming the
/// object gone (Store.finalizeDelete).
fn delete_answer(res: &ResourceInfo, version: &str, deleted: Value) -> Value {
    let pending = deleted["metadata"].get("deletionTimestamp").is_some()
        && deleted["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
    if deleted["kind"] == "Status" {
        return deleted;
    }
    if pending || super::store::returns_deleted_object(res) {
        return as_version(res, version, deleted);
    }
    let mut details = json!({
        "name": deleted["metadata"]["name"],
        "kind": res.plural,
        "uid": deleted["metadata"]["uid"],
    });
    if !res.group.is_empty() {
        details["group"] = json!(res.group);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

/// POST pods/NAME/binding, checked as BindingREST.Create checks it.
fn bind(
    store: &Store,
    res: &ResourceInfo,
    ns: &str,
    name: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    let binding = parse_body(body)?;
    super::store::check_shape(&binding)?;
    if binding["metadata"]["name"].as_str().unwrap_or_default() != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Binding object",
        ));
    }
    // ValidatePodBinding. Its errors come back as a plain error, not a
    // Status, which kube-apiserver answers with a 500 of unknown reason.
    let target = &binding["target"];
    let kind = target["kind"].as_str().unwrap_or_default();
    let node = target["name"].as_str().unwrap_or_default();
    let mut problems = Vec::new();
    if !kind.is_empty() && kind != "Node" {
        problems.push(FieldError::not_supported("target.kind", kind, &["Node", "<empty>"]).text());
    }
    if node.is_empty() {
        problems.push(FieldError::required("target.name", "").text());
    }
    match problems.as_slice() {
        [] => {}
        [one] => return Err(ApiError::unknown(one.clone())),
        many => return Err(ApiError::unknown(format!("[{}]", many.join(", ")))),
    }
    let annotations = binding["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    store.bind(res, ns, name, node, &annotations)?;
    Ok(json_response(
        201,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

/// The scale subresource (`kubectl scale`): an `autoscaling/v1 Scale` view
/// of `spec.replicas`.
fn scale(c: &ObjectCall<'_>, method: &Method, headers: &HeaderMap) -> Result<Response, ApiError> {
    let (store, res, ns, name) = (c.store, c.res, c.ns, c.name);
    // A custom resource's scale reads and writes the CRD's paths.
    let custom = |o: &Value| super::custom::scale_paths_of(res, o);
    let to_scale = |o: &Value| -> Value {
        if let Some(paths) = custom(o) {
            return paths.scale(o);
        }
        let selector = LabelSelector::from_object(&o["spec"]["selector"])
            .map(|_| {
                o["spec"]["selector"]["matchLabels"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        json!({
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": o["metadata"]["name"], "namespace": o["metadata"]["namespace"], "uid": o["metadata"]["uid"],
                         "resourceVersion": o["metadata"]["resourceVersion"], "creationTimestamp": o["metadata"]["creationTimestamp"]},
            "spec": {"replicas": o["spec"]["replicas"].as_i64().unwrap_or(0)},
            "status": {"replicas": o["status"]["replicas"].as_i64().unwrap_or(0), "selector": selector},
        })
    };
    match *method {
        Method::GET => Ok(json_response(200, &to_scale(&store.get(res, ns, name)?))),
        Method::PUT | Method::PATCH => {
            let p = parse_body(c.body)?;
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let is_put = *method == Method::PUT;
            let updated = store.modify(res, ns, name, None, c.manager, |old| {
                let mut sc = to_scale(old);
                if is_put {
                    sc = p.clone();
                } else if ct.starts_with("application/json-patch+json") {
                    patch::json_patch(&mut sc, &p)?;
                } else {
                    patch::merge_patch(&mut sc, &p);
                }
                if let Some(rv) = sc["metadata"]["resourceVersion"].as_str()
                    && Some(rv) != old["metadata"]["resourceVersion"].as_str()
                {
                    return Err(ApiError::conflict(res, name));
                }
                let replicas = sc["spec"]["replicas"]
                    .as_i64()
                    .ok_or_else(|| ApiError::unprocessable("spec.replicas: Required value"))?;
                let mut new = old.clone();
                match custom(old) {
                    Some(paths) => paths.set_replicas(&mut new, replicas),
                    None => new["spec"]["replicas"] = json!(replicas),
                }
                Ok(new)
            })?;
            Ok(json_response(200, &to_scale(&updated)))
        }
        _ => Err(method_refused()),
    }
}

/// `fieldValidation=Strict` (kubectl's default): unknown fields of a
/// custom resource are an error instead of being pruned.
fn strict_fields(
    res: &ResourceInfo,
    version: &str,
    obj: &Value,
    query: &HashMap<String, String>,
) -> Result<(), ApiError> {
    let (Some(crd), Some("Strict")) = (&res.crd, query.get("fieldValidation").map(String::as_str))
    else {
        return Ok(());
    };
    let mut copy = obj.clone();
    let unknown = crd
        .validator
        .default_object(version, &mut copy)
        .unwrap_or_default();
    let unknown: Vec<String> = unknown
        .iter()
        .filter(|p| !p.starts_with("metadata."))
        .map(|p| format!("unknown field \"{p}\""))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
        unknown.join(", "),
        kind = res.kind
    )))
}

fn check_sub(res: &ResourceInfo, sub: Option<&str>) -> Result<(), ApiError> {
    match sub {
        None => Ok(()),
        Some(s) if s == "status" && res.has_status() => Ok(()),
        Some(_) => Err(no_such_path()),
    }
}

/// What decoding a body refuses: a shape the API types cannot hold, and
/// an apiVersion (for built-in kinds, a kind) the endpoint does not take.
/// A custom resource's wrong kind is left to its validation.
fn check_kind(res: &ResourceInfo, version: &str, obj: &Value) -> Result<(), ApiError> {
    super::custom::decodable(res, version, obj)?;
    if res.crd.is_some() {
        return super::custom::check_group_version(res, version, obj);
    }
    if let Some(kind) = obj["kind"].as_str().filter(|k| !k.is_empty())
        && kind != res.kind
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({}) does not match the expected API version ({})",
            obj["apiVersion"].as_str().unwrap_or_default(),
            res.api_version(version)
        )));
    }
    Ok(())
}

fn group_list(store: &Store) -> Value {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for r in store.resources() {
        if r.group.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, vs)) => {
                for v in &r.versions {
                    if !vs.contains(v) {
                        vs.push(v.clone());
                    }
                }
            }
            None => groups.push((r.group.clone(), r.versions.clone())),
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .filter_map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .iter()
                .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                .collect();
            let preferred = versions.first()?.clone();
            Some(json!({"name": g, "versions": versions, "preferredVersion": preferred}))
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn resource_list(store: &Store, group: &str, version: &str) -> Result<Response, ApiError> {
    let resources: Vec<Value> = store
        .resources()
        .iter()
        .filter(|r| r.group == group && r.versions.iter().any(|v| v == version))
        .flat_map(|r| r.discovery())
        .collect();
    if resources.is_empty() {
        return Err(no_such_path());
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Ok(json_response(
        200,
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    ))
}

/// The `labelSelector` and `fieldSelector` of a request on a collection,
/// parsed and checked against the kind's field labels (400).
fn selectors(
    res: &ResourceInfo,
    query: &HashMap<String, String>,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?;
    let fields = FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))?
        .for_resource(res)?;
    Ok((labels, fields))
}

/// The ListOptions of a list or watch of `res`: selectors parsed and
/// checked against the kind's field labels (400), then the options
/// validated as the list handler does (422).
fn list_options(
    res: &ResourceInfo,
    query: &HashMap<String, String>,
    watch: bool,
) -> Result<ListOptions, ApiError> {
    let (labels, fields) = selectors(res, query)?;
    options::list(query, watch)?;
    Ok(ListOptions {
        labels,
        fields,
        limit: query.get("limit").and_then(|l| l.parse().ok()),
        continue_token: query.get("continue").filter(|c| !c.is_empty()).cloned(),
        resource_version: query.get("resourceVersion").cloned(),
        exact: query
            .get("resourceVersionMatch")
            .is_some_and(|m| m == "Exact"),
    })
}

fn list(
    store: &Store,
    t: &Target,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let opts = list_options(&t.res, query, false)?;
    let page = store.list_page(&t.res, t.namespace.as_deref(), &opts)?;
    let (items, rv, cont) = (page.items, page.resource_version, page.next);
    let items: Vec<Value> = items
        .into_iter()
        .map(|o| as_version(&t.res, &t.version, o))
        .collect();
    if wants_table(headers) {
        return Ok(table_response(
            &t.res,
            &t.version,
            &items,
            &rv.to_string(),
            cont.as_deref(),
            query,
        ));
    }
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    if let Some(n) = page.remaining {
        meta["remainingItemCount"] = json!(n);
    }
    let body = json!({
        "kind": format!("{}List", t.res.kind),
        "apiVersion": t.res.api_version(&t.version),
        "metadata": meta,
        "items": items,
    });
    Ok(json_response(200, &body))
}

struct WatchFilter {
    resource: String,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl WatchFilter {
    fn matches(&self, obj: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|n| obj["metadata"]["namespace"].as_str() == Some(n))
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }

    /// The event a watcher sees for a stored event, if any (selector
    /// watches see ADDED/DELETED as objects enter or leave the selection).
    fn translate(&self, ev: &StoredEvent) -> Option<(EventType, Arc<Value>)> {
        if ev.resource != self.resource {
            return None;
        }
        let now = self.matches(&ev.object);
        match ev.kind {
            EventType::Modified => {
                let before = ev.old.as_deref().is_some_and(|o| self.matches(o));
                match (before, now) {
                    (true, true) => Some((EventType::Modified, ev.object.clone())),
                    (false, true) => Some((EventType::Added, ev.object.clone())),
                    (true, false) => Some((EventType::Deleted, ev.object.clone())),
                    (false, false) => None,
                }
            }
            kind => now.then(|| (kind, ev.object.clone())),
        }
    }
}

fn watch_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

/// What a watch request asks for, beyond its ListOptions.
struct WatchParams {
    /// The version to start after (None: from now, for `0` or none).
    from: Option<u64>,
    /// Whether the current objects come first, as ADDED events.
    initial: bool,
    /// `sendInitialEvents=true`: the initial events end with a bookmark.
    send_initial: bool,
    /// `allowWatchBookmarks=true`: idle periods get bookmarks.
    bookmarks: bool,
    timeout: Duration,
}

impl WatchParams {
    fn parse(query: &HashMap<String, String>) -> Result<Self, ApiError> {
        let rv = query
            .get("resourceVersion")
            .filter(|s| !s.is_empty())
            .cloned();
        let send_initial = query.get("sendInitialEvents").is_some_and(|v| v == "true");
        let bookmarks = query
            .get("allowWatchBookmarks")
            .is_some_and(|v| v == "true");
        let timeout = query
            .get("timeoutSeconds")
            .and_then(|s| s.parse::<u64>().ok())
            .map_or(Duration::from_secs(1800), Duration::from_secs);
        let from =
            match rv.as_deref() {
                None | Some("0") => None,
                Some(s) => Some(s.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version {s:?}"))
                })?),
            };
        // Without sendInitialEvents a watch from no version (or 0) starts with
        // the current objects; with it, exactly when it asks for them.
        let initial = if query.contains_key("sendInitialEvents") {
            send_initial
        } else {
            from.is_none()
        };
        Ok(Self {
            from,
            initial,
            send_initial,
            bookmarks,
            timeout,
        })
    }
}

/// The sending end of one watch: encodes events in the requested version
/// (as one-row Tables when asked), skips what the watcher has seen, and
/// remembers the last version sent.
struct WatchSender {
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
    filter: WatchFilter,
    res: Arc<ResourceInfo>,
    version: String,
    table: bool,
    last: u64,
}

impl WatchSender {
    fn encode(&self, kind: &str, obj: &Value) -> Bytes {
        let obj = as_version(&self.res, &self.version, obj.clone());
        if self.table && kind != "BOOKMARK" && kind != "ERROR" {
            let rvs = obj["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let table = tables::table(&self.res, &self.version, &[obj], &rvs, None, false);
            return watch_line(kind, &table);
        }
        watch_line(kind, &obj)
    }

    /// Sends one event; false once the watcher has gone.
    async fn send(&self, kind: &str, obj: &Value) -> bool {
        self.tx.send(Ok(self.encode(kind, obj))).await.is_ok()
    }

    /// A BOOKMARK at `rv`; the one that ends the initial events says so.
    async fn bookmark(&self, rv: u64, initial_end: bool) -> bool {
        let mut bm = json!({
            "kind": self.res.kind, "apiVersion": self.res.api_version(&self.version),
            "metadata": {"resourceVersion": rv.to_string()},
        });
        if initial_end {
            bm["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        self.send("BOOKMARK", &bm).await
    }

    /// Forwards a stored event newer than the last one sent, as this
    /// watch's selectors see it; false once the watcher has gone.
    async fn forward(&mut self, ev: &StoredEvent) -> bool {
        if ev.rv <= self.last {
            return true;
        }
        self.last = ev.rv;
        match self.filter.translate(ev) {
            Some((kind, obj)) => self.send(kind.as_str(), &obj).await,
            None => true,
        }
    }
}

fn watch(
    app: &Arc<App>,
    t: &Target,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let opts = list_options(&t.res, query, true)?;
    let params = WatchParams::parse(query)?;
    let store = app.store.clone();
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(1024);
    let sub = store.subscribe(&t.res, params.from);
    // The current objects are listed now, while the request can still
    // fail; a subscription that failed is reported in the stream instead.
    let mut initial_objs = Vec::new();
    if sub.is_ok() && params.initial {
        let (items, _, _) =
            store.list(&t.res, t.namespace.as_deref(), &opts_without_limit(&opts))?;
        initial_objs = items;
    }
    let sender = WatchSender {
        tx,
        filter: WatchFilter {
            resource: super::store::resource_key(&t.res.group, &t.res.plural),
            namespace: t.namespace.clone(),
            labels: opts.labels.clone(),
            fields: opts.fields.clone(),
        },
        res: t.res.clone(),
        version: t.version.clone(),
        table: wants_table(headers),
        last: 0,
    };
    let interval = app.bookmark_interval;
    tokio::spawn(async move {
        let (replay, brx, start_rv) = match sub {
            Ok(s) => s,
            Err(e) => {
                let _ = sender.tx.send(Ok(watch_line("ERROR", &e.status()))).await;
                return;
            }
        };
        let mut sender = sender;
        sender.last = params.from.unwrap_or(start_rv);
        if params.initial {
            sender.last = start_rv;
            if !send_initial_events(&sender, &initial_objs, params.send_initial, start_rv).await {
                return;
            }
        }
        for ev in replay {
            if !sender.forward(&ev).await {
                return;
            }
        }
        stream_events(sender, brx, &store, &params, interval).await;
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    Ok(Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()))
}

/// The current objects as ADDED events, then (for `sendInitialEvents`)
/// the bookmark that ends them; false once the watcher has gone.
async fn send_initial_events(
    sender: &WatchSender,
    objects: &[Value],
    end_bookmark: bool,
    start_rv: u64,
) -> bool {
    for o in objects {
        if !sender.send("ADDED", o).await {
            return false;
        }
    }
    !end_bookmark || sender.bookmark(start_rv, true).await
}

/// The live part of a watch: events as they are stored, and bookmarks
/// when asked for, until the timeout, the watcher leaving, or the
/// watcher lagging behind the buffer.
async fn stream_events(
    mut sender: WatchSender,
    mut brx: broadcast::Receiver<Arc<StoredEvent>>,
    store: &Store,
    params: &WatchParams,
    interval: Duration,
) {
    let deadline = tokio::time::sleep(params.timeout);
    tokio::pin!(deadline);
    let mut tick = tokio::time::interval(interval);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = &mut deadline => break,
            _ = sender.tx.closed() => break,
            _ = tick.tick(), if params.bookmarks => {
                let current = store.current_rv();
                // With nothing queued, every version up to now has been
                // seen (those that did not match were filtered out).
                if brx.is_empty() {
                    sender.last = sender.last.max(current);
                }
                if !sender.bookmark(sender.last, false).await {
                    break;
                }
            }
            ev = brx.recv() => match ev {
                Ok(ev) => {
                    if !sender.forward(&ev).await {
                        break;
                    }
                }
                // A watcher too slow for the buffer ends; it resumes from
                // its last version out of the history.
                Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => break,
            },
        }
    }
}

fn opts_without_limit(o: &ListOptions) -> ListOptions {
    ListOptions {
        labels: o.labels.clone(),
        fields: o.fields.clone(),
        ..ListOptions::default()
    }
}
