//! Getting snapshots: each round tries the sources in order. A control plane that answers is
//! watched (`/v1/routing-table/watch`) until its stream ends; a change fetches the whole signed
//! table from it. When no control plane answers, the first mirror or file that does is read,
//! and the next round (after the poll interval) tries the control planes again.
//!
//! Whatever the source, a snapshot is [`offer`]ed: verified, checked by [`super::guard`],
//! written to disk, then applied. Nothing a source says or fails to say removes a route.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use reqwest::StatusCode;
use tokio::sync::watch;

use super::{Applied, Edge, guard, status, store};
use bulkhead_routing::{SignedSnapshot, SnapshotError, TrustedKeys, snapshot_etag};

/// The largest snapshot document read from a mirror, a file or a control plane's answer (a
/// 10,000-route table is about 4 MiB).
const DOCUMENT_LIMIT: usize = 64 << 20;

/// Where snapshots come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A control plane's base URL: watched, with the token.
    ControlPlane(String),
    /// A URL serving the signed snapshot document: polled, without the token.
    Mirror(String),
    /// A file holding the signed snapshot document: polled.
    File(PathBuf),
}

impl Source {
    /// Control planes first, then mirrors, then files, each in the order given.
    pub fn list(
        control_planes: &[String],
        mirrors: &[String],
        files: &[PathBuf],
    ) -> anyhow::Result<Vec<Source>> {
        let url = |text: &String| -> anyhow::Result<String> {
            let trimmed = text.trim().trim_end_matches('/');
            anyhow::ensure!(
                trimmed.starts_with("https://") || trimmed.starts_with("http://"),
                "`{text}` is not an https:// (or http://) URL"
            );
            Ok(trimmed.to_owned())
        };
        for control_plane in control_planes {
            // The token goes there: never in clear across a network. A mirror may be plain
            // HTTP anywhere: it gets no token, and cannot forge a signed snapshot.
            bulkhead_common::tls::cleartext_refuse("--control-plane", control_plane.trim())?;
        }
        let mut sources = Vec::new();
        for control_plane in control_planes {
            sources.push(Source::ControlPlane(url(control_plane)?));
        }
        for mirror in mirrors {
            sources.push(Source::Mirror(url(mirror)?));
        }
        sources.extend(files.iter().cloned().map(Source::File));
        Ok(sources)
    }

    /// A name for logs and metrics.
    pub fn name(&self) -> String {
        match self {
            Source::ControlPlane(url) | Source::Mirror(url) => url.clone(),
            Source::File(path) => format!("file:{}", path.display()),
        }
    }
}

/// Syncs until `stop` turns true.
pub async fn run(edge: Arc<Edge>, mut stop: watch::Receiver<bool>) {
    loop {
        for source in edge.settings.sources.clone() {
            let answered = tokio::select! {
                answered = sync_from(&edge, &source) => answered,
                _ = stop.wait_for(|stopped| *stopped) => return,
            };
            match answered {
                Ok(()) => break,
                Err(err) => {
                    metrics::counter!("bulkhead_edge_source_failures_total").increment(1);
                    tracing::warn!(source = %source.name(), error = %err, "source did not answer; trying the next");
                }
            }
        }
        status::staleness_check(&edge);
        tokio::select! {
            _ = tokio::time::sleep(edge.settings.poll_interval) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}

/// Reads `source` once (a control plane: watches it until its stream ends). `Err` when it did
/// not answer.
async fn sync_from(edge: &Arc<Edge>, source: &Source) -> anyhow::Result<()> {
    match source {
        Source::ControlPlane(base) => watch_control_plane(edge, base).await,
        Source::Mirror(url) => {
            let document = fetch(edge, url, false).await?;
            if let Some(document) = document {
                offer(edge, source, &document);
            }
            confirm(edge, source);
            Ok(())
        }
        Source::File(path) => {
            let size = tokio::fs::metadata(path).await?.len();
            anyhow::ensure!(
                size <= DOCUMENT_LIMIT as u64,
                "{}: the document exceeds {} MiB",
                path.display(),
                DOCUMENT_LIMIT >> 20
            );
            let document = tokio::fs::read(path).await?;
            offer(edge, source, &document);
            confirm(edge, source);
            Ok(())
        }
    }
}

/// GETs a signed snapshot document; `None` when unchanged (304). `with_token` for control
/// planes only: mirrors are not trusted with it.
async fn fetch(edge: &Edge, url: &str, with_token: bool) -> anyhow::Result<Option<Vec<u8>>> {
    let mut request = edge
        .http
        .get(url)
        .timeout(Duration::from_secs(30))
        .header(reqwest::header::ACCEPT_ENCODING, "gzip");
    if with_token && let Some(token) = &edge.settings.token {
        request = request.bearer_auth(token);
    }
    if let Some(etag) = edge
        .state()
        .applied
        .as_ref()
        .map(|a| snapshot_etag(&a.document))
    {
        request = request.header(reqwest::header::IF_NONE_MATCH, etag);
    }
    let response = request.send().await?;
    match response.status() {
        StatusCode::NOT_MODIFIED => Ok(None),
        status if status.is_success() => {
            let gzipped = response
                .headers()
                .get(reqwest::header::CONTENT_ENCODING)
                .is_some_and(|encoding| encoding.as_bytes().eq_ignore_ascii_case(b"gzip"));
            let mut response = response;
            let mut document = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                document.extend_from_slice(&chunk);
                anyhow::ensure!(
                    document.len() <= DOCUMENT_LIMIT,
                    "{url}: the document exceeds {} MiB",
                    DOCUMENT_LIMIT >> 20
                );
            }
            if gzipped {
                document = inflate(&document)?;
            }
            Ok(Some(document))
        }
        status => anyhow::bail!("{url} answered {status}"),
    }
}

/// Decompresses a gzip body, at most [`DOCUMENT_LIMIT`] bytes of it.
fn inflate(gzipped: &[u8]) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let mut document = Vec::new();
    flate2::read::GzDecoder::new(gzipped)
        .take(DOCUMENT_LIMIT as u64 + 1)
        .read_to_end(&mut document)?;
    anyhow::ensure!(
        document.len() <= DOCUMENT_LIMIT,
        "the document exceeds {} MiB",
        DOCUMENT_LIMIT >> 20
    );
    Ok(document)
}

/// Watches a control plane until its stream ends: `Ok` if it answered at all.
async fn watch_control_plane(edge: &Arc<Edge>, base: &str) -> anyhow::Result<()> {
    let source = Source::ControlPlane(base.to_owned());
    let mut request = edge
        .http
        .get(format!("{base}/v1/routing-table/watch"))
        .header(reqwest::header::ACCEPT, "text/event-stream");
    if let Some(token) = &edge.settings.token {
        request = request.bearer_auth(token);
    }
    let served = edge.state().revision();
    if served > 0 {
        request = request.header("last-event-id", served.to_string());
    }
    let response = request.send().await?;
    anyhow::ensure!(
        response.status().is_success(),
        "{base} answered {}",
        response.status()
    );
    tracing::info!(source = %base, "watching the control plane");
    edge.state().watching = true;
    confirm(edge, &source);
    let mut events = response.bytes_stream().eventsource();
    let ended = loop {
        let Some(event) = events.next().await else {
            break None;
        };
        let event = match event {
            Ok(event) => event,
            Err(err) => break Some(err.to_string()),
        };
        match event.event.as_str() {
            "snapshot" => offer(edge, &source, event.data.as_bytes()),
            "change" => {
                let revision: i64 = event.id.parse().unwrap_or(i64::MAX);
                if revision > edge.state().revision() {
                    match fetch(edge, &format!("{base}/v1/routing-table"), true).await {
                        Ok(Some(document)) => offer(edge, &source, &document),
                        Ok(None) => {}
                        Err(err) => break Some(err.to_string()),
                    }
                }
            }
            _ => {}
        }
        confirm(edge, &source);
    };
    edge.state().watching = false;
    edge.state().confirmed_at = Some(Instant::now());
    tracing::warn!(source = %base, error = ended.as_deref().unwrap_or("stream ended"), "the control plane's watch ended; the table stays as it is");
    Ok(())
}

fn confirm(edge: &Edge, source: &Source) {
    let mut state = edge.state();
    state.confirmed_at = Some(Instant::now());
    state.source = Some(source.name());
}

/// Verifies, checks, stores and applies `document`; a refusal is logged, counted and
/// reported, and changes nothing.
pub fn offer(edge: &Edge, source: &Source, document: &[u8]) {
    let table = match verify(edge, document) {
        Ok(table) => table,
        Err(err) => {
            let revision = serde_json::from_slice::<serde_json::Value>(document)
                .ok()
                .and_then(|doc| doc["table"]["revision"].as_i64())
                .unwrap_or(0);
            refuse(edge, source, revision, err.reason(), err.to_string());
            return;
        }
    };
    let served = edge.state().applied.as_ref().map(|a| a.table.clone());
    if let Err(refusal) = guard::check(served.as_ref(), &table, edge.settings.max_drop) {
        // The same revision again is no news; an older one is worth a warning.
        if !matches!(refusal, guard::Refusal::NotNewer { served } if served == table.revision) {
            refuse(
                edge,
                source,
                table.revision,
                refusal.reason(),
                refusal.describe(&table),
            );
        }
        return;
    }
    if let Err(err) = store::save(&edge.settings.state_dir, document) {
        // Applying a table that would not survive a restart is still better than not: the
        // routes are newer. Say so loudly.
        tracing::error!(revision = table.revision, error = %err, "could not write the routing table to disk");
    }
    tracing::info!(
        revision = table.revision,
        routes = table.routes.len(),
        upstreams = table.upstream_count(),
        source = %source.name(),
        "accepted a routing table"
    );
    status::applied_metrics(&table);
    edge.state().applied = Some(Applied {
        table,
        document: Arc::new(document.to_vec()),
    });
    edge.news();
}

/// Verifies `document`, re-reading the trusted keys once if it names a key not yet trusted
/// (a rotation the operator has since told this edge about).
fn verify(edge: &Edge, document: &[u8]) -> Result<bulkhead_routing::RoutingTable, SnapshotError> {
    let trusted = edge.trusted.lock().expect("not poisoned").clone();
    match SignedSnapshot::verify(document, &trusted) {
        Err(SnapshotError::UnknownKey(_)) => {
            let reread = std::fs::read(&edge.settings.trusted_keys)
                .ok()
                .and_then(|bytes| TrustedKeys::from_document(&bytes).ok())
                .filter(|keys| !keys.is_empty());
            let Some(reread) = reread else {
                return SignedSnapshot::verify(document, &trusted);
            };
            *edge.trusted.lock().expect("not poisoned") = reread.clone();
            SignedSnapshot::verify(document, &reread)
        }
        verified => verified,
    }
}

fn refuse(edge: &Edge, source: &Source, revision: i64, reason: &'static str, detail: String) {
    metrics::counter!("bulkhead_edge_refusals_total", "reason" => reason).increment(1);
    let detail = format!("{reason}: {detail}");
    let mut state = edge.state();
    if state.last_refusal.as_ref() != Some(&(revision, detail.clone())) {
        tracing::error!(revision, reason, source = %source.name(), "REFUSED a routing table: {detail}; still serving revision {}", state.revision());
    }
    state.last_refusal = Some((revision, detail));
    drop(state);
    edge.news();
}
