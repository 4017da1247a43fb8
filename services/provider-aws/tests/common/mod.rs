//! Test harness: a real `moto_server` on a free loopback port, a small
//! fault-injecting HTTP proxy of our own in front of it, and the provider
//! service serving gRPC on loopback, pointed at the proxy.
//!
//! ```text
//!   test ──gRPC──▶ provider-aws ──AWS wire protocol──▶ FaultProxy ──▶ moto_server
//!                                                        │ evaluates seed 003's IAM policy, conditions
//!                                                        │   included (resource tags read from moto);
//!                                                        │   a denied call is answered AccessDenied and
//!                                                        │   fails the test unless it expects it
//!                                                        │ answers what moto lacks:
//!                                                        │   pricing:GetProducts, spot price history,
//!                                                        │   /aws/service/... SSM parameters,
//!                                                        │   CreateFleet insufficient capacity,
//!                                                        │   throttling / 5xx
//! ```
//!
//! moto falls short in ways these tests work around here, not by mocking the
//! SDK: its spot prices are a dummy value, CreateFleet always takes the first
//! override and never reports insufficient capacity, the Pricing API is
//! missing, and the public EKS SSM parameters are absent (PutParameter
//! refuses `/aws/` names). The proxy supplies exactly those answers; every
//! other call reaches moto unchanged.

#![allow(dead_code)]

pub mod policy;
pub mod userdata;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use karpenter_proto::provider::v1 as pv;
use karpenter_proto::provider::v1::cloud_provider_client::CloudProviderClient;
use tokio::net::{TcpListener, TcpStream};

pub const REGION: &str = "ap-northeast-2";
pub const CLUSTER: &str = "seed-cluster";
pub const K8S: &str = "1.31";
pub const QUEUE: &str = "Karpenter-seed-cluster-SpotInterruptionQueue";
pub const NODE_ROLE: &str = "KarpenterNodeRole-seed-cluster";
pub const ZONES: [&str; 3] = ["ap-northeast-2a", "ap-northeast-2b", "ap-northeast-2c"];

/// Where a world is made: seed 003's region, or another one.
#[derive(Debug, Clone, Copy)]
pub struct Place {
    pub region: &'static str,
    pub zones: &'static [&'static str],
}

pub const SEED_PLACE: Place = Place {
    region: REGION,
    zones: &ZONES,
};

/// moto's account.
pub const ACCOUNT: &str = "123456789012";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A `moto_server` child process, killed on drop.
pub struct Moto {
    pub addr: SocketAddr,
    child: Child,
}

impl Moto {
    pub async fn start() -> Self {
        let port = free_port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server is installed (scripts/setup.sh installs moto[server])");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("an address");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok((status, _)) = http(addr, "GET", "/moto-api/", "").await
                && status < 500
            {
                break;
            }
            assert!(Instant::now() < deadline, "moto_server did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self { addr, child }
    }

    /// `POST /moto-api/reset`: forget every resource.
    pub async fn reset(&self) {
        let (status, _) = http(self.addr, "POST", "/moto-api/reset", "")
            .await
            .expect("moto reset");
        assert_eq!(status, 200);
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request over a fresh connection.
pub async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String), String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

/// A fault the proxy injects.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer `action` with a throttling error `times` times.
    Throttle { action: String, times: usize },
    /// Answer `action` with HTTP 500 `times` times.
    ServerError { action: String, times: usize },
    /// Refuse the whole `action` call with EC2's error `code` (HTTP 400)
    /// `times` times.
    Refuse {
        action: String,
        code: String,
        times: usize,
    },
    /// Answer `action` with HTTP 500 whenever its form field `field` is
    /// `value` (one instance's DescribeInstances, say), until cleared.
    ServerErrorWhen {
        action: String,
        field: String,
        value: String,
    },
    /// Answer CreateFleet of this capacity type with InsufficientInstanceCapacity for every override.
    FleetIce { capacity_type: String },
    /// The Pricing API is unreachable (HTTP 503 every time).
    PricingDown,
    /// EC2 is eventually consistent: an instance a fleet launched less than
    /// this long ago is not found by DescribeInstances yet.
    FreshInstanceNotFound(Duration),
}

#[derive(Default)]
pub struct ProxyState {
    pub actions: Vec<String>,
    pub faults: Vec<Fault>,
    /// Public SSM parameters moto lacks.
    pub ssm: HashMap<String, String>,
    /// On-demand USD/hour by instance type, for pricing:GetProducts.
    pub on_demand: BTreeMap<String, f64>,
    /// Bare-metal types: AWS prices them only as dedicated "Compute
    /// Instance (bare metal)" products.
    pub bare_metal: BTreeSet<String>,
    /// Spot USD/hour by (type, zone), for DescribeSpotPriceHistory.
    pub spot: BTreeMap<(String, String), f64>,
    /// Fleets answered with insufficient capacity (type, zone) per call.
    pub ice_answers: Vec<Vec<(String, String)>>,
    /// Every query-protocol request (EC2, IAM): its action and form fields.
    pub requests: Vec<(String, BTreeMap<String, String>)>,
    /// Instances CreateFleet launched, and when.
    pub launched: Vec<(String, Instant)>,
    /// Calls the IAM policy denied: what was asked and why it failed.
    pub denials: Vec<String>,
    /// The instance profile of each launch template the provider made.
    pub profile_of_template: BTreeMap<String, String>,
}

impl ProxyState {
    /// The form fields of every `action` request, oldest first.
    pub fn requests_of(&self, action: &str) -> Vec<BTreeMap<String, String>> {
        self.requests
            .iter()
            .filter(|(a, _)| a == action)
            .map(|(_, fields)| fields.clone())
            .collect()
    }
}

/// The fault-injecting proxy in front of moto.
#[derive(Clone)]
pub struct FaultProxy {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<ProxyState>>,
    /// Clients straight to moto, for the resource tags conditions read.
    lookup: Arc<std::sync::OnceLock<Setup>>,
}

fn form(body: &str) -> BTreeMap<String, String> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                    match u8::from_str_radix(hex, 16) {
                        Ok(b) => {
                            out.push(b);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    body.split('&')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            Some((decode(k), decode(v)))
        })
        .collect()
}

fn xml(status: u16, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "text/xml")
        .body(Full::new(Bytes::from(body)))
        .expect("a response")
}

/// Text escaped for an XML element.
fn xml_text(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An EC2 (query protocol) error answer.
fn ec2_error(status: u16, code: &str, message: &str) -> Response<Full<Bytes>> {
    xml(
        status,
        format!(
            "<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>proxy</RequestID></Response>"
        ),
    )
}

fn json(status: u16, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/x-amz-json-1.1")
        .body(Full::new(Bytes::from(body)))
        .expect("a response")
}

impl FaultProxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let state = Arc::new(Mutex::new(ProxyState::default()));
        let proxy = Self {
            addr,
            state,
            lookup: Arc::new(std::sync::OnceLock::new()),
        };
        let serving = proxy.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let proxy = serving.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let proxy = proxy.clone();
                        async move { Ok::<_, Infallible>(proxy.handle(req, upstream).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        proxy
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut ProxyState) -> R) -> R {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut state)
    }

    pub fn add_fault(&self, fault: Fault) {
        self.with(|s| s.faults.push(fault));
    }

    pub fn clear_faults(&self) {
        self.with(|s| s.faults.clear());
    }

    pub fn actions(&self) -> Vec<String> {
        self.with(|s| s.actions.clone())
    }

    pub fn count(&self, action: &str) -> usize {
        self.with(|s| s.actions.iter().filter(|a| *a == action).count())
    }

    /// Gives the proxy clients straight to moto, so it can read the tags
    /// the policy's conditions look at.
    pub fn look_up_with(&self, setup: Setup) {
        let _ = self.lookup.set(setup);
    }

    /// The denials so far, forgotten (for a test that expects some).
    pub fn take_denials(&self) -> Vec<String> {
        self.with(|s| std::mem::take(&mut s.denials))
    }

    async fn handle(&self, req: Request<Incoming>, upstream: SocketAddr) -> Response<Full<Bytes>> {
        let (parts, body) = req.into_parts();
        let body = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => return xml(400, format!("bad body: {e}")),
        };
        let text = String::from_utf8_lossy(&body).into_owned();
        // service from the SigV4 credential scope: .../<region>/<service>/aws4_request
        let service = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|auth| {
                let credential = auth.split("Credential=").nth(1)?;
                let scope: Vec<&str> = credential.split(',').next()?.split('/').collect();
                scope.get(3).map(|s| s.to_string())
            })
            .unwrap_or_default();
        let target = parts
            .headers
            .get("x-amz-target")
            .and_then(|v| v.to_str().ok())
            .map(|t| t.rsplit('.').next().unwrap_or(t).to_string());
        let fields = form(&text);
        let action = target
            .clone()
            .or_else(|| fields.get("Action").cloned())
            .or_else(|| rest_action(&service, parts.method.as_str(), parts.uri.path()))
            .unwrap_or_default();
        let qualified = format!("{service}:{action}");
        self.with(|s| {
            s.actions.push(qualified.clone());
            if matches!(service.as_str(), "ec2" | "iam") {
                s.requests.push((qualified.clone(), fields.clone()));
            }
        });
        let region = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|auth| {
                let credential = auth.split("Credential=").nth(1)?;
                credential.split('/').nth(2).map(str::to_string)
            })
            .unwrap_or_default();
        let request = Call {
            service: &service,
            action: &action,
            region: &region,
            fields: &fields,
            body: &text,
            path: parts.uri.path(),
        };
        if let Some(denied) = self.authorize(&request).await {
            return denied;
        }
        if let Some(response) = self.inject(&service, &action, &fields, &text) {
            return response;
        }
        // Forward unchanged.
        let (response, answer) = match forward(upstream, parts, body).await {
            Ok(r) => r,
            Err(e) => return xml(502, format!("proxy: {e}")),
        };
        if qualified == "ec2:CreateFleet" {
            self.remember_launched(&String::from_utf8_lossy(&answer));
        }
        if qualified == "ec2:DescribeLaunchTemplates" && response.status().is_success() {
            let current = self
                .with_current_template_tags(&String::from_utf8_lossy(&answer))
                .await;
            return xml(200, current);
        }
        response
    }

    /// moto answers DescribeLaunchTemplates with the tags each template was
    /// created with; EC2 answers with its current tags, those added by
    /// CreateTags since included. Each template's `tagSet` is rewritten
    /// from moto's own tag records.
    async fn with_current_template_tags(&self, answer: &str) -> String {
        let mut segments = answer.split("<launchTemplateId>");
        let mut out = segments.next().unwrap_or_default().to_string();
        for segment in segments {
            out.push_str("<launchTemplateId>");
            let id = segment.split('<').next().unwrap_or_default();
            let (Some(open), Some(close)) = (segment.find("<tagSet>"), segment.find("</tagSet>"))
            else {
                out.push_str(segment);
                continue;
            };
            let tags = self.template_tags_by_id(id).await;
            let items: String = tags
                .iter()
                .map(|(k, v)| {
                    let (k, v) = (xml_text(k), xml_text(v));
                    format!("<item><key>{k}</key><value>{v}</value></item>")
                })
                .collect();
            out.push_str(&segment[..open + "<tagSet>".len()]);
            out.push_str(&items);
            out.push_str(&segment[close..]);
        }
        out
    }

    /// Notes the instances a CreateFleet answer names.
    fn remember_launched(&self, body: &str) {
        let now = Instant::now();
        self.with(|s| {
            for id in body.split("<item>").filter_map(|chunk| {
                let id = chunk.strip_prefix("i-")?;
                let end = id.find(|c: char| !c.is_ascii_hexdigit())?;
                Some(format!("i-{}", &id[..end]))
            }) {
                s.launched.push((id, now));
            }
        });
    }

    fn inject(
        &self,
        service: &str,
        action: &str,
        fields: &BTreeMap<String, String>,
        body: &str,
    ) -> Option<Response<Full<Bytes>>> {
        let query_protocol = matches!(service, "ec2" | "iam");
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for fault in state.faults.iter_mut() {
            match fault {
                Fault::Throttle { action: a, times } if a == action && *times > 0 => {
                    *times -= 1;
                    return Some(if query_protocol {
                        xml(503, "<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>proxy</RequestID></Response>".into())
                    } else {
                        json(
                            400,
                            r#"{"__type":"ThrottlingException","message":"Rate exceeded"}"#.into(),
                        )
                    });
                }
                Fault::Refuse {
                    action: a,
                    code,
                    times,
                } if a == action && *times > 0 => {
                    *times -= 1;
                    return Some(ec2_error(400, code, "refused by the test proxy"));
                }
                Fault::ServerErrorWhen {
                    action: a,
                    field,
                    value,
                } if a == action && fields.get(field.as_str()) == Some(&*value) => {
                    return Some(ec2_error(500, "InternalError", "internal"));
                }
                Fault::ServerError { action: a, times } if a == action && *times > 0 => {
                    *times -= 1;
                    return Some(if query_protocol {
                        ec2_error(500, "InternalError", "internal")
                    } else {
                        json(
                            500,
                            r#"{"__type":"InternalServerException","message":"internal"}"#.into(),
                        )
                    });
                }
                _ => {}
            }
        }
        if action == "DescribeInstances"
            && let Some(fresh) = state.faults.iter().find_map(|f| match f {
                Fault::FreshInstanceNotFound(age) => Some(*age),
                _ => None,
            })
        {
            let asked: Vec<&String> = fields
                .iter()
                .filter(|(k, _)| k.starts_with("InstanceId."))
                .map(|(_, v)| v)
                .collect();
            if let Some(id) = asked.iter().find(|id| {
                state
                    .launched
                    .iter()
                    .any(|(launched, at)| launched == **id && at.elapsed() < fresh)
            }) {
                return Some(xml(
                    400,
                    format!(
                        "<Response><Errors><Error><Code>InvalidInstanceID.NotFound</Code><Message>The instance ID '{id}' does not exist</Message></Error></Errors><RequestID>proxy</RequestID></Response>"
                    ),
                ));
            }
        }
        let pricing_down = state.faults.iter().any(|f| matches!(f, Fault::PricingDown));
        match (service, action) {
            ("pricing", "GetProducts") => {
                if pricing_down {
                    return Some(json(
                        503,
                        r#"{"__type":"ServiceUnavailableException","message":"unreachable"}"#
                            .into(),
                    ));
                }
                let filter = |field: &str| {
                    serde_json::from_str::<serde_json::Value>(body)
                        .ok()
                        .and_then(|v| {
                            v.get("Filters")?.as_array()?.iter().find_map(|f| {
                                (f.get("Field")?.as_str()? == field)
                                    .then(|| f.get("Value")?.as_str().map(str::to_string))?
                            })
                        })
                        .unwrap_or_default()
                };
                let region = filter("regionCode");
                // As AWS: shared "Compute Instance" products, or dedicated
                // "Compute Instance (bare metal)" ones.
                let metal = match (filter("tenancy").as_str(), filter("productFamily").as_str()) {
                    ("Shared", "Compute Instance") => false,
                    ("Dedicated", "Compute Instance (bare metal)") => true,
                    _ => {
                        return Some(json(
                            200,
                            serde_json::json!({"FormatVersion": "aws_v1", "PriceList": []})
                                .to_string(),
                        ));
                    }
                };
                let family = filter("productFamily");
                let list: Vec<String> = state
                    .on_demand
                    .iter()
                    .filter(|(t, _)| state.bare_metal.contains(*t) == metal)
                    .map(|(t, p)| {
                        serde_json::json!({
                            "product": {"productFamily": family, "attributes": {"instanceType": t, "regionCode": region, "operatingSystem": "Linux"}},
                            "terms": {"OnDemand": {"T1": {"priceDimensions": {"D1": {"unit": "Hrs", "pricePerUnit": {"USD": format!("{p:.4}")}}}}}}
                        })
                        .to_string()
                    })
                    .collect();
                Some(json(
                    200,
                    serde_json::json!({"FormatVersion": "aws_v1", "PriceList": list}).to_string(),
                ))
            }
            ("ec2", "DescribeSpotPriceHistory") => {
                let mut items = String::new();
                for ((t, zone), price) in &state.spot {
                    items.push_str(&format!(
                        "<item><instanceType>{t}</instanceType><productDescription>Linux/UNIX</productDescription><spotPrice>{price:.4}</spotPrice><timestamp>2026-01-01T00:00:00.000Z</timestamp><availabilityZone>{zone}</availabilityZone></item>"
                    ));
                }
                Some(xml(
                    200,
                    format!(
                        "<DescribeSpotPriceHistoryResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>proxy</requestId><spotPriceHistorySet>{items}</spotPriceHistorySet></DescribeSpotPriceHistoryResponse>"
                    ),
                ))
            }
            ("ssm", "GetParameter") => {
                let name = serde_json::from_str::<serde_json::Value>(body)
                    .ok()
                    .and_then(|v| v.get("Name")?.as_str().map(str::to_string))
                    .unwrap_or_default();
                if !name.starts_with("/aws/service/") {
                    return None;
                }
                Some(match state.ssm.get(&name) {
                    Some(value) => json(200, serde_json::json!({"Parameter": {"Name": name, "Type": "String", "Value": value, "Version": 1, "DataType": "text"}}).to_string()),
                    None => json(400, serde_json::json!({"__type": "ParameterNotFound", "message": format!("Parameter {name} not found.")}).to_string()),
                })
            }
            ("ec2", "CreateFleet") => {
                let capacity_type = fields
                    .get("TargetCapacitySpecification.DefaultTargetCapacityType")
                    .cloned()
                    .unwrap_or_default();
                let ice = state.faults.iter().any(
                    |f| matches!(f, Fault::FleetIce { capacity_type: c } if *c == capacity_type),
                );
                if !ice {
                    return None;
                }
                let mut errors = String::new();
                let mut answered = Vec::new();
                for (key, instance_type) in fields {
                    let Some(prefix) = key.strip_suffix(".InstanceType") else {
                        continue;
                    };
                    if !prefix.contains(".Overrides.") {
                        continue;
                    }
                    let subnet = fields
                        .get(&format!("{prefix}.SubnetId"))
                        .cloned()
                        .unwrap_or_default();
                    let zone = fields
                        .get(&format!("{prefix}.AvailabilityZone"))
                        .cloned()
                        .unwrap_or_default();
                    answered.push((instance_type.clone(), zone.clone()));
                    errors.push_str(&format!(
                        "<item><launchTemplateAndOverrides><launchTemplateSpecification><launchTemplateName>lt</launchTemplateName><version>1</version></launchTemplateSpecification><overrides><instanceType>{instance_type}</instanceType><subnetId>{subnet}</subnetId><availabilityZone>{zone}</availabilityZone></overrides></launchTemplateAndOverrides><lifecycle>{capacity_type}</lifecycle><errorCode>InsufficientInstanceCapacity</errorCode><errorMessage>We currently do not have sufficient {instance_type} capacity in the Availability Zone you requested ({zone}).</errorMessage></item>"
                    ));
                }
                state.ice_answers.push(answered);
                Some(xml(
                    200,
                    format!(
                        "<CreateFleetResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>proxy</requestId><fleetId>fleet-proxy</fleetId><errorSet>{errors}</errorSet><fleetInstanceSet></fleetInstanceSet></CreateFleetResponse>"
                    ),
                ))
            }
            _ => None,
        }
    }
}

/// One AWS call as the proxy reads it.
struct Call<'a> {
    service: &'a str,
    action: &'a str,
    region: &'a str,
    fields: &'a BTreeMap<String, String>,
    body: &'a str,
    path: &'a str,
}

impl Call<'_> {
    /// Values of the numbered fields `<prefix>.N<suffix>`.
    fn numbered(&self, prefix: &str, suffix: &str) -> Vec<String> {
        self.fields
            .iter()
            .filter(|(k, _)| {
                k.strip_prefix(prefix)
                    .and_then(|rest| rest.strip_prefix('.'))
                    .and_then(|rest| rest.strip_suffix(suffix))
                    .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
            })
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// EC2's `Tag.N.Key/Value` (CreateTags) as a map.
    fn ec2_tags(&self) -> BTreeMap<String, String> {
        self.fields
            .iter()
            .filter_map(|(field, key)| {
                let n = field.strip_prefix("Tag.")?.strip_suffix(".Key")?;
                let value = self.fields.get(&format!("Tag.{n}.Value"));
                Some((key.clone(), value.cloned().unwrap_or_default()))
            })
            .collect()
    }

    /// IAM's `Tags.member.N.Key/Value` as a map.
    fn iam_tags(&self) -> BTreeMap<String, String> {
        self.fields
            .iter()
            .filter_map(|(field, key)| {
                let member = field.strip_prefix("Tags.member.")?.strip_suffix(".Key")?;
                let value = self.fields.get(&format!("Tags.member.{member}.Value"));
                Some((key.clone(), value.cloned().unwrap_or_default()))
            })
            .collect()
    }

    /// The tags of `TagSpecification.N` for `resource_type` (`instance`,
    /// `volume`, `fleet`, `launch-template`).
    fn tag_specification(&self, resource_type: &str) -> BTreeMap<String, String> {
        let Some(spec) = self.fields.iter().find_map(|(field, value)| {
            let n = field
                .strip_prefix("TagSpecification.")?
                .strip_suffix(".ResourceType")?;
            (value == resource_type).then(|| n.to_string())
        }) else {
            return BTreeMap::new();
        };
        let prefix = format!("TagSpecification.{spec}.Tag.");
        self.fields
            .iter()
            .filter_map(|(field, key)| {
                let member = field.strip_prefix(&prefix)?.strip_suffix(".Key")?;
                let value = self.fields.get(&format!("{prefix}{member}.Value"));
                Some((key.clone(), value.cloned().unwrap_or_default()))
            })
            .collect()
    }

    fn arn(&self, service: &str, resource: &str) -> String {
        match service {
            "iam" => format!("arn:aws:iam::{ACCOUNT}:{resource}"),
            _ => format!("arn:aws:{service}:{}:{ACCOUNT}:{resource}", self.region),
        }
    }
}

/// The answer AWS gives a denied call, in the service's protocol.
fn access_denied(service: &str, check: &policy::Check) -> Response<Full<Bytes>> {
    let message = format!(
        "User: arn:aws:sts::{ACCOUNT}:assumed-role/KarpenterControllerRole-{CLUSTER}/proxy is not authorized to perform: {} on resource: {} because no identity-based policy allows the {} action",
        check.action, check.resource, check.action
    );
    match service {
        "iam" => xml(
            403,
            format!(
                "<ErrorResponse xmlns=\"https://iam.amazonaws.com/doc/2010-05-08/\"><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>{message}</Message></Error><RequestId>proxy</RequestId></ErrorResponse>"
            ),
        ),
        "ec2" => xml(
            403,
            format!(
                "<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>You are not authorized to perform this operation. {message}</Message></Error></Errors><RequestID>proxy</RequestID></Response>"
            ),
        ),
        "eks" => Response::builder()
            .status(403)
            .header("content-type", "application/json")
            .header("x-amzn-errortype", "AccessDeniedException")
            .body(Full::new(Bytes::from(
                serde_json::json!({"message": message}).to_string(),
            )))
            .expect("a response"),
        _ => json(
            400,
            serde_json::json!({"__type": "AccessDeniedException", "message": message}).to_string(),
        ),
    }
}

impl FaultProxy {
    /// Evaluates both policies for the call (seed 003's and the scoped
    /// one: the provider must work under either); the denial to answer, if
    /// either denies.
    async fn authorize(&self, call: &Call<'_>) -> Option<Response<Full<Bytes>>> {
        let policies = [
            (
                "seed 003's policy",
                policy::Policy::seed(CLUSTER, call.region, ACCOUNT),
            ),
            (
                "the scoped policy",
                policy::Policy::scoped(CLUSTER, call.region, ACCOUNT, QUEUE),
            ),
        ];
        for check in self.checks(call).await {
            // Every call names the region it is sent to.
            let check = check.with("aws:RequestedRegion", call.region);
            for (name, policy) in &policies {
                if !policy.allows(&check) {
                    self.with(|s| {
                        s.denials.push(format!(
                            "{} on {} with {:?}: {name} denies it",
                            check.action, check.resource, check.context
                        ))
                    });
                    return Some(access_denied(call.service, &check));
                }
            }
        }
        None
    }

    /// The permissions a call needs, with the condition keys AWS supplies.
    async fn checks(&self, call: &Call<'_>) -> Vec<policy::Check> {
        use policy::Check;
        let action = format!("{}:{}", call.service, call.action);
        match (call.service, call.action) {
            ("ec2", "TerminateInstances" | "RebootInstances") => {
                let mut checks = Vec::new();
                for id in call.numbered("InstanceId", "") {
                    let tags = self.instance_tags(&id).await;
                    checks.push(
                        Check::new(&action, call.arn("ec2", &format!("instance/{id}")))
                            .tags("ec2:ResourceTag", &tags)
                            .tags("aws:ResourceTag", &tags),
                    );
                }
                checks
            }
            ("ec2", "CreateLaunchTemplate") => {
                if let (Some(name), Some(profile)) = (
                    call.fields.get("LaunchTemplateName"),
                    call.fields
                        .get("LaunchTemplateData.IamInstanceProfile.Name"),
                ) {
                    self.with(|s| s.profile_of_template.insert(name.clone(), profile.clone()));
                }
                let tags = call.tag_specification("launch-template");
                vec![
                    Check::new(&action, call.arn("ec2", "launch-template/*"))
                        .tags("aws:RequestTag", &tags),
                    Check::new("ec2:CreateTags", call.arn("ec2", "launch-template/*"))
                        .tags("aws:RequestTag", &tags)
                        .with("ec2:CreateAction", "CreateLaunchTemplate"),
                ]
            }
            ("ec2", "DeleteLaunchTemplate") => {
                let name = call
                    .fields
                    .get("LaunchTemplateName")
                    .cloned()
                    .unwrap_or_default();
                let tags = self.template_tags(&name).await;
                vec![
                    Check::new(&action, call.arn("ec2", "launch-template/*"))
                        .tags("ec2:ResourceTag", &tags)
                        .tags("aws:ResourceTag", &tags),
                ]
            }
            ("ec2", "CreateTags") => {
                // Tagging after creation: per resource, with the tags it
                // has and the tags requested.
                let requested = call.ec2_tags();
                let mut checks = Vec::new();
                for id in call.numbered("ResourceId", "") {
                    let (arn, tags) = if id.starts_with("lt-") {
                        ("launch-template", self.template_tags_by_id(&id).await)
                    } else {
                        ("instance", self.instance_tags(&id).await)
                    };
                    checks.push(
                        Check::new(&action, call.arn("ec2", &format!("{arn}/{id}")))
                            .tags("ec2:ResourceTag", &tags)
                            .tags("aws:ResourceTag", &tags)
                            .tags("aws:RequestTag", &requested),
                    );
                }
                checks
            }
            ("ec2", "CreateFleet") => {
                // A fleet is authorized per resource it makes or uses: the
                // fleet, its instances and their volumes with the tags they
                // are created with (and CreateTags for tagging on create),
                // and the launch templates, images, subnets and security
                // groups it launches from.
                let mut checks = Vec::new();
                for (kind, made_by) in [
                    ("fleet", "ec2:CreateFleet"),
                    ("instance", "ec2:RunInstances"),
                    ("volume", "ec2:RunInstances"),
                ] {
                    let tags = call.tag_specification(kind);
                    checks.push(
                        Check::new(made_by, call.arn("ec2", &format!("{kind}/*")))
                            .tags("aws:RequestTag", &tags),
                    );
                    if !tags.is_empty() {
                        checks.push(
                            Check::new("ec2:CreateTags", call.arn("ec2", &format!("{kind}/*")))
                                .tags("aws:RequestTag", &tags)
                                .with("ec2:CreateAction", "CreateFleet"),
                        );
                    }
                }
                for used in ["launch-template/*", "subnet/*", "security-group/*"] {
                    checks.push(Check::new("ec2:RunInstances", call.arn("ec2", used)));
                }
                checks.push(Check::new(
                    "ec2:RunInstances",
                    format!("arn:aws:ec2:{}::image/*", call.region),
                ));
                let templates: BTreeSet<String> = call
                    .fields
                    .iter()
                    .filter(|(k, _)| k.ends_with(".LaunchTemplateSpecification.LaunchTemplateName"))
                    .map(|(_, v)| v.clone())
                    .collect();
                for template in templates {
                    // Launching with a template's instance profile passes its role.
                    if let Some(role) = self.role_of_template(&template).await {
                        checks.push(
                            Check::new("iam:PassRole", call.arn("iam", &format!("role/{role}")))
                                .with("iam:PassedToService", "ec2.amazonaws.com"),
                        );
                    }
                }
                checks
            }
            ("iam", "CreateInstanceProfile") => {
                let name = call
                    .fields
                    .get("InstanceProfileName")
                    .cloned()
                    .unwrap_or_default();
                vec![
                    Check::new(
                        &action,
                        call.arn("iam", &format!("instance-profile/{name}")),
                    )
                    .tags("aws:RequestTag", &call.iam_tags()),
                ]
            }
            (
                "iam",
                "TagInstanceProfile"
                | "AddRoleToInstanceProfile"
                | "RemoveRoleFromInstanceProfile"
                | "DeleteInstanceProfile",
            ) => {
                let name = call
                    .fields
                    .get("InstanceProfileName")
                    .cloned()
                    .unwrap_or_default();
                let existing = self.profile_tags(&name).await;
                let mut checks = vec![
                    Check::new(
                        &action,
                        call.arn("iam", &format!("instance-profile/{name}")),
                    )
                    .tags("aws:ResourceTag", &existing)
                    .tags("iam:ResourceTag", &existing)
                    .tags("aws:RequestTag", &call.iam_tags()),
                ];
                if call.action == "AddRoleToInstanceProfile" {
                    let role = call.fields.get("RoleName").cloned().unwrap_or_default();
                    checks.push(
                        Check::new("iam:PassRole", call.arn("iam", &format!("role/{role}")))
                            .with("iam:PassedToService", "ec2.amazonaws.com"),
                    );
                }
                checks
            }
            ("iam", "GetInstanceProfile") => {
                let name = call
                    .fields
                    .get("InstanceProfileName")
                    .cloned()
                    .unwrap_or_default();
                vec![Check::new(
                    &action,
                    call.arn("iam", &format!("instance-profile/{name}")),
                )]
            }
            ("eks", "DescribeCluster") => {
                let name = call
                    .path
                    .trim_matches('/')
                    .rsplit('/')
                    .next()
                    .unwrap_or_default();
                vec![Check::new(
                    &action,
                    call.arn("eks", &format!("cluster/{name}")),
                )]
            }
            ("sqs", _) => {
                let queue = serde_json::from_str::<serde_json::Value>(call.body)
                    .ok()
                    .and_then(|v| {
                        v.get("QueueName")
                            .or_else(|| v.get("QueueUrl"))
                            .and_then(|q| q.as_str())
                            .map(|q| q.rsplit('/').next().unwrap_or(q).to_string())
                    })
                    .unwrap_or_default();
                vec![Check::new(&action, call.arn("sqs", &queue))]
            }
            ("ssm", "GetParameter") => {
                let name = serde_json::from_str::<serde_json::Value>(call.body)
                    .ok()
                    .and_then(|v| v["Name"].as_str().map(str::to_string))
                    .unwrap_or_default();
                vec![Check::new(
                    &action,
                    format!(
                        "arn:aws:ssm:{}::parameter/{}",
                        call.region,
                        name.trim_start_matches('/')
                    ),
                )]
            }
            _ => vec![Check::new(&action, "*")],
        }
    }

    async fn template_tags(&self, name: &str) -> BTreeMap<String, String> {
        let Some(setup) = self.lookup.get() else {
            return BTreeMap::new();
        };
        let Ok(out) = setup
            .ec2
            .describe_launch_templates()
            .launch_template_names(name)
            .send()
            .await
        else {
            return BTreeMap::new();
        };
        tag_map(out.launch_templates().iter().flat_map(|t| t.tags()))
    }

    /// A launch template's current tags (moto's tag records, which
    /// DescribeLaunchTemplates does not keep up with).
    async fn template_tags_by_id(&self, id: &str) -> BTreeMap<String, String> {
        let Some(setup) = self.lookup.get() else {
            return BTreeMap::new();
        };
        let Ok(out) = setup
            .ec2
            .describe_tags()
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name("resource-id")
                    .values(id)
                    .build(),
            )
            .send()
            .await
        else {
            return BTreeMap::new();
        };
        out.tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
            .collect()
    }

    async fn instance_tags(&self, id: &str) -> BTreeMap<String, String> {
        let Some(setup) = self.lookup.get() else {
            return BTreeMap::new();
        };
        let Ok(out) = setup.ec2.describe_instances().instance_ids(id).send().await else {
            return BTreeMap::new();
        };
        tag_map(
            out.reservations()
                .iter()
                .flat_map(|r| r.instances())
                .flat_map(|i| i.tags()),
        )
    }

    async fn profile_tags(&self, name: &str) -> BTreeMap<String, String> {
        let Some(setup) = self.lookup.get() else {
            return BTreeMap::new();
        };
        let Ok(out) = setup
            .iam
            .get_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
        else {
            return BTreeMap::new();
        };
        out.instance_profile()
            .map(|p| {
                p.tags()
                    .iter()
                    .map(|t| (t.key().to_string(), t.value().to_string()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The role of the instance profile a launch template names.
    async fn role_of_template(&self, template: &str) -> Option<String> {
        let setup = self.lookup.get()?;
        let profile = match self.with(|s| s.profile_of_template.get(template).cloned()) {
            Some(profile) => profile,
            None => {
                let versions = setup
                    .ec2
                    .describe_launch_template_versions()
                    .launch_template_name(template)
                    .send()
                    .await
                    .ok()?;
                let data = versions
                    .launch_template_versions()
                    .first()?
                    .launch_template_data()?;
                data.iam_instance_profile()?.name()?.to_string()
            }
        };
        let out = setup
            .iam
            .get_instance_profile()
            .instance_profile_name(&profile)
            .send()
            .await
            .ok()?;
        out.instance_profile()?
            .roles()
            .first()
            .map(|r| r.role_name().to_string())
    }
}

/// EC2 tags as a map (a tag without a key is no tag).
fn tag_map<'a>(
    tags: impl Iterator<Item = &'a aws_sdk_ec2::types::Tag>,
) -> BTreeMap<String, String> {
    tags.filter_map(|t| {
        Some((
            t.key()?.to_string(),
            t.value().unwrap_or_default().to_string(),
        ))
    })
    .collect()
}

/// The action of a REST call (EKS names it by method and path).
fn rest_action(service: &str, method: &str, path: &str) -> Option<String> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (service, method, segments.as_slice()) {
        ("eks", "GET", ["clusters", _]) => Some("DescribeCluster".into()),
        ("eks", "POST", ["clusters"]) => Some("CreateCluster".into()),
        ("eks", "GET", ["clusters"]) => Some("ListClusters".into()),
        _ => None,
    }
}

/// Sends the request on to moto; the answer, and its body.
async fn forward(
    upstream: SocketAddr,
    parts: http::request::Parts,
    body: Bytes,
) -> Result<(Response<Full<Bytes>>, Bytes), String> {
    let stream = TcpStream::connect(upstream)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let mut builder = Request::builder().method(parts.method).uri(path);
    for (name, value) in &parts.headers {
        if name == "connection" || name == "transfer-encoding" {
            continue;
        }
        builder = builder.header(name, value);
    }
    let request = builder
        .header("content-length", body.len())
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    let mut out = Response::builder().status(parts.status);
    for (name, value) in &parts.headers {
        if name == "connection" || name == "transfer-encoding" || name == "content-length" {
            continue;
        }
        out = out.header(name, value);
    }
    let response = out
        .body(Full::new(bytes.clone()))
        .map_err(|e| e.to_string())?;
    Ok((response, bytes))
}

/// SDK clients straight to moto, for setting up the world (not recorded).
#[derive(Clone)]
pub struct Setup {
    pub ec2: aws_sdk_ec2::Client,
    pub iam: aws_sdk_iam::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub eks: aws_sdk_eks::Client,
}

pub async fn setup_clients(endpoint: &str) -> Setup {
    setup_clients_in(endpoint, REGION).await
}

pub async fn setup_clients_in(endpoint: &str, region: &str) -> Setup {
    let mut settings = provider_aws::Settings::new(CLUSTER, region);
    settings.endpoint_url = Some(endpoint.to_string());
    settings.credentials = Some(("testing".into(), "testing".into()));
    let clients = provider_aws::Clients::new(&settings).await;
    Setup {
        ec2: clients.ec2,
        iam: clients.iam,
        sqs: clients.sqs,
        eks: clients.eks,
    }
}

/// What the world setup made.
#[derive(Debug, Clone, Default)]
pub struct Made {
    pub vpc: String,
    pub subnets: Vec<(String, String)>,
    pub security_group: String,
    pub ami_amd64: String,
    pub ami_arm64: String,
    pub queue_url: String,
}

/// moto + proxy + provider, with seed 003's VPC.
pub struct World {
    pub moto: Moto,
    pub proxy: FaultProxy,
    pub setup: Setup,
    pub made: Made,
    pub service: integration_tests::RunningService,
    pub client: CloudProviderClient<tonic::transport::Channel>,
}

fn tag(k: &str, v: &str) -> aws_sdk_ec2::types::Tag {
    aws_sdk_ec2::types::Tag::builder().key(k).value(v).build()
}

fn tags_spec(
    kind: aws_sdk_ec2::types::ResourceType,
    tags: &[(&str, &str)],
) -> aws_sdk_ec2::types::TagSpecification {
    aws_sdk_ec2::types::TagSpecification::builder()
        .resource_type(kind)
        .set_tags(Some(tags.iter().map(|(k, v)| tag(k, v)).collect()))
        .build()
}

/// Newest moto AMI named `pattern` for `arch`.
async fn find_ami(ec2: &aws_sdk_ec2::Client, pattern: &str, arch: &str) -> String {
    let out = ec2
        .describe_images()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("name")
                .values(pattern)
                .build(),
        )
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("architecture")
                .values(arch)
                .build(),
        )
        .send()
        .await
        .expect("describe images in moto");
    let mut images: Vec<_> = out.images().to_vec();
    images.sort_by(|a, b| b.creation_date().cmp(&a.creation_date()));
    images
        .first()
        .and_then(|i| i.image_id())
        .expect("moto ships an AL2023 AMI for this architecture")
        .to_string()
}

/// Creates the seed's VPC: 3 tagged subnets, a tagged security group, the
/// node role and the interruption queue; fills the proxy's price tables and
/// the public SSM parameters for `al2023@latest`.
pub async fn make_world(setup: &Setup, proxy: &FaultProxy) -> Made {
    make_world_in(setup, proxy, &ZONES).await
}

/// [`make_world`] with subnets in `zones` (the first three get the seed's
/// sizes, the others /24s).
pub async fn make_world_in(setup: &Setup, proxy: &FaultProxy, zones: &[&str]) -> Made {
    use aws_sdk_ec2::types::ResourceType;
    let discovery = [("karpenter.sh/discovery", CLUSTER)];
    let vpc = setup
        .ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .expect("create vpc");
    let vpc = vpc
        .vpc()
        .and_then(|v| v.vpc_id())
        .expect("vpc id")
        .to_string();
    let mut subnets = Vec::new();
    for (i, zone) in zones.iter().enumerate() {
        // Different sizes so "most free IPs" is observable.
        let cidr = match i {
            0 => "10.0.0.0/20".to_string(),
            1 => "10.0.16.0/24".to_string(),
            2 => "10.0.32.0/22".to_string(),
            n => format!("10.0.{}.0/24", 100 + n),
        };
        let out = setup
            .ec2
            .create_subnet()
            .vpc_id(&vpc)
            .cidr_block(cidr)
            .availability_zone(*zone)
            .tag_specifications(tags_spec(ResourceType::Subnet, &discovery))
            .send()
            .await
            .expect("create subnet");
        let id = out
            .subnet()
            .and_then(|s| s.subnet_id())
            .expect("subnet id")
            .to_string();
        subnets.push((id, zone.to_string()));
    }
    // An untagged subnet that must not be selected.
    setup
        .ec2
        .create_subnet()
        .vpc_id(&vpc)
        .cidr_block("10.0.64.0/24")
        .availability_zone(zones[0])
        .send()
        .await
        .expect("create untagged subnet");
    let sg = setup
        .ec2
        .create_security_group()
        .group_name("seed-cluster-nodes")
        .description("nodes")
        .vpc_id(&vpc)
        .tag_specifications(tags_spec(ResourceType::SecurityGroup, &discovery))
        .send()
        .await
        .expect("create security group");
    let security_group = sg.group_id().expect("group id").to_string();
    setup
        .iam
        .create_role()
        .role_name(NODE_ROLE)
        .assume_role_policy_document(r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#)
        .send()
        .await
        .expect("create role");
    // The EKS cluster the provider learns its endpoint, CA, service CIDR
    // (moto's default, 172.20.0.0/16) and version from.
    setup
        .eks
        .create_cluster()
        .name(CLUSTER)
        .version(K8S)
        .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
        .resources_vpc_config(
            aws_sdk_eks::types::VpcConfigRequest::builder()
                .set_subnet_ids(Some(subnets.iter().map(|(id, _)| id.clone()).collect()))
                .build(),
        )
        .send()
        .await
        .expect("create the EKS cluster");
    let queue = setup
        .sqs
        .create_queue()
        .queue_name(QUEUE)
        .send()
        .await
        .expect("create queue");
    let queue_url = queue.queue_url().expect("queue url").to_string();
    let ami_amd64 = find_ami(&setup.ec2, "al2023-ami-*", "x86_64").await;
    let ami_arm64 = find_ami(&setup.ec2, "al2023-ami-*", "arm64").await;
    // Prices: a table for every type moto knows (on-demand), spot per zone.
    let mut on_demand = BTreeMap::new();
    let mut bare_metal = BTreeSet::new();
    let mut pages = setup.ec2.describe_instance_types().into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.expect("describe instance types");
        for info in page.instance_types() {
            let (Some(t), Some(cpu), Some(mem)) = (
                info.instance_type(),
                info.v_cpu_info().and_then(|v| v.default_v_cpus()),
                info.memory_info().and_then(|m| m.size_in_mib()),
            ) else {
                continue;
            };
            let graviton = info.processor_info().is_some_and(|p| {
                p.supported_architectures()
                    .iter()
                    .any(|a| a.as_str() == "arm64")
            });
            if info.bare_metal() == Some(true) {
                bare_metal.insert(t.as_str().to_string());
            }
            let factor = if graviton { 0.8 } else { 1.0 };
            let price = (0.034 * f64::from(cpu) + 0.0046 * (mem as f64 / 1024.0)) * factor;
            on_demand.insert(
                t.as_str().to_string(),
                (price * 10_000.0).round() / 10_000.0,
            );
        }
    }
    let mut spot = BTreeMap::new();
    for (t, p) in &on_demand {
        for (i, zone) in zones.iter().enumerate() {
            spot.insert((t.clone(), zone.to_string()), p * (0.30 + 0.05 * i as f64));
        }
    }
    proxy.with(|s| {
        s.on_demand = on_demand;
        s.bare_metal = bare_metal;
        s.spot = spot;
        let root = format!("/aws/service/eks/optimized-ami/{K8S}/amazon-linux-2023");
        s.ssm.insert(
            format!("{root}/x86_64/standard/recommended/image_id"),
            ami_amd64.clone(),
        );
        s.ssm.insert(
            format!("{root}/arm64/standard/recommended/image_id"),
            ami_arm64.clone(),
        );
        // The GPU and Neuron variants (moto has no such images: the same ones).
        for (arch, ami) in [("x86_64", &ami_amd64), ("arm64", &ami_arm64)] {
            s.ssm.insert(
                format!("{root}/{arch}/nvidia/recommended/image_id"),
                ami.clone(),
            );
        }
        s.ssm.insert(
            format!("{root}/x86_64/neuron/recommended/image_id"),
            ami_amd64.clone(),
        );
        // Other families' public parameters (moto ships no Bottlerocket or
        // EKS AL2 images, so they point at the same AL2023 images).
        let al2 = format!("/aws/service/eks/optimized-ami/{K8S}");
        s.ssm.insert(format!("{al2}/amazon-linux-2/recommended/image_id"), ami_amd64.clone());
        s.ssm.insert(format!("{al2}/amazon-linux-2-arm64/recommended/image_id"), ami_arm64.clone());
        let br = format!("/aws/service/bottlerocket/aws-k8s-{K8S}");
        s.ssm.insert(format!("{br}/x86_64/latest/image_id"), ami_amd64.clone());
        s.ssm.insert(format!("{br}/arm64/latest/image_id"), ami_arm64.clone());
        s.ssm.insert(
            format!("/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-{K8S}/image_id"),
            ami_amd64.clone(),
        );
    });
    Made {
        vpc,
        subnets,
        security_group,
        ami_amd64,
        ami_arm64,
        queue_url,
    }
}

/// Settings of the provider under test.
pub fn settings(proxy: &FaultProxy) -> provider_aws::Settings {
    settings_in(proxy, REGION)
}

pub fn settings_in(proxy: &FaultProxy, region: &str) -> provider_aws::Settings {
    let mut settings = provider_aws::Settings::new(CLUSTER, region);
    settings.endpoint_url = Some(proxy.url());
    settings.credentials = Some(("testing".into(), "testing".into()));
    settings.interruption_queue = Some(QUEUE.into());
    settings.interruption_wait_seconds = 1;
    settings
}

impl World {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut provider_aws::Settings)) -> Self {
        Self::start_in(SEED_PLACE, tweak).await
    }

    /// A world in `place` rather than seed 003's region.
    pub async fn start_in(place: Place, tweak: impl FnOnce(&mut provider_aws::Settings)) -> Self {
        if let Ok(filter) = std::env::var("TEST_LOG") {
            let _ = karpenter_runtime::init_tracing("provider-aws-tests", &filter, false);
        }
        let moto = Moto::start().await;
        moto.reset().await;
        let proxy = FaultProxy::start(moto.addr).await;
        let setup = setup_clients_in(&moto.url(), place.region).await;
        proxy.look_up_with(setup.clone());
        let made = make_world_in(&setup, &proxy, place.zones).await;
        let mut settings = settings_in(&proxy, place.region);
        tweak(&mut settings);
        let metrics = karpenter_runtime::Metrics::new("karpenter_provider_aws");
        let service = provider_aws::service(settings, metrics).await;
        let running = integration_tests::RunningService::start(move || service)
            .await
            .expect("provider serves");
        let client = CloudProviderClient::connect(running.url())
            .await
            .expect("connect")
            .max_decoding_message_size(256 * 1024 * 1024);
        Self {
            moto,
            proxy,
            setup,
            made,
            service: running,
            client,
        }
    }

    /// Another replica of the provider on the same cloud, as the chart runs
    /// two: its own settings, its own janitor.
    pub async fn replica(
        &self,
        tweak: impl FnOnce(&mut provider_aws::Settings),
    ) -> (
        integration_tests::RunningService,
        CloudProviderClient<tonic::transport::Channel>,
    ) {
        let mut settings = settings_in(&self.proxy, SEED_PLACE.region);
        tweak(&mut settings);
        let metrics = karpenter_runtime::Metrics::new("karpenter_provider_aws");
        let service = provider_aws::service(settings, metrics).await;
        let running = integration_tests::RunningService::start(move || service)
            .await
            .expect("replica serves");
        let client = CloudProviderClient::connect(running.url())
            .await
            .expect("connect")
            .max_decoding_message_size(256 * 1024 * 1024);
        (running, client)
    }

    /// Fails on any call seed 003's IAM policy denied.
    pub fn assert_least_privilege(&self) {
        let denials = self.proxy.with(|s| s.denials.clone());
        assert!(
            denials.is_empty(),
            "calls Karpenter's IAM policy denies: {denials:#?}"
        );
    }
}

/// Every test fails on a denied call it did not take back.
impl Drop for World {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.assert_least_privilege();
        }
    }
}

/// The seed 003 EC2NodeClass.
pub fn seed_node_class() -> pv::NodeClass {
    let spec = serde_json::json!({
        "amiFamily": "AL2023",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
        "role": NODE_ROLE,
    });
    pv::NodeClass {
        name: "default".into(),
        uid: "uid-default".into(),
        generation: 1,
        spec_json: spec.to_string(),
        status_json: String::new(),
        annotations: Default::default(),
    }
}

/// Resolves the node class and returns it with its status filled in.
pub async fn resolved(
    world: &mut World,
    mut node_class: pv::NodeClass,
) -> (pv::NodeClass, pv::ResolveNodeClassResponse) {
    let response = world
        .client
        .resolve_node_class(pv::ResolveNodeClassRequest {
            node_class: Some(node_class.clone()),
        })
        .await
        .expect("resolve")
        .into_inner();
    node_class.status_json = response.status_json.clone();
    (node_class, response)
}

pub fn requirement(key: &str, values: &[&str]) -> karpenter_proto::types::v1::Requirement {
    karpenter_proto::types::v1::Requirement {
        key: key.into(),
        operator: karpenter_proto::types::v1::Operator::In as i32,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    }
}

/// A node claim from seed 003's NodePool requirements.
pub fn seed_node_claim(name: &str, node_class: &pv::NodeClass) -> pv::NodeClaim {
    pv::NodeClaim {
        name: name.into(),
        node_pool: "default".into(),
        labels: Default::default(),
        annotations: Default::default(),
        requirements: vec![
            requirement("karpenter.k8s.aws/instance-family", &["t4g"]),
            requirement("karpenter.k8s.aws/instance-cpu", &["2", "4"]),
            requirement(
                "karpenter.k8s.aws/instance-memory",
                &["4096", "8192", "16384"],
            ),
            requirement("karpenter.sh/capacity-type", &["spot", "on-demand"]),
            requirement("topology.kubernetes.io/zone", &["ap-northeast-2a"]),
            requirement("kubernetes.io/arch", &["arm64"]),
            requirement("karpenter.sh/nodepool", &["default"]),
        ],
        resources: Some(karpenter_proto::types::v1::ResourceList {
            quantities: [("cpu".to_string(), 500), ("memory".to_string(), 512 << 20)]
                .into_iter()
                .collect(),
        }),
        taints: Vec::new(),
        startup_taints: Vec::new(),
        node_class: Some(node_class.clone()),
        instance_types: Vec::new(),
        uid: format!("uid-{name}"),
    }
}
