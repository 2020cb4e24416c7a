//! How a client command reaches the control plane: the flags every client command takes
//! ([`GlobalArgs`]), where its servers and token come from (flag, then `BULKHEAD_URL` /
//! `BULKHEAD_TOKEN`, then the credentials file), and [`Connection::call`], which sends one
//! operation of the generated client to the servers in turn (see `servers`: the next one when
//! a server does not answer), refreshes an expired session once, and turns a refusal into a
//! [`Failure`] with its exit status. It never prints a token.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bulkhead_client::{Client, ClientOptions, Error, ResponseValue, types};
use bulkhead_common::tls::{PublicKeyPin, ServerTrust};

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
    /// A PEM file of the CA certificates to verify the server with (a private CA), or of the
    /// server's own self-signed certificate, instead of the platform's roots [default:
    /// BULKHEAD_CA_FILE, else the one given at login].
    #[arg(long = "ca-file", env = "BULKHEAD_CA_FILE", global = true)]
    pub ca_file: Option<PathBuf>,
    /// The SHA-256 of the server's public key (its SubjectPublicKeyInfo), in base64 as curl's
    /// `--pinnedpubkey sha256//` takes it, or in hex: the server is trusted by its key,
    /// whatever signed its certificate (its name and dates are still checked) [default:
    /// BULKHEAD_PIN_SHA256, else the one given at login].
    #[arg(
        long = "pin-sha256",
        env = "BULKHEAD_PIN_SHA256",
        global = true,
        value_name = "BASE64|HEX",
        conflicts_with = "ca_file"
    )]
    pub pin_sha256: Option<PublicKeyPin>,
}

impl GlobalArgs {
    /// The servers `list` of one command, saying with `--verbose` when it moves on.
    pub fn servers(&self, list: ServerList) -> Servers {
        Servers::new(list, self.verbose)
    }

    /// What `--ca-file` or `--pin-sha256` says to verify the servers with (the CA file's path
    /// made absolute, to be stored), `None` when neither is given.
    pub fn trust(&self) -> anyhow::Result<Option<ServerTrust>> {
        let ca_file = match &self.ca_file {
            Some(path) => Some(std::path::absolute(path)?),
            None => None,
        };
        Ok(match (ca_file, self.pin_sha256) {
            (None, None) => None,
            (ca_file, pin) => Some(ServerTrust::of(ca_file, pin)),
        })
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
    /// What the servers are verified with: `--ca-file` or `--pin-sha256`, else what was given
    /// at login.
    trust: ServerTrust,
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
                    pin_sha256: None,
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
        let trust = args.trust()?.unwrap_or_else(|| credentials.trust());
        let clients = clients_make(&list, Some(&credentials.auth), &trust)?;
        Ok(Self {
            args: args.clone(),
            servers: args.servers(list),
            issued_for: credentials.servers,
            trust,
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
        let anonymous = clients_make(self.servers.list(), None, &self.trust)?;
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
            clients_make(self.servers.list(), Some(&auth), &self.trust)?;
        if self.stored {
            credentials_save(&Credentials::new(
                self.issued_for.clone(),
                &self.trust,
                auth.clone(),
            ))?;
        }
        *self.auth.lock().expect("not poisoned") = auth;
        Ok(true)
    }
}

/// A client of each server of `list`, in its order, with `auth`'s token if any (none: to log
/// in or out), verifying them as `trust` says. An unreadable CA file or a token that cannot be
/// a header are refused before anything is sent.
pub fn clients_make(
    list: &ServerList,
    auth: Option<&Auth>,
    trust: &ServerTrust,
) -> anyhow::Result<Vec<Client>> {
    list.urls()
        .iter()
        .map(|server| {
            let options = ClientOptions {
                token: auth.map(|auth| auth.bearer().to_owned()),
                ca_file: trust.ca_file().map(Path::to_path_buf),
                pin_sha256: trust.pin_sha256(),
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
        Error::CommunicationError(err) => {
            Failure::new(Exit::Unavailable, unreachable_text(server, &err))
        }
        // The generated client checks the schema's constraints before sending.
        Error::InvalidRequest(reason) => {
            Failure::new(Exit::InvalidInput, format!("invalid input: {reason}"))
        }
        other => Failure::new(Exit::Unexpected, other.to_string()),
    }
}

/// Why `server` gave no answer: a TLS failure in plain words, with what to do (a refused
/// certificate says why, and the pin of its key), else the error with its causes.
pub fn unreachable_text(server: &str, err: &(dyn std::error::Error + 'static)) -> String {
    let why = bulkhead_common::tls::failure_explained(err).unwrap_or_else(|| error_chain(err));
    format!("cannot reach {server}: {why}")
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

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::sync::Arc;

    use clap::Parser;

    use super::*;

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        global: GlobalArgs,
    }

    #[test]
    fn a_pin_is_a_flag_of_its_own_in_base64_or_hex() {
        let pin = "daU0xNNUfFv9EdXyQZ2sLalK0gQDerPhq7i55/bk5SE=";
        let flags = Flags::try_parse_from(["bulkhead", "--pin-sha256", pin]).unwrap();
        let trust = flags.global.trust().unwrap().unwrap();
        assert_eq!(trust.pin_sha256().unwrap().to_string(), pin);
        let hex = hex_of(pin);
        let flags = Flags::try_parse_from(["bulkhead", "--pin-sha256", &hex]).unwrap();
        assert_eq!(flags.global.trust().unwrap(), Some(trust));
        let err = Flags::try_parse_from(["bulkhead", "--pin-sha256", "abc"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("not the SHA-256 of a public key"), "{err}");
        // A pin or a CA file: not both.
        let both = Flags::try_parse_from(["bulkhead", "--pin-sha256", pin, "--ca-file", "ca.pem"]);
        assert!(both.is_err());
        // A CA file is made absolute, to be stored.
        let flags = Flags::try_parse_from(["bulkhead", "--ca-file", "ca.pem"]).unwrap();
        let trust = flags.global.trust().unwrap().unwrap();
        assert!(trust.ca_file().unwrap().is_absolute());
        let none = Flags::try_parse_from(["bulkhead"]).unwrap();
        assert_eq!(none.global.trust().unwrap(), None);
    }

    fn hex_of(base64: &str) -> String {
        let pin: PublicKeyPin = base64.parse().unwrap();
        pin.sha256()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    /// A certificate and key made here; CA:TRUE like `openssl req -x509`'s.
    fn self_signed() -> (rcgen::Certificate, rcgen::KeyPair) {
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        (params.self_signed(&key).unwrap(), key)
    }

    /// A TLS server of `certificate` on 127.0.0.1, in a thread, answering each request
    /// `{"status":"ok"}`; its URL.
    fn tls_server(certificate: &rcgen::Certificate, key: &rcgen::KeyPair) -> String {
        let key = rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der());
        let config =
            rustls::ServerConfig::builder_with_provider(bulkhead_common::tls::crypto_provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![certificate.der().clone()], key.into())
                .unwrap();
        let config = Arc::new(config);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for tcp in listener.incoming().flatten() {
                let connection = rustls::ServerConnection::new(config.clone()).unwrap();
                let mut stream = rustls::StreamOwned::new(connection, tcp);
                let mut request = [0u8; 8192];
                // A refused handshake ends here.
                if stream.read(&mut request).is_ok() {
                    let body = r#"{"status":"ok"}"#;
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.flush();
                }
            }
        });
        url
    }

    /// What `healthz` at `url` gives, trusting it as `trust` says: the failure's exit and
    /// message.
    async fn healthz(url: &str, trust: &ServerTrust) -> Result<(), (Exit, String)> {
        let list = ServerList::parse(url).unwrap();
        let client = clients_make(&list, None, trust).unwrap().remove(0);
        match client.healthz().send().await {
            Ok(answer) => {
                assert_eq!(answer.into_inner().status, "ok");
                Ok(())
            }
            Err(err) => {
                let failure = failure_of(url, err);
                Err((failure.exit, failure.message))
            }
        }
    }

    #[tokio::test]
    async fn a_refused_certificate_is_told_in_plain_words_with_its_pin() {
        let (certificate, key) = self_signed();
        let url = tls_server(&certificate, &key);
        let pin = PublicKeyPin::of_certificate(certificate.der()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cert_pem = dir.path().join("cert.pem");
        std::fs::write(&cert_pem, certificate.pem()).unwrap();
        // The self-signed certificate itself, as curl --cacert takes it; or its key.
        healthz(&url, &ServerTrust::CaFile(cert_pem)).await.unwrap();
        healthz(&url, &ServerTrust::PublicKeyPin(pin))
            .await
            .unwrap();
        // Another one.
        let (other, _) = self_signed();
        let other_pem = dir.path().join("other.pem");
        std::fs::write(&other_pem, other.pem()).unwrap();
        let (exit, message) = healthz(&url, &ServerTrust::CaFile(other_pem.clone()))
            .await
            .unwrap_err();
        assert_eq!(exit, Exit::Unavailable);
        assert_eq!(
            message,
            format!(
                "cannot reach {url}: the server's certificate for 127.0.0.1 is a CA \
                 certificate (CA:TRUE, as `openssl req -x509` makes it) and is not itself in \
                 {}: to trust it as it is, give that very certificate with --ca-file, or pin \
                 its key with --pin-sha256 {pin}",
                other_pem.display()
            )
        );
        let other_pin = PublicKeyPin::of_certificate(other.der()).unwrap();
        let (_, message) = healthz(&url, &ServerTrust::PublicKeyPin(other_pin))
            .await
            .unwrap_err();
        assert!(
            message.contains(&format!("its pin is {pin}, not {other_pin}")),
            "{message}"
        );
    }
}
