//! Waiting for the platform to reach a state, with a limit, measuring how long it took.

use std::time::{Duration, Instant};

use bulkhead_client::Client;
use bulkhead_client::types::DeploymentState;
use uuid::Uuid;

/// Polls `check` every 100 ms until it answers `Some`, for at most `limit`: the answer and
/// how long it took. An error of `check` ends the wait.
pub async fn until<T>(
    what: &str,
    limit: Duration,
    check: impl AsyncFn() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<(T, Duration)> {
    let started = Instant::now();
    loop {
        if let Some(answer) = check().await? {
            return Ok((answer, started.elapsed()));
        }
        anyhow::ensure!(
            started.elapsed() < limit,
            "{what}: not within {} s",
            limit.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until a deployment is healthy (at most 120 s); an error if it fails or is
/// cancelled.
pub async fn deployment_healthy(
    client: &Client,
    project: Uuid,
    service: Uuid,
    deployment: Uuid,
) -> anyhow::Result<Duration> {
    let what = format!("deployment {deployment} healthy");
    let ((), took) = until(&what, Duration::from_secs(120), async || {
        let now = client
            .deployment_view()
            .project_id(project)
            .service_id(service)
            .deployment_id(deployment)
            .send()
            .await?
            .into_inner();
        match now.state {
            DeploymentState::Healthy => Ok(Some(())),
            DeploymentState::Failed | DeploymentState::Cancelled | DeploymentState::Superseded => {
                anyhow::bail!(
                    "deployment {deployment} ended {}: {}",
                    now.state,
                    now.reason
                )
            }
            _ => Ok(None),
        }
    })
    .await?;
    Ok(took)
}
