//! The process-wide Prometheus recorder: every `metrics::` macro of the process records into
//! it, and `/metrics` renders it.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// The recorder, installed on first use. Request durations get buckets from 0.5 ms to 10 s.
pub fn prometheus_handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let buckets = [
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ];
        PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full("http_request_duration_seconds".into()),
                &buckets,
            )
            .expect("buckets are not empty")
            .install_recorder()
            .expect("no other metrics recorder is installed")
    })
}
