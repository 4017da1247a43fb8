//! `karpenter-convert`: converts older Karpenter manifests to the v1 API.
//!
//! Reads YAML files (or standard input), writes the converted documents as
//! one YAML stream to standard output and the notes to standard error.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use karpenter_convert::{Input, Options, convert_inputs, parse_yaml, to_yaml};

#[derive(Parser)]
#[command(
    name = "karpenter-convert",
    about = "Convert Karpenter v1alpha5/v1alpha1/v1beta1 manifests to the v1 API"
)]
struct Args {
    /// YAML files to convert; `-` or none reads standard input. All files
    /// form one batch, so kubelet settings can move to an EC2NodeClass
    /// defined in another file.
    #[arg(short = 'f', long = "filename")]
    files: Vec<PathBuf>,
    /// Do not add the requirements v1alpha5 defaulted implicitly.
    #[arg(long)]
    ignore_defaults: bool,
    /// IAM role for EC2NodeClasses made from AWSNodeTemplates or inline
    /// providers (default: keep their instance profile, or write the
    /// $KARPENTER_NODE_ROLE placeholder).
    #[arg(long, env = "KARPENTER_NODE_ROLE")]
    node_role: Option<String>,
    /// Do not print notes.
    #[arg(short, long)]
    quiet: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("karpenter-convert: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let mut sources = Vec::new();
    if args.files.is_empty() {
        sources.push(("-".to_string(), read_stdin()?));
    }
    for path in &args.files {
        if path.as_os_str() == "-" {
            sources.push(("-".to_string(), read_stdin()?));
        } else {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            sources.push((path.display().to_string(), text));
        }
    }
    let mut inputs: Vec<Input> = Vec::new();
    let mut notes = Vec::new();
    for (name, text) in &sources {
        let mut parsed = parse_yaml(name, text).map_err(|e| e.to_string())?;
        inputs.append(&mut parsed.inputs);
        notes.append(&mut parsed.notes);
    }
    if inputs.is_empty() {
        return Err("no documents to convert".to_string());
    }
    let opts = Options {
        ignore_defaults: args.ignore_defaults,
        node_role: args.node_role.clone(),
    };
    let conversion = convert_inputs(&inputs, &opts).map_err(|e| e.to_string())?;
    notes.extend(conversion.notes);
    print!(
        "{}",
        to_yaml(&conversion.documents).map_err(|e| e.to_string())?
    );
    if !args.quiet {
        for note in &notes {
            eprintln!("# {note}");
        }
    }
    Ok(())
}

fn read_stdin() -> Result<String, String> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| format!("reading standard input: {e}"))?;
    Ok(text)
}
