//! `bulkhead login` and `bulkhead logout`: obtain a session (email and password) or take an API
//! token, from the first server of the list that answers, and keep it in the credentials file
//! with the whole list; end the session and delete the file. Secrets come from a prompt
//! without echo or from stdin, never from a flag (every user can read a process's command
//! line).

use std::io::{BufRead, IsTerminal};

use super::connection::{GlobalArgs, clients_make, default_servers};
use super::credentials::{
    Auth, Credentials, credentials_delete, credentials_load, credentials_save,
};
use super::exit::{Exit, fail};
use super::output::done;
use super::servers::Unanswered;

#[derive(clap::Args)]
#[command(after_help = "Examples:
  bulkhead login --server http://127.0.0.1:8080 --email ana@example.com
  bulkhead login --server https://a:8443,https://b:8443,https://c:8443 --email ana@example.com
  echo \"$PASSWORD\" | bulkhead login --email ana@example.com --password-stdin
  echo \"$API_TOKEN\" | bulkhead login --token-stdin")]
pub struct LoginArgs {
    #[command(flatten)]
    global: GlobalArgs,
    /// The account's email (asked for when not given and stdin is a terminal).
    #[arg(long, conflicts_with = "token_stdin")]
    email: Option<String>,
    /// Read the password from the first line of stdin (for scripts).
    #[arg(long)]
    password_stdin: bool,
    /// Log in with an API token read from the first line of stdin instead of a password.
    #[arg(long, conflicts_with = "password_stdin")]
    token_stdin: bool,
}

#[derive(clap::Args)]
#[command(after_help = "Example:
  bulkhead logout")]
pub struct LogoutArgs {
    #[command(flatten)]
    global: GlobalArgs,
}

pub async fn login(args: LoginArgs) -> anyhow::Result<()> {
    let servers = args
        .global
        .servers(args.global.server.clone().unwrap_or_else(default_servers));
    // A CA file is stored as an absolute path: later commands may run from another directory.
    let trust = args.global.trust()?.unwrap_or_default();
    let auth = if args.token_stdin {
        let token = stdin_line("API token")?;
        if reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
            return fail(Exit::InvalidInput, "that is not a token");
        }
        let auth = Auth::ApiToken { token };
        let clients = clients_make(servers.list(), Some(&auth), &trust)?;
        servers
            .send(&clients, async |c| c.me_view().send().await)
            .await
            .map_err(Unanswered::failure)?;
        auth
    } else {
        let email = match args.email {
            Some(email) => email,
            None if std::io::stdin().is_terminal() => prompt("Email: ")?,
            None => return fail(Exit::Usage, "give --email (stdin is not a terminal)"),
        };
        let password = if args.password_stdin {
            stdin_line("password")?
        } else if std::io::stdin().is_terminal() {
            rpassword::prompt_password("Password: ")?
        } else {
            return fail(
                Exit::Usage,
                "stdin is not a terminal: give --password-stdin (or --token-stdin)",
            );
        };
        let anonymous = clients_make(servers.list(), None, &trust)?;
        let session = servers
            .send(&anonymous, async |c| {
                c.session_login()
                    .body_map(|b| b.email(email.clone()).password(password.clone()))
                    .send()
                    .await
            })
            .await
            .map_err(Unanswered::failure)?
            .into_inner();
        Auth::Session {
            access_token: session.access_token,
            refresh_token: session.refresh_token,
        }
    };
    let path = credentials_save(&Credentials::new(servers.list().clone(), &trust, auth))?;
    done(format!(
        "Logged in to {} (credentials in {})",
        servers.list(),
        path.display()
    ));
    Ok(())
}

pub async fn logout(args: LogoutArgs) -> anyhow::Result<()> {
    let Some(credentials) = credentials_load()? else {
        done("Not logged in.");
        return Ok(());
    };
    if let Auth::Session { refresh_token, .. } = &credentials.auth {
        let servers = args
            .global
            .servers(credentials.server_for(args.global.server.as_ref())?);
        let trust = args.global.trust()?.unwrap_or_else(|| credentials.trust());
        let anonymous = clients_make(servers.list(), None, &trust)?;
        let ended = servers
            .send(&anonymous, async |c| {
                c.session_logout()
                    .body_map(|b| b.refresh_token(refresh_token.clone()))
                    .send()
                    .await
            })
            .await;
        // The file goes anyway: a session the server no longer knows is over.
        if let Err(unanswered) = ended {
            done(format!(
                "warning: the server did not end the session: {}",
                unanswered.failure()
            ));
        }
    }
    credentials_delete()?;
    done("Logged out.");
    Ok(())
}

/// The first line of stdin, without its line ending; empty is refused.
fn stdin_line(what: &str) -> anyhow::Result<String> {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let line = line.trim_end_matches(['\r', '\n']).to_owned();
    if line.is_empty() {
        return fail(Exit::InvalidInput, format!("no {what} on stdin"));
    }
    Ok(line)
}

fn prompt(question: &str) -> anyhow::Result<String> {
    eprint!("{question}");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim().to_owned())
}
