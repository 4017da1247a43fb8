//! `karpctl disrupt`: manifests -> snapshot -> the scheduler's disruption
//! planner -> commands (what Karpenter's disruption controller would do),
//! blocked candidates and the cluster's cost.
//!
//! The manifests are read exactly as `plan` reads them ([`plan::build_snapshot_at`]);
//! the snapshot is taken at `--now` (or the wall clock), against which
//! ages, `consolidateAfter`, expiry and budget schedules are measured.

use karpenter_proto::scheduler::v1 as sched;

use crate::CliError;
use crate::input::InputError;
use crate::output;
use crate::plan::{self, PlanArgs};
use crate::snapshot::Built;

/// Arguments of `disrupt`: those of `plan`, and the time to plan at.
#[derive(Debug, Clone, clap::Args)]
pub struct DisruptArgs {
    #[command(flatten)]
    pub plan: PlanArgs,
    /// The time decisions are made at (RFC 3339, e.g. 2024-05-01T12:00:00Z);
    /// default: the wall clock.
    #[arg(long)]
    pub now: Option<String>,
}

/// Parses `--now`.
pub fn parse_now(text: &str) -> Result<prost_types::Timestamp, InputError> {
    let parsed = chrono::DateTime::parse_from_rfc3339(text.trim()).map_err(|e| {
        InputError::file(
            "--now",
            format!("invalid RFC 3339 time {text:?} (e.g. 2024-05-01T12:00:00Z): {e}"),
        )
    })?;
    Ok(prost_types::Timestamp {
        seconds: parsed.timestamp(),
        nanos: i32::try_from(parsed.timestamp_subsec_nanos()).unwrap_or(0),
    })
}

/// Asks the disruption planner, in-process or through `--scheduler`.
pub fn plan_disruption(
    args: &PlanArgs,
    built: &Built,
    options: sched::SchedulingOptions,
    runtime: &tokio::runtime::Runtime,
) -> Result<sched::PlanDisruptionResponse, CliError> {
    let request = sched::PlanDisruptionRequest {
        cluster: Some(built.snapshot.clone()),
        options: Some(options),
    };
    let response = match &args.scheduler {
        None => karpenter_planner_wire::plan_disruption_request(&request)
            .map_err(|e| plan::rejected(built, &e.field, &e.message))?,
        Some(url) => runtime.block_on(async {
            let mut client = plan::connect_scheduler(url).await?;
            client
                .plan_disruption(request)
                .await
                .map(tonic::Response::into_inner)
                .map_err(|status| plan::status_error(built, url, "PlanDisruption", &status))
        })?,
    };
    plan::refuse_left_out(built, None, &response.rejected)?;
    Ok(response)
}

/// Runs `disrupt` and returns the rendered output and the warnings.
pub fn run(
    args: &DisruptArgs,
    stdout_is_terminal: bool,
) -> Result<(String, Vec<String>), CliError> {
    // A bad --now is reported before any manifest is read.
    let now = match &args.now {
        Some(text) => parse_now(text)?,
        None => plan::wall_clock(),
    };
    let runtime = plan::runtime()?;
    let prepared = plan::build_snapshot_at(&args.plan, &runtime, now)?;
    let options = plan::options(&args.plan, &prepared.gates, prepared.well_known_labels);
    let response = plan_disruption(&args.plan, &prepared.built, options, &runtime)?;
    let value = output::disrupt_value(&response);
    let format = plan::format(args.plan.output, stdout_is_terminal);
    let text = output::render_as(&value, format, output::disrupt_table)
        .map_err(|e| CliError::Other(anyhow::anyhow!(e)))?;
    Ok((text, prepared.warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_rfc3339() {
        let t = parse_now("2024-05-01T12:00:00Z").expect("valid");
        assert_eq!(t.seconds, 1_714_564_800);
        let t = parse_now("2024-05-01T14:00:00.5+02:00").expect("valid");
        assert_eq!((t.seconds, t.nanos), (1_714_564_800, 500_000_000));
        let e = parse_now("yesterday").expect_err("invalid");
        assert_eq!(e.location, "--now");
    }
}
