//! What `bulkhead`'s exit status means: one list, shown in `bulkhead --help` and docs/cli.md,
//! and the one mapping from an answer's HTTP status to it. Commands fail with a [`Failure`]
//! (wrapped in `anyhow`) to choose a status; any other error exits with
//! [`Exit::Unexpected`].

use std::fmt;

/// The exit statuses of `bulkhead`; [`Exit::meaning`] says what each means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    Unexpected = 1,
    Usage = 2,
    NotLoggedIn = 3,
    Forbidden = 4,
    NotFound = 5,
    Conflict = 6,
    InvalidInput = 7,
    Unavailable = 8,
    DeploymentUnhealthy = 9,
}

impl Exit {
    pub const ALL: [Exit; 10] = [
        Exit::Ok,
        Exit::Unexpected,
        Exit::Usage,
        Exit::NotLoggedIn,
        Exit::Forbidden,
        Exit::NotFound,
        Exit::Conflict,
        Exit::InvalidInput,
        Exit::Unavailable,
        Exit::DeploymentUnhealthy,
    ];

    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Ok => "success",
            Exit::Unexpected => "unexpected error",
            Exit::Usage => "usage error (bad flags or arguments)",
            Exit::NotLoggedIn => "not logged in, unusable credentials, or 401 from the server",
            Exit::Forbidden => "forbidden (403)",
            Exit::NotFound => {
                "not found (404 or 410, or no project/environment/service by that name)"
            }
            Exit::Conflict => "conflict (409) or precondition failed (412)",
            Exit::InvalidInput => {
                "invalid input (400, 413, 415, 422, refused by the schema, or an ambiguous name)"
            }
            Exit::Unavailable => "server unreachable, busy (429) or failing (5xx)",
            Exit::DeploymentUnhealthy => {
                "the deployment followed ended unhealthy (failed, cancelled or superseded)"
            }
        }
    }

    /// The list as `bulkhead --help` shows it.
    pub fn help() -> String {
        let lines: Vec<String> = Self::ALL
            .iter()
            .map(|exit| format!("  {}  {}", *exit as u8, exit.meaning()))
            .collect();
        format!("Exit status:\n{}", lines.join("\n"))
    }

    /// The status for an HTTP answer's status code.
    pub fn for_http_status(status: u16) -> Self {
        match status {
            401 => Self::NotLoggedIn,
            403 => Self::Forbidden,
            404 | 410 => Self::NotFound,
            409 | 412 => Self::Conflict,
            400 | 413 | 415 | 422 => Self::InvalidInput,
            429 | 500..=599 => Self::Unavailable,
            _ => Self::Unexpected,
        }
    }

    /// The status of a failed command: that of the first [`Failure`] in its chain.
    pub fn of_error(error: &anyhow::Error) -> Self {
        error
            .chain()
            .find_map(|cause| cause.downcast_ref::<Failure>())
            .map_or(Self::Unexpected, |failure| failure.exit)
    }
}

/// How a command ends the process: success, or its error on stderr and the status it means.
pub fn process_exit(result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            Exit::of_error(&err).into()
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        Self::from(exit as u8)
    }
}

/// A command's failure with the exit status it means, and what to tell the user.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
}

impl Failure {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self {
            exit,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// Fails with `exit` and `message`.
pub fn fail<T>(exit: Exit, message: impl Into<String>) -> anyhow::Result<T> {
    Err(Failure::new(exit, message).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_their_exit() {
        assert_eq!(Exit::for_http_status(401), Exit::NotLoggedIn);
        assert_eq!(Exit::for_http_status(403), Exit::Forbidden);
        assert_eq!(Exit::for_http_status(404), Exit::NotFound);
        assert_eq!(Exit::for_http_status(412), Exit::Conflict);
        assert_eq!(Exit::for_http_status(422), Exit::InvalidInput);
        assert_eq!(Exit::for_http_status(503), Exit::Unavailable);
        assert_eq!(Exit::for_http_status(418), Exit::Unexpected);
    }

    #[test]
    fn a_failure_deep_in_a_chain_chooses_the_exit() {
        let error = anyhow::Error::new(Failure::new(Exit::Forbidden, "no")).context("projects");
        assert_eq!(Exit::of_error(&error), Exit::Forbidden);
        assert_eq!(Exit::of_error(&anyhow::anyhow!("boom")), Exit::Unexpected);
    }

    #[test]
    fn the_cli_doc_lists_every_status_as_the_help_does() {
        let doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cli.md"));
        for exit in Exit::ALL {
            let row = format!("| {} | {} |", exit as u8, exit.meaning());
            assert!(doc.contains(&row), "docs/cli.md lacks `{row}`");
        }
    }
}
