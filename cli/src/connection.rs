//! How a client command reaches the control plane: the flags every client command takes
//! ([`GlobalArgs`]), where its servers and token come from (flag, then `BULKHEAD_URL` /
//! `BULKHEAD_TOKEN`, then the credentials file), and [`Connection::call`], which sends one
//! operation of the generated client to the servers in turn (see `servers`: the next one when
//! a server does not answer), refreshes an expired session once, and turns a refusal into a
//! [`Failure`] with its exit status. It never prints a token.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bulkhead_client::{Client, ClientOptions, Error, ResponseValue, types};

use super::credentials::{Auth, Credentials, credentials_load, credentials_save};
use super::exit::{Exit, Failure, fail};
use super::output::OutputFormat;
use super::servers::{ServerList, Servers, Unanswered};

/// The server used when neither a flag, `BULKHEAD_URL` nor a login names one.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// Flags of every client command.
#[derive(clap::Args, Clone, Debug)]
pub struct GlobalArgs {
    /// The server's URL, or the URLs of the control plane's replicas separated by commas:
    /// each request goes to the next when one does not answer [default: BULKHEAD_URL, else
    /// those logged in to, else http://127.0.0.1:8080].
    #[arg(long, env = "BULKHEAD_URL", global = true, value_name = "URL[,URL...]",
          value_parser = ServerList::parse)]
    pub server: Option<ServerList>,
    /// `table` for people, `json` for scripts (the API's answers as JSON).
    #[arg(long, value_enum, default_value_t = OutputFormat::Table, global = true)]
    pub output: OutputFormat,
    /// Print each operation sent and its answer's status to stderr, and each server moved on
    /// from.
    #[arg(long, global = true)]
    pub verbose: bool,
    /// A PEM file of the CA certificates to verify the server with (a private CA), instead of
    /// the platform's roots [default: BULKHEAD_CA_FILE, else the one given at login].
    #[arg(long = "ca-file", env = "BULKHEAD_CA_FILE", global = true)]
    pub ca_file: Option<PathBuf>,
}

impl GlobalArgs {
    /// The servers `list` of one command, saying with `--verbose` when it moves on.
    pub fn servers(&self, list: ServerList) -> Servers {
        Servers::new(list, self.verbose)
    }
}

/// [`DEFAULT_SERVER`] as a list.
pub fn default_servers() -> ServerList {
    ServerList::parse(DEFAULT_SERVER).expect("the default server is loopback")
}

/// A logged-in client of the control plane's servers.
pub struct Connection {
    pub args: GlobalArgs,
    servers: Servers,
    /// The servers the stored credentials were issued for (stored again after a refresh):
    /// `servers` may be a part of them.
    issued_for: ServerList,
    /// The CA file the servers are verified with: `--ca-file`, else the one stored at login.
    ca_file: Option<PathBuf>,
    auth: Mutex<Auth>,
    /// Whether refreshed tokens go back to the credentials file (not for `BULKHEAD_TOKEN`).
    stored: bool,
    /// One client a server, in the list's order, with the token as it is now.
    clients: Mutex<Vec<Client>>,
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
                    servers: default_servers(),
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
        // only to the servers that issued them.
        let list = if stored {
            credentials.server_for(args.server.as_ref())?
        } else {
            args.server.clone().unwrap_or(credentials.servers.clone())
        };
        let ca_file = args.ca_file.clone().or(credentials.ca_file);
        let clients = clients_make(&list, Some(&credentials.auth), ca_file.as_deref())?;
        Ok(Self {
            args: args.clone(),
            servers: args.servers(list),
            issued_for: credentials.servers,
            ca_file,
            auth: Mutex::new(credentials.auth),
            stored,
            clients: Mutex::new(clients),
        })
    }

    /// The client of the server that answered last, as it is now (after any refresh).
    pub fn client(&self) -> Client {
        self.clients.lock().expect("not poisoned")[self.servers.answering()].clone()
    }

    /// Moves on to the next server after `why`: for requests sent outside [`Connection::call`]
    /// (the event stream).
    pub fn server_move_on(&self, why: &str) {
        self.servers.move_on(why);
    }

    fn clients_now(&self) -> Vec<Client> {
        self.clients.lock().expect("not poisoned").clone()
    }

    /// Sends one operation, to the next server when one does not answer; on a 401 with a
    /// session, refreshes it once and sends it again.
    pub async fn call<T, F>(&self, operation: F) -> anyhow::Result<T>
    where
        F: AsyncFn(&Client) -> Result<ResponseValue<T>, Error<types::Problem>>,
    {
        let answer = self.servers.send(&self.clients_now(), &operation).await;
        let answer = match answer {
            Err(unanswered)
                if unanswered.error.status().map(|s| s.as_u16()) == Some(401)
                    && self.session_refresh().await? =>
            {
                self.servers.send(&self.clients_now(), &operation).await
            }
            answer => answer,
        };
        answer
            .map(ResponseValue::into_inner)
            .map_err(Unanswered::failure)
    }

    /// Exchanges the session's refresh token for new tokens (at the server that answers) and
    /// stores them: `false` when the credential is not a session.
    pub async fn session_refresh(&self) -> anyhow::Result<bool> {
        let refresh_token = match &*self.auth.lock().expect("not poisoned") {
            Auth::Session { refresh_token, .. } => refresh_token.clone(),
            Auth::ApiToken { .. } => return Ok(false),
        };
        let anonymous = clients_make(self.servers.list(), None, self.ca_file.as_deref())?;
        let renewed = self
            .servers
            .send(&anonymous, async |c| {
                c.session_refresh()
                    .body_map(|b| b.refresh_token(refresh_token.clone()))
                    .send()
                    .await
            })
            .await
            .map_err(
                |unanswered| match unanswered.error.status().map(|s| s.as_u16()) {
                    Some(401) => Failure::new(
                        Exit::NotLoggedIn,
                        "the session has ended: run `bulkhead login`",
                    )
                    .into(),
                    _ => unanswered.failure(),
                },
            )?
            .into_inner();
        let auth = Auth::Session {
            access_token: renewed.access_token,
            refresh_token: renewed.refresh_token,
        };
        *self.clients.lock().expect("not poisoned") =
            clients_make(self.servers.list(), Some(&auth), self.ca_file.as_deref())?;
        if self.stored {
            credentials_save(&Credentials {
                servers: self.issued_for.clone(),
                ca_file: self.ca_file.clone(),
                auth: auth.clone(),
            })?;
        }
        *self.auth.lock().expect("not poisoned") = auth;
        Ok(true)
    }
}

/// A client of each server of `list`, in its order, with `auth`'s token if any (none: to log
/// in or out). An unreadable CA file or a token that cannot be a header are refused before
/// anything is sent.
pub fn clients_make(
    list: &ServerList,
    auth: Option<&Auth>,
    ca_file: Option<&Path>,
) -> anyhow::Result<Vec<Client>> {
    list.urls()
        .iter()
        .map(|server| {
            let options = ClientOptions {
                token: auth.map(|auth| auth.bearer().to_owned()),
                ca_file: ca_file.map(Path::to_path_buf),
                // Each request gets its observer from `Servers::send`.
                observer: Default::default(),
            };
            Client::with_options(server, options).or_else(|err| match auth {
                Some(_) if err.to_string().contains("header value") => fail(
                    Exit::NotLoggedIn,
                    "the stored token is not a valid header value: run `bulkhead login`",
                ),
                _ => fail(Exit::Usage, err.to_string()),
            })
        })
        .collect()
}

/// How a problem the server answered is told to the user: title, detail and code.
pub fn problem_text(problem: &types::Problem) -> String {
    format!("{}: {} ({})", problem.title, problem.detail, problem.code)
}

/// A refusal or failure of an operation as a [`Failure`]: the problem's title, detail and code
/// for an answer the server documents, the status otherwise.
pub fn api_failure(server: &str, err: Error<types::Problem>) -> anyhow::Error {
    failure_of(server, err).into()
}

/// [`api_failure`], as the [`Failure`] it is.
pub fn failure_of(server: &str, err: Error<types::Problem>) -> Failure {
    match err {
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
    }
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
