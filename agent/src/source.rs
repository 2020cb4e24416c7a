//! A workload's code from a git repository: one exact commit, fetched once per machine and
//! checked out into the workload's own directory, then built there.
//!
//! - **Fetching** is the agent's: into a bare repository per URL under `DATA_DIR/sources`
//!   (the agent's alone, mode 0700), shallow (`--depth 1`), by commit id, and verified to hold
//!   that very commit. A commit already there is not fetched again, so replicas, restarts and
//!   rollbacks on one machine fetch it once. Git runs with no configuration but its own, no
//!   prompt, and only the `https`, `http` and `git` protocols; a read token goes to git in its
//!   environment as an `Authorization` header (never in the URL, a file or a command line) and
//!   is scrubbed from anything git says. The agent reaches the repository from the host's
//!   network, as a container runtime pulls an image. The repository of a URL that no workload
//!   uses any more is removed.
//! - **Checking out** writes `git archive` of the commit into `WORK_DIR/app` through `tar` run
//!   as the workload's user: the agent never writes files the workload owns.
//! - **Building** (`build`, optional) runs in `app` as the workload, in its network namespace,
//!   with its variables, like its command; its output is the workload's log. It has
//!   [`BUILD_TIMEOUT`]. The supervisor runs it (see `supervisor`); this module says what to run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use bulkhead_common::git_source::repository_url_check;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;
use tokio::process::Command;

/// How long fetching one commit may take.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a build may take.
pub(crate) const BUILD_TIMEOUT: Duration = Duration::from_secs(900);
/// Where a workload's code is checked out, in its directory.
pub(crate) const APP_DIR: &str = "app";
/// The longest build command.
const MAX_BUILD_LEN: usize = 8192;
/// The most of git's error output kept for the reason of a failure.
const MAX_REASON_LEN: usize = 2000;

/// Where a workload's code comes from: one commit of a git repository, and how to build it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitSource {
    /// `https://`, `http://` or `git://`, with no user or password in it.
    pub url: String,
    /// The full commit id: 40 or 64 lowercase hex digits.
    pub commit: String,
    /// A token that reads the repository, sent to it over `https` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Run in the checked-out code before the command (split shell-style, `$PORT` expanded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
}

/// A source as the API shows it: its token left out.
#[derive(Debug, Clone, Serialize)]
pub struct SourceView {
    pub url: String,
    pub commit: String,
    pub build: Option<String>,
}

impl GitSource {
    pub(crate) fn view(&self) -> SourceView {
        SourceView {
            url: self.url.clone(),
            commit: self.commit.clone(),
            build: self.build.clone(),
        }
    }

    /// Checks the source; the build's words on success.
    pub(crate) fn validate(&self) -> Result<Option<Vec<String>>, String> {
        repository_url_check(&self.url).map_err(|why| format!("`source.url` {why}"))?;
        let hex = self
            .commit
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex || !matches!(self.commit.len(), 40 | 64) {
            return Err("`source.commit` must be 40 or 64 lowercase hex digits".into());
        }
        if let Some(token) = &self.token {
            if !self.url.starts_with("https://") {
                return Err("`source.token` is only sent over `https`".into());
            }
            if token.is_empty() || token.len() > 1024 || token.chars().any(char::is_control) {
                return Err(
                    "`source.token` must be 1 to 1024 characters, none of them control characters"
                        .into(),
                );
            }
        }
        self.build
            .as_deref()
            .map(|build| {
                if build.len() > MAX_BUILD_LEN || build.contains('\0') {
                    return Err(format!(
                        "`source.build` must be at most {MAX_BUILD_LEN} bytes, without NUL"
                    ));
                }
                crate::spec::split_command(build).map_err(|err| err.replace("command", "build"))
            })
            .transpose()
    }
}

/// The bare repositories the agent fetches into, one per URL.
pub(crate) struct SourceCache {
    root: PathBuf,
    /// One fetch at a time per repository (git locks it, and a second would fail).
    locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
}

impl SourceCache {
    pub(crate) fn open(data_dir: &Path) -> anyhow::Result<Self> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let root = data_dir.join("sources");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&root)
            .with_context(|| format!("creating {}", root.display()))?;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))?;
        Ok(Self {
            root,
            locks: Mutex::new(HashMap::new()),
        })
    }

    /// The bare repository of `url`.
    fn repository(&self, url: &str) -> PathBuf {
        let digest = Sha256::digest(url.as_bytes());
        let name: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        self.root.join(format!("{name}.git"))
    }

    /// Makes sure `source.commit` is in its repository, fetching it when it is not. The reason
    /// on failure is for the workload's owner (git's own words, without the token).
    pub(crate) async fn fetch(&self, source: &GitSource) -> Result<Fetched, String> {
        let repository = self.repository(&source.url);
        let lock = self
            .locks
            .lock()
            .expect("not poisoned")
            .entry(repository.clone())
            .or_default()
            .clone();
        let _held = lock.lock().await;
        if !repository.join("HEAD").exists() {
            let _ = std::fs::remove_dir_all(&repository);
            run_git(&repository, &["init", "--bare", "--quiet"], None)
                .await
                .map_err(|err| format!("preparing the repository cache failed: {err}"))?;
        }
        if commit_present(&repository, &source.commit).await {
            return Ok(Fetched {
                repository,
                cached: true,
            });
        }
        let fetch = [
            "fetch",
            "--quiet",
            "--depth",
            "1",
            "--no-tags",
            "--no-write-fetch-head",
            "--",
            source.url.as_str(),
            source.commit.as_str(),
        ];
        match tokio::time::timeout(
            FETCH_TIMEOUT,
            run_git(&repository, &fetch, source.token.as_deref()),
        )
        .await
        {
            Err(_) => {
                return Err(format!(
                    "fetching {} from {} took more than {} s",
                    source.commit,
                    source.url,
                    FETCH_TIMEOUT.as_secs()
                ));
            }
            Ok(Err(said)) => {
                return Err(format!(
                    "fetching {} from {} failed: {said}",
                    source.commit, source.url
                ));
            }
            Ok(Ok(())) => {}
        }
        if !commit_present(&repository, &source.commit).await {
            return Err(format!(
                "{} did not give commit {}",
                source.url, source.commit
            ));
        }
        Ok(Fetched {
            repository,
            cached: false,
        })
    }

    /// Removes the repositories of URLs no workload uses any more.
    pub(crate) fn prune(&self, used: &[&str]) {
        let keep: Vec<PathBuf> = used.iter().map(|url| self.repository(url)).collect();
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if keep.contains(&path) {
                continue;
            }
            // One being fetched is kept: its lock is held.
            let busy = self
                .locks
                .lock()
                .expect("not poisoned")
                .get(&path)
                .is_some_and(|lock| lock.try_lock().is_err());
            if !busy && let Err(err) = std::fs::remove_dir_all(&path) {
                tracing::warn!("removing the source cache {} failed: {err}", path.display());
            }
            self.locks.lock().expect("not poisoned").remove(&path);
        }
    }
}

/// A commit in the cache.
pub(crate) struct Fetched {
    repository: PathBuf,
    /// Whether it was there already.
    pub cached: bool,
}

impl Fetched {
    /// Writes the commit's files into `work_dir/app` (replacing what was there), through
    /// `tar` running as `uid` when the workload has one.
    pub(crate) async fn check_out(
        &self,
        commit: &str,
        work_dir: &Path,
        uid: Option<u32>,
    ) -> Result<(), String> {
        let app = work_dir.join(APP_DIR);
        // Not following links: `remove_dir_all` removes a link, not what it points at.
        match tokio::fs::remove_dir_all(&app).await {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                return Err(format!("clearing {APP_DIR} failed: {err}"));
            }
            _ => {}
        }
        let mut archive = git_command(&self.repository);
        archive
            .args([
                "archive",
                "--format=tar",
                &format!("--prefix={APP_DIR}/"),
                commit,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut archive = archive
            .spawn()
            .map_err(|err| format!("running git failed: {err}"))?;
        let tar_input: Stdio = archive
            .stdout
            .take()
            .expect("piped")
            .try_into()
            .map_err(|err| format!("piping git archive failed: {err}"))?;
        let mut tar = Command::new("tar");
        tar.args(["-x", "-f", "-", "--no-same-owner", "--no-same-permissions"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(work_dir)
            .stdin(tar_input)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(uid) = uid {
            // As root, the standard library drops every supplementary group too.
            tar.uid(uid).gid(uid);
        }
        let tar = tar
            .spawn()
            .map_err(|err| format!("running tar failed: {err}"))?;
        let (archived, extracted) = tokio::join!(finish(archive), finish(tar));
        archived.map_err(|said| format!("reading commit {commit} failed: {said}"))?;
        extracted.map_err(|said| format!("writing the code into {APP_DIR} failed: {said}"))
    }
}

/// Git on `repository`, with nothing of the machine's or a user's configuration, no prompt, no
/// protocol but `https`, `http` and `git`.
fn git_command(repository: &Path) -> Command {
    let home = repository.parent().unwrap_or(repository);
    let mut git = Command::new("git");
    git.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .current_dir(home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ALLOW_PROTOCOL", "https:http:git")
        .env("LC_ALL", "C")
        .arg("--git-dir")
        .arg(repository);
    git
}

/// Whether `commit` is a commit of `repository`.
async fn commit_present(repository: &Path, commit: &str) -> bool {
    let mut git = git_command(repository);
    git.args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    git.status().await.is_ok_and(|status| status.success())
}

/// Runs git on `repository` ([`git_command`]), with `token` as the password of basic
/// credentials; what git said on failure, the token scrubbed.
async fn run_git(repository: &Path, args: &[&str], token: Option<&str>) -> Result<(), String> {
    let mut git = git_command(repository);
    git.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(token) = token {
        // GitHub's and GitLab's read tokens both work as the password of basic credentials.
        let credentials =
            base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
        git.env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "http.extraHeader")
            .env(
                "GIT_CONFIG_VALUE_0",
                format!("Authorization: Basic {credentials}"),
            );
    }
    let child = git
        .spawn()
        .map_err(|err| format!("running git failed: {err}"))?;
    finish(child).await.map_err(|said| match token {
        Some(token) if !token.is_empty() => said.replace(token, "[token]"),
        _ => said,
    })
}

/// Waits for `child`; what it wrote to stderr (its last lines) when it failed.
async fn finish(mut child: tokio::process::Child) -> Result<(), String> {
    let mut said = Vec::new();
    if let Some(mut stderr) = child.stderr.take() {
        let mut chunk = [0u8; 4096];
        while let Ok(read) = stderr.read(&mut chunk).await {
            if read == 0 {
                break;
            }
            said.extend_from_slice(&chunk[..read]);
            if said.len() > 4 * MAX_REASON_LEN {
                said.drain(..said.len() - MAX_REASON_LEN);
            }
        }
    }
    let status = child
        .wait()
        .await
        .map_err(|err| format!("waiting for it failed: {err}"))?;
    if status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&said);
    let said = said.trim();
    let mut start = said.len().saturating_sub(MAX_REASON_LEN);
    while !said.is_char_boundary(start) {
        start += 1;
    }
    let tail = said[start..].trim();
    Err(if tail.is_empty() {
        crate::process::describe_exit(status)
    } else {
        format!(
            "{} ({})",
            tail.replace('\n', "; "),
            crate::process::describe_exit(status)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(url: &str) -> GitSource {
        GitSource {
            url: url.into(),
            commit: "a".repeat(40),
            token: None,
            build: None,
        }
    }

    #[test]
    fn sources_are_validated() {
        for good in [
            "https://github.com/acme/web.git",
            "http://127.0.0.1:9000/web.git",
            "git://git.example.com/web",
        ] {
            assert_eq!(source(good).validate(), Ok(None), "{good}");
        }
        // The URL rule itself is bulkhead_common's (tested there).
        assert!(source("file:///etc").validate().is_err());
        let mut short = source("https://x/y");
        short.commit = "abc123".into();
        assert!(short.validate().is_err());
        let mut plain_token = source("http://x/y");
        plain_token.token = Some("t".into());
        assert!(plain_token.validate().is_err());
        let mut built = source("https://x/y");
        built.build = Some("npm run 'build".into());
        assert!(built.validate().is_err());
        built.build = Some("npm run build".into());
        assert_eq!(
            built.validate(),
            Ok(Some(vec!["npm".into(), "run".into(), "build".into()]))
        );
    }
}
