//! An instance's output, read from CloudWatch Logs: the streams `INSTANCE-ID/stdout` and
//! `INSTANCE-ID/stderr` of the log group `log_group` (where the CloudWatch agent ships it),
//! each read with `GetLogEvents` and merged by timestamp (stdout first at equal times).
//!
//! AWS's forward tokens are opaque and point after the last event of a read, but a page may
//! deliver only part of what was read (the other stream's lines come first, or the bounds
//! stop it). So a cursor keeps, per stream, where its last read started (the forward token,
//! or `since`'s time) and how many of the events from there were delivered:
//! `a1|FROM~SKIP|FROM~SKIP` (stdout, then stderr), FROM `t:TOKEN` or `s:MILLISECONDS`. The
//! next page reads from there again and skips those; once a read is delivered whole, the
//! stream's cursor moves to the forward token AWS gave after it. A stream that does not exist
//! (yet) reads as empty.
//!
//! Without a cursor, the newest lines: each stream's last `max-lines` (`startFromHead`
//! false), merged, and the newest that fit the bounds; the cursor is then each stream's
//! forward token. With `since-ms`, each stream from that time (`startTime`).

use std::time::SystemTime;

use bulkhead_sdk::http::Request;
use bulkhead_sdk::{LogLine, LogPage, LogRequest, LogStream, ProviderError};
use serde::Deserialize;
use serde_json::json;

use crate::sigv4::{self, Credentials};
use crate::{config_or, map_error, service_endpoint, status_error};

const CURSOR_VERSION: &str = "a1";
const TARGET: &str = "Logs_20140328.GetLogEvents";
const CONTENT_TYPE: &str = "application/x-amz-json-1.1";
const SERVICE: &str = "logs";
const DEFAULT_LOG_GROUP: &str = "bulkhead-instances";
/// `limit`'s maximum at AWS.
const MAX_LIMIT: u64 = 10_000;
/// Reads of one stream for a page at most (a cursor that skips a whole read moves on).
const MAX_READS: usize = 3;

/// Where a stream's reads start.
#[derive(Debug, Clone, PartialEq, Eq)]
enum From {
    /// A forward token AWS gave.
    Token(String),
    /// The first event at or after this time (milliseconds since the epoch).
    Since(u64),
}

/// Where a stream was read to: from `from`, `skip` events were delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StreamCursor {
    from: From,
    skip: u64,
}

/// Where a page of both streams ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    stdout: StreamCursor,
    stderr: StreamCursor,
}

/// `%`, `|` and `~` escaped, so that any token fits the cursor's syntax.
fn escape(text: &str) -> String {
    text.replace('%', "%25")
        .replace('|', "%7C")
        .replace('~', "%7E")
}

fn unescape(text: &str) -> String {
    text.replace("%7C", "|")
        .replace("%7E", "~")
        .replace("%25", "%")
}

impl StreamCursor {
    fn parse(text: &str) -> Option<StreamCursor> {
        let (from, skip) = text.rsplit_once('~')?;
        let from = if let Some(token) = from.strip_prefix("t:") {
            From::Token(unescape(token))
        } else {
            From::Since(from.strip_prefix("s:")?.parse().ok()?)
        };
        Some(StreamCursor {
            from,
            skip: skip.parse().ok()?,
        })
    }

    fn render(&self) -> String {
        let from = match &self.from {
            From::Token(token) => format!("t:{}", escape(token)),
            From::Since(ms) => format!("s:{ms}"),
        };
        format!("{from}~{}", self.skip)
    }
}

impl Cursor {
    pub fn parse(text: &str) -> Result<Cursor, ProviderError> {
        let invalid = || ProviderError::InvalidSpec(format!("`{text}` is not a cursor of aws's"));
        let parts: Vec<&str> = text.split('|').collect();
        let [CURSOR_VERSION, stdout, stderr] = parts[..] else {
            return Err(invalid());
        };
        Ok(Cursor {
            stdout: StreamCursor::parse(stdout).ok_or_else(invalid)?,
            stderr: StreamCursor::parse(stderr).ok_or_else(invalid)?,
        })
    }

    fn render(&self) -> String {
        format!(
            "{CURSOR_VERSION}|{}|{}",
            self.stdout.render(),
            self.stderr.render()
        )
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EventsPage {
    #[serde(default)]
    events: Vec<Event>,
    #[serde(default)]
    next_forward_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Event {
    #[serde(default)]
    timestamp: u64,
    #[serde(default)]
    message: String,
}

/// What one `GetLogEvents` of a stream gave: where it read from, the events after those
/// already delivered, the forward token after them all, and whether it was cut by `limit`
/// (there may be more).
#[derive(Debug)]
struct StreamRead {
    base: StreamCursor,
    events: Vec<Event>,
    next: Option<String>,
    full: bool,
}

impl StreamRead {
    /// Nothing read (the stream does not exist yet).
    fn nothing(base: StreamCursor) -> Self {
        StreamRead {
            base,
            events: Vec::new(),
            next: None,
            full: false,
        }
    }
}

/// The JSON error of a JSON-protocol service: `{"__type": "[ns#]Code", "message": ...}`.
#[derive(Debug, Default, Deserialize)]
struct JsonError {
    #[serde(default, rename = "__type")]
    kind: String,
    #[serde(default, alias = "Message")]
    message: String,
}

/// One CloudWatch Logs client call: the region, where, and as whom.
struct Logs<'a> {
    credentials: &'a Credentials,
    region: &'a str,
    group: String,
}

impl Logs<'_> {
    /// `GetLogEvents` of `stream` with `params`; `None` when the stream does not exist.
    fn get_log_events(
        &self,
        stream: &str,
        params: serde_json::Value,
    ) -> Result<Option<EventsPage>, ProviderError> {
        let mut body = params;
        body["logGroupName"] = json!(self.group);
        body["logStreamName"] = json!(stream);
        let body = body.to_string();
        let length = body.len();
        let url = format!(
            "{}/",
            service_endpoint("logs_endpoint", SERVICE, self.region)
        );
        let request = Request::post(&url)
            .header("content-type", CONTENT_TYPE)
            .header("x-amz-target", TARGET)
            .body(body);
        let request = sigv4::sign(
            request,
            self.credentials,
            self.region,
            SERVICE,
            SystemTime::now(),
        )?
        .header("content-length", length.to_string());
        let response = request.send()?;
        let what = format!(
            "CloudWatch Logs GetLogEvents of {stream} in {}",
            self.region
        );
        if (200..300).contains(&response.status) {
            return serde_json::from_slice(&response.body)
                .map(Some)
                .map_err(|err| {
                    ProviderError::Internal(format!("{what}: unreadable answer ({err})"))
                });
        }
        let parsed: Option<JsonError> = serde_json::from_slice(&response.body).ok();
        let Some(error) = parsed.filter(|error| !error.kind.is_empty()) else {
            let excerpt: String = response.text().chars().take(300).collect();
            let message = format!("{what}: HTTP {}: {excerpt}", response.status);
            return Err(status_error(&response, message));
        };
        let code = error.kind.rsplit('#').next().unwrap_or_default();
        if code == "ResourceNotFoundException" && error.message.contains("log stream") {
            return Ok(None);
        }
        let message = format!(
            "{what}: {code} (HTTP {}): {}",
            response.status, error.message
        );
        bulkhead_sdk::debug!("{message}");
        Err(map_error(
            response.status,
            code,
            message,
            response.retry_after_secs(),
        ))
    }

    /// The events of `stream` after those `cursor` delivered, at most `want` of them.
    fn read_on(
        &self,
        stream: &str,
        cursor: &StreamCursor,
        want: u64,
    ) -> Result<StreamRead, ProviderError> {
        let mut base = cursor.clone();
        for _ in 0..MAX_READS {
            let limit = (base.skip + want).clamp(1, MAX_LIMIT);
            let mut params = json!({"limit": limit, "startFromHead": true});
            match &base.from {
                From::Token(token) => params["nextToken"] = json!(token),
                From::Since(ms) => params["startTime"] = json!(ms),
            }
            let Some(page) = self.get_log_events(stream, params)? else {
                return Ok(StreamRead::nothing(base));
            };
            let read = page.events.len() as u64;
            let full = read >= limit;
            // Every event of this read was delivered already: on from the token after it.
            if full
                && base.skip >= read
                && let Some(token) = page.next_forward_token.clone()
            {
                base = StreamCursor {
                    from: From::Token(token),
                    skip: base.skip - read,
                };
                continue;
            }
            let mut events = page.events;
            events.drain(..(base.skip as usize).min(events.len()));
            return Ok(StreamRead {
                base,
                events,
                next: page.next_forward_token,
                full,
            });
        }
        Ok(StreamRead::nothing(base))
    }

    /// The last `want` events of `stream`.
    fn read_newest(&self, stream: &str, want: u64) -> Result<StreamRead, ProviderError> {
        let limit = want.clamp(1, MAX_LIMIT);
        let params = json!({"limit": limit, "startFromHead": false});
        let Some(page) = self.get_log_events(stream, params)? else {
            return Ok(StreamRead::nothing(StreamCursor {
                from: From::Since(0),
                skip: 0,
            }));
        };
        Ok(StreamRead {
            base: StreamCursor {
                from: From::Since(0),
                skip: 0,
            },
            events: page.events,
            next: page.next_forward_token,
            full: false,
        })
    }
}

/// The events of both reads merged by time (stdout first at equal times), each with its
/// stream; when a read was cut by its limit, nothing later than its last event (the other
/// stream's later events would come before its unread ones).
fn merged(stdout: &StreamRead, stderr: &StreamRead) -> Vec<(LogStream, LogLine)> {
    let horizon = [stdout, stderr]
        .iter()
        .filter(|read| read.full)
        .filter_map(|read| read.events.last().map(|event| event.timestamp))
        .min();
    let line = |stream, event: &Event| {
        let text = event.message.strip_suffix('\n').unwrap_or(&event.message);
        (
            stream,
            LogLine {
                time_ms: event.timestamp,
                stream,
                text: text.to_owned(),
            },
        )
    };
    let (mut out, mut err) = (
        stdout.events.iter().peekable(),
        stderr.events.iter().peekable(),
    );
    let mut lines = Vec::new();
    loop {
        let next = match (out.peek(), err.peek()) {
            (Some(o), Some(e)) if e.timestamp < o.timestamp => {
                line(LogStream::Stderr, err.next().expect("peeked"))
            }
            (Some(_), _) => line(LogStream::Stdout, out.next().expect("peeked")),
            (None, Some(_)) => line(LogStream::Stderr, err.next().expect("peeked")),
            (None, None) => break,
        };
        if horizon.is_some_and(|horizon| next.1.time_ms > horizon) {
            break;
        }
        lines.push(next);
    }
    lines
}

/// A stream's cursor once `delivered` of `read`'s events (the first ones) were delivered.
fn moved(read: &StreamRead, delivered: usize) -> StreamCursor {
    match &read.next {
        Some(token) if delivered > 0 && delivered == read.events.len() => StreamCursor {
            from: From::Token(token.clone()),
            skip: 0,
        },
        _ => StreamCursor {
            from: read.base.from.clone(),
            skip: read.base.skip + delivered as u64,
        },
    }
}

/// A page of the output of EC2 instance `instance_id` in `region`.
pub fn logs(
    credentials: &Credentials,
    region: &str,
    instance_id: &str,
    cursor: Option<Cursor>,
    request: &LogRequest,
) -> Result<LogPage, ProviderError> {
    let client = Logs {
        credentials,
        region,
        group: config_or("log_group", DEFAULT_LOG_GROUP),
    };
    let (stdout_name, stderr_name) = (
        format!("{instance_id}/stdout"),
        format!("{instance_id}/stderr"),
    );
    let want = u64::from(request.max_lines.max(1));
    let from = match (cursor, request.since_ms) {
        (Some(cursor), _) => cursor,
        (None, Some(since)) => {
            let start = StreamCursor {
                from: From::Since(since),
                skip: 0,
            };
            Cursor {
                stdout: start.clone(),
                stderr: start,
            }
        }
        (None, None) => {
            let stdout = client.read_newest(&stdout_name, want)?;
            let stderr = client.read_newest(&stderr_name, want)?;
            let lines = request.newest(merged(&stdout, &stderr), |(_, line)| line);
            let at = |read: &StreamRead| StreamCursor {
                from: read.next.clone().map_or(From::Since(0), From::Token),
                skip: 0,
            };
            let next = Cursor {
                stdout: at(&stdout),
                stderr: at(&stderr),
            };
            return Ok(LogPage {
                lines: lines.into_iter().map(|(_, line)| line).collect(),
                next: next.render(),
                gap: false,
            });
        }
    };
    let stdout = client.read_on(&stdout_name, &from.stdout, want)?;
    let stderr = client.read_on(&stderr_name, &from.stderr, want)?;
    let merged = merged(&stdout, &stderr);
    let lines = request.bounded(merged.iter().map(|(_, line)| line.clone()));
    let delivered = &merged[..lines.len()];
    let count = |stream| delivered.iter().filter(|(s, _)| *s == stream).count();
    let next = Cursor {
        stdout: moved(&stdout, count(LogStream::Stdout)),
        stderr: moved(&stderr, count(LogStream::Stderr)),
    };
    let next = match &request.after {
        Some(after) if lines.is_empty() => after.clone(),
        _ => next.render(),
    };
    Ok(LogPage {
        lines,
        next,
        gap: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back() {
        let cursor = Cursor {
            stdout: StreamCursor {
                from: From::Token("f/3837|~%x/s".into()),
                skip: 3,
            },
            stderr: StreamCursor {
                from: From::Since(1_777_000_000_000),
                skip: 0,
            },
        };
        let text = cursor.render();
        assert_eq!(text, "a1|t:f/3837%7C%7E%25x/s~3|s:1777000000000~0");
        assert_eq!(Cursor::parse(&text).unwrap(), cursor);
        for bad in [
            "",
            "a1",
            "a1|t:x~1",
            "a1|t:x|s:1~0",
            "a2|t:x~0|t:y~0",
            "a1|u:x~0|t:y~0",
        ] {
            assert!(Cursor::parse(bad).is_err(), "{bad}");
        }
    }
}
