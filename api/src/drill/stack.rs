//! The drill's platform, all real components on this machine: the GCP and AWS simulators
//! and a host agent ([`DevPlatform`], in this process), the control plane as child processes
//! (`bulkhead serve`, so that each can be killed outright and started again on its data; with
//! `--replicas`, several on one PostgreSQL behind a Caddy load balancer, [`ApiFront`]), and
//! an edge agent (in this process, restartable) in front of a real Caddy, serving HTTPS with
//! certificates from a real ACME CA (Pebble).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bulkhead::dev::acme::AcmeCa;
use bulkhead::dev::caddy::{CaddyProcess, free_port};
use bulkhead_edge::certificates::EdgeTls;
use bulkhead_edge::sync::Source;
use bulkhead_edge::{EdgeSettings, RunningEdge};

/// How often the control plane probes each provider: the breaker's reaction time.
pub const PROBE_INTERVAL_MS: u64 = 500;

/// How a control-plane process is started.
#[derive(Debug, Clone)]
pub struct ControlPlaneSettings {
    pub program: PathBuf,
    pub database_url: Option<String>,
    pub admin_token: String,
    /// The master key's file, shared by replicas (default: the data directory's own).
    pub secret_key_file: Option<PathBuf>,
    /// The DNS server domains are verified against (the platform's).
    pub dns_resolver: Option<std::net::SocketAddr>,
    /// `--config`: the settings that have no flag (identity providers).
    pub config_file: Option<PathBuf>,
}

/// A control plane (or one replica of it), a `bulkhead serve` child process on a fixed
/// loopback port.
pub struct ControlPlane {
    child: Option<Child>,
    settings: ControlPlaneSettings,
    dir: PathBuf,
    port: u16,
}

impl ControlPlane {
    /// Starts `serve` on a free port, its data in `dir`, without waiting for it ([`Self::ready`]
    /// waits).
    pub fn spawned(settings: &ControlPlaneSettings, dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut control_plane = Self {
            child: None,
            settings: settings.clone(),
            dir: dir.to_owned(),
            port: free_port()?,
        };
        control_plane.spawn()?;
        Ok(control_plane)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The address it listens on, as `/v1/status` shows it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where its output goes.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("control-plane.log")
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let mut command = Command::new(&self.settings.program);
        // Only what the drill says: none of the operator's own BULKHEAD_* settings.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("BULKHEAD_") {
                command.env_remove(name);
            }
        }
        command
            .arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--data-dir")
            .arg(&self.dir)
            .arg("--provider-probe-interval-ms")
            .arg(PROBE_INTERVAL_MS.to_string())
            // The API traffic writes an environment every few tens of milliseconds into one
            // project, and checks that each acknowledged one is kept: a load, not a tenant.
            .arg("--limit")
            .arg("environments_per_project=1000000")
            .env("BULKHEAD_BOOTSTRAP_TOKEN", &self.settings.admin_token)
            .env("RUST_LOG", "info,sqlx=warn,sea_orm=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));
        if let Some(url) = &self.settings.database_url {
            command.arg("--database-url").arg(url);
        }
        if let Some(key_file) = &self.settings.secret_key_file {
            command.arg("--secret-key-file").arg(key_file);
        }
        if let Some(dns) = &self.settings.dns_resolver {
            command.arg("--dns-resolver").arg(dns.to_string());
        }
        if let Some(config) = &self.settings.config_file {
            command.arg("--config").arg(config);
        }
        self.child = Some(command.spawn().map_err(|err| {
            anyhow::anyhow!(
                "starting the control plane ({} serve): {err}",
                self.settings.program.display()
            )
        })?);
        Ok(())
    }

    /// Waits until `/readyz` answers 200 (at most 60 s).
    pub async fn ready(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        let readyz = format!("{}/readyz", self.url());
        loop {
            if let Ok(answer) = reqwest::get(&readyz).await
                && answer.status().is_success()
            {
                return Ok(());
            }
            if let Some(child) = &mut self.child
                && let Some(status) = child.try_wait()?
            {
                anyhow::bail!(
                    "the control plane exited ({status}); its log: {}",
                    self.log_path().display()
                );
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(60),
                "the control plane was not ready within 60 s; its log: {}",
                self.log_path().display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Kills it outright (SIGKILL): no graceful shutdown, as a crashed machine.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and data, and waits until it is ready.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.spawn()?;
        self.ready().await
    }
}

/// A real Caddy in front of the control plane's replicas, as docs/operations/replicas.md's
/// "Three replicas behind Caddy" sets it up: round robin, a refused connection tried on the
/// next replica, `/readyz` checked every second, event streams flushed at once.
pub struct ApiFront {
    /// Kept for as long as the front runs: dropping it stops Caddy.
    _caddy: CaddyProcess,
    pub port: u16,
}

impl ApiFront {
    /// Starts Caddy balancing `127.0.0.1:<port>` over `replicas` (their ports).
    pub async fn start(caddy_program: &Path, dir: &Path, replicas: &[u16]) -> anyhow::Result<Self> {
        let admin_port = free_port()?;
        let caddy = CaddyProcess::start(caddy_program, dir, admin_port)?;
        caddy.ready().await?;
        let port = free_port()?;
        let config = front_config(admin_port, port, replicas);
        let answer = reqwest::Client::new()
            .post(format!("{}/load", caddy.admin()))
            .json(&config)
            .send()
            .await?;
        let status = answer.status();
        anyhow::ensure!(
            status.is_success(),
            "Caddy refused the front's configuration ({status}): {}",
            answer.text().await.unwrap_or_default()
        );
        Ok(Self {
            _caddy: caddy,
            port,
        })
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// The Caddyfile for replicas of docs/operations/replicas.md, as Caddy's JSON (its admin API
/// kept on `admin_port`).
fn front_config(admin_port: u16, port: u16, replicas: &[u16]) -> serde_json::Value {
    let upstreams: Vec<_> = replicas
        .iter()
        .map(|port| serde_json::json!({ "dial": format!("127.0.0.1:{port}") }))
        .collect();
    serde_json::json!({
        "admin": { "listen": format!("127.0.0.1:{admin_port}") },
        "apps": { "http": { "servers": { "front": {
            "listen": [format!("127.0.0.1:{port}")],
            "automatic_https": { "disable": true },
            "routes": [{ "handle": [{
                "handler": "reverse_proxy",
                "upstreams": upstreams,
                "load_balancing": {
                    "selection_policy": { "policy": "round_robin" },
                    "try_duration": "5s",
                    "try_interval": "100ms",
                },
                "health_checks": {
                    "active": { "uri": "/readyz", "interval": "1s" },
                    "passive": { "fail_duration": "10s" },
                },
                "flush_interval": -1,
            }] }],
            // Caddy's own errors (no replica ready, none answering) as the replicas answer
            // theirs: a problem document with `Retry-After`, which clients know how to read.
            "errors": { "routes": [{ "handle": [{
                "handler": "static_response",
                "status_code": "{http.error.status_code}",
                "headers": {
                    "Content-Type": ["application/problem+json"],
                    "Retry-After": ["1"],
                },
                "body": "{\"type\":\"about:blank\",\"title\":\"{http.error.status_text}\",\"status\":{http.error.status_code},\"code\":\"not_ready\",\"detail\":\"no replica answered through the load balancer; try again shortly\"}",
            }] }] },
        } } } },
    })
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Caddy and the edge agent that keeps it routing, and the ACME CA its certificates come
/// from.
pub struct Edge {
    /// Kept for as long as the edge runs: dropping it stops Caddy.
    _caddy: CaddyProcess,
    _acme: AcmeCa,
    pub agent: Option<RunningEdge>,
    settings: EdgeSettings,
    /// Where Caddy serves the routes over HTTPS.
    pub https_port: u16,
    /// The PEM file of the root the edge's certificates chain to.
    pub root: PathBuf,
}

impl Edge {
    /// Starts Caddy, then the edge agent watching `control_planes` (each replica, the next
    /// when one fails) with `token`, trusting `trusted_keys` (the keys document).
    pub async fn start(
        caddy_program: &Path,
        dir: &Path,
        control_planes: &[String],
        token: &str,
        trusted_keys: &[u8],
    ) -> anyhow::Result<Self> {
        let caddy = CaddyProcess::start(caddy_program, &dir.join("caddy"), free_port()?)?;
        caddy.ready().await?;
        std::fs::write(dir.join("trusted-keys.json"), trusted_keys)?;
        let (http_port, https_port) = (free_port()?, free_port()?);
        let acme = AcmeCa::start(&dir.join("acme"), http_port, https_port).await?;
        let root = acme.issuing_root().await?;
        let settings = EdgeSettings {
            id: "drill-edge".into(),
            sources: control_planes
                .iter()
                .map(|url| Source::ControlPlane(url.clone()))
                .collect(),
            token: Some(token.to_owned()),
            trusted_keys: dir.join("trusted-keys.json"),
            ca_file: None,
            state_dir: dir.join("edge-state"),
            caddy_admin: caddy.admin(),
            caddy_listen: format!("127.0.0.1:{http_port}"),
            tls: Some(EdgeTls::resolve(
                format!("127.0.0.1:{https_port}"),
                &acme.directory(),
                None,
                vec![acme.server_root()],
                dir.join("edge-state").join("certificates"),
            )?),
            listen: "127.0.0.1:0".parse()?,
            max_drop: 0.5,
            poll_interval: Duration::from_millis(200),
            stale_after: Duration::from_secs(300),
        };
        let agent = bulkhead_edge::start(settings.clone()).await?;
        Ok(Self {
            _caddy: caddy,
            _acme: acme,
            agent: Some(agent),
            settings,
            https_port,
            root,
        })
    }

    /// Stops the edge agent and starts it again (it loads its last table from disk first).
    /// Returns the revision it serves once started.
    pub async fn agent_restart(&mut self) -> anyhow::Result<i64> {
        if let Some(agent) = self.agent.take() {
            agent.shutdown().await;
        }
        self.agent = Some(bulkhead_edge::start(self.settings.clone()).await?);
        self.revision().await
    }

    /// The revision the edge agent serves, as its `/healthz` says.
    pub async fn revision(&self) -> anyhow::Result<i64> {
        let agent = self
            .agent
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("the edge agent is not running"))?;
        let health: serde_json::Value = reqwest::get(format!("http://{}/healthz", agent.addr))
            .await?
            .json()
            .await?;
        Ok(health["revision"].as_i64().unwrap_or(0))
    }

    pub async fn shutdown(mut self) {
        if let Some(agent) = self.agent.take() {
            agent.shutdown().await;
        }
    }
}

/// Copies this binary to a fresh world-readable directory under the system's temporary one.
pub fn workload_binary_copy() -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("bulkhead-drill-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    let copy = dir.join("bulkhead");
    std::fs::copy(std::env::current_exe()?, &copy)?;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755))?;
    Ok(copy)
}
