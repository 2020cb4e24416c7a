//! GitHub's side of push intake: the part of a `push` event that Bulkhead reads, the check of
//! its signature (`X-Hub-Signature-256`, HMAC-SHA256 compared in constant time), the JSON of a
//! delivery posted as JSON or as a form, and the checks of what a push says.

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;
use utoipa::ToSchema;

use crate::app::git::installations::{branch_valid, repository_valid};
use crate::error::{AppError, AppResult, ErrorCode};

/// The part of GitHub's `push` event that intake reads (the forge sends much more).
#[derive(Debug, Deserialize, ToSchema)]
pub struct GithubPushEvent {
    /// `refs/heads/<branch>` (other refs deploy nothing).
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// The commit the ref points to after the push (40 or 64 hexadecimal digits).
    pub after: String,
    /// Whether the push deleted the ref.
    #[serde(default)]
    pub deleted: bool,
    pub repository: GithubRepository,
    pub head_commit: Option<GithubCommit>,
    pub pusher: Option<GithubPusher>,
}

/// GitHub's form of a delivery (its default content type).
#[derive(Debug, Deserialize, ToSchema)]
pub struct GithubPushForm {
    /// The event's JSON ([`GithubPushEvent`]).
    pub payload: String,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct GithubRepository {
    /// `owner/name`.
    pub full_name: String,
    /// When the push happened, in seconds since the epoch (as GitHub sends it in `push`
    /// events).
    pub pushed_at: i64,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct GithubCommit {
    pub message: String,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct GithubPusher {
    pub name: String,
}

/// Whether `header` (`sha256=<hex>`) is the HMAC-SHA256 of `body` under one of `secrets`,
/// compared in constant time.
pub fn signature_valid(secrets: &[String], header: &str, body: &[u8]) -> bool {
    let Some(expected) = header
        .strip_prefix("sha256=")
        .and_then(|hex| hex::decode(hex).ok())
    else {
        return false;
    };
    secrets.iter().any(|secret| {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
        mac.update(body);
        mac.verify_slice(&expected).is_ok()
    })
}

/// The JSON of a delivery: the body itself, or its `payload` field when the webhook posts a
/// form (GitHub's default content type).
pub(crate) fn payload_of(content_type: Option<&str>, body: &[u8]) -> AppResult<Vec<u8>> {
    let essence = content_type
        .and_then(|value| value.split(';').next())
        .map(|value| value.trim().to_ascii_lowercase());
    match essence.as_deref() {
        Some("application/json") => Ok(body.to_vec()),
        Some("application/x-www-form-urlencoded") => {
            serde_urlencoded::from_bytes::<GithubPushForm>(body)
                .map(|form| form.payload.into_bytes())
                .map_err(|err| {
                    AppError::malformed(
                        ErrorCode::InvalidBody,
                        format!("the form has no `payload` field: {err}"),
                    )
                })
        }
        _ => Err(AppError::new(
            ErrorCode::UnsupportedMediaType,
            "a delivery is `application/json` or `application/x-www-form-urlencoded`",
        )),
    }
}

pub(crate) fn first_line(text: &str, max: usize) -> String {
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(max)
        .collect()
}

/// Whether `sha` is a commit id (SHA-1 or SHA-256, lowercase hex).
pub(crate) fn commit_valid(sha: &str) -> bool {
    matches!(sha.len(), 40 | 64) && sha.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// What is stored of a push, checked.
pub(crate) struct StoredPush {
    pub(crate) repository: String,
    pub(crate) branch: String,
    pub(crate) commit: String,
    pub(crate) message: String,
    pub(crate) pusher: String,
    pub(crate) pushed_at: DateTime<Utc>,
    /// Why it deploys nothing, when that is clear from the push alone.
    pub(crate) ignored: Option<String>,
}

pub(crate) fn push_check(push: &GithubPushEvent) -> AppResult<StoredPush> {
    let invalid = |detail: &str| AppError::malformed(ErrorCode::InvalidBody, detail.to_owned());
    if !repository_valid(&push.repository.full_name) {
        return Err(invalid("`repository.full_name` must be `owner/name`"));
    }
    if push.git_ref.len() > 266 {
        return Err(invalid("`ref` is longer than 266 characters"));
    }
    let deleted = push.deleted || push.after.bytes().all(|b| b == b'0');
    if !deleted && !commit_valid(&push.after) {
        return Err(invalid(
            "`after` must be a commit id: 40 or 64 lowercase hexadecimal digits",
        ));
    }
    let pushed_at = DateTime::<Utc>::from_timestamp(push.repository.pushed_at, 0)
        .ok_or_else(|| invalid("`repository.pushed_at` is not a time"))?;
    let branch = push.git_ref.strip_prefix("refs/heads/");
    let ignored = match branch {
        None => Some(format!(
            "`{}` is not a branch",
            first_line(&push.git_ref, 100)
        )),
        Some(_) if deleted => Some("the push deleted the branch".to_owned()),
        Some(branch) if !branch_valid(branch) => Some("no binding can name this branch".to_owned()),
        Some(_) => None,
    };
    Ok(StoredPush {
        repository: push.repository.full_name.clone(),
        branch: branch.unwrap_or(&push.git_ref).chars().take(255).collect(),
        commit: push.after.chars().take(64).collect(),
        message: push
            .head_commit
            .as_ref()
            .map(|c| first_line(&c.message, 200))
            .unwrap_or_default(),
        pusher: push
            .pusher
            .as_ref()
            .map(|p| p.name.chars().take(100).collect())
            .unwrap_or_default(),
        pushed_at,
        ignored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GitHub's documented example: the secret "It's a Secret to Everybody" and the payload
    /// "Hello, World!" give this signature.
    #[test]
    fn signatures_match_githubs_example() {
        let secrets = vec!["It's a Secret to Everybody".to_owned()];
        let header = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert!(signature_valid(&secrets, header, b"Hello, World!"));
        assert!(!signature_valid(&secrets, header, b"Hello, World?"));
        assert!(!signature_valid(
            &secrets,
            &header.replace("sha256=", "sha1="),
            b"Hello, World!"
        ));
        assert!(!signature_valid(&secrets, "sha256=zz", b"Hello, World!"));
        let rotated = vec!["new".to_owned(), "It's a Secret to Everybody".to_owned()];
        assert!(signature_valid(&rotated, header, b"Hello, World!"));
    }

    #[test]
    fn forms_carry_the_payload() {
        let body = b"payload=%7B%22a%22%3A1%7D";
        assert_eq!(
            payload_of(Some("application/x-www-form-urlencoded"), body).unwrap(),
            br#"{"a":1}"#
        );
        assert_eq!(
            payload_of(Some("application/json; charset=utf-8"), b"{}").unwrap(),
            b"{}"
        );
        assert_eq!(
            payload_of(Some("text/plain"), b"{}").unwrap_err().code,
            crate::error::ErrorCode::UnsupportedMediaType
        );
    }
}
