//! A plugin that misbehaves on purpose, one way per call, for the host's sandbox tests:
//! `health` never returns, `provision` allocates until it is stopped, `describe` panics,
//! `list` looks for what a sandboxed plugin must not see (environment, files) and reports it,
//! and `deprovision` of a URL fetches it (allowed or not; `post:URL` posts a body) and reports
//! the outcome. `deprovision("requests:…")` opens many requests at once and returns with them
//! still in flight, and `deprovision("upload:…")` posts a body its server never reads (see
//! `requests`).

mod requests;

use bulkhead_sdk::{HealthReport, Instance, InstanceSpec, Provider, ProviderError, ProviderInfo};

pub struct Hostile;

impl Provider for Hostile {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "hostile".into(),
            version: "0.1.0".into(),
            regions: vec!["local".into()],
            capabilities: vec![],
            config: vec![],
        }
    }

    fn health() -> Result<HealthReport, ProviderError> {
        let mut counter: u64 = 0;
        loop {
            counter = std::hint::black_box(counter.wrapping_add(1));
        }
    }

    fn provision(_spec: InstanceSpec) -> Result<Instance, ProviderError> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }

    fn deprovision(instance_key: String) -> Result<(), ProviderError> {
        if let Some(spec) = instance_key.strip_prefix("requests:") {
            let report = requests::many(spec).unwrap_or_else(|err| format!("bad spec: {err}"));
            return Err(ProviderError::Internal(report));
        }
        if let Some(spec) = instance_key.strip_prefix("upload:") {
            let report = requests::upload(spec).unwrap_or_else(|err| format!("bad spec: {err}"));
            return Err(ProviderError::Internal(report));
        }
        // `deprovision("http://host:port/path")` fetches that URL and reports what came back.
        // `deprovision("post:http://...")` sends a POST with a body instead.
        let (post, url) = match instance_key.strip_prefix("post:") {
            Some(url) => (true, url.to_owned()),
            None => (false, instance_key.clone()),
        };
        if url.starts_with("http://") || url.starts_with("https://") {
            let request = if post {
                bulkhead_sdk::http::Request::post(&url).json(&vec!["payload"; 4096])
            } else {
                bulkhead_sdk::http::Request::get(&url)
            };
            return match request.send() {
                Ok(response) => Err(ProviderError::Internal(format!(
                    "fetched status={} bytes={} body={}",
                    response.status,
                    response.body.len(),
                    response.text().chars().take(64).collect::<String>()
                ))),
                Err(err) => Err(ProviderError::Internal(format!("refused: {err}"))),
            };
        }
        Ok(())
    }

    fn describe(instance_key: String) -> Result<Instance, ProviderError> {
        panic!("describe({instance_key}) panics on purpose");
    }

    fn list() -> Result<Vec<Instance>, ProviderError> {
        let env: Vec<String> = std::env::vars().map(|(key, _)| key).collect();
        let file = std::fs::read_to_string("/etc/passwd")
            .map(|text| text.len())
            .map_err(|err| err.to_string());
        let dir = std::fs::read_dir(".")
            .map(|entries| entries.count())
            .map_err(|err| err.to_string());
        Err(ProviderError::Internal(format!(
            "env={env:?} file={file:?} dir={dir:?}"
        )))
    }
}

bulkhead_sdk::export_provider!(Hostile);
