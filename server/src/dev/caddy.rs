//! A real Caddy process for the local platform's edge (the drill, the edge tests): started
//! with nothing but its admin API on a port of its own, so that the edge agent configures it,
//! and killed with its owner.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How to get Caddy when it is missing.
pub const CADDY_INSTALL_HINT: &str = "install Caddy 2.6 or later: `apt-get install caddy` on \
    Debian and Ubuntu, or a binary from https://caddyserver.com/download";

/// Checks that `program` runs (`caddy version`), saying how to install it when it does not.
pub fn caddy_check(program: &Path) -> anyhow::Result<()> {
    match Command::new(program).arg("version").output() {
        Ok(output) if output.status.success() => Ok(()),
        Ok(output) => anyhow::bail!(
            "`{} version` failed ({}): {CADDY_INSTALL_HINT}",
            program.display(),
            output.status
        ),
        Err(err) => anyhow::bail!(
            "cannot run Caddy ({}: {err}): {CADDY_INSTALL_HINT}",
            program.display()
        ),
    }
}

/// A running Caddy with its admin API on `127.0.0.1:<admin_port>` and no routes yet.
pub struct CaddyProcess {
    child: Child,
    program: PathBuf,
    admin_port: u16,
    dir: PathBuf,
}

impl CaddyProcess {
    /// Starts `program` (e.g. `caddy`), its state, initial configuration and log (`caddy.log`)
    /// in `dir`.
    pub fn start(program: &Path, dir: &Path, admin_port: u16) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let config = dir.join("caddy-initial.json");
        let initial =
            serde_json::json!({ "admin": { "listen": format!("127.0.0.1:{admin_port}") } });
        std::fs::write(&config, initial.to_string())?;
        let child = Command::new(program)
            .args(["run", "--config"])
            .arg(&config)
            .env("HOME", dir)
            .env("XDG_CONFIG_HOME", dir.join("config"))
            .env("XDG_DATA_HOME", dir.join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::options()
                    .create(true)
                    .append(true)
                    .open(dir.join("caddy.log"))?,
            ))
            .spawn()
            .map_err(|err| {
                anyhow::anyhow!(
                    "cannot run Caddy ({}: {err}): {CADDY_INSTALL_HINT}",
                    program.display()
                )
            })?;
        Ok(Self {
            child,
            program: program.to_owned(),
            admin_port,
            dir: dir.to_owned(),
        })
    }

    /// Its admin API's base URL.
    pub fn admin(&self) -> String {
        format!("http://127.0.0.1:{}", self.admin_port)
    }

    /// Waits until its admin API answers (at most 15 s).
    pub async fn ready(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        while reqwest::get(format!("{}/config/", self.admin()))
            .await
            .is_err()
        {
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(15),
                "Caddy's admin API ({}) did not answer within 15 s",
                self.admin()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Kills Caddy and starts it again, empty (as a crash and a restart without `--resume`).
    pub async fn restart(mut self) -> anyhow::Result<Self> {
        self.stop();
        let again = Self::start(&self.program, &self.dir, self.admin_port)?;
        again.ready().await?;
        Ok(again)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for CaddyProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A loopback port free now (for a process that must be told its port before it binds).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
