//! How a client command reaches the server: the flags every client command takes
//! ([`GlobalArgs`]), where its server and token come from (flag, then `BULKHEAD_URL` /
//! `BULKHEAD_TOKEN`, then the credentials file), and [`Connection::call`], which sends one
//! operation of the generated client, refreshes an expired session once, and turns a refusal
//! into a [`Failure`] with its exit status. It never prints a token.

use std::path::PathBuf;
use std::sync::Mutex;

use bulkhead_client::{Client, ClientOptions, Error, Observer, ResponseValue, types};

use super::credentials::{Auth, Credentials, credentials_load, credentials_save};
use super::exit::{Exit, Failure, fail};
use super::output::OutputFormat;

/// The server used when neither a flag, `BULKHEAD_URL` nor a login names one.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// Flags of every client command.
#[derive(clap::Args, Clone, Debug)]
pub struct GlobalArgs {
    /// The server's URL [default: BULKHEAD_URL, else the one logged in to, else
    /// http://127.0.0.1:8080].
    #[arg(long, env = "BULKHEAD_URL", global = true)]
    pub server: Option<String>,
    /// `table` for people, `json` for scripts (the API's answers as JSON).
    #[arg(long, value_enum, default_value_t = OutputFormat::Table, global = true)]
    pub output: OutputFormat,
    /// Print each operation sent and its answer's status to stderr.
    #[arg(long, global = true)]
    pub verbose: bool,
    /// A PEM file of the CA certificates to verify the server with (a private CA), instead of
    /// the platform's roots [default: BULKHEAD_CA_FILE, else the one given at login].
    #[arg(long = "ca-file", env = "BULKHEAD_CA_FILE", global = true)]
    pub ca_file: Option<PathBuf>,
}

impl GlobalArgs {
    /// The observer that `--verbose` prints with (operation ids and statuses only).
    pub fn observer(&self) -> Observer {
        if !self.verbose {
            return Observer::default();
        }
        Observer::new(|_, _| {}).with_answers(|operation, status| match status {
            Some(status) => eprintln!("bulkhead: {operation} -> {}", status.as_u16()),
            None => eprintln!("bulkhead: {operation} -> no answer"),
        })
    }

    /// A client without a credential (to log in), verifying the server with `ca_file`.
    pub fn anonymous(&self, server: &str, ca_file: Option<PathBuf>) -> anyhow::Result<Client> {
        client_make(self, server, None, ca_file)
    }
}

/// A logged-in client of one server.
pub struct Connection {
    pub args: GlobalArgs,
    server: String,
    /// The CA file the server is verified with: `--ca-file`, else the one stored at login.
    ca_file: Option<PathBuf>,
    auth: Mutex<Auth>,
    /// Whether refreshed tokens go back to the credentials file (not for `BULKHEAD_TOKEN`).
    stored: bool,
    client: Mutex<Client>,
}

impl Connection {
    /// Connects as `BULKHEAD_TOKEN`, else as the stored credentials; fails with
    /// [`Exit::NotLoggedIn`] when there are neither.
    pub fn open(args: &GlobalArgs) -> anyhow::Result<Self> {
        let from_env = std::env::var("BULKHEAD_TOKEN")
            .ok()
            .filter(|token| !token.is_empty());
        let (credentials, stored) = match from_env {
            Some(token) => (
                Credentials {
                    server: DEFAULT_SERVER.into(),
                    ca_file: None,
                    auth: Auth::ApiToken { token },
                },
                false,
            ),
            None => match credentials_load()? {
                Some(credentials) => (credentials, true),
                None => {
                    return fail(
                        Exit::NotLoggedIn,
                        "not logged in: run `bulkhead login` (or set BULKHEAD_TOKEN)",
                    );
                }
            },
        };
        // A token from the environment goes where the environment says; stored credentials
        // only to the server that issued them.
        let server = if stored {
            credentials.server_for(args.server.as_deref())?
        } else {
            args.server.clone().unwrap_or(credentials.server)
        };
        let ca_file = args.ca_file.clone().or(credentials.ca_file);
        let client = client_make(args, &server, Some(&credentials.auth), ca_file.clone())?;
        Ok(Self {
            args: args.clone(),
            server,
            ca_file,
            auth: Mutex::new(credentials.auth),
            stored,
            client: Mutex::new(client),
        })
    }

    /// The client as it is now (after any refresh).
    pub fn client(&self) -> Client {
        self.client.lock().expect("not poisoned").clone()
    }

    /// Sends one operation; on a 401 with a session, refreshes it once and sends it again.
    pub async fn call<T, F>(&self, operation: F) -> anyhow::Result<T>
    where
        F: AsyncFn(&Client) -> Result<ResponseValue<T>, Error<types::Problem>>,
    {
        let answer = operation(&self.client()).await;
        let answer = match answer {
            Err(err)
                if err.status().map(|s| s.as_u16()) == Some(401)
                    && self.session_refresh().await? =>
            {
                operation(&self.client()).await
            }
            answer => answer,
        };
        answer
            .map(ResponseValue::into_inner)
            .map_err(|err| api_failure(&self.server, err))
    }

    /// Exchanges the session's refresh token for new tokens and stores them: `false` when
    /// the credential is not a session.
    pub async fn session_refresh(&self) -> anyhow::Result<bool> {
        let refresh_token = match &*self.auth.lock().expect("not poisoned") {
            Auth::Session { refresh_token, .. } => refresh_token.clone(),
            Auth::ApiToken { .. } => return Ok(false),
        };
        let renewed = self
            .args
            .anonymous(&self.server, self.ca_file.clone())?
            .session_refresh()
            .body_map(|b| b.refresh_token(refresh_token))
            .send()
            .await
            .map_err(|err| match err.status().map(|s| s.as_u16()) {
                Some(401) => Failure::new(
                    Exit::NotLoggedIn,
                    "the session has ended: run `bulkhead login`",
                )
                .into(),
                _ => api_failure(&self.server, err),
            })?
            .into_inner();
        let auth = Auth::Session {
            access_token: renewed.access_token,
            refresh_token: renewed.refresh_token,
        };
        *self.client.lock().expect("not poisoned") =
            client_make(&self.args, &self.server, Some(&auth), self.ca_file.clone())?;
        if self.stored {
            credentials_save(&Credentials {
                server: self.server.clone(),
                ca_file: self.ca_file.clone(),
                auth: auth.clone(),
            })?;
        }
        *self.auth.lock().expect("not poisoned") = auth;
        Ok(true)
    }
}

/// A client of `server`, with `auth`'s token if any. A plain-HTTP server that is not loopback,
/// an unreadable CA file or a token that cannot be a header are refused before anything is
/// sent.
fn client_make(
    args: &GlobalArgs,
    server: &str,
    auth: Option<&Auth>,
    ca_file: Option<PathBuf>,
) -> anyhow::Result<Client> {
    if let Err(err) = bulkhead_common::tls::cleartext_refuse("the server", server) {
        return fail(Exit::Usage, format!("{err:#}"));
    }
    let options = ClientOptions {
        token: auth.map(|auth| auth.bearer().to_owned()),
        ca_file,
        observer: args.observer(),
    };
    Client::with_options(server, options).or_else(|err| match auth {
        Some(_) if err.to_string().contains("header value") => fail(
            Exit::NotLoggedIn,
            "the stored token is not a valid header value: run `bulkhead login`",
        ),
        _ => fail(Exit::Usage, err.to_string()),
    })
}

/// How a problem the server answered is told to the user: title, detail and code.
pub fn problem_text(problem: &types::Problem) -> String {
    format!("{}: {} ({})", problem.title, problem.detail, problem.code)
}

/// A refusal or failure of an operation as a [`Failure`]: the problem's title, detail and code
/// for an answer the server documents, the status otherwise.
pub fn api_failure(server: &str, err: Error<types::Problem>) -> anyhow::Error {
    let failure = match err {
        Error::ErrorResponse(answer) => {
            let exit = Exit::for_http_status(answer.status().as_u16());
            let problem = answer.into_inner();
            Failure::new(exit, problem_text(&problem))
        }
        Error::UnexpectedResponse(response) => Failure::new(
            Exit::for_http_status(response.status().as_u16()),
            format!("{server} answered {}", response.status()),
        ),
        Error::CommunicationError(err) => Failure::new(
            Exit::Unavailable,
            format!("cannot reach {server}: {}", error_chain(&err)),
        ),
        // The generated client checks the schema's constraints before sending.
        Error::InvalidRequest(reason) => {
            Failure::new(Exit::InvalidInput, format!("invalid input: {reason}"))
        }
        other => Failure::new(Exit::Unexpected, other.to_string()),
    };
    failure.into()
}

/// An error with its causes, `a: b: c`.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}
