//! Certificates on an edge that serves HTTPS. Caddy obtains each domain's certificate on demand
//! (at its first TLS handshake) from the ACME CA, keeps it in the storage directory and renews
//! it ahead of expiry; before it obtains one it asks this agent (`GET /tls/ask?domain=…`), which
//! answers from the snapshot it serves, in memory, with no network call: yes for a domain the
//! table routes, no for any other. A control plane that is down changes nothing.
//!
//! What the agent tells about them comes from Caddy's own records: the certificates in the
//! storage directory (parsed, for issuer and expiry) and Caddy's certificate events, which it
//! writes as JSON lines to a file in the state directory (the last error per domain). They are
//! followed every [`FOLLOW_EVERY`], kept in [`super::EdgeState::certificates`] for the table's
//! domains, reported with the revision and counted in `/metrics`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use tokio::sync::watch;

use super::Edge;

/// Let's Encrypt's production directory: the CA an edge uses unless told otherwise.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// How often Caddy's events are read; the storage is read again after an event or a new
/// table, and at least every [`STORAGE_READ_EVERY`] (for certificates another edge sharing
/// the storage obtained, and expiry).
pub const FOLLOW_EVERY: Duration = Duration::from_secs(2);
pub const STORAGE_READ_EVERY: Duration = Duration::from_secs(60);

/// A certificate expiring within this long counts as expiring soon.
pub const EXPIRING_SOON: Duration = Duration::from_secs(14 * 24 * 3600);

/// The file, in the state directory, Caddy writes its certificate events to.
const EVENTS_FILE: &str = "caddy-certificates.log";

/// Bytes of events read at most per pass (Caddy rolls the file at 1 MiB).
const EVENTS_READ_AT_MOST: u64 = 2 << 20;

/// How an edge serves HTTPS.
#[derive(Debug, Clone)]
pub struct EdgeTls {
    /// Where Caddy serves HTTPS (`host:port` or `:port`).
    pub listen: String,
    pub acme_ca: String,
    pub acme_email: Option<String>,
    /// Absolute paths of PEM files of the ACME CA's roots.
    pub acme_ca_roots: Vec<PathBuf>,
    /// The absolute path of Caddy's certificate storage.
    pub storage: PathBuf,
}

impl EdgeTls {
    /// Checks the flags, and makes the paths absolute (Caddy may run in another directory).
    pub fn resolve(
        listen: String,
        acme_ca: &str,
        acme_email: Option<String>,
        acme_ca_roots: Vec<PathBuf>,
        storage: PathBuf,
    ) -> anyhow::Result<Self> {
        let acme_ca = acme_ca.trim();
        let url = reqwest::Url::parse(acme_ca)
            .map_err(|err| anyhow::anyhow!("--acme-ca `{acme_ca}` is not a URL: {err}"))?;
        anyhow::ensure!(
            url.scheme() == "https" && url.host().is_some(),
            "--acme-ca must be an https:// URL (an ACME CA's directory), not `{acme_ca}`"
        );
        if let Some(email) = &acme_email {
            anyhow::ensure!(
                email.len() <= 254
                    && email.split_once('@').is_some_and(|(user, host)| {
                        !user.is_empty()
                            && host.contains('.')
                            && !email.contains(char::is_whitespace)
                    }),
                "--acme-email `{email}` is not an email address"
            );
        }
        for root in &acme_ca_roots {
            anyhow::ensure!(
                root.is_file(),
                "--acme-ca-root {} is not a readable file",
                root.display()
            );
        }
        anyhow::ensure!(
            listen
                .rsplit_once(':')
                .is_some_and(|(_, port)| port.parse::<u16>().is_ok()),
            "--caddy-listen-tls must be `host:port` or `:port`, not `{listen}`"
        );
        Ok(Self {
            listen,
            acme_ca: acme_ca.to_owned(),
            acme_email,
            acme_ca_roots: acme_ca_roots
                .iter()
                .map(std::path::absolute)
                .collect::<Result<_, _>>()?,
            storage: std::path::absolute(storage)?,
        })
    }

    /// The file Caddy writes its certificate events to.
    pub fn events_log(state_dir: &Path) -> anyhow::Result<PathBuf> {
        Ok(std::path::absolute(state_dir.join(EVENTS_FILE))?)
    }
}

/// What the edge knows of one domain's certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertificateStatus {
    /// The common name of the certificate's issuer, once there is one.
    pub issuer: Option<String>,
    pub not_after: Option<DateTime<Utc>>,
    /// Caddy's last failure to obtain or renew it, cleared by a success.
    pub last_error: Option<String>,
}

impl CertificateStatus {
    /// As reported to the control plane.
    fn to_json(&self, hostname: &str) -> serde_json::Value {
        serde_json::json!({
            "hostname": hostname,
            "issuer": self.issuer,
            "not_after": self.not_after,
            "last_error": self.last_error.as_deref().map(|error| {
                error
                    .chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .take(500)
                    .collect::<String>()
            }),
        })
    }
}

/// The most certificates a report lists (the control plane's bound); the counts cover all.
pub const REPORT_LISTS_AT_MOST: usize = 256;

/// What the certificates of the table's domains come to: the report's counts and the gauges.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CertificateCounts {
    pub domains: usize,
    /// Domains with a certificate.
    pub issued: usize,
    /// Certificates expiring within [`EXPIRING_SOON`].
    pub expiring_soon: usize,
    /// Domains whose last attempt to obtain or renew failed.
    pub failing: usize,
}

impl CertificateCounts {
    pub fn of(certificates: &BTreeMap<String, CertificateStatus>) -> Self {
        let soon = Utc::now() + EXPIRING_SOON;
        let mut counts = Self {
            domains: certificates.len(),
            ..Self::default()
        };
        for status in certificates.values() {
            counts.issued += usize::from(status.not_after.is_some());
            counts.expiring_soon += usize::from(status.not_after.is_some_and(|at| at < soon));
            counts.failing += usize::from(status.last_error.is_some());
        }
        counts
    }
}

/// The certificates as reported: counts, and the failing ones first, then those without a
/// certificate yet, then by expiry.
pub fn report(certificates: &BTreeMap<String, CertificateStatus>) -> serde_json::Value {
    let counts = CertificateCounts::of(certificates);
    let mut items: Vec<(&String, &CertificateStatus)> = certificates.iter().collect();
    items.sort_by_key(|(hostname, status)| {
        (
            status.last_error.is_none(),
            status.not_after.is_some(),
            status.not_after,
            *hostname,
        )
    });
    serde_json::json!({
        "domains": counts.domains,
        "issued": counts.issued,
        "expiring_soon": counts.expiring_soon,
        "failing": counts.failing,
        "items": items
            .iter()
            .take(REPORT_LISTS_AT_MOST)
            .map(|(hostname, status)| status.to_json(hostname))
            .collect::<Vec<_>>(),
    })
}

#[derive(Debug, Deserialize)]
pub struct AskParams {
    #[serde(default)]
    domain: String,
}

/// Caddy's permission endpoint: 200 for a domain the served table routes, 403 otherwise.
pub async fn ask(State(edge): State<Arc<Edge>>, Query(params): Query<AskParams>) -> StatusCode {
    let domain = params.domain.trim_end_matches('.').to_ascii_lowercase();
    let allowed = edge.state().routes_domain(&domain);
    metrics::counter!("bulkhead_edge_certificate_asks_total", "allowed" => allowed.to_string())
        .increment(1);
    if allowed {
        StatusCode::OK
    } else {
        tracing::debug!(
            domain,
            "refused a certificate for a domain the table does not route"
        );
        StatusCode::FORBIDDEN
    }
}

/// Follows the storage directory and Caddy's events until `stop` turns true.
pub async fn follow(edge: Arc<Edge>, mut stop: watch::Receiver<bool>) {
    let Some(tls) = edge.settings.tls.clone() else {
        return;
    };
    let mut events = match EdgeTls::events_log(&edge.settings.state_dir) {
        Ok(path) => EventsLog::new(path),
        Err(err) => {
            tracing::error!(error = %err, "no certificate events: the state directory has no absolute path");
            return;
        }
    };
    let mut errors: HashMap<String, String> = HashMap::new();
    // When the whole storage was last read, and the revision it was read for.
    let mut scanned: Option<(Instant, i64)> = None;
    loop {
        let named = events.read(&mut errors);
        let revision = edge.state().revision();
        let whole = scanned.is_none_or(|(at, read_for)| {
            read_for != revision || at.elapsed() >= STORAGE_READ_EVERY
        });
        if whole {
            scanned = Some((Instant::now(), revision));
            certificates_read(&edge, &tls, &mut errors, None).await;
        } else if !named.is_empty() {
            // Events name their domains: only theirs are read again (an issuance burst at
            // 1,000 domains would otherwise re-read every certificate after each one).
            certificates_read(&edge, &tls, &mut errors, Some(named)).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(FOLLOW_EVERY) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}

/// Reads the storage for the table's domains (or those of them in `only`), with each one's
/// last error, into the state.
async fn certificates_read(
    edge: &Edge,
    tls: &EdgeTls,
    errors: &mut HashMap<String, String>,
    only: Option<BTreeSet<String>>,
) {
    let (domains, mut certificates): (Vec<String>, BTreeMap<String, CertificateStatus>) = {
        let state = edge.state();
        let routed = state
            .applied
            .as_ref()
            .map_or(&[][..], |a| &a.table.routes[..]);
        match &only {
            None => (
                routed.iter().map(|r| r.domain.clone()).collect(),
                BTreeMap::new(),
            ),
            Some(only) => (
                only.iter()
                    .filter(|domain| state.routes_domain(domain))
                    .cloned()
                    .collect(),
                state.certificates.clone(),
            ),
        }
    };
    let storage = tls.storage.clone();
    let scanned = tokio::task::spawn_blocking(move || storage_scan(&storage, &domains))
        .await
        .unwrap_or_default();
    certificates.extend(scanned);
    for (domain, status) in &mut certificates {
        status.last_error = errors.get(domain).cloned();
    }
    errors.retain(|domain, _| certificates.contains_key(domain));
    certificates_metrics(&certificates);
    let changed = {
        let mut state = edge.state();
        let changed = state.certificates != certificates;
        state.certificates = certificates;
        changed
    };
    if changed {
        edge.news();
    }
}

fn certificates_metrics(certificates: &BTreeMap<String, CertificateStatus>) {
    let counts = CertificateCounts::of(certificates);
    metrics::gauge!("bulkhead_edge_certificates").set(counts.issued as f64);
    metrics::gauge!("bulkhead_edge_certificates_expiring_soon").set(counts.expiring_soon as f64);
    metrics::gauge!("bulkhead_edge_certificates_failing").set(counts.failing as f64);
}

/// Each domain's newest certificate in Caddy's storage
/// (`certificates/<issuer>/<domain>/<domain>.crt`); a domain without one has an empty status.
fn storage_scan(storage: &Path, domains: &[String]) -> Vec<(String, CertificateStatus)> {
    let issuers: Vec<PathBuf> = std::fs::read_dir(storage.join("certificates"))
        .map(|dir| {
            dir.filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .collect()
        })
        .unwrap_or_default();
    domains
        .iter()
        .map(|domain| {
            let newest = issuers
                .iter()
                .filter_map(|issuer| {
                    let pem = std::fs::read(issuer.join(domain).join(format!("{domain}.crt")));
                    certificate_read(&pem.ok()?)
                })
                .max_by_key(|status| status.not_after);
            (domain.clone(), newest.unwrap_or_default())
        })
        .collect()
}

/// The issuer and expiry of the first certificate of a PEM chain.
fn certificate_read(pem: &[u8]) -> Option<CertificateStatus> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    let certificate = pem.parse_x509().ok()?;
    let issuer = certificate
        .issuer()
        .iter_common_name()
        .next()
        .and_then(|name| name.as_str().ok())
        .map(str::to_owned);
    Some(CertificateStatus {
        issuer,
        not_after: DateTime::from_timestamp(certificate.validity().not_after.timestamp(), 0),
        last_error: None,
    })
}

/// Caddy's certificate events file, read as it grows (and from its start again when Caddy
/// rolls it).
struct EventsLog {
    path: PathBuf,
    /// The file read (its inode): another one means Caddy rolled it.
    inode: u64,
    offset: u64,
    partial: Vec<u8>,
}

/// The fields of one of Caddy's log lines that matter here.
#[derive(Debug, Deserialize)]
struct Event {
    level: String,
    #[serde(default)]
    msg: String,
    identifier: Option<String>,
    error: Option<String>,
}

impl EventsLog {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            inode: 0,
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// Reads what was written since the last call, recording each domain's last error and
    /// clearing it on a success; the domains the events named.
    fn read(&mut self, errors: &mut HashMap<String, String>) -> BTreeSet<String> {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return BTreeSet::new();
        };
        let Ok(metadata) = file.metadata() else {
            return BTreeSet::new();
        };
        let inode = std::os::unix::fs::MetadataExt::ino(&metadata);
        if inode != self.inode || metadata.len() < self.offset {
            self.inode = inode;
            // Rolled: a new file.
            self.offset = 0;
            self.partial.clear();
        }
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return BTreeSet::new();
        }
        let mut bytes = Vec::new();
        let Ok(read) = file.take(EVENTS_READ_AT_MOST).read_to_end(&mut bytes) else {
            return BTreeSet::new();
        };
        self.offset += read as u64;
        self.partial.extend_from_slice(&bytes);
        let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') else {
            return BTreeSet::new();
        };
        let lines: Vec<u8> = self.partial.drain(..=end).collect();
        let mut named = BTreeSet::new();
        for line in lines.split(|b| *b == b'\n') {
            let Ok(event) = serde_json::from_slice::<Event>(line) else {
                continue;
            };
            named.extend(event_apply(event, errors));
        }
        named
    }
}

/// Records an event of a domain's certificate; the domain, if it was one.
fn event_apply(event: Event, errors: &mut HashMap<String, String>) -> Option<String> {
    let domain = event.identifier?;
    if event.level == "error" {
        let error = event.error.unwrap_or(event.msg);
        tracing::warn!(domain, error, "Caddy could not get a certificate");
        errors.insert(domain.clone(), error);
    } else if event.msg.contains("successfully") {
        errors.remove(&domain);
    }
    Some(domain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_record_the_last_error_until_a_success() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(EVENTS_FILE);
        let mut log = EventsLog::new(path.clone());
        let mut errors = HashMap::new();
        std::fs::write(
            &path,
            concat!(
                r#"{"level":"info","logger":"tls.obtain","msg":"obtaining certificate","identifier":"a.example"}"#,
                "\n",
                r#"{"level":"error","logger":"tls.obtain","msg":"could not get certificate from issuer","identifier":"a.example","error":"no solvers"}"#,
                "\n",
                r#"{"level":"error","logger":"tls.obtain","msg":"will retry","error":"x"}"#,
                "\n",
                r#"{"level":"info","logger":"tls.obtain","msg":"obtaining"#,
            ),
        )
        .unwrap();
        let named = log.read(&mut errors);
        assert_eq!(named, BTreeSet::from(["a.example".to_owned()]));
        assert_eq!(
            errors.get("a.example").map(String::as_str),
            Some("no solvers")
        );
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(
            &mut file,
            b" certificate\",\"identifier\":\"b.example\"}\n{\"level\":\"info\",\"msg\":\"certificate obtained successfully\",\"identifier\":\"a.example\"}\n",
        )
        .unwrap();
        let named = log.read(&mut errors);
        assert_eq!(
            named,
            BTreeSet::from(["a.example".to_owned(), "b.example".to_owned()]),
            "a line split across two reads is read whole"
        );
        assert!(errors.is_empty(), "{errors:?}");
        // Rolled: read from the start of the new file.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(
            &path,
            "{\"level\":\"error\",\"msg\":\"x\",\"identifier\":\"c.example\",\"error\":\"rate limited\"}\n",
        )
        .unwrap();
        log.read(&mut errors);
        assert_eq!(
            errors.get("c.example").map(String::as_str),
            Some("rate limited")
        );
    }

    #[test]
    fn flags_are_checked() {
        let storage = PathBuf::from("certificates");
        let resolve = |ca: &str, email: Option<&str>| {
            EdgeTls::resolve(
                ":443".into(),
                ca,
                email.map(str::to_owned),
                vec![],
                storage.clone(),
            )
        };
        assert!(resolve(LETS_ENCRYPT, Some("ops@example.com")).is_ok());
        assert!(resolve("http://ca.example/dir", None).is_err());
        assert!(resolve("not a url", None).is_err());
        assert!(resolve(LETS_ENCRYPT, Some("ops")).is_err());
        assert!(resolve(LETS_ENCRYPT, None).unwrap().storage.is_absolute());
    }
}
