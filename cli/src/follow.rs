//! Following a deployment to its end through its event stream
//! (`GET .../deployments/{id}/events` with `Accept: text/event-stream`, which the generated
//! client does not parse): each event printed as it comes, the stream reopened after its last
//! event (`Last-Event-ID`) when it drops — at the next server when the one it was on stopped
//! answering — and the deployment's final state read once the stream ends.

use std::time::Duration;

use bulkhead_client::{ClientInfo, types};
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use uuid::Uuid;

use super::connection::{Connection, problem_text, unreachable_text};
use super::exit::{Exit, Failure, fail};
use super::output::OutputFormat;

/// Sends operation `$operation` of the generated client about one deployment of a service.
macro_rules! deployment_call {
    ($connection:expr, $project:expr, $service:expr, $deployment:expr, $operation:ident) => {
        $connection
            .call(async |c| {
                c.$operation()
                    .project_id($project)
                    .service_id($service)
                    .deployment_id($deployment)
                    .send()
                    .await
            })
            .await
    };
}
pub(super) use deployment_call;

/// States of a deployment that has finished.
const FINISHED: [types::DeploymentState; 4] = [
    types::DeploymentState::Healthy,
    types::DeploymentState::Failed,
    types::DeploymentState::Cancelled,
    types::DeploymentState::Superseded,
];

/// Reconnections in a row that may fail before following gives up.
const RECONNECTS: u32 = 10;

/// Prints the deployment's events until it has finished; returns it as it ended.
pub async fn deployment_follow(
    connection: &Connection,
    project: Uuid,
    service: Uuid,
    deployment: Uuid,
) -> anyhow::Result<types::DeploymentView> {
    let path = format!("/v1/projects/{project}/services/{service}/deployments/{deployment}/events");
    let mut last_seen = None;
    let mut ended = None;
    reconnecting(connection, &mut last_seen, async |last_seen| {
        stream_read(connection, &path, last_seen).await?;
        // The server ends the stream once the deployment has finished, or when it stops.
        let now = deployment_view(connection, project, service, deployment).await?;
        let finished = FINISHED.contains(&now.state);
        ended = Some(now);
        Ok(finished)
    })
    .await?;
    Ok(ended.expect("read once it finished"))
}

/// Reads an event stream with `read` (from `cursor`, which it moves on) until `read` says the
/// stream is over; reopens it after a pause when it ends or drops, and gives up after
/// [`RECONNECTS`] drops in a row that did not move the cursor, or at any other failure.
pub(super) async fn reconnecting<C: Clone + PartialEq>(
    connection: &Connection,
    cursor: &mut C,
    mut read: impl AsyncFnMut(&mut C) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let mut failures = 0;
    loop {
        let before = cursor.clone();
        let outcome = read(cursor).await;
        if *cursor != before {
            failures = 0;
        }
        match outcome {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(err) if Exit::of_error(&err) != Exit::Unavailable => return Err(err),
            Err(err) => {
                failures += 1;
                if failures > RECONNECTS {
                    return Err(err);
                }
                if connection.args.verbose {
                    eprintln!("bulkhead: the event stream dropped ({err:#}); reconnecting");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(
            200 + 500 * u64::from(failures.min(6)),
        ))
        .await;
    }
}

/// Reads the stream once, after `last_seen`, printing each event; `Ok` when it ended.
async fn stream_read(
    connection: &Connection,
    path: &str,
    last_seen: &mut Option<i64>,
) -> anyhow::Result<()> {
    let response = stream_open(
        connection,
        path,
        last_seen.map(|seen| seen.to_string()),
        "deployment_event_list",
    )
    .await?;
    let mut events = response.bytes_stream().eventsource();
    while let Some(event) = events.next().await {
        let event = event.map_err(|err| {
            Failure::new(Exit::Unavailable, format!("the event stream broke: {err}"))
        })?;
        if event.data.is_empty() {
            continue;
        }
        let parsed: types::DeploymentEventView = serde_json::from_str(&event.data)?;
        if last_seen.is_some_and(|seen| parsed.seq <= seen) {
            continue;
        }
        *last_seen = Some(parsed.seq);
        event_print(connection.args.output, &parsed);
    }
    Ok(())
}

/// Opens the event stream at `path` (of operation `operation`) after `last_event`; an expired
/// session is refreshed once.
pub(super) async fn stream_open(
    connection: &Connection,
    path: &str,
    last_event: Option<String>,
    operation: &str,
) -> anyhow::Result<reqwest::Response> {
    let mut refreshed = false;
    loop {
        let client = connection.client();
        let mut request = client
            .client()
            .get(format!("{}{path}", client.baseurl()))
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(seen) = &last_event {
            request = request.header("last-event-id", seen);
        }
        let response = request.send().await.map_err(|err| {
            connection.server_move_on("gave no answer");
            Failure::new(Exit::Unavailable, unreachable_text(client.baseurl(), &err))
        })?;
        let status = response.status().as_u16();
        if connection.args.verbose {
            eprintln!("bulkhead: {operation} (event stream) -> {status}");
        }
        if matches!(status, 502..=504) {
            connection.server_move_on(&format!("answered {}", response.status()));
        }
        if status == 401 && !refreshed && connection.session_refresh().await? {
            refreshed = true;
            continue;
        }
        if response.status().is_success() {
            return Ok(response);
        }
        let problem = response.json::<types::Problem>().await.ok();
        return fail(
            Exit::for_http_status(status),
            match problem {
                Some(problem) => problem_text(&problem),
                None => format!("the event stream answered {status}"),
            },
        );
    }
}

pub async fn deployment_view(
    connection: &Connection,
    project: Uuid,
    service: Uuid,
    deployment: Uuid,
) -> anyhow::Result<types::DeploymentView> {
    deployment_call!(connection, project, service, deployment, deployment_view)
}

/// One event: a line for people (time, kind, message), or the event as one line of JSON.
pub fn event_print(format: OutputFormat, event: &types::DeploymentEventView) {
    match format {
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string(event).expect("an event serializes")
        ),
        OutputFormat::Table => println!(
            "{}  {:<24} {}",
            event.created_at.format("%H:%M:%S"),
            event.kind,
            event.message
        ),
    }
}
