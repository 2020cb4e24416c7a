//! The control-plane servers a command may send to — the replicas of one control plane, named
//! by `--server` / `BULKHEAD_URL` as a comma-separated list ([`ServerList`], every URL checked
//! before anything is sent), or stored with the credentials — and the sending of one request
//! to them in turn ([`Servers::send`]): to the server that answered last (the first at the
//! start of a command), then to the next while the failure shows the request may be sent
//! again without doubling its effect ([`Miss::resendable`]).
//!
//! It prints which server it moves on from (its URL and why, never a token) with `--verbose`;
//! it does not decide which servers a credential may go to (that is `credentials`).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bulkhead_client::{Client, ClientInfo, Error, Observer, ResponseValue, types};
use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};

use super::connection::{api_failure, error_chain, failure_of, problem_text, unreachable_text};
use super::exit::{Exit, Failure};

/// The servers a command may use, in the order they are tried: at least one, each an HTTPS
/// URL (or plain HTTP to loopback), none twice. Stored as a string when it is one server (as
/// the credentials of older versions hold it), as a list otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "StoredServers", into = "StoredServers")]
pub struct ServerList(Vec<String>);

/// How a [`ServerList`] is written in the credentials file.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum StoredServers {
    One(String),
    Several(Vec<String>),
}

impl ServerList {
    /// The list of `--server` / `BULKHEAD_URL`: URLs separated by commas, each trimmed. An
    /// empty item, or plain HTTP to a host that is not loopback, refuses the whole list.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        Self::from_urls(text.split(',').map(str::trim).map(str::to_owned).collect())
    }

    fn from_urls(urls: Vec<String>) -> anyhow::Result<Self> {
        let mut list: Vec<String> = Vec::with_capacity(urls.len());
        for url in urls {
            if url.is_empty() {
                anyhow::bail!("an empty URL in the list of servers (URLs are separated by commas)");
            }
            bulkhead_common::tls::cleartext_refuse("the server", &url)?;
            if !list.iter().any(|seen| same_server(seen, &url)) {
                list.push(url);
            }
        }
        Ok(Self(list))
    }

    /// The URLs, in the order they are tried.
    pub fn urls(&self) -> &[String] {
        &self.0
    }

    /// Whether every server of `self` is one of `other`'s (a trailing `/` aside).
    pub fn is_subset_of(&self, other: &ServerList) -> bool {
        self.0
            .iter()
            .all(|url| other.0.iter().any(|theirs| same_server(url, theirs)))
    }
}

impl fmt::Display for ServerList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

impl TryFrom<StoredServers> for ServerList {
    type Error = anyhow::Error;

    fn try_from(stored: StoredServers) -> anyhow::Result<Self> {
        match stored {
            StoredServers::One(url) => Self::from_urls(vec![url]),
            StoredServers::Several(urls) if urls.is_empty() => anyhow::bail!("no server"),
            StoredServers::Several(urls) => Self::from_urls(urls),
        }
    }
}

impl From<ServerList> for StoredServers {
    fn from(list: ServerList) -> Self {
        match <[String; 1]>::try_from(list.0) {
            Ok([one]) => StoredServers::One(one),
            Err(several) => StoredServers::Several(several),
        }
    }
}

fn same_server(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// How a request failed without an answer of the server's own: what may send it to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// No connection was made (refused, DNS, TLS handshake, connect timeout): the request was
    /// never delivered.
    NotDelivered,
    /// The connection broke or timed out after the request may have been delivered.
    NoAnswer,
    /// 502, 503 or 504 from something that did not handle the request: a load balancer or a
    /// proxy (an answer that is not a problem of the API's), or a replica that is not ready or
    /// busy (`not_ready`, `busy`).
    NotHandled(StatusCode),
    /// 502, 503 or 504 with another problem of the API's (a provider's failure, or one it
    /// does not document for the operation): the server may have handled the request, and a
    /// write taken effect.
    Failed(StatusCode),
}

impl Miss {
    /// What `error` says about where the request went; `None` for an answer of the server's
    /// own (success or refusal), which goes to no other.
    /// `answered`: the status the answer had, if one came (an answer whose body is not the
    /// API's JSON carries none in `error`).
    pub fn of(error: &Error<types::Problem>, answered: Option<StatusCode>) -> Option<Self> {
        let unready = |status: StatusCode| matches!(status.as_u16(), 502..=504);
        match error {
            // A gateway status the operation documents, with a body that is not a problem of
            // the API's: a load balancer's or proxy's page.
            Error::InvalidResponsePayload(..) if answered.is_some_and(unready) => {
                answered.map(Self::NotHandled)
            }
            Error::CommunicationError(err) if err.is_connect() => Some(Self::NotDelivered),
            Error::CommunicationError(_) | Error::ResponseBodyError(_) => Some(Self::NoAnswer),
            // A problem of Bulkhead's that the API does not document for the operation: which
            // one is unknown, so it may have been handled.
            Error::UnexpectedResponse(response) if unready(response.status()) => {
                let problem = response
                    .headers()
                    .get(reqwest::header::CONTENT_TYPE)
                    .is_some_and(|kind| kind.as_bytes().starts_with(b"application/problem+json"));
                Some(if problem {
                    Self::Failed
                } else {
                    Self::NotHandled
                }(response.status()))
            }
            Error::ErrorResponse(answer) if unready(answer.status()) => {
                Some(match answer.code {
                    types::ErrorCode::NotReady | types::ErrorCode::Busy => Self::NotHandled,
                    _ => Self::Failed,
                }(answer.status()))
            }
            _ => None,
        }
    }

    /// Whether a `method` request that missed so may be sent to another server: a read
    /// always; a write only when it was not delivered or not handled, never after it may
    /// have been applied (a broken connection, a provider's failure).
    pub fn resendable(self, method: &Method) -> bool {
        match self {
            Self::NotDelivered | Self::NotHandled(_) => true,
            Self::NoAnswer | Self::Failed(_) => matches!(*method, Method::GET | Method::HEAD),
        }
    }
}

impl fmt::Display for Miss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotDelivered => f.write_str("could not be reached"),
            Self::NoAnswer => f.write_str("gave no answer"),
            Self::NotHandled(status) | Self::Failed(status) => write!(f, "answered {status}"),
        }
    }
}

/// What the observer of one request saw.
#[derive(Default)]
struct Sent {
    method: Option<Method>,
    answered: Option<StatusCode>,
}

/// The servers of one command, and the one that answered last.
pub struct Servers {
    list: ServerList,
    answering: AtomicUsize,
    verbose: bool,
}

/// The last failure of a request that no server answered as it should, with the servers it
/// missed before.
pub struct Unanswered {
    pub server: String,
    pub error: Error<types::Problem>,
    /// The status of the last server's answer, if one came.
    answered: Option<StatusCode>,
    /// Each server tried before, and how it missed.
    missed: Vec<String>,
    /// Whether the request was not sent on because it may have taken effect (a write).
    kept_back: bool,
}

impl Servers {
    pub fn new(list: ServerList, verbose: bool) -> Self {
        Self {
            list,
            answering: AtomicUsize::new(0),
            verbose,
        }
    }

    pub fn list(&self) -> &ServerList {
        &self.list
    }

    /// The position in the list of the server that answered last.
    pub fn answering(&self) -> usize {
        self.answering.load(Ordering::Relaxed)
    }

    /// Sends `operation` through `clients` (one a server, in the list's order): to the server
    /// that answered last, then to each next one while the failure allows it; the server that
    /// answers is remembered for the requests that follow.
    pub async fn send<T, F>(
        &self,
        clients: &[Client],
        operation: F,
    ) -> Result<ResponseValue<T>, Unanswered>
    where
        F: AsyncFn(&Client) -> Result<ResponseValue<T>, Error<types::Problem>>,
    {
        let urls = self.list.urls();
        let first = self.answering();
        let mut missed = Vec::new();
        for step in 0..urls.len() {
            let index = (first + step) % urls.len();
            let sent = Arc::new(Mutex::new(Sent::default()));
            let client = Client::new_with_client(
                clients[index].baseurl(),
                clients[index].client().clone(),
                self.observer(sent.clone()),
            );
            let error = match operation(&client).await {
                Ok(answer) => {
                    self.answering.store(index, Ordering::Relaxed);
                    return Ok(answer);
                }
                Err(error) => error,
            };
            let Sent { method, answered } =
                std::mem::take(&mut *sent.lock().expect("not poisoned"));
            let miss = Miss::of(&error, answered);
            let resendable =
                matches!((miss, &method), (Some(miss), Some(method)) if miss.resendable(method));
            let next = urls
                .get((index + 1) % urls.len())
                .filter(|_| step + 1 < urls.len());
            match next {
                Some(next) if resendable => {
                    if let (true, Some(miss)) = (self.verbose, miss) {
                        eprintln!("bulkhead: {} {miss}; sending to {next}", urls[index]);
                    }
                    missed.push(attempt_text(&urls[index], &error, answered));
                }
                _ if miss.is_none() => {
                    // The server's own answer (a refusal): what the others missed is no news.
                    self.answering.store(index, Ordering::Relaxed);
                    return Err(Unanswered {
                        server: urls[index].clone(),
                        error,
                        answered,
                        missed: Vec::new(),
                        kept_back: false,
                    });
                }
                _ => {
                    return Err(Unanswered {
                        server: urls[index].clone(),
                        error,
                        answered,
                        missed,
                        kept_back: next.is_some(),
                    });
                }
            }
        }
        unreachable!("the last server's failure returns")
    }

    /// Moves on to the next server after `why` (a failure outside [`Servers::send`], e.g. of
    /// an event stream), saying so with `--verbose`.
    pub fn move_on(&self, why: &str) {
        let urls = self.list.urls();
        if urls.len() < 2 {
            return;
        }
        let from = self.answering();
        let next = (from + 1) % urls.len();
        self.answering.store(next, Ordering::Relaxed);
        if self.verbose {
            eprintln!("bulkhead: {} {why}; sending to {}", urls[from], urls[next]);
        }
    }

    /// The observer of one request: notes its method and its answer's status in `sent`, and
    /// prints each operation and its answer's status with `--verbose` (operation ids and
    /// statuses only).
    fn observer(&self, sent: Arc<Mutex<Sent>>) -> Observer {
        let verbose = self.verbose;
        let answers = sent.clone();
        Observer::new(move |_, request| {
            sent.lock().expect("not poisoned").method = Some(request.method().clone());
        })
        .with_answers(move |operation, status| {
            answers.lock().expect("not poisoned").answered = status;
            if verbose {
                match status {
                    Some(status) => eprintln!("bulkhead: {operation} -> {}", status.as_u16()),
                    None => eprintln!("bulkhead: {operation} -> no answer"),
                }
            }
        })
    }
}

impl Unanswered {
    /// The failure to report: the last server's, as with one server; after several, each
    /// server tried and why.
    pub fn failure(self) -> anyhow::Error {
        // An answer whose body is not the API's (a proxy's page) is known by its status.
        let proxied = match (&self.error, self.answered) {
            (Error::InvalidResponsePayload(..), Some(status)) => Some(status),
            _ => None,
        };
        if self.missed.is_empty() && proxied.is_none() {
            return api_failure(&self.server, self.error);
        }
        let last = attempt_text(&self.server, &self.error, self.answered);
        let exit = match proxied {
            Some(status) => Exit::for_http_status(status.as_u16()),
            None => failure_of(&self.server, self.error).exit,
        };
        if self.missed.is_empty() {
            return Failure::new(exit, last).into();
        }
        let tried = self.missed.len() + 1;
        let mut message = format!(
            "no server answered ({tried} tried): {}; {last}",
            self.missed.join("; ")
        );
        if self.kept_back {
            message.push_str(" (not sent to another server: the write may have been applied)");
        }
        Failure::new(exit, message).into()
    }
}

/// One server's failure, naming it.
fn attempt_text(
    server: &str,
    error: &Error<types::Problem>,
    answered: Option<StatusCode>,
) -> String {
    match error {
        Error::CommunicationError(err) => unreachable_text(server, err),
        Error::ResponseBodyError(err) => {
            format!("{server}'s answer broke off: {}", error_chain(err))
        }
        Error::ErrorResponse(answer) => format!(
            "{server} answered {}: {}",
            answer.status(),
            problem_text(answer)
        ),
        Error::UnexpectedResponse(response) => format!("{server} answered {}", response.status()),
        Error::InvalidResponsePayload(..) if answered.is_some() => format!(
            "{server} answered {} with a body that is not the API's",
            answered.unwrap_or_default()
        ),
        other => format!("{server}: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::AtomicUsize;

    use bulkhead_client::ClientOptions;

    use super::*;

    #[test]
    fn a_list_is_split_on_commas_and_trimmed() {
        let list =
            ServerList::parse(" https://a:8443, https://b:8443 ,http://127.0.0.1:8080").unwrap();
        assert_eq!(
            list.urls(),
            ["https://a:8443", "https://b:8443", "http://127.0.0.1:8080"]
        );
        assert_eq!(
            list.to_string(),
            "https://a:8443,https://b:8443,http://127.0.0.1:8080"
        );
        let one = ServerList::parse("https://a:8443").unwrap();
        assert_eq!(one.urls(), ["https://a:8443"]);
        // The same server twice is tried once.
        let twice = ServerList::parse("https://a:8443,https://a:8443/").unwrap();
        assert_eq!(twice.urls(), ["https://a:8443"]);
    }

    #[test]
    fn an_empty_item_refuses_the_list() {
        for text in [
            "",
            " ",
            "https://a,,https://b",
            "https://a,",
            ",https://a",
            "https://a, ",
        ] {
            let err = ServerList::parse(text).unwrap_err();
            assert!(err.to_string().contains("empty URL"), "{text:?}: {err}");
        }
    }

    #[test]
    fn any_member_in_clear_to_another_host_refuses_the_list() {
        let err = ServerList::parse("https://a:8443,http://b.example.com:8080").unwrap_err();
        assert!(err.to_string().contains("in clear"), "{err}");
        assert!(err.to_string().contains("b.example.com"), "{err}");
        let err = ServerList::parse("http://10.0.0.1,https://a").unwrap_err();
        assert!(err.to_string().contains("in clear"), "{err}");
        let err = ServerList::parse("https://a,ftp://b").unwrap_err();
        assert!(err.to_string().contains("scheme"), "{err}");
        let err = ServerList::parse("https://a,not a url").unwrap_err();
        assert!(err.to_string().contains("not a URL"), "{err}");
        assert!(ServerList::parse("http://localhost:1,http://[::1]:2").is_ok());
    }

    #[test]
    fn a_subset_is_of_the_same_servers() {
        let all = ServerList::parse("https://a,https://b/,https://c").unwrap();
        for subset in [
            "https://a",
            "https://b",
            "https://c/,https://a",
            "https://a,https://b,https://c",
        ] {
            assert!(
                ServerList::parse(subset).unwrap().is_subset_of(&all),
                "{subset}"
            );
        }
        for other in ["https://d", "https://a,https://d", "https://a:444"] {
            assert!(
                !ServerList::parse(other).unwrap().is_subset_of(&all),
                "{other}"
            );
        }
    }

    #[test]
    fn one_server_is_stored_as_a_string_and_several_as_a_list() {
        let one = ServerList::parse("https://a").unwrap();
        assert_eq!(serde_json::to_value(&one).unwrap(), "https://a");
        let several = ServerList::parse("https://a,https://b").unwrap();
        assert_eq!(
            serde_json::to_value(&several).unwrap(),
            serde_json::json!(["https://a", "https://b"])
        );
        for list in [one, several] {
            let back: ServerList =
                serde_json::from_value(serde_json::to_value(&list).unwrap()).unwrap();
            assert_eq!(back, list);
        }
        for bad in [
            serde_json::json!([]),
            serde_json::json!(["https://a", ""]),
            serde_json::json!("http://b.example.com"),
        ] {
            assert!(
                serde_json::from_value::<ServerList>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn reads_are_sent_again_after_any_miss_and_writes_only_when_not_delivered_or_not_handled() {
        let gateway = StatusCode::BAD_GATEWAY;
        for method in [Method::GET, Method::HEAD] {
            for miss in [
                Miss::NotDelivered,
                Miss::NoAnswer,
                Miss::NotHandled(gateway),
                Miss::Failed(gateway),
            ] {
                assert!(miss.resendable(&method), "{method} {miss:?}");
            }
        }
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(Miss::NotDelivered.resendable(&method), "{method}");
            assert!(Miss::NotHandled(gateway).resendable(&method), "{method}");
            assert!(!Miss::NoAnswer.resendable(&method), "{method}");
            assert!(!Miss::Failed(gateway).resendable(&method), "{method}");
        }
    }

    fn problem(status: u16, code: &str) -> Error<types::Problem> {
        let problem: types::Problem = serde_json::from_str(&problem_json(status, code)).unwrap();
        let status = StatusCode::from_u16(status).unwrap();
        Error::ErrorResponse(ResponseValue::new(problem, status, Default::default()))
    }

    #[test]
    fn a_replica_not_ready_did_not_handle_the_request_and_a_providers_failure_did() {
        let unavailable = StatusCode::SERVICE_UNAVAILABLE;
        assert_eq!(
            Miss::of(&problem(503, "not_ready"), None),
            Some(Miss::NotHandled(unavailable))
        );
        assert_eq!(
            Miss::of(&problem(503, "busy"), None),
            Some(Miss::NotHandled(unavailable))
        );
        assert_eq!(
            Miss::of(&problem(503, "provider_unavailable"), None),
            Some(Miss::Failed(unavailable))
        );
        assert_eq!(
            Miss::of(&problem(502, "provider_error"), None),
            Some(Miss::Failed(StatusCode::BAD_GATEWAY))
        );
        // The server's own refusals go to no other server.
        for (status, code) in [
            (500, "internal"),
            (404, "not_found"),
            (401, "unauthenticated"),
            (429, "too_many_attempts"),
        ] {
            assert_eq!(
                Miss::of(&problem(status, code), None),
                None,
                "{status} {code}"
            );
        }
        assert_eq!(
            Miss::of(&Error::InvalidRequest("no name".into()), None),
            None
        );
    }

    /// A port nothing listens on.
    fn closed_port() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    }

    /// A server that answers its connections with `answers` in turn (raw HTTP; `None` closes
    /// the connection once the request is read, without answering), then waits for ever; and
    /// the number of connections it accepted.
    fn server_answering(answers: Vec<Option<String>>) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        std::thread::spawn(move || {
            for answer in answers {
                let (mut stream, _) = listener.accept().unwrap();
                counted.fetch_add(1, Ordering::SeqCst);
                let mut request = [0u8; 8192];
                let _ = stream.read(&mut request).unwrap();
                if let Some(answer) = answer {
                    stream.write_all(answer.as_bytes()).unwrap();
                }
            }
            // Held open: a connection now waits instead of being refused.
            let _ = listener.accept();
        });
        (url, accepted)
    }

    fn answer(status: &str, content_type: &str, body: &str) -> Option<String> {
        Some(format!(
            "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        ))
    }

    fn healthy() -> Option<String> {
        answer("200 OK", "application/json", r#"{"status":"ok"}"#)
    }

    /// A load balancer's 503: not a problem of the API's.
    fn unavailable() -> Option<String> {
        answer(
            "503 Service Unavailable",
            "text/html",
            "<h1>no upstream</h1>",
        )
    }

    fn servers_of(urls: &[&str]) -> (Servers, Vec<Client>) {
        bulkhead_common::tls::crypto_provider_install();
        let list = ServerList::parse(&urls.join(",")).unwrap();
        let clients = list
            .urls()
            .iter()
            .map(|url| Client::with_options(url, ClientOptions::default()).unwrap())
            .collect();
        (Servers::new(list, false), clients)
    }

    #[tokio::test]
    async fn a_read_goes_on_to_the_server_that_answers_and_stays_there() {
        let dead = closed_port();
        let (unready, unready_hits) = server_answering(vec![unavailable(), unavailable()]);
        let (live, live_hits) = server_answering(vec![healthy(), healthy()]);
        let (servers, clients) = servers_of(&[&dead, &unready, &live]);
        let read = async |c: &Client| c.healthz().send().await;
        assert_eq!(
            servers.send(&clients, read).await.ok().unwrap().status,
            "ok"
        );
        assert_eq!(servers.answering(), 2);
        assert_eq!(unready_hits.load(Ordering::SeqCst), 1);
        // The next request goes first to the one that answered.
        assert_eq!(
            servers.send(&clients, read).await.ok().unwrap().status,
            "ok"
        );
        assert_eq!(unready_hits.load(Ordering::SeqCst), 1);
        assert_eq!(live_hits.load(Ordering::SeqCst), 2);
    }

    fn create()
    -> impl AsyncFn(&Client) -> Result<ResponseValue<types::ProjectView>, Error<types::Problem>>
    {
        async |c: &Client| c.project_create().body_map(|b| b.name("shop")).send().await
    }

    #[tokio::test]
    async fn a_write_goes_on_after_a_refused_connection_or_a_load_balancers_503() {
        let dead = closed_port();
        let (unready, _) = server_answering(vec![unavailable()]);
        let (live, live_hits) = server_answering(vec![answer(
            "400 Bad Request",
            "application/problem+json",
            &problem_json(400, "invalid_input"),
        )]);
        let (servers, clients) = servers_of(&[&dead, &unready, &live]);
        let unanswered = servers.send(&clients, create()).await.err().unwrap();
        // The live server's refusal is its answer, reported alone.
        assert_eq!(unanswered.server, live);
        assert_eq!(live_hits.load(Ordering::SeqCst), 1);
        assert_eq!(servers.answering(), 2);
        let message = unanswered.failure().to_string();
        assert!(!message.contains(&dead), "{message}");
    }

    #[tokio::test]
    async fn a_write_is_not_sent_again_after_a_problem_the_operation_does_not_document() {
        let (failing, _) = server_answering(vec![answer(
            "503 Service Unavailable",
            "application/problem+json",
            &problem_json(503, "provider_unavailable"),
        )]);
        let (live, live_hits) = server_answering(vec![healthy()]);
        let (servers, clients) = servers_of(&[&failing, &live]);
        let unanswered = servers.send(&clients, create()).await.err().unwrap();
        assert_eq!(unanswered.server, failing);
        assert_eq!(live_hits.load(Ordering::SeqCst), 0, "the write was sent on");
    }

    fn problem_json(status: u16, code: &str) -> String {
        serde_json::json!({
            "type": "about:blank", "title": "t", "status": status, "detail": "d", "code": code
        })
        .to_string()
    }

    #[tokio::test]
    async fn a_write_is_not_sent_again_once_it_may_have_been_delivered() {
        let dead = closed_port();
        let (silent, _) = server_answering(vec![None]);
        let (live, live_hits) = server_answering(vec![healthy()]);
        let (servers, clients) = servers_of(&[&dead, &silent, &live]);
        let unanswered = servers.send(&clients, create()).await.err().unwrap();
        assert_eq!(unanswered.server, silent);
        assert_eq!(live_hits.load(Ordering::SeqCst), 0, "the write was sent on");
        let message = unanswered.failure().to_string();
        assert!(
            message.contains(&dead) && message.contains(&silent),
            "{message}"
        );
        assert!(message.contains("may have been applied"), "{message}");
        assert!(!message.contains(&live), "{message}");
    }

    #[tokio::test]
    async fn when_every_server_misses_each_is_named_with_why() {
        let first = closed_port();
        let (second, _) = server_answering(vec![unavailable()]);
        let (servers, clients) = servers_of(&[&first, &second]);
        let unanswered = servers
            .send(&clients, async |c: &Client| c.project_list().send().await)
            .await
            .err()
            .unwrap();
        let failure = unanswered.failure();
        let exit = failure.downcast_ref::<Failure>().unwrap().exit;
        assert_eq!(exit, crate::exit::Exit::Unavailable);
        let message = failure.to_string();
        assert!(message.contains("2 tried"), "{message}");
        assert!(
            message.contains(&format!("cannot reach {first}")),
            "{message}"
        );
        assert!(
            message.contains(&format!("{second} answered 503")),
            "{message}"
        );
    }
}
