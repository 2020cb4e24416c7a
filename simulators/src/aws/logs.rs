//! CloudWatch Logs' `GetLogEvents`, serving what the simulated instances printed
//! ([`crate::instances::Output`]) as the CloudWatch agent would ship it: the log group
//! [`LOG_GROUP`], with the streams `INSTANCE-ID/stdout` and `INSTANCE-ID/stderr` of each
//! instance (made when it launches, kept after it is terminated).
//!
//! The JSON protocol as AWS speaks it: `POST /` with `X-Amz-Target: Logs_20140328.GetLogEvents`
//! and `Content-Type: application/x-amz-json-1.1`, signed with SigV4 for the service `logs`
//! ([`super::signature`]); errors are `{"__type": CODE, "message": ...}` with HTTP 400 (500 for
//! `ServiceUnavailableException`). Signature refusals are EC2's, renamed as JSON services name
//! them (`UnrecognizedClientException`, `InvalidSignatureException`, ...). Faults: a suspended
//! account is `AccessDeniedException` saying the account is blocked (an assumption: AWS does
//! not document what CloudWatch Logs answers a suspended account), throttling is
//! `ThrottlingException` (with `Retry-After`), failing is `ServiceUnavailableException`.
//!
//! Events are ordered by timestamp, then by the order they were printed. Tokens are positions
//! between two events: `f/…` reads forward from its position, `b/…` backward; as at AWS, a
//! forward read that finds nothing new answers the token it was given.

use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Ec2Error, Shared, signature};
use crate::instances::{Output, OutputStream};

/// The log group the instances' streams are in.
pub const LOG_GROUP: &str = "bulkhead-instances";
/// The `X-Amz-Target` prefix of CloudWatch Logs' API version.
pub(super) const TARGET_PREFIX: &str = "Logs_20140328.";
const SERVICE: &str = "logs";
const CONTENT_TYPE: &str = "application/x-amz-json-1.1";
/// `limit`'s maximum and default, as at AWS.
const MAX_LIMIT: usize = 10_000;

/// A CloudWatch Logs error.
#[derive(Debug)]
struct LogsError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    retry_after: Option<u32>,
}

impl LogsError {
    fn bad_request(kind: &'static str, message: impl Into<String>) -> Self {
        LogsError {
            status: StatusCode::BAD_REQUEST,
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    fn invalid_parameter(message: impl Into<String>) -> Self {
        Self::bad_request("InvalidParameterException", message)
    }

    fn not_found(message: &str) -> Self {
        Self::bad_request("ResourceNotFoundException", message)
    }
}

impl From<Ec2Error> for LogsError {
    /// A signature refusal, as JSON-protocol services name it.
    fn from(err: Ec2Error) -> Self {
        let kind = match err.code {
            "MissingAuthenticationToken" => "MissingAuthenticationTokenException",
            "AuthFailure" => "UnrecognizedClientException",
            "IncompleteSignature" => "IncompleteSignatureException",
            _ => "InvalidSignatureException",
        };
        let message = if kind == "UnrecognizedClientException" {
            "The security token included in the request is invalid.".to_owned()
        } else {
            err.message
        };
        Self::bad_request(kind, message)
    }
}

impl IntoResponse for LogsError {
    fn into_response(self) -> Response {
        let body = json!({"__type": self.kind, "message": self.message}).to_string();
        let mut response = (
            self.status,
            [
                (header::CONTENT_TYPE, CONTENT_TYPE.to_owned()),
                (
                    header::HeaderName::from_static("x-amzn-requestid"),
                    uuid::Uuid::new_v4().to_string(),
                ),
            ],
            body,
        )
            .into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, secs.into());
        }
        response
    }
}

/// An event's place: its timestamp (ms) and its place in the instance's output.
type Position = (u64, u64);

fn token(direction: char, position: Position) -> String {
    format!("{direction}/{:020}{:020}/s", position.0, position.1)
}

/// The direction (`f` or `b`) and position of a token.
fn token_parse(text: &str) -> Option<(char, Position)> {
    let (direction, rest) = text.split_once('/')?;
    let digits = rest.strip_suffix("/s")?;
    if digits.len() != 40 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let direction = match direction {
        "f" => 'f',
        "b" => 'b',
        _ => return None,
    };
    Some((
        direction,
        (digits[..20].parse().ok()?, digits[20..].parse().ok()?),
    ))
}

/// `POST /` with an `X-Amz-Target`: one CloudWatch Logs call.
pub(super) async fn endpoint(
    sim: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    match call(sim, method, uri, headers, body).await {
        Ok(answer) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, CONTENT_TYPE)],
            answer.to_string(),
        )
            .into_response(),
        Err(err) => {
            tracing::debug!(kind = err.kind, message = %err.message, "CloudWatch Logs simulator error");
            err.into_response()
        }
    }
}

async fn call(
    sim: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Value, LogsError> {
    let faults = sim.faults.apply().await;
    signature::verify(
        &sim.credentials,
        &sim.region,
        SERVICE,
        method,
        uri,
        headers,
        body,
        std::time::SystemTime::now(),
    )?;
    if faults.suspended {
        return Err(LogsError::bad_request(
            "AccessDeniedException",
            "This account is currently blocked and not recognized as a valid account. Please \
             contact aws-verification@amazon.com if you have questions.",
        ));
    }
    if let Some(secs) = faults.rate_limited_secs {
        let mut err = LogsError::bad_request("ThrottlingException", "Rate exceeded");
        err.retry_after = Some(secs);
        return Err(err);
    }
    if faults.failing {
        return Err(LogsError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "ServiceUnavailableException",
            message: "The service cannot complete the request.".into(),
            retry_after: None,
        });
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if content_type.split(';').next().map(str::trim) != Some(CONTENT_TYPE) {
        return Err(LogsError::bad_request(
            "SerializationException",
            format!("Unsupported content type '{content_type}': expected {CONTENT_TYPE}"),
        ));
    }
    let target = headers
        .get("x-amz-target")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let request: Value = serde_json::from_slice(body)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| LogsError::bad_request("SerializationException", "Malformed JSON body"))?;
    match target.strip_prefix(TARGET_PREFIX) {
        Some("GetLogEvents") => get_log_events(sim, &request),
        _ => Err(LogsError::bad_request(
            "UnknownOperationException",
            format!("Unknown operation '{target}'"),
        )),
    }
}

/// The output and stream of a log stream's name, `INSTANCE-ID/stdout` or `INSTANCE-ID/stderr`.
fn stream_of(sim: &Shared, name: &str) -> Option<(Output, OutputStream)> {
    let (instance_id, stream) = name.rsplit_once('/')?;
    let stream = match stream {
        "stdout" => OutputStream::Stdout,
        "stderr" => OutputStream::Stderr,
        _ => return None,
    };
    let outputs = sim.log_streams.lock().expect("not poisoned");
    Some((outputs.get(instance_id)?.clone(), stream))
}

fn get_log_events(sim: &Shared, request: &Value) -> Result<Value, LogsError> {
    let text = |name: &str| {
        request
            .get(name)
            .and_then(Value::as_str)
            .filter(|value| !value.is_empty())
            .ok_or_else(|| {
                LogsError::invalid_parameter(format!("1 validation error detected: Value at '{name}' failed to satisfy constraint: Member must not be null"))
            })
    };
    let number = |name: &str| -> Result<Option<u64>, LogsError> {
        match request.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => value.as_u64().map(Some).ok_or_else(|| {
                LogsError::invalid_parameter(format!("Invalid value for {name}: {value}"))
            }),
        }
    };
    let group = text("logGroupName")?;
    let stream_name = text("logStreamName")?;
    let start_time = number("startTime")?;
    let end_time = number("endTime")?;
    let limit = match number("limit")? {
        None => MAX_LIMIT,
        Some(limit) if (1..=MAX_LIMIT as u64).contains(&limit) => limit as usize,
        Some(limit) => {
            return Err(LogsError::invalid_parameter(format!(
                "1 validation error detected: Value '{limit}' at 'limit' failed to satisfy \
                 constraint: Member must have value between 1 and 10000"
            )));
        }
    };
    let from_head = request
        .get("startFromHead")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let given = match request.get("nextToken").and_then(Value::as_str) {
        None => None,
        Some(text) => Some((
            text,
            token_parse(text).ok_or_else(|| {
                LogsError::invalid_parameter("The specified nextToken is invalid.")
            })?,
        )),
    };
    if group != LOG_GROUP {
        return Err(LogsError::not_found(
            "The specified log group does not exist.",
        ));
    }
    let (output, stream) = stream_of(sim, stream_name)
        .ok_or_else(|| LogsError::not_found("The specified log stream does not exist."))?;

    let mut events: Vec<(Position, String)> = output
        .lines()
        .into_iter()
        .filter(|line| line.stream == stream)
        .map(|line| {
            let ms = line
                .time
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_millis() as u64);
            ((ms, line.seq), line.text)
        })
        .filter(|((ms, _), _)| {
            start_time.is_none_or(|start| *ms >= start) && end_time.is_none_or(|end| *ms < end)
        })
        .collect();
    events.sort();
    let page: Vec<(Position, String)> = match given {
        Some((_, ('f', after))) => events
            .into_iter()
            .filter(|(position, _)| *position > after)
            .take(limit)
            .collect(),
        Some((_, (_, before))) => {
            events.retain(|(position, _)| *position < before);
            let skip = events.len().saturating_sub(limit);
            events.split_off(skip)
        }
        None if from_head => events.into_iter().take(limit).collect(),
        None => {
            let skip = events.len().saturating_sub(limit);
            events.split_off(skip)
        }
    };
    let origin = (start_time.unwrap_or(0), 0);
    let forward = match (page.last(), given) {
        (Some((last, _)), _) => token('f', *last),
        (None, Some((text, ('f', _)))) => text.to_owned(),
        (None, _) => token('f', origin),
    };
    let backward = match (page.first(), given) {
        (Some((first, _)), _) => token('b', *first),
        (None, Some((text, ('b', _)))) => text.to_owned(),
        (None, _) => token('b', origin),
    };
    let events: Vec<Value> = page
        .into_iter()
        .map(|((ms, _), message)| {
            json!({"timestamp": ms, "message": message, "ingestionTime": ms + 5})
        })
        .collect();
    Ok(json!({
        "events": events,
        "nextForwardToken": forward,
        "nextBackwardToken": backward,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_read_back() {
        let forward = token('f', (1_777_000_000_123, 42));
        assert_eq!(forward.len(), 44);
        assert_eq!(token_parse(&forward), Some(('f', (1_777_000_000_123, 42))));
        assert_eq!(token_parse(&token('b', (1, 2))), Some(('b', (1, 2))));
        for bad in [
            "",
            "f/12/s",
            "x/0000000000000000000000000000000000000000/s",
            "garbage",
        ] {
            assert_eq!(token_parse(bad), None, "{bad}");
        }
    }
}
