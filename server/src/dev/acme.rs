//! A real ACME CA for the local platform's edge (the drill, the HTTPS tests): Pebble, Let's
//! Encrypt's test server (Debian's `pebble` package), with `pebble-challtestsrv` from the same
//! package as its DNS, which answers every name with 127.0.0.1, so that Pebble validates each
//! challenge against the edge on this machine: HTTP-01 on the edge's plain HTTP port and
//! TLS-ALPN-01 on its HTTPS port, as Let's Encrypt would on 80 and 443.
//!
//! Pebble serves its directory over HTTPS with a certificate made here (its root is
//! [`AcmeCa::server_root`], what the edge is given with `--acme-ca-root`); the certificates it
//! issues chain to a root it generates at start ([`AcmeCa::issuing_root`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::caddy::free_port;

/// How to get Pebble when it is missing.
pub const PEBBLE_INSTALL_HINT: &str = "install Pebble (Let's Encrypt's test ACME server) and \
    its challenge test server: `apt-get install pebble` on Debian and Ubuntu, or `go install \
    github.com/letsencrypt/pebble/v2/cmd/...@latest`";

/// Checks that Pebble and its challenge test server are installed, saying how to install them
/// when they are not.
pub fn acme_check() -> anyhow::Result<()> {
    for program in ["pebble", "pebble-challtestsrv"] {
        let found = std::env::var_os("PATH").is_some_and(|path| {
            std::env::split_paths(&path).any(|dir| dir.join(program).is_file())
        });
        anyhow::ensure!(
            found,
            "`{program}` is not on the PATH: {PEBBLE_INSTALL_HINT}"
        );
    }
    Ok(())
}

/// A running Pebble and its DNS, killed with their owner.
pub struct AcmeCa {
    pebble: Child,
    dns: Child,
    port: u16,
    management_port: u16,
    dns_management_port: u16,
    dir: PathBuf,
}

impl AcmeCa {
    /// Starts Pebble (and its DNS) with its state and logs in `dir`, validating HTTP-01 on
    /// `http_port` and TLS-ALPN-01 on `https_port` of 127.0.0.1.
    pub async fn start(dir: &Path, http_port: u16, https_port: u16) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let server = rcgen::generate_simple_self_signed(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ])?;
        std::fs::write(dir.join("server.pem"), server.cert.pem())?;
        std::fs::write(
            dir.join("server-key.pem"),
            server.signing_key.serialize_pem(),
        )?;
        let (port, management_port) = (free_port()?, free_port()?);
        let (dns_port, dns_management_port) = (free_port()?, free_port()?);
        let config = serde_json::json!({ "pebble": {
            "listenAddress": format!("127.0.0.1:{port}"),
            "managementListenAddress": format!("127.0.0.1:{management_port}"),
            "certificate": dir.join("server.pem"),
            "privateKey": dir.join("server-key.pem"),
            "httpPort": http_port,
            "tlsPort": https_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        }});
        std::fs::write(dir.join("pebble.json"), config.to_string())?;
        let log = |name: &str| -> anyhow::Result<Stdio> {
            Ok(Stdio::from(std::fs::File::create(dir.join(name))?))
        };
        let spawn = |command: &mut Command, program: &str| {
            command.spawn().map_err(|err| {
                anyhow::anyhow!("cannot run `{program}` ({err}): {PEBBLE_INSTALL_HINT}")
            })
        };
        let dns = spawn(
            Command::new("pebble-challtestsrv")
                .args(["-dns01", &format!("127.0.0.1:{dns_port}")])
                .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
                .args(["-management", &format!("127.0.0.1:{dns_management_port}")])
                .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
                .stdin(Stdio::null())
                .stdout(log("challtestsrv.log")?)
                .stderr(Stdio::null()),
            "pebble-challtestsrv",
        )?;
        let pebble = spawn(
            Command::new("pebble")
                .arg("-config")
                .arg(dir.join("pebble.json"))
                .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
                // No random sleeps before validations, no nonces refused on purpose.
                .env("PEBBLE_VA_NOSLEEP", "1")
                .env("PEBBLE_WFE_NONCEREJECT", "0")
                .stdin(Stdio::null())
                .stdout(log("pebble.log")?)
                .stderr(Stdio::null()),
            "pebble",
        );
        let pebble = match pebble {
            Ok(pebble) => pebble,
            Err(err) => {
                let mut dns = dns;
                let _ = dns.kill();
                return Err(err);
            }
        };
        let ca = Self {
            pebble,
            dns,
            port,
            management_port,
            dns_management_port,
            dir: dir.to_owned(),
        };
        ca.ready().await?;
        Ok(ca)
    }

    /// The ACME directory URL (`--acme-ca`).
    pub fn directory(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.port)
    }

    /// The PEM file of the root of Pebble's own HTTPS certificate (`--acme-ca-root`).
    pub fn server_root(&self) -> PathBuf {
        self.dir.join("server.pem")
    }

    /// A PEM file (in Pebble's directory) of the root that the certificates Pebble issues
    /// chain to: what a client of the edge trusts.
    pub async fn issuing_root(&self) -> anyhow::Result<PathBuf> {
        let url = format!("https://127.0.0.1:{}/roots/0", self.management_port);
        let pem = self
            .client()?
            .get(url)
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let file = self.dir.join("issuing-root.pem");
        std::fs::write(&file, pem)?;
        Ok(file)
    }

    /// Pebble's log: every request it received and every order it took, with its names.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pebble.log")).unwrap_or_default()
    }

    /// Makes Pebble's DNS answer `host` with `ip` (the edge is elsewhere: its challenges
    /// fail).
    pub async fn dns_point(&self, host: &str, ip: &str) -> anyhow::Result<()> {
        reqwest::Client::new()
            .post(format!(
                "http://127.0.0.1:{}/add-a",
                self.dns_management_port
            ))
            .json(&serde_json::json!({ "host": host, "addresses": [ip] }))
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    /// How many orders Pebble has taken.
    pub fn orders(&self) -> usize {
        self.log().matches("Added order").count()
    }

    fn client(&self) -> anyhow::Result<reqwest::Client> {
        Ok(
            bulkhead_common::tls::http_client_builder(Some(&self.server_root()))?
                .timeout(Duration::from_secs(5))
                .build()?,
        )
    }

    async fn ready(&self) -> anyhow::Result<()> {
        let client = self.client()?;
        let started = Instant::now();
        loop {
            if client.get(self.directory()).send().await.is_ok()
                && client
                    .get(format!(
                        "https://127.0.0.1:{}/roots/0",
                        self.management_port
                    ))
                    .send()
                    .await
                    .is_ok()
            {
                return Ok(());
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(15),
                "Pebble did not answer within 15 s; its log: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for AcmeCa {
    fn drop(&mut self) {
        for child in [&mut self.pebble, &mut self.dns] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
