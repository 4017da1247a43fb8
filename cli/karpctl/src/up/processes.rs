//! The local cluster's processes: each service is its own binary (found
//! next to `karpctl`, or on `PATH`), started on free loopback ports with
//! its log in the state directory, and stopped with SIGTERM (SIGKILL if it
//! does not go within a few seconds).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::process::{Child, Command};

/// The binaries `karpctl up` runs.
pub const BINARIES: [&str; 4] = ["local-apiserver", "scheduler", "provider-kwok", "adapter"];

/// Where the service binaries are: `dir` if given, else next to this
/// executable, else on `PATH`.
pub fn find_binary(name: &str, dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    let mut searched = Vec::new();
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    for candidate_dir in dir.map(Path::to_path_buf).into_iter().chain(beside) {
        let path = candidate_dir.join(name);
        if path.is_file() {
            return Ok(path);
        }
        searched.push(candidate_dir.display().to_string());
    }
    if dir.is_none()
        && let Some(paths) = std::env::var_os("PATH")
    {
        for candidate_dir in std::env::split_paths(&paths) {
            let path = candidate_dir.join(name);
            if path.is_file() {
                return Ok(path);
            }
        }
        searched.push("$PATH".to_owned());
    }
    bail!(
        "karpctl up needs the `{name}` binary; looked in {}. Build the services with `cargo build --bins` (or run ./scripts/up, which builds what is missing)",
        searched.join(", ")
    )
}

/// A free port on 127.0.0.1 (bound and released; the child binds it, see
/// [`start_ready`] for when another process takes it first).
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A started service.
pub struct Process {
    pub name: &'static str,
    pub log: PathBuf,
    child: Child,
}

impl Process {
    /// Starts `binary` with `args`, its output appended to `logs/<name>.log`.
    pub fn start(
        name: &'static str,
        binary: &Path,
        args: &[String],
        env: &[(&str, String)],
        logs: &Path,
    ) -> anyhow::Result<Process> {
        std::fs::create_dir_all(logs).with_context(|| format!("creating {}", logs.display()))?;
        let log = logs.join(format!("{name}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("opening {}", log.display()))?;
        let errors = file.try_clone()?;
        let mut command = Command::new(binary);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(errors))
            .kill_on_drop(true)
            // One name for every service would merge them in a trace
            // viewer: each names itself (karpenter-scheduler, ...).
            .env_remove("OTEL_SERVICE_NAME");
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Process { name, log, child })
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM, then SIGKILL if it is still running after `grace`.
    pub async fn stop(mut self, grace: Duration) {
        if self.exited().is_some() {
            return;
        }
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }
}

/// A plain HTTP/1.1 GET on loopback: the status code, if anything answered.
pub async fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream =
        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
            .await
            .ok()?
            .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut head = vec![0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut head))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&head[..read]);
    text.split_whitespace().nth(1)?.parse().ok()
}

/// Waits until `addr` answers `path` with 200, or `process` exits, or
/// `within` passes.
pub async fn await_ready(
    process: &mut Process,
    addr: SocketAddr,
    path: &str,
    within: Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if http_status(addr, path).await == Some(200) {
            return Ok(());
        }
        if let Some(status) = process.exited() {
            bail!(
                "{} exited ({status}) while starting; see {}",
                process.name,
                process.log.display()
            );
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "{} did not become ready within {within:?}; see {}",
                process.name,
                process.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many times a service is started again on new ports after it found
/// the ones it was given taken.
const PORT_ATTEMPTS: usize = 3;

/// What a service is started with: its ports are found by [`start_ready`].
pub struct Launch<'a, const PORTS: usize> {
    pub name: &'static str,
    pub binary: &'a Path,
    pub env: &'a [(&'a str, String)],
    pub logs: &'a Path,
    /// Its arguments, given its ports.
    pub args: &'a dyn Fn(&[u16; PORTS]) -> Vec<String>,
    /// Which of its ports answers `/readyz` over HTTP.
    pub ready_port: usize,
}

/// Starts a service on free loopback ports and waits, at most `within`,
/// until it is ready.
/// A port is found free, released, then bound by the child: another
/// process on the machine may take it in between, and the child then
/// exits at once saying so; it is started again on new ports.
pub async fn start_ready<const PORTS: usize>(
    launch: &Launch<'_, PORTS>,
    within: Duration,
) -> anyhow::Result<(Process, [u16; PORTS])> {
    let mut attempt = 1;
    loop {
        let mut ports = [0u16; PORTS];
        for port in &mut ports {
            *port = free_port()?;
        }
        let mut process = Process::start(
            launch.name,
            launch.binary,
            &(launch.args)(&ports),
            launch.env,
            launch.logs,
        )?;
        let ready = await_ready(
            &mut process,
            loopback(ports[launch.ready_port]),
            "/readyz",
            within,
        )
        .await;
        let Err(error) = ready else {
            return Ok((process, ports));
        };
        let taken = process.exited().is_some()
            && std::fs::read_to_string(&process.log).is_ok_and(|log| {
                log.contains("Address already in use") || log.contains("AddrInUse")
            });
        process.stop(Duration::from_secs(5)).await;
        if !taken || attempt >= PORT_ATTEMPTS {
            return Err(error);
        }
        attempt += 1;
    }
}
