//! Cloud Logging's `entries.list` (`POST /v2/entries:list`), serving what the simulated
//! instances printed ([`crate::instances::Output`]) as Google serves a VM's logs: one entry per
//! line, of resource type `gce_instance`, in the log `projects/P/logs/stdout` or
//! `projects/P/logs/stderr`.
//!
//! It checks what Cloud Logging checks, in Google's newer error style (`status` and
//! `google.rpc.ErrorInfo` details, no `errors` list): the bearer token and its scopes
//! (`logging.read`, `logging.admin`, `cloud-platform` or `cloud-platform.read-only`), the
//! faults (a suspended project is 403 `PERMISSION_DENIED` with reason `CONSUMER_SUSPENDED`),
//! `resourceNames` (only the simulator's project; another is 403), `orderBy`, `pageSize`
//! (at most 1000, default 50) and `pageToken` (only with the query it came from). The filter
//! is the subset the plugin sends — terms joined by `AND`: `resource.type="gce_instance"`,
//! `resource.labels.instance_id="ID"`, `timestamp>="RFC3339"`, `timestamp>"RFC3339"` —
//! anything else is 400 `INVALID_ARGUMENT`, as Google refuses a filter it cannot read.
//!
//! Entries are ordered by timestamp, then by `insertId` (as Google documents for equal
//! timestamps), and a page token is the position after the page's last entry, so that pages
//! neither repeat nor skip entries while instances keep printing.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::{CLOUD_PLATFORM_READONLY_SCOPE, CLOUD_PLATFORM_SCOPE, Refusal, Sim, retry_after};
use crate::instances::{Output, OutputLine, OutputStream};

/// The OAuth scope that reads logs.
pub const LOGGING_READ_SCOPE: &str = "https://www.googleapis.com/auth/logging.read";
const LOGGING_ADMIN_SCOPE: &str = "https://www.googleapis.com/auth/logging.admin";
const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 1000;

/// The output of an instance, kept after the instance is deleted (as Cloud Logging keeps a
/// deleted VM's logs).
pub(super) struct InstanceLog {
    pub(super) zone: String,
    pub(super) output: Output,
    /// Makes the instance's `insertId`s its own.
    pub(super) insert_prefix: String,
}

/// An entry's place in the order: its time (nanoseconds since the epoch) and `insertId`.
type Position = (i128, String);

/// One line of output as an entry, with its position.
struct Entry {
    position: Position,
    json: Value,
}

fn nanos(time: std::time::SystemTime) -> i128 {
    match time.duration_since(std::time::UNIX_EPOCH) {
        Ok(after) => after.as_nanos() as i128,
        Err(before) => -(before.duration().as_nanos() as i128),
    }
}

fn rfc3339_nanos(time: std::time::SystemTime) -> String {
    DateTime::<Utc>::from(time).to_rfc3339_opts(SecondsFormat::Nanos, true)
}

impl Sim {
    fn entry(&self, instance_id: u64, log: &InstanceLog, line: &OutputLine) -> Entry {
        let insert_id = format!("{}{:012x}", log.insert_prefix, line.seq);
        let (log_id, severity) = match line.stream {
            OutputStream::Stdout => ("stdout", "INFO"),
            OutputStream::Stderr => ("stderr", "ERROR"),
        };
        let received = line.time + std::time::Duration::from_millis(3);
        let json = json!({
            "logName": format!("projects/{}/logs/{log_id}", self.project),
            "resource": {
                "type": "gce_instance",
                "labels": {
                    "instance_id": instance_id.to_string(),
                    "zone": log.zone,
                    "project_id": self.project,
                },
            },
            "timestamp": rfc3339_nanos(line.time),
            "receiveTimestamp": rfc3339_nanos(received),
            "insertId": insert_id,
            "textPayload": line.text,
            "severity": severity,
        });
        Entry {
            position: (nanos(line.time), insert_id),
            json,
        }
    }
}

/// A refusal as Cloud Logging words it.
fn logging_refusal(sim: &Sim, refusal: Refusal) -> Response {
    match refusal {
        Refusal::Failing => logging_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "UNAVAILABLE",
            None,
            "The service is currently unavailable.",
        ),
        Refusal::RateLimited(secs) => {
            let mut response = logging_error(
                StatusCode::TOO_MANY_REQUESTS,
                "RESOURCE_EXHAUSTED",
                Some("RATE_LIMIT_EXCEEDED"),
                &format!(
                    "Quota exceeded for quota metric 'Read requests' and limit 'Read requests \
                     per minute' of service 'logging.googleapis.com' for consumer \
                     'project:{}'.",
                    sim.project
                ),
            );
            retry_after(&mut response, secs);
            response
        }
        Refusal::MissingCredentials => with_www_authenticate(logging_error(
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            Some("CREDENTIALS_MISSING"),
            "Request is missing required authentication credential. Expected OAuth 2 access \
             token, login cookie or other valid authentication credential. See \
             https://developers.google.com/identity/sign-in/web/devconsole-project.",
        )),
        Refusal::InvalidCredentials => with_www_authenticate(logging_error(
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            None,
            "Request had invalid authentication credentials. Expected OAuth 2 access token, \
             login cookie or other valid authentication credential. See \
             https://developers.google.com/identity/sign-in/web/devconsole-project.",
        )),
        Refusal::InsufficientScopes => logging_error(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            Some("ACCESS_TOKEN_SCOPE_INSUFFICIENT"),
            "Request had insufficient authentication scopes.",
        ),
        Refusal::Suspended => logging_error(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            Some("CONSUMER_SUSPENDED"),
            &format!(
                "Permission denied: Consumer 'projects/{}' has been suspended.",
                sim.project
            ),
        ),
    }
}

/// `{"error":{"code","message","status","details":[ErrorInfo]}}`, Google's newer shape.
fn logging_error(code: StatusCode, status: &str, reason: Option<&str>, message: &str) -> Response {
    let mut error = json!({
        "code": code.as_u16(),
        "message": message,
        "status": status,
    });
    if let Some(reason) = reason {
        error["details"] = json!([{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "googleapis.com",
            "metadata": {"service": "logging.googleapis.com"},
        }]);
    }
    (code, Json(json!({ "error": error }))).into_response()
}

fn with_www_authenticate(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        "Bearer realm=\"https://accounts.google.com/\""
            .parse()
            .expect("a valid header"),
    );
    response
}

fn invalid_argument(message: &str) -> Response {
    logging_error(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", None, message)
}

/// The filter terms the simulator understands.
#[derive(Debug, Default)]
struct Filter {
    resource_type: Option<String>,
    instance_id: Option<String>,
    /// Entries at or after (`true`: strictly after) this time.
    since: Option<(i128, bool)>,
}

impl Filter {
    fn parse(filter: &str) -> Result<Filter, String> {
        let mut parsed = Filter::default();
        let filter = filter.trim();
        if filter.is_empty() {
            return Ok(parsed);
        }
        for term in filter.split(" AND ") {
            let term = term.trim();
            let unreadable = || format!("Unparseable filter: unsupported term '{term}'");
            let field_end = term
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
                .ok_or_else(unreadable)?;
            let (field, rest) = term.split_at(field_end);
            let rest = rest.trim_start();
            let (operator, value) = [">=", ">", "="]
                .iter()
                .find_map(|op| rest.strip_prefix(op).map(|value| (*op, value.trim())))
                .ok_or_else(unreadable)?;
            let value = value
                .strip_prefix('"')
                .and_then(|value| value.strip_suffix('"'))
                .filter(|value| !value.contains('"'))
                .ok_or_else(unreadable)?;
            match (field, operator) {
                ("resource.type", "=") => parsed.resource_type = Some(value.to_owned()),
                ("resource.labels.instance_id", "=") => {
                    parsed.instance_id = Some(value.to_owned());
                }
                ("timestamp", ">=" | ">") => {
                    let time = DateTime::parse_from_rfc3339(value).map_err(|_| {
                        format!("Invalid timestamp in filter: '{value}' is not RFC 3339")
                    })?;
                    let at = time.timestamp_nanos_opt().ok_or_else(unreadable)? as i128;
                    parsed.since = Some((at, operator == ">"));
                }
                _ => return Err(unreadable()),
            }
        }
        Ok(parsed)
    }

    fn matches(&self, entry: &Entry, instance_id: u64) -> bool {
        self.resource_type
            .as_deref()
            .is_none_or(|kind| kind == "gce_instance")
            && self
                .instance_id
                .as_deref()
                .is_none_or(|id| id == instance_id.to_string())
            && self.since.is_none_or(|(at, strictly)| {
                let time = entry.position.0;
                if strictly { time > at } else { time >= at }
            })
    }
}

/// A page token: the position after which the next page starts, and the query it belongs to.
fn page_token(after: &Position, query: u64) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(format!("{query:x}.{}.{}", after.0, after.1))
}

fn page_token_parse(token: &str, query: u64) -> Option<Position> {
    let text = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()?;
    let text = String::from_utf8(text).ok()?;
    let mut parts = text.splitn(3, '.');
    let belongs = u64::from_str_radix(parts.next()?, 16).ok()? == query;
    let nanos = parts.next()?.parse().ok()?;
    let insert_id = parts.next()?.to_owned();
    belongs.then_some((nanos, insert_id))
}

/// `POST /v2/entries:list`.
pub(super) async fn entries_list(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let allowed = [
        LOGGING_READ_SCOPE,
        LOGGING_ADMIN_SCOPE,
        CLOUD_PLATFORM_SCOPE,
        CLOUD_PLATFORM_READONLY_SCOPE,
    ];
    if let Err(refusal) = sim.authorize(&headers, &allowed).await {
        return logging_refusal(&sim, refusal);
    }
    let body: Value = match serde_json::from_slice(&body) {
        Ok(body @ Value::Object(_)) => body,
        _ => return invalid_argument("Invalid JSON payload received."),
    };
    let field = |name: &str| body.get(name).and_then(Value::as_str).unwrap_or_default();
    let names: Vec<&str> = body
        .get("resourceNames")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if names.is_empty() {
        return invalid_argument("resourceNames: at least one resource name is required");
    }
    for name in &names {
        let Some(project) = name.strip_prefix("projects/") else {
            return invalid_argument(&format!("Invalid resource name: '{name}'"));
        };
        if project != sim.project {
            return logging_error(
                StatusCode::FORBIDDEN,
                "PERMISSION_DENIED",
                None,
                "The caller does not have permission",
            );
        }
    }
    let filter = match Filter::parse(field("filter")) {
        Ok(filter) => filter,
        Err(message) => return invalid_argument(&message),
    };
    let descending = match field("orderBy").trim() {
        "" | "timestamp asc" => false,
        "timestamp desc" => true,
        other => {
            return invalid_argument(&format!(
                "Invalid orderBy '{other}': only 'timestamp asc' and 'timestamp desc' are \
                 supported"
            ));
        }
    };
    let page_size = match body.get("pageSize") {
        None | Some(Value::Null) => DEFAULT_PAGE_SIZE,
        Some(size) => match size.as_i64() {
            Some(0) => DEFAULT_PAGE_SIZE,
            Some(size) if (1..=MAX_PAGE_SIZE as i64).contains(&size) => size as usize,
            _ => return invalid_argument(&format!("Invalid page size {size}: at most 1000")),
        },
    };
    let query = {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (&names, field("filter"), descending).hash(&mut hasher);
        hasher.finish()
    };
    let after = match field("pageToken") {
        "" => None,
        token => match page_token_parse(token, query) {
            Some(position) => Some(position),
            None => return invalid_argument("Invalid page token."),
        },
    };

    let mut entries: Vec<Entry> = {
        let logs = sim.logs.lock().expect("not poisoned");
        logs.iter()
            .flat_map(|(id, log)| {
                log.output
                    .lines()
                    .iter()
                    .map(|line| (*id, sim.entry(*id, log, line)))
                    .collect::<Vec<_>>()
            })
            .filter(|(id, entry)| filter.matches(entry, *id))
            .map(|(_, entry)| entry)
            .collect()
    };
    entries.sort_by(|a, b| a.position.cmp(&b.position));
    if descending {
        entries.reverse();
    }
    if let Some(after) = &after {
        entries.retain(|entry| {
            if descending {
                entry.position < *after
            } else {
                entry.position > *after
            }
        });
    }
    let more = entries.len() > page_size;
    entries.truncate(page_size);
    let mut answer = json!({});
    if more && let Some(last) = entries.last() {
        answer["nextPageToken"] = json!(page_token(&last.position, query));
    }
    if !entries.is_empty() {
        answer["entries"] = Value::Array(entries.into_iter().map(|entry| entry.json).collect());
    }
    Json(answer).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_read_or_refused() {
        let filter = Filter::parse(
            "resource.type=\"gce_instance\" AND resource.labels.instance_id = \"42\" AND \
             timestamp>=\"2026-05-01T10:20:30.123456789Z\"",
        )
        .unwrap();
        assert_eq!(filter.resource_type.as_deref(), Some("gce_instance"));
        assert_eq!(filter.instance_id.as_deref(), Some("42"));
        let (at, strictly) = filter.since.unwrap();
        assert!(!strictly);
        assert_eq!(at % 1_000_000_000, 123_456_789);
        assert!(
            Filter::parse("timestamp>\"2026-05-01T10:20:30Z\"")
                .unwrap()
                .since
                .unwrap()
                .1
        );
        for refused in [
            "severity>=ERROR",
            "logName=\"projects/p/logs/stdout\"",
            "timestamp<\"2026-05-01T10:20:30Z\"",
            "timestamp>=\"yesterday\"",
            "resource.type=gce_instance",
            "resource.type=\"a\" OR resource.type=\"b\"",
        ] {
            assert!(Filter::parse(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn page_tokens_belong_to_their_query() {
        let position = (1_777_000_000_123_456_789, "abc.def".to_owned());
        let token = page_token(&position, 7);
        assert_eq!(page_token_parse(&token, 7), Some(position));
        assert_eq!(page_token_parse(&token, 8), None);
        assert_eq!(page_token_parse("garbage", 7), None);
    }
}
