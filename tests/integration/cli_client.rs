//! The client commands of the `bulkhead` binary (`login`, `projects`, `services`, `domains`,
//! `members`, `invitations`, `deploy`, `deployments`, `providers`, `routes`, `tokens`), run as processes against the real server
//! with a credentials directory of their own: what they print, what they store, and their
//! exit statuses. Here the harness; the tests are in the modules below.

mod credentials;
mod deploying;
mod exit_statuses;
mod listing;
mod members;
mod operating;
mod servers;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;
use tokio::io::AsyncWriteExt;

use crate::support::{PASSWORD, TestServer};

/// A process's answer.
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Its stdout, once it succeeded.
    #[track_caller]
    pub fn ok(&self) -> &str {
        self.exits(0);
        &self.stdout
    }

    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(self.ok())
            .unwrap_or_else(|err| panic!("not JSON ({err}): {}", self.stdout))
    }

    /// Its stderr, once it exited with `code`.
    #[track_caller]
    pub fn exits(&self, code: i32) -> &str {
        assert_eq!(
            self.code, code,
            "stdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        &self.stderr
    }
}

/// The `bulkhead` binary with a config directory of its own, and environment variables.
pub struct Cli {
    config: TempDir,
    pub env: Vec<(&'static str, String)>,
}

impl Cli {
    pub fn new() -> Self {
        Self {
            config: tempfile::tempdir().unwrap(),
            env: vec![],
        }
    }

    /// One that uses an API token from the environment (`BULKHEAD_TOKEN`, `BULKHEAD_URL`).
    pub fn with_token(server: &str, token: &str) -> Self {
        let mut cli = Self::new();
        cli.env = vec![
            ("BULKHEAD_TOKEN", token.to_owned()),
            ("BULKHEAD_URL", server.to_owned()),
        ];
        cli
    }

    pub fn credentials(&self) -> PathBuf {
        self.config.path().join("bulkhead/credentials.json")
    }

    /// Runs `bulkhead` with the arguments of `line`, split as a shell would.
    pub async fn run(&self, line: &str) -> Ran {
        self.run_with_stdin(line, "").await
    }

    pub async fn run_with_stdin(&self, line: &str, stdin: &str) -> Ran {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_bulkhead"));
        command
            .args(shell_words::split(line).unwrap())
            .env_remove("BULKHEAD_URL")
            .env_remove("BULKHEAD_TOKEN")
            .env("BULKHEAD_CONFIG_DIR", self.config.path().join("bulkhead"))
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).await.unwrap();
        drop(input);
        // A command that hangs (e.g. waiting on a server that never answers) fails the test.
        let output = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("`bulkhead {line}` did not end within 120 s"))
            .unwrap();
        Ran {
            code: output.status.code().expect("exited, not killed"),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Starts `bulkhead` with the arguments of `line` without waiting for it (a follower),
    /// its stdout piped; it is killed when dropped.
    pub fn spawn(&self, line: &str) -> tokio::process::Child {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_bulkhead"))
            .args(shell_words::split(line).unwrap())
            .env_remove("BULKHEAD_URL")
            .env_remove("BULKHEAD_TOKEN")
            .env("BULKHEAD_CONFIG_DIR", self.config.path().join("bulkhead"))
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    }

    /// Logs in as `email`, with [`PASSWORD`] on stdin.
    pub async fn login(&self, s: &TestServer, email: &str) {
        let line = format!("login --server {} --email {email} --password-stdin", s.base);
        self.run_with_stdin(&line, &format!("{PASSWORD}\n"))
            .await
            .ok();
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

pub fn stored(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The line of a table that starts with `first`.
fn row<'a>(table: &'a str, first: &str) -> Option<&'a str> {
    table
        .lines()
        .find(|line| line.trim_start().starts_with(first))
}
