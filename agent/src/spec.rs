//! What a workload may be: its key, its command (split shell-style into words, `$PORT`
//! expanded), its environment, its health check, where its code comes from and its size,
//! checked before anything starts.

use std::collections::BTreeMap;

use bulkhead_common::health_check::HealthCheckValues;
use serde::{Deserialize, Serialize};

use crate::limits::WorkloadSize;

/// Limits on what a workload may be given.
const MAX_COMMAND_LEN: usize = 8192;
const MAX_ENV_VARS: usize = 512;
const MAX_ENV_BYTES: usize = 128 * 1024;

/// A workload to start.
#[derive(Debug, Clone)]
pub(crate) struct NewWorkload {
    pub command: String,
    pub env: BTreeMap<String, String>,
    pub port: Option<u16>,
    pub health_check: Option<HealthCheck>,
    /// Its code, from a repository (see `source`); without one, the command runs as it is.
    pub source: Option<crate::source::GitSource>,
    /// What it is given of the machine (see `limits`).
    pub size: WorkloadSize,
}

/// The platform's health check of a workload, made by the agent (see `health::check`): `GET
/// path` on the workload's port every `interval_ms`; an answer of status 200 to 399 within
/// `timeout_ms` passes. `healthy_threshold` passes in a row make it healthy,
/// `unhealthy_threshold` failures in a row after that unhealthy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheck {
    pub path: String,
    pub interval_ms: u32,
    pub timeout_ms: u32,
    pub healthy_threshold: u32,
    pub unhealthy_threshold: u32,
}

impl HealthCheck {
    /// The control plane's bounds (`bulkhead_common::health_check`).
    fn validate(&self) -> Result<(), String> {
        HealthCheckValues {
            path: &self.path,
            interval_ms: u64::from(self.interval_ms),
            timeout_ms: u64::from(self.timeout_ms),
            healthy_threshold: self.healthy_threshold,
            unhealthy_threshold: self.unhealthy_threshold,
            start_timeout_secs: None,
        }
        .check()
        .map_err(str::to_owned)
    }
}

/// Whether `key` is a workload key: 1–63 characters of `[a-z0-9-]`.
pub(crate) fn valid_key(key: &str) -> bool {
    (1..=63).contains(&key.len())
        && key
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
}

/// The command's words, split shell-style (quotes and backslashes; no expansion, no shell).
pub(crate) fn split_command(command: &str) -> Result<Vec<String>, String> {
    let argv = shell_words::split(command).map_err(|err| format!("`command`: {err}"))?;
    if argv.is_empty() {
        return Err("`command` is empty".into());
    }
    Ok(argv)
}

/// Replaces `$PORT` and `${PORT}` in the command's words by the assigned port, for programs
/// that take their port as an argument (`python3 -m http.server $PORT`): there is no shell to
/// expand it. Other `$` words are left as they are.
pub(crate) fn expand_port(argv: Vec<String>, port: u16) -> Vec<String> {
    let port = port.to_string();
    argv.into_iter()
        .map(|word| {
            let mut out = String::with_capacity(word.len());
            let mut rest = word.as_str();
            while let Some(at) = rest.find('$') {
                out.push_str(&rest[..at]);
                let tail = &rest[at..];
                if let Some(after) = tail.strip_prefix("${PORT}") {
                    out.push_str(&port);
                    rest = after;
                } else if let Some(after) = tail.strip_prefix("$PORT").filter(|after| {
                    !after
                        .bytes()
                        .next()
                        .is_some_and(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
                }) {
                    out.push_str(&port);
                    rest = after;
                } else {
                    out.push('$');
                    rest = &tail[1..];
                }
            }
            out.push_str(rest);
            out
        })
        .collect()
}

/// The words of a workload's command and of its build.
pub(crate) type Words = (Vec<String>, Option<Vec<String>>);

/// Checks a new workload; its command's words (and its build's) on success.
pub(crate) fn validate(new: &NewWorkload) -> Result<Words, String> {
    if new.command.len() > MAX_COMMAND_LEN {
        return Err(format!("`command` is longer than {MAX_COMMAND_LEN} bytes"));
    }
    if new.command.contains('\0') {
        return Err("`command` contains a NUL character".into());
    }
    let argv = split_command(&new.command)?;
    if new.port == Some(0) {
        return Err("`port` must be between 1 and 65535".into());
    }
    if new.env.len() > MAX_ENV_VARS {
        return Err(format!("more than {MAX_ENV_VARS} variables in `env`"));
    }
    let mut bytes = 0;
    for (name, value) in &new.env {
        let valid_name = name
            .bytes()
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
            && name
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_');
        if !valid_name {
            return Err(format!(
                "`env`: `{name}` is not a variable name (letters, digits and `_`, not starting with a digit)"
            ));
        }
        if value.contains('\0') {
            return Err(format!("`env`: `{name}` contains a NUL character"));
        }
        bytes += name.len() + value.len();
    }
    if bytes > MAX_ENV_BYTES {
        return Err(format!("`env` is larger than {MAX_ENV_BYTES} bytes"));
    }
    if let Some(check) = &new.health_check {
        check.validate()?;
    }
    new.size.validate()?;
    let build = new
        .source
        .as_ref()
        .map(|source| source.validate())
        .transpose()?;
    Ok((argv, build.flatten()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_is_expanded_in_the_command_words() {
        let words = |text: &str| text.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            expand_port(
                words("serve $PORT --listen=:${PORT} $PORTS $HOME $ a$PORT"),
                4100
            ),
            words("serve 4100 --listen=:4100 $PORTS $HOME $ a4100")
        );
    }

    #[test]
    fn keys_and_workloads_are_validated() {
        assert!(valid_key("web-1"));
        assert!(valid_key(&"a".repeat(63)));
        assert!(!valid_key(&"a".repeat(64)));
        assert!(!valid_key(""));
        assert!(!valid_key("Web"));
        assert!(!valid_key("a_b"));
        assert!(!valid_key("../x"));

        let new = |command: &str, env: &[(&str, &str)]| NewWorkload {
            command: command.into(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            port: Some(8080),
            health_check: None,
            source: None,
            size: WorkloadSize::DEFAULT,
        };
        assert_eq!(
            validate(&new("python3 -c 'print(1)'", &[("A_1", "x")]))
                .unwrap()
                .0,
            ["python3", "-c", "print(1)"]
        );
        for bad in [
            new("", &[]),
            new("   ", &[]),
            new("echo 'unclosed", &[]),
            new("echo", &[("1A", "x")]),
            new("echo", &[("A=B", "x")]),
            new("echo", &[("A", "x\0y")]),
        ] {
            assert!(validate(&bad).is_err());
        }

        let check = HealthCheck {
            path: "/ready?full=1".into(),
            interval_ms: 500,
            timeout_ms: 200,
            healthy_threshold: 1,
            unhealthy_threshold: 3,
        };
        let checked = |check: HealthCheck| NewWorkload {
            health_check: Some(check),
            ..new("echo", &[])
        };
        assert!(validate(&checked(check.clone())).is_ok());
        for bad in [
            HealthCheck {
                path: "ready".into(),
                ..check.clone()
            },
            HealthCheck {
                path: "/a b".into(),
                ..check.clone()
            },
            HealthCheck {
                path: "/\r\nHost: evil".into(),
                ..check.clone()
            },
            HealthCheck {
                interval_ms: 99,
                ..check.clone()
            },
            HealthCheck {
                timeout_ms: 30_001,
                ..check.clone()
            },
            HealthCheck {
                healthy_threshold: 0,
                ..check.clone()
            },
            HealthCheck {
                unhealthy_threshold: 11,
                ..check.clone()
            },
        ] {
            assert!(validate(&checked(bad.clone())).is_err(), "{bad:?}");
        }
    }
}
