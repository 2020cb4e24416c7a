//! `bulkhead logs`: the lines a service's instances printed, newest first page or from a time,
//! and followed (`--follow`: the logs' event stream, reopened after its last event when it
//! drops). Instances whose provider cannot be read now are named on stderr, once each time
//! that changes.

use std::time::Duration;

use bulkhead_client::types;
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use uuid::Uuid;

use super::connection::{Connection, GlobalArgs};
use super::deployments::ServiceTarget;
use super::exit::{Exit, Failure, fail};
use super::follow::{reconnecting, stream_open};
use super::output::OutputFormat;

#[derive(clap::Args)]
#[command(after_help = "Examples:
  bulkhead logs -p shop -s web                    # the newest 100 lines
  bulkhead logs -p shop -s web --since 10m -n 1000
  bulkhead logs -p shop -s web --deployment 7 --follow
  bulkhead logs -p shop -s web --instance web-7-k3x9 -o json")]
pub struct LogsArgs {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(flatten)]
    target: ServiceTarget,
    /// Only the instances of this deployment (its number or id).
    #[arg(long)]
    deployment: Option<String>,
    /// Only this instance (its key).
    #[arg(long)]
    instance: Option<String>,
    /// The lines printed since this long ago (`30s`, `10m`, `2h`, `1d`) instead of the newest.
    #[arg(long, value_parser = duration_parse)]
    since: Option<Duration>,
    /// Lines to read (1 to 1000); with --since, pages of this many until the end.
    #[arg(short = 'n', long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    lines: u32,
    /// Go on printing new lines as they come, until interrupted.
    #[arg(short, long)]
    follow: bool,
}

/// `30s`, `10m`, `2h`, `1d`.
fn duration_parse(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration such as 30s, 10m, 2h or 1d"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(format!("`{text}`: the unit is one of s, m, h, d")),
    };
    Ok(Duration::from_secs(number.saturating_mul(seconds)))
}

pub async fn logs(args: LogsArgs) -> anyhow::Result<()> {
    let connection = Connection::open(&args.global)?;
    let target = args.target.resolve(&connection).await?;
    let (project, service) = (target.project, target.service);
    let deployment = match &args.deployment {
        None => None,
        Some(wanted) => Some(deployment_id(&connection, project, service, wanted).await?),
    };
    let since = args.since.map(|ago| {
        chrono::Utc::now() - chrono::Duration::from_std(ago).unwrap_or(chrono::Duration::MAX)
    });
    let format = args.global.output;
    let mut missing = Vec::new();
    let mut cursor: Option<String> = None;
    // A page, or with --since every page up to now.
    loop {
        let page = connection
            .call(async |c| {
                let mut request = c
                    .service_logs()
                    .project_id(project)
                    .service_id(service)
                    .limit(args.lines);
                if let Some(deployment) = deployment {
                    request = request.deployment(deployment);
                }
                if let Some(instance) = &args.instance {
                    request = request.instance(instance.clone());
                }
                match &cursor {
                    Some(cursor) => request = request.cursor(cursor.clone()),
                    None => {
                        if let Some(since) = since {
                            request = request.since(since);
                        }
                    }
                }
                request.send().await
            })
            .await?;
        page_print(format, &page, &mut missing);
        let more = since.is_some() && page.lines.len() == args.lines as usize;
        cursor = Some(page.next_cursor);
        if !more {
            break;
        }
    }
    if !args.follow {
        return Ok(());
    }
    let mut query = Vec::new();
    if let Some(deployment) = deployment {
        query.push(format!("deployment={deployment}"));
    }
    if let Some(instance) = &args.instance {
        query.push(format!("instance={instance}"));
    }
    let path = format!(
        "/v1/projects/{project}/services/{service}/logs?{}",
        query.join("&")
    );
    reconnecting(&connection, &mut cursor, async |cursor| {
        stream_read(&connection, &path, cursor, &mut missing, format).await?;
        Ok(false) // followed until interrupted
    })
    .await
}

/// Reads the log stream once, after `cursor`, printing each page; `Ok` when it ended.
async fn stream_read(
    connection: &Connection,
    path: &str,
    cursor: &mut Option<String>,
    missing: &mut Vec<(String, String)>,
    format: OutputFormat,
) -> anyhow::Result<()> {
    let response = stream_open(connection, path, cursor.clone(), "service_logs").await?;
    let mut events = response.bytes_stream().eventsource();
    while let Some(event) = events.next().await {
        let event = event.map_err(|err| {
            Failure::new(Exit::Unavailable, format!("the log stream broke: {err}"))
        })?;
        if event.data.is_empty() {
            continue;
        }
        let page: types::LogPageView = serde_json::from_str(&event.data)?;
        page_print(format, &page, missing);
        *cursor = Some(page.next_cursor);
    }
    Ok(())
}

/// Prints a page's lines, and on stderr the instances left out when they changed.
fn page_print(
    format: OutputFormat,
    page: &types::LogPageView,
    missing: &mut Vec<(String, String)>,
) {
    for line in &page.lines {
        match format {
            OutputFormat::Json => println!(
                "{}",
                serde_json::to_string(line).expect("a line serializes")
            ),
            OutputFormat::Table => println!(
                "{} {} {:<6} {}",
                line.time.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
                line.instance_key,
                line.stream,
                line.text
            ),
        }
    }
    for key in &page.gaps {
        eprintln!("bulkhead: older lines of {key} are no longer kept by its provider");
    }
    let now: Vec<(String, String)> = page
        .missing
        .iter()
        .map(|gone| (gone.instance_key.clone(), gone.detail.clone()))
        .collect();
    if now != *missing {
        for gone in &page.missing {
            eprintln!(
                "bulkhead: no lines from {} (provider {}): {} ({})",
                gone.instance_key, gone.provider, gone.detail, gone.code
            );
        }
        if page.missing.is_empty() && !missing.is_empty() {
            eprintln!("bulkhead: every instance's lines come again");
        }
        *missing = now;
    }
}

/// The id of the service's deployment `wanted` (its number or id).
async fn deployment_id(
    connection: &Connection,
    project: Uuid,
    service: Uuid,
    wanted: &str,
) -> anyhow::Result<Uuid> {
    if let Ok(id) = wanted.parse() {
        return Ok(id);
    }
    let Ok(number) = wanted.trim_start_matches('#').parse::<i64>() else {
        return fail(
            Exit::Usage,
            format!("`{wanted}` is neither a deployment's number nor its id"),
        );
    };
    let mut page_cursor: Option<String> = None;
    loop {
        let page = connection
            .call(async |c| {
                let mut request = c
                    .deployment_list()
                    .project_id(project)
                    .service_id(service)
                    .order(types::ListOrder::Desc)
                    .limit(100);
                if let Some(cursor) = &page_cursor {
                    request = request.cursor(cursor.clone());
                }
                request.send().await
            })
            .await?;
        if let Some(found) = page.items.iter().find(|d| d.number == number) {
            return Ok(found.id);
        }
        match page.next_cursor {
            Some(next) => page_cursor = Some(next),
            None => {
                return fail(
                    Exit::NotFound,
                    format!("the service has no deployment #{number}"),
                );
            }
        }
    }
}
