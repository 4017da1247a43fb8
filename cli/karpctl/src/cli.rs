//! Command-line parsing and the commands' effects on stdout, stderr and
//! the exit status.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::disrupt::DisruptArgs;
use crate::input;
use crate::plan::PlanArgs;
use crate::{CliError, convert, crds, disrupt, plan, validate};

#[derive(Debug, Parser)]
#[command(
    name = "karpctl",
    version = karpenter_runtime::build_info::version(),
    about = "Karpenter's scheduler and APIs from the command line"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// What the scheduler would do with these manifests: new node claims,
    /// placements on existing nodes, unschedulable pods, cost.
    Plan(PlanArgs),
    /// What Karpenter's disruption controller would do with these
    /// manifests: empty, under-used, drifted and expired nodes it would
    /// remove or replace, the candidates it may not touch, and the cost.
    Disrupt(DisruptArgs),
    /// Print the generated CRDs (NodePool, NodeClaim, EC2NodeClass).
    Crds(CrdsArgs),
    /// Convert v1alpha5/v1alpha1/v1beta1 Karpenter manifests to v1.
    Convert(ConvertArgs),
    /// Validate Karpenter v1 manifests against the generated CRDs.
    Validate(ValidateArgs),
    /// Start a local cluster: the Kubernetes API (local-apiserver), the
    /// scheduler, provider-kwok and the adapter, until Ctrl-C.
    Up(crate::up::UpArgs),
    /// Print a shell completion script.
    ///
    /// Example: `source <(karpctl completion bash)`, or
    /// `karpctl completion zsh > "${fpath[1]}/_karpctl"`.
    Completion(CompletionArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct CompletionArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Clone, clap::Args)]
pub struct CrdsArgs {
    /// Write the files to deploy/crds and charts/karpenter/crds.
    #[arg(long)]
    pub write: bool,
    /// Exit 1 listing the files that differ from the generated CRDs.
    #[arg(long, conflicts_with = "write")]
    pub check: bool,
    /// Repository root for --write and --check.
    #[arg(long, default_value = ".")]
    pub repo_root: PathBuf,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ConvertArgs {
    /// Files or directories; `-` reads standard input.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Do not add the requirements v1alpha5 defaulted implicitly.
    #[arg(long)]
    pub ignore_defaults: bool,
    /// IAM role for EC2NodeClasses made from AWSNodeTemplates or inline providers.
    #[arg(long)]
    pub node_role: Option<String>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ValidateArgs {
    /// Files or directories; `-` reads standard input.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Unknown fields, as kubectl's flag: refused (`strict`, the default),
    /// reported (`warn`) or not looked for (`ignore`).
    #[arg(long, value_enum, default_value = "strict")]
    pub validate: validate::FieldValidation,
}

/// Runs the command line and returns the exit status.
pub fn main(args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // clap's usage errors are bad input too.
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match run(cli.command) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn out(text: &str) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| CliError::Other(anyhow::anyhow!("writing standard output: {e}")))
}

fn print_warnings(warnings: Vec<String>) {
    for w in warnings {
        if w.starts_with("notice:") {
            eprintln!("{w}");
        } else {
            eprintln!("warning: {w}");
        }
    }
}

/// Runs one command; `Ok` carries the exit status.
pub fn run(command: Command) -> Result<u8, CliError> {
    match command {
        Command::Plan(args) => {
            let (text, warnings) = plan::run(&args, std::io::stdout().is_terminal())?;
            print_warnings(warnings);
            out(&text)?;
            Ok(0)
        }
        Command::Disrupt(args) => {
            let (text, warnings) = disrupt::run(&args, std::io::stdout().is_terminal())?;
            print_warnings(warnings);
            out(&text)?;
            Ok(0)
        }
        Command::Crds(args) => {
            if args.write {
                let written = karpenter_api::write_crd_files(&args.repo_root)
                    .map_err(|e| CliError::Other(anyhow::anyhow!(e)))?;
                for path in written {
                    eprintln!("wrote {}", path.display());
                }
                return Ok(0);
            }
            if args.check {
                let stale = crds::stale(&args.repo_root);
                if stale.is_empty() {
                    eprintln!("CRDs are up to date");
                    return Ok(0);
                }
                for path in &stale {
                    eprintln!("stale: {path}");
                }
                eprintln!(
                    "{} CRD file(s) are stale; run `karpctl crds --write`",
                    stale.len()
                );
                return Ok(1);
            }
            out(&crds::all_yaml())?;
            Ok(0)
        }
        Command::Up(args) => crate::up::run(&args),
        Command::Completion(args) => {
            let mut command = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(args.shell, &mut command, "karpctl", &mut script);
            out(&String::from_utf8_lossy(&script))?;
            Ok(0)
        }
        Command::Convert(args) => {
            let sources = input::read_sources(&args.files)?;
            let options = karpenter_convert::Options {
                ignore_defaults: args.ignore_defaults,
                node_role: args.node_role.clone(),
            };
            let (yaml, notes) = convert::convert(&sources, &options)?;
            out(&yaml)?;
            for note in notes {
                eprintln!("# {note}");
            }
            Ok(0)
        }
        Command::Validate(args) => {
            let docs = input::load(&args.files)?;
            let (text, code) = validate::run(&docs, args.validate, &args.files)?;
            out(&text)?;
            Ok(code)
        }
    }
}
