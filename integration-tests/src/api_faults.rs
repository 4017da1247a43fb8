//! A fault proxy for the Kubernetes API, on loopback between a client (the
//! adapter) and the API server, speaking plain HTTP/1.1 on both sides.
//!
//! ```text
//!   client ──conn #n──▶ ApiFaultProxy ──its own conn──▶ API server
//!                         │ dead connection (frozen, or accepted during a partition):
//!                         │   requests never answered, response streams stop mid-way
//!                         │ faults, first match wins: answer a status (429, 5xx),
//!                         │   delay, hold until the fault is removed (a stalled watch:
//!                         │   a watch already streaming stops passing events too), reset
//!                         ├ every request recorded (method, path and query)
//!                         └ every write the API server answered recorded with
//!                           when it was sent and answered (who wrote what, when)
//! ```
//!
//! A dead connection stays dead, as a connection a network dropped without
//! a reset does: only the client's own timeouts get it out.

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

type ProxyBody = BoxBody<Bytes, std::io::Error>;

/// What a matching request gets.
#[derive(Clone, Debug)]
pub enum Action {
    /// An answer with this HTTP status and a Kubernetes `Status` body.
    Answer(u16),
    /// Forwarded after this long.
    Delay(Duration),
    /// Held until the fault is removed, then forwarded.
    Hold,
    /// The connection is closed without an answer.
    Reset,
}

/// A fault for the requests it matches.
#[derive(Clone, Debug)]
pub struct Fault {
    /// `GET`, `PUT`, ...; any when `None`.
    pub method: Option<String>,
    /// A substring of the path.
    pub path_contains: String,
    /// Only watches (`Some(true)`), only other requests (`Some(false)`).
    pub watch: Option<bool>,
    pub action: Action,
    /// How many requests it applies to; every one when `None`.
    pub times: Option<usize>,
}

impl Fault {
    /// `action` for every request whose path contains `path`.
    pub fn on(path: &str, action: Action) -> Self {
        Self {
            method: None,
            path_contains: path.to_owned(),
            watch: None,
            action,
            times: None,
        }
    }

    /// Only the watches among them.
    pub fn watches(mut self) -> Self {
        self.watch = Some(true);
        self
    }

    fn matches(&self, method: &str, path: &str, watch: bool) -> bool {
        self.method.as_deref().is_none_or(|m| m == method)
            && path.contains(&self.path_contains)
            && self.watch.is_none_or(|w| w == watch)
            && self.times.is_none_or(|t| t > 0)
    }
}

/// The handle of an added fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FaultId(u64);

#[derive(Default)]
struct Rules {
    dead: HashSet<u64>,
    open: HashSet<u64>,
    partitioned: bool,
    faults: Vec<(FaultId, Fault)>,
    requests: Vec<(String, String)>,
    writes: Vec<Write>,
}

/// A request other than a read that reached the API server and was answered.
#[derive(Clone, Debug)]
pub struct Write {
    pub method: String,
    /// Path and query.
    pub path: String,
    /// When the proxy passed it on.
    pub sent: std::time::Instant,
    /// When the API server's answer came back.
    pub answered: std::time::Instant,
    pub status: u16,
}

struct Shared {
    rules: Mutex<Rules>,
    /// Bumped on every change of the rules, to wake waiting requests.
    changed: watch::Sender<u64>,
    next_id: AtomicU64,
    upstream: SocketAddr,
}

impl Shared {
    fn with<R>(&self, f: impl FnOnce(&mut Rules) -> R) -> R {
        let out = f(&mut self.rules.lock().unwrap_or_else(|p| p.into_inner()));
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
        out
    }

    fn is_dead(&self, connection: u64) -> bool {
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        rules.dead.contains(&connection)
    }

    fn holds(&self, id: FaultId) -> bool {
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        rules.faults.iter().any(|(f, _)| *f == id)
    }

    /// Whether a `Hold` fault matches the request now.
    fn held(&self, request: &Asked) -> bool {
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        rules.faults.iter().any(|(_, f)| {
            matches!(f.action, Action::Hold)
                && f.matches(&request.method, &request.path, request.watch)
        })
    }

    /// Waits while a `Hold` fault matches the request.
    async fn wait_while_held(&self, request: &Asked) {
        let mut changed = self.changed.subscribe();
        while self.held(request) {
            if changed.changed().await.is_err() {
                return;
            }
        }
    }
}

/// What a request asked, as faults match it.
#[derive(Clone)]
struct Asked {
    method: String,
    path: String,
    watch: bool,
}

/// The proxy; it serves until dropped.
pub struct ApiFaultProxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ApiFaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ApiFaultProxy {
    /// A proxy on a free loopback port in front of `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            rules: Mutex::default(),
            changed: watch::channel(0).0,
            next_id: AtomicU64::new(0),
            upstream,
        });
        let serving = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let connection = serving.next_id.fetch_add(1, Ordering::SeqCst);
                serving.with(|r| {
                    r.open.insert(connection);
                    if r.partitioned {
                        r.dead.insert(connection);
                    }
                });
                tokio::spawn(serve(serving.clone(), stream, connection));
            }
        });
        Ok(Self { addr, shared, task })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes a kubeconfig that reaches the API server through the proxy.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, local_apiserver::kubeconfig_yaml(&self.url()))
    }

    /// Every connection open now stops answering for good; new ones work.
    pub fn freeze_established(&self) {
        self.shared.with(|r| {
            let open: Vec<u64> = r.open.iter().copied().collect();
            r.dead.extend(open);
        });
    }

    /// Every connection, open now or opened until [`Self::heal`], stops
    /// answering for good.
    pub fn partition(&self) {
        self.shared.with(|r| {
            r.partitioned = true;
            let open: Vec<u64> = r.open.iter().copied().collect();
            r.dead.extend(open);
        });
    }

    /// New connections work again (dead ones stay dead).
    pub fn heal(&self) {
        self.shared.with(|r| r.partitioned = false);
    }

    pub fn add(&self, fault: Fault) -> FaultId {
        let id = FaultId(self.shared.next_id.fetch_add(1, Ordering::SeqCst));
        self.shared.with(|r| r.faults.push((id, fault)));
        id
    }

    /// Removes a fault; requests it holds go on.
    pub fn remove(&self, id: FaultId) {
        self.shared.with(|r| r.faults.retain(|(f, _)| *f != id));
    }

    /// The requests so far: method and path with query.
    pub fn requests(&self) -> Vec<(String, String)> {
        self.shared.with(|r| r.requests.clone())
    }

    /// The writes the API server answered so far.
    pub fn writes(&self) -> Vec<Write> {
        self.shared.with(|r| r.writes.clone())
    }
}

async fn serve(shared: Arc<Shared>, stream: TcpStream, connection: u64) {
    let upstream: Arc<
        tokio::sync::Mutex<Option<hyper::client::conn::http1::SendRequest<Incoming>>>,
    > = Arc::default();
    let service = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        let upstream = upstream.clone();
        async move { handle(shared, connection, upstream, req).await }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// Waits forever: what a request on a dead connection gets (the server
/// drops this future when the client closes the connection).
async fn never<T>() -> T {
    std::future::pending().await
}

async fn handle(
    shared: Arc<Shared>,
    connection: u64,
    upstream: Arc<tokio::sync::Mutex<Option<hyper::client::conn::http1::SendRequest<Incoming>>>>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, std::io::Error> {
    if shared.is_dead(connection) {
        return never().await;
    }
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let watch = query
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1");
    let fault = shared.with(|r| {
        r.requests.push((method.clone(), format!("{path}?{query}")));
        let (id, fault) = r
            .faults
            .iter_mut()
            .find(|(_, f)| f.matches(&method, &path, watch))?;
        if let Some(times) = fault.times.as_mut() {
            *times -= 1;
        }
        Some((*id, fault.action.clone()))
    });
    match fault {
        Some((_, Action::Answer(code))) => return Ok(status(code)),
        Some((_, Action::Delay(after))) => tokio::time::sleep(after).await,
        Some((id, Action::Hold)) => {
            let mut changed = shared.changed.subscribe();
            while shared.holds(id) {
                if changed.changed().await.is_err() {
                    return never().await;
                }
            }
        }
        Some((_, Action::Reset)) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "reset by the fault proxy",
            ));
        }
        None => {}
    }
    if shared.is_dead(connection) {
        return never().await;
    }
    let sent = std::time::Instant::now();
    let response = {
        let mut sender = upstream.lock().await;
        if sender.as_ref().is_none_or(|s| s.is_closed()) {
            *sender = Some(connect(shared.upstream).await?);
        }
        let Some(sender) = sender.as_mut() else {
            return Ok(status(502));
        };
        sender.ready().await.map_err(std::io::Error::other)?;
        sender
            .send_request(req)
            .await
            .map_err(std::io::Error::other)?
    };
    if method != "GET" {
        let write = Write {
            method: method.clone(),
            path: format!("{path}?{query}"),
            sent,
            answered: std::time::Instant::now(),
            status: response.status().as_u16(),
        };
        shared.with(|r| r.writes.push(write));
    }
    let asked = Asked {
        method,
        path,
        watch,
    };
    let (parts, body) = response.into_parts();
    Ok(Response::from_parts(
        parts,
        pump(shared, connection, asked, body),
    ))
}

async fn connect(
    upstream: SocketAddr,
) -> std::io::Result<hyper::client::conn::http1::SendRequest<Incoming>> {
    let stream = TcpStream::connect(upstream).await?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(connection);
    Ok(sender)
}

/// The upstream body, frame by frame, until the connection dies (then it
/// stops without ending, as a dropped connection does); while a `Hold`
/// fault matches the request, frames wait.
fn pump(shared: Arc<Shared>, connection: u64, asked: Asked, mut body: Incoming) -> ProxyBody {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(16);
    tokio::spawn(async move {
        loop {
            let frame = tokio::select! {
                frame = body.frame() => frame,
                () = tx.closed() => return,
            };
            let Some(frame) = frame else { return };
            tokio::select! {
                () = shared.wait_while_held(&asked) => {}
                () = tx.closed() => return,
            }
            if shared.is_dead(connection) {
                tx.closed().await;
                return;
            }
            if tx.send(frame.map_err(std::io::Error::other)).await.is_err() {
                return;
            }
        }
    });
    http_body_util::BodyExt::boxed(StreamBody::new(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ))
}

/// A Kubernetes `Status` answer with `code`.
fn status(code: u16) -> Response<ProxyBody> {
    let (reason, message) = match code {
        429 => (
            "TooManyRequests",
            "the server has received too many requests",
        ),
        500 => (
            "InternalError",
            "an error on the server has prevented the request",
        ),
        503 => (
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
        504 => (
            "Timeout",
            "the server was unable to return a response in the time allotted",
        ),
        _ => ("Unknown", "injected by the fault proxy"),
    };
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    });
    let mut response = Response::builder()
        .status(code)
        .header("content-type", "application/json");
    if code == 429 {
        response = response.header("retry-after", "1");
    }
    let body = Full::new(Bytes::from(body.to_string()))
        .map_err(|never: Infallible| match never {})
        .boxed();
    // The status and headers above are all valid.
    response.body(body).unwrap_or_default()
}
