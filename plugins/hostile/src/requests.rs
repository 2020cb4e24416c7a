//! Requests over `wasi:http` itself, past what the SDK's one-at-a-time client does: many at
//! once, with the request options' timeouts set, left in flight when the call returns, or
//! with a request body the server never reads.

use bulkhead_sdk::bindings::wasi::clocks::monotonic_clock;
use bulkhead_sdk::bindings::wasi::http::outgoing_handler;
use bulkhead_sdk::bindings::wasi::http::types::{
    ErrorCode, Fields, FutureIncomingResponse, IncomingResponse, Method, OutgoingBody,
    OutgoingRequest, RequestOptions, Scheme,
};
use bulkhead_sdk::bindings::wasi::io::poll;
use bulkhead_sdk::bindings::wasi::io::streams::StreamError;

/// The timeouts a request asks for, in milliseconds (0: not set).
pub struct Timeouts {
    pub connect_ms: u64,
    pub first_byte_ms: u64,
    pub between_bytes_ms: u64,
}

/// `COUNT:HOLD_MS:CONNECT_MS:FIRST_BYTE_MS:BETWEEN_BYTES_MS:URL`: opens COUNT GET requests to
/// URL at once, waits up to HOLD_MS for their answers (reading each body that comes to its
/// end), and reports each request's outcome, in order: `pending`, `status=200 bytes=N`, or the
/// error code that ended it. The requests still pending are left to the host (never dropped).
pub fn many(spec: &str) -> Result<String, String> {
    let mut fields = spec.splitn(6, ':');
    let mut number = || -> Result<u64, String> {
        let field = fields.next().unwrap_or_default();
        field
            .parse()
            .map_err(|_| format!("`{field}` is not a number"))
    };
    let (count, hold_ms) = (number()?, number()?);
    let timeouts = Timeouts {
        connect_ms: number()?,
        first_byte_ms: number()?,
        between_bytes_ms: number()?,
    };
    let url = fields.next().ok_or("no URL")?;
    let mut outcomes: Vec<Option<String>> = Vec::new();
    let mut waiting: Vec<(usize, FutureIncomingResponse)> = Vec::new();
    for index in 0..count as usize {
        match open(url, &timeouts, None) {
            Ok(future) => {
                outcomes.push(None);
                waiting.push((index, future));
            }
            Err(code) => outcomes.push(Some(named(&code))),
        }
    }
    let hold = monotonic_clock::subscribe_duration(hold_ms * 1_000_000);
    while !waiting.is_empty() {
        let ready = {
            let subscriptions: Vec<_> = waiting
                .iter()
                .map(|(_, future)| future.subscribe())
                .collect();
            let mut pollables: Vec<_> = subscriptions.iter().collect();
            pollables.push(&hold);
            poll::poll(&pollables)
        };
        let mut answered: Vec<usize> = ready
            .into_iter()
            .map(|position| position as usize)
            .filter(|position| *position < waiting.len())
            .collect();
        if answered.is_empty() {
            break;
        }
        answered.sort_unstable();
        for position in answered.into_iter().rev() {
            let (index, future) = waiting.swap_remove(position);
            outcomes[index] = Some(match future.get() {
                Some(Ok(Ok(response))) => read(response),
                Some(Ok(Err(code))) => named(&code),
                Some(Err(())) | None => "no response".into(),
            });
        }
    }
    // A hostile plugin keeps what is still in flight: the host must end it with the call.
    std::mem::forget(waiting);
    Ok(outcomes
        .into_iter()
        .map(|outcome| outcome.unwrap_or_else(|| "pending".into()))
        .collect::<Vec<_>>()
        .join(","))
}

/// `MEGABYTES:URL`: posts a body of MEGABYTES to URL, written as fast as the host takes it.
/// Against a server that never reads, the writes block until the call's deadline.
pub fn upload(spec: &str) -> Result<String, String> {
    let (megabytes, url) = spec.split_once(':').ok_or("MEGABYTES:URL")?;
    let megabytes: usize = megabytes.parse().map_err(|_| "MEGABYTES is not a number")?;
    let body_written = std::cell::Cell::new(0usize);
    let no_timeouts = Timeouts {
        connect_ms: 0,
        first_byte_ms: 0,
        between_bytes_ms: 0,
    };
    let future = open(
        url,
        &no_timeouts,
        Some(&|body: &OutgoingBody| {
            let stream = body
                .write()
                .map_err(|()| "body stream taken twice".to_owned())?;
            let chunk = [b'x'; 4096];
            for _ in 0..megabytes * 256 {
                stream
                    .blocking_write_and_flush(&chunk)
                    .map_err(|err| format!("write failed: {err:?}"))?;
                body_written.set(body_written.get() + chunk.len());
            }
            Ok(())
        }),
    )
    .map_err(|code| named(&code))?;
    future.subscribe().block();
    let outcome = match future.get() {
        Some(Ok(Ok(response))) => read(response),
        Some(Ok(Err(code))) => named(&code),
        Some(Err(())) | None => "no response".into(),
    };
    Ok(format!("wrote {} bytes; {outcome}", body_written.get()))
}

type BodyWriter<'a> = &'a dyn Fn(&OutgoingBody) -> Result<(), String>;

/// Hands one request to the host: GET, or POST with the body `write` writes.
fn open(
    url: &str,
    timeouts: &Timeouts,
    write: Option<BodyWriter<'_>>,
) -> Result<FutureIncomingResponse, ErrorCode> {
    let invalid = || ErrorCode::HttpRequestUriInvalid;
    let (scheme, rest) = url.split_once("://").ok_or_else(invalid)?;
    let split = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    let request = OutgoingRequest::new(Fields::new());
    let scheme = if scheme == "https" {
        Scheme::Https
    } else {
        Scheme::Http
    };
    request.set_scheme(Some(&scheme)).map_err(|()| invalid())?;
    request
        .set_authority(Some(authority))
        .map_err(|()| invalid())?;
    request
        .set_path_with_query(Some(if path.is_empty() { "/" } else { path }))
        .map_err(|()| invalid())?;
    let body = match write {
        Some(_) => {
            request.set_method(&Method::Post).map_err(|()| invalid())?;
            Some(request.body().map_err(|()| invalid())?)
        }
        None => None,
    };
    let options = RequestOptions::new();
    let nanos = |ms: u64| (ms > 0).then_some(ms * 1_000_000);
    let _ = options.set_connect_timeout(nanos(timeouts.connect_ms));
    let _ = options.set_first_byte_timeout(nanos(timeouts.first_byte_ms));
    let _ = options.set_between_bytes_timeout(nanos(timeouts.between_bytes_ms));
    let future = outgoing_handler::handle(request, Some(options))?;
    if let (Some(body), Some(write)) = (body, write) {
        // A refused or failed request cannot take its body: its response says why.
        if write(&body).is_ok() {
            let _ = OutgoingBody::finish(body, None);
        }
    }
    Ok(future)
}

/// Reads a response's body to its end: `status=S bytes=N`, or where it stopped and why.
fn read(response: IncomingResponse) -> String {
    let status = response.status();
    let Ok(body) = response.consume() else {
        return format!("status={status} body taken twice");
    };
    let mut bytes = 0;
    let ended = {
        let Ok(stream) = body.stream() else {
            return format!("status={status} body stream taken twice");
        };
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => bytes += chunk.len(),
                Err(StreamError::Closed) => break None,
                Err(StreamError::LastOperationFailed(err)) => {
                    break Some(
                        bulkhead_sdk::bindings::wasi::http::types::http_error_code(&err)
                            .map_or_else(|| err.to_debug_string(), |code| named(&code)),
                    );
                }
            }
        }
    };
    match ended {
        None => format!("status={status} bytes={bytes}"),
        Some(why) => format!("status={status} bytes={bytes} then {why}"),
    }
}

/// An error code as the tests name it: `ConnectionLimitReached`, not `ErrorCode::…`.
fn named(code: &ErrorCode) -> String {
    let debug = format!("{code:?}");
    debug
        .strip_prefix("ErrorCode::")
        .map_or(debug.clone(), str::to_owned)
}
