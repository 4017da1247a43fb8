//! `karpctl plan`: manifests -> snapshot -> scheduler -> decisions.

use std::path::PathBuf;

use karpenter_core::feature_gates::FeatureGates;
use karpenter_core::labels::LabelRules;
use karpenter_proto::provider::v1 as pv;
use karpenter_proto::scheduler::v1 as sched;
use karpenter_snapshot::spread::SchedulerConfig;

use crate::input::{self, Document, InputError};
use crate::output::{self, Format};
use crate::snapshot::{self, Built};
use karpenter_catalog::kwok as builtin_catalog;

pub use crate::validate::FieldValidation;
use crate::{CliError, catalog, example};

/// `--min-values-policy`: Karpenter's MIN_VALUES_POLICY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MinValuesPolicy {
    #[value(name = "Strict")]
    Strict,
    #[value(name = "BestEffort")]
    BestEffort,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PreferencePolicy {
    #[value(name = "Respect")]
    Respect,
    #[value(name = "Ignore")]
    Ignore,
}

/// Arguments of `plan`.
#[derive(Debug, Clone, clap::Args)]
pub struct PlanArgs {
    /// Manifest files or directories (recursive: *.yaml, *.yml, *.json); `-` reads standard input.
    #[arg(short = 'f', long = "filename", required_unless_present = "example")]
    pub files: Vec<PathBuf>,
    /// Run on an embedded example manifest set instead (seed-001, consolidation).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(example::NAMES))]
    pub example: Option<String>,
    /// An InstanceTypeCatalog file (instead of catalogs among the manifests).
    #[arg(long, conflicts_with = "provider")]
    pub instance_types: Option<PathBuf>,
    /// A running provider service to ask for instance types (GetInstanceTypes).
    #[arg(long)]
    pub provider: Option<String>,
    /// A running scheduler service to call instead of solving in-process.
    #[arg(long)]
    pub scheduler: Option<String>,
    /// Output format (default: table on a terminal, json otherwise).
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<Format>,
    #[arg(long, value_enum, default_value = "Strict")]
    pub min_values_policy: MinValuesPolicy,
    #[arg(long, value_enum, default_value = "Respect")]
    pub preference_policy: PreferencePolicy,
    /// Feature gates, e.g. SpotToSpotConsolidation=true,NodeRepair=false.
    #[arg(long, default_value = "")]
    pub feature_gates: String,
    /// kube-scheduler's default topology spread constraints, the document
    /// itself (YAML or JSON): `{podTopologySpread: {defaultConstraints:
    /// [...]}}`, each without a labelSelector (deduced per pod from the
    /// Services that select it and its controller).
    #[arg(long, default_value = "")]
    pub scheduler_config: String,
    /// Unknown fields, as kubectl's flag: refused
    /// (`strict`, the default), reported (`warn`) or not looked for (`ignore`).
    #[arg(long, value_enum, default_value = "strict")]
    pub validate: FieldValidation,
}

/// Karpenter documents against their CRDs (a violation is refused), and
/// the unknown fields of the documents (Karpenter's and the built-in kinds
/// planning reads): refused under `strict`, warnings under `warn`, as the
/// API server's field validation treats them.
fn check_fields(
    docs: &[Document],
    mode: FieldValidation,
    warnings: &mut Vec<String>,
) -> Result<(), CliError> {
    let validators = crate::validate::Validators::new()?;
    let karpenter = |d: &&Document| matches!(d.group(), "karpenter.sh" | "karpenter.k8s.aws");
    for doc in docs
        .iter()
        .filter(|d| mode != FieldValidation::Ignore || karpenter(d))
    {
        let report = validators.check(doc);
        // What the CRD's schema and rules refuse, the API server refuses
        // whatever the field validation mode.
        if let Some(error) = report.errors.first() {
            let (field, message) = error.split_once(": ").unwrap_or(("", error));
            return Err(doc.error(field, message).into());
        }
        let (errors, mut warned) = crate::validate::judge_unknown_fields(&report, mode);
        if let Some((field, message)) = errors.into_iter().next() {
            return Err(doc.error(field, message).into());
        }
        warnings.extend(warned.drain(..).map(|w| format!("{}: {w}", doc.origin)));
    }
    Ok(())
}

/// Parses `--feature-gates` over Karpenter's defaults; a name that is not
/// one of Karpenter's gates is refused.
pub fn feature_gates(text: &str) -> Result<FeatureGates, InputError> {
    let bad = |message: String| InputError::file("--feature-gates", message);
    let gates = FeatureGates::parse(text).map_err(|e| bad(e.to_string()))?;
    if let Some(name) = gates.unknown().first() {
        return Err(bad(format!(
            "unknown feature gate {name:?} (known: {})",
            karpenter_core::feature_gates::names().join(", ")
        )));
    }
    Ok(gates)
}

pub fn options(
    args: &PlanArgs,
    gates: &FeatureGates,
    well_known_labels: Vec<String>,
) -> sched::SchedulingOptions {
    use sched::scheduling_options as so;
    sched::SchedulingOptions {
        min_values_policy: match args.min_values_policy {
            MinValuesPolicy::Strict => so::MinValuesPolicy::Strict,
            MinValuesPolicy::BestEffort => so::MinValuesPolicy::BestEffort,
        } as i32,
        preference_policy: match args.preference_policy {
            PreferencePolicy::Respect => so::PreferencePolicy::Respect,
            PreferencePolicy::Ignore => so::PreferencePolicy::Ignore,
        } as i32,
        feature_gates: gates.to_map(),
        well_known_labels,
        // Karpenter's default (IGNORE_DRA_REQUESTS=true): pods with DRA
        // requests are reported unschedulable.
        plan_dra_pods: false,
    }
}

/// Reads the manifests of `plan` (files or the embedded example).
pub fn load_documents(args: &PlanArgs) -> Result<Vec<Document>, InputError> {
    let mut docs = match &args.example {
        Some(name) => example::documents(name)?,
        None => Vec::new(),
    };
    docs.extend(input::load(&args.files)?);
    Ok(docs)
}

/// The snapshot a plan sends, with what goes with it.
pub struct Prepared {
    pub built: Built,
    /// Warnings and notices for standard error.
    pub warnings: Vec<String>,
    /// The provider's well-known labels (with `--provider`).
    pub well_known_labels: Vec<String>,
    /// `--feature-gates`, read.
    pub gates: FeatureGates,
}

/// The wall clock as a protobuf timestamp (whole seconds).
pub fn wall_clock() -> prost_types::Timestamp {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    prost_types::Timestamp {
        seconds: i64::try_from(now.as_secs()).unwrap_or(0),
        nanos: 0,
    }
}

/// Reads the manifests and the instance types into a snapshot taken at the
/// wall clock.
pub fn build_snapshot(
    args: &PlanArgs,
    runtime: &tokio::runtime::Runtime,
) -> Result<Prepared, CliError> {
    build_snapshot_at(args, runtime, wall_clock())
}

/// Reads the manifests and the instance types into a snapshot taken at `now`.
pub fn build_snapshot_at(
    args: &PlanArgs,
    runtime: &tokio::runtime::Runtime,
    now: prost_types::Timestamp,
) -> Result<Prepared, CliError> {
    let mut warnings = Vec::new();
    let docs = load_documents(args)?;
    let docs = snapshot::upgrade(docs, &mut warnings)?;
    check_fields(&docs, args.validate, &mut warnings)?;
    let gates = feature_gates(&args.feature_gates)?;
    let buffers = gates.enabled(karpenter_core::feature_gates::CAPACITY_BUFFER);
    let scheduler_config = SchedulerConfig::parse(&args.scheduler_config)
        .map_err(|message| InputError::file("--scheduler-config", message))?;
    let mut built = snapshot::build(docs, now, buffers, &scheduler_config)?;
    warnings.append(&mut built.warnings);
    let mut well_known = Vec::new();
    // The manifests' node classes are EC2NodeClasses: AWS's label rules,
    // unless a provider says which are its own.
    let mut rules = LabelRules::neutral().with_provider(
        [karpenter_api::aws::labels::AWS_GROUP],
        karpenter_api::aws::labels::AWS_WELL_KNOWN_LABELS
            .iter()
            .copied(),
    );

    if let Some(path) = &args.instance_types {
        let file_docs = input::load(std::slice::from_ref(path))?;
        let mut types = Vec::new();
        for doc in &file_docs {
            if doc.kind() != catalog::KIND {
                return Err(doc
                    .error(
                        "kind",
                        format!("--instance-types expects {} documents", catalog::KIND),
                    )
                    .into());
            }
            types.extend(catalog::instance_types(doc)?);
        }
        if built.has_catalog {
            warnings.push(format!(
                "--instance-types {} replaces the InstanceTypeCatalog documents among the manifests",
                path.display()
            ));
        }
        built.snapshot.instance_type_catalogs = vec![sched::InstanceTypeCatalog {
            name: snapshot::MANIFEST_CATALOG.to_string(),
            instance_types: types,
        }];
    } else if let Some(url) = &args.provider {
        let info = runtime.block_on(provider_catalogs(url, &mut built))?;
        rules = LabelRules::neutral().with_provider(
            info.restricted_label_domains.iter().map(String::as_str),
            info.well_known_labels.iter().map(String::as_str),
        );
        well_known = info.well_known_labels;
    } else if !built.has_catalog {
        warnings.push(format!(
            "notice: no instance types given (InstanceTypeCatalog, --instance-types or --provider); using the built-in kwok-style catalog ({} generated types in {})",
            builtin_catalog::instance_types().len(),
            builtin_catalog::ZONES.join(", ")
        ));
        built
            .snapshot
            .instance_type_catalogs
            .push(builtin_catalog::catalog());
    }
    overlay_catalogs(&mut built, &gates, &rules, &mut warnings);
    karpenter_snapshot::fill_from_catalogs(&mut built.snapshot);
    Ok(Prepared {
        built,
        warnings,
        well_known_labels: well_known,
        gates,
    })
}

/// With the `NodeOverlay` gate on, the NodeOverlay documents overlay each
/// pool's instance types, and an overlay that does not apply says why;
/// with it off they are ignored, as upstream ignores them.
fn overlay_catalogs(
    built: &mut Built,
    gates: &FeatureGates,
    rules: &LabelRules,
    warnings: &mut Vec<String>,
) {
    if built.node_overlays.is_empty() {
        return;
    }
    if !gates.enabled(karpenter_core::feature_gates::NODE_OVERLAY) {
        warnings.push(format!(
            "notice: {} NodeOverlay document(s) ignored: the NodeOverlay feature gate is off (--feature-gates NodeOverlay=true)",
            built.node_overlays.len()
        ));
        return;
    }
    let overlays: Vec<&karpenter_api::NodeOverlay> =
        built.node_overlays.iter().map(|(_, o)| o).collect();
    let verdicts = karpenter_snapshot::overlay::apply(&mut built.snapshot, &overlays, rules);
    for (name, verdict) in verdicts {
        let origin = built
            .node_overlays
            .iter()
            .find(|(_, o)| o.metadata.name.as_deref() == Some(name.as_str()))
            .and_then(|(id, _)| built.documents.get(*id))
            .cloned()
            .unwrap_or_default();
        use karpenter_snapshot::overlay::Verdict;
        let why = match verdict {
            Verdict::Applied => continue,
            Verdict::Invalid(message) => format!("RuntimeValidation: {message}"),
            Verdict::Conflict => {
                format!("Conflict: {}", karpenter_api::nodeoverlay::CONFLICT_MESSAGE)
            }
        };
        warnings.push(format!(
            "{origin}: NodeOverlay {name:?} is not applied (ValidationSucceeded=False, {why})"
        ));
    }
}

/// Asks the provider for each pool's instance types; returns the provider's
/// Info.
async fn provider_catalogs(url: &str, built: &mut Built) -> Result<pv::InfoResponse, CliError> {
    use pv::cloud_provider_client::CloudProviderClient;
    let mut client = CloudProviderClient::connect(url.to_string())
        .await
        .map_err(|e| CliError::Other(anyhow::anyhow!("connecting to provider {url}: {e}")))?;
    let info = client
        .info(pv::InfoRequest {})
        .await
        .map_err(|e| CliError::Other(anyhow::anyhow!("provider {url}: Info: {}", e.message())))?
        .into_inner();
    for pool in &mut built.snapshot.node_pools {
        let class_name = pool
            .node_class_ref
            .as_ref()
            .map(|r| r.name.clone())
            .unwrap_or_default();
        let node_class = built.node_classes.get(&class_name).map(|c| pv::NodeClass {
            name: class_name.clone(),
            uid: c
                .value
                .pointer("/metadata/uid")
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string(),
            generation: c
                .value
                .pointer("/metadata/generation")
                .and_then(|v| v.as_i64())
                .unwrap_or(1),
            spec_json: c
                .value
                .get("spec")
                .map(|s| s.to_string())
                .unwrap_or_default(),
            status_json: c
                .value
                .get("status")
                .map(|s| s.to_string())
                .unwrap_or_default(),
            annotations: c
                .value
                .pointer("/metadata/annotations")
                .and_then(|a| a.as_object())
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                        .collect()
                })
                .unwrap_or_default(),
        });
        let response = client
            .get_instance_types(pv::GetInstanceTypesRequest {
                node_pool: pool.name.clone(),
                node_class,
            })
            .await
            .map_err(|e| {
                CliError::Other(anyhow::anyhow!(
                    "provider {url}: GetInstanceTypes for node pool {:?}: {}",
                    pool.name,
                    e.message()
                ))
            })?
            .into_inner();
        let name = format!("provider/{}", pool.name);
        built
            .snapshot
            .instance_type_catalogs
            .push(sched::InstanceTypeCatalog {
                name: name.clone(),
                instance_types: response.instance_types,
            });
        pool.instance_type_catalog = name;
    }
    Ok(info)
}

/// Solves in-process or through `--scheduler`.
pub fn solve(
    args: &PlanArgs,
    built: &Built,
    snapshot: sched::ClusterSnapshot,
    options: sched::SchedulingOptions,
    runtime: &tokio::runtime::Runtime,
) -> Result<sched::SolveResponse, CliError> {
    let request = sched::SolveRequest {
        cluster: Some(snapshot),
        options: Some(options),
    };
    let response = match &args.scheduler {
        None => karpenter_planner_wire::solve_request(&request)
            .map_err(|e| rejected(built, &e.field, &e.message))?,
        Some(url) => runtime.block_on(async {
            let mut client = connect_scheduler(url).await?;
            client
                .solve(request)
                .await
                .map(tonic::Response::into_inner)
                .map_err(|status| status_error(built, url, "Solve", &status))
        })?,
    };
    let invalid_pod = response
        .unschedulable
        .iter()
        .find(|u| !u.invalid_field.is_empty())
        .map(|u| (u.invalid_field.as_str(), u.reason.as_str()));
    refuse_left_out(built, invalid_pod, &response.rejected)?;
    Ok(response)
}

/// Manifests are checked before planning, so anything the scheduler still
/// left out (a pod or object it could not understand) is bad input: named,
/// with its file and document, like every other input error.
pub fn refuse_left_out(
    built: &Built,
    invalid_pod: Option<(&str, &str)>,
    rejected_objects: &[sched::RejectedObject],
) -> Result<(), CliError> {
    if let Some((field, reason)) = invalid_pod {
        return Err(rejected(built, field, reason));
    }
    match rejected_objects.first() {
        Some(object) => Err(rejected(built, &object.field, &object.message)),
        None => Ok(()),
    }
}

/// Bad input the scheduler rejected, located in the manifest it came from
/// when the field names a snapshot entry.
pub fn rejected(built: &Built, field: &str, message: &str) -> CliError {
    let location = built
        .locate(field)
        .map(str::to_string)
        .unwrap_or_else(|| "the scheduler".to_string());
    CliError::Input(InputError {
        location,
        field: field.to_string(),
        message: format!("rejected by the scheduler: {message}"),
    })
}

/// Connects to `--scheduler`.
pub async fn connect_scheduler(
    url: &str,
) -> Result<sched::scheduler_client::SchedulerClient<tonic::transport::Channel>, CliError> {
    sched::scheduler_client::SchedulerClient::connect(url.to_string())
        .await
        .map_err(|e| CliError::Other(anyhow::anyhow!("connecting to scheduler {url}: {e}")))
}

/// A failed call to `--scheduler`: `InvalidArgument` is bad input (the
/// service answers `"<field>: <message>"`), anything else a failure.
pub fn status_error(built: &Built, url: &str, method: &str, status: &tonic::Status) -> CliError {
    if status.code() == tonic::Code::InvalidArgument {
        let message = status.message();
        return match message.split_once(": ") {
            Some((field, rest)) if !field.contains(' ') => rejected(built, field, rest),
            _ => rejected(built, "", message),
        };
    }
    CliError::Other(anyhow::anyhow!(
        "scheduler {url}: {method}: {}: {}",
        status.code(),
        status.message()
    ))
}

/// The single-threaded runtime the commands' remote calls run on.
pub fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Other(anyhow::anyhow!("starting the async runtime: {e}")))
}

/// `-o`, defaulting to a table on a terminal and JSON otherwise.
pub fn format(output: Option<Format>, stdout_is_terminal: bool) -> Format {
    output.unwrap_or(if stdout_is_terminal {
        Format::Table
    } else {
        Format::Json
    })
}

/// The most static NodeClaims a plan lists for one pool (`replicas` has
/// no upper bound).
const MAX_STATIC_CLAIMS_LISTED: i64 = 10_000;

/// The NodeClaims the static pools still need (`StaticCapacity`): what
/// `replicas` lacks counting the pool's claims in any state, within
/// `limits.nodes`; each the pool's template with no pods.
fn static_claims(built: &Built, warnings: &mut Vec<String>) -> Vec<sched::NodeClaimPlan> {
    let mut plans = Vec::new();
    for pool in &built.static_pools {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let claims = built
            .snapshot
            .nodes
            .iter()
            .filter(|n| n.node_pool == name)
            .count();
        let claims = i64::try_from(claims).unwrap_or(i64::MAX);
        let missing = pool.spec.static_claims_to_create(claims, claims);
        if missing > MAX_STATIC_CLAIMS_LISTED {
            warnings.push(format!(
                "NodePool {name:?} still needs {missing} static NodeClaims; the plan lists the first {MAX_STATIC_CLAIMS_LISTED}"
            ));
        }
        let missing = usize::try_from(missing.min(MAX_STATIC_CLAIMS_LISTED)).unwrap_or(0);
        plans.extend(std::iter::repeat_n(
            karpenter_snapshot::static_claim_plan(pool),
            missing,
        ));
    }
    plans
}

/// Runs `plan` and returns the rendered output.
pub fn run(args: &PlanArgs, stdout_is_terminal: bool) -> Result<(String, Vec<String>), CliError> {
    let runtime = runtime()?;
    let mut prepared = build_snapshot(args, &runtime)?;
    let static_plans = if prepared
        .gates
        .enabled(karpenter_core::feature_gates::STATIC_CAPACITY)
    {
        static_claims(&prepared.built, &mut prepared.warnings)
    } else {
        Vec::new()
    };
    // The request takes the snapshot: errors are located by its origins.
    let snapshot = std::mem::take(&mut prepared.built.snapshot);
    let options = options(args, &prepared.gates, prepared.well_known_labels);
    let mut response = solve(args, &prepared.built, snapshot, options, &runtime)?;
    response.node_claims.extend(static_plans);
    let value = output::plan_value(&response);
    let format = format(args.output, stdout_is_terminal);
    let text = output::render(&value, format).map_err(|e| CliError::Other(anyhow::anyhow!(e)))?;
    Ok((text, prepared.warnings))
}
