//! The revision a deployment deploys: one commit of the service's code, and the image
//! reference that names it. An `artifact` source's image may name the commit
//! (`ghcr.io/acme/web:{commit}`, `{short_commit}`, `{branch}`): CI builds and pushes the image
//! tagged with the commit, and the push deploys exactly that tag. A deployment records its
//! revision in its spec, so a rollback deploys the same commit again.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{AppError, AppResult, ErrorCode};

/// How many hex digits `{short_commit}` keeps (as `git rev-parse --short` and the tags CI
/// tools write by default).
pub const SHORT_COMMIT_LEN: usize = 7;

/// The names an image may use, each between braces.
const PLACEHOLDERS: [&str; 3] = ["commit", "short_commit", "branch"];

/// The exact revision of a service's code a deployment deploys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SourceRevision {
    /// The full commit id: 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
    #[schema(pattern = "^([0-9a-f]{40}|[0-9a-f]{64})$")]
    pub commit: String,
    /// The branch it was pushed to, when known (a push, or the service's bound branch).
    pub branch: Option<String>,
    /// The repository (`owner/name`), when known.
    pub repository: Option<String>,
}

impl SourceRevision {
    /// Its first [`SHORT_COMMIT_LEN`] digits (`{short_commit}`, events, tables).
    pub fn short_commit(&self) -> &str {
        &self.commit[..SHORT_COMMIT_LEN.min(self.commit.len())]
    }

    /// A commit given by hand (`POST …/deployments?commit=…`), checked: a full commit id.
    pub fn commit_validate(commit: &str) -> AppResult<()> {
        let hex = commit
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if hex && matches!(commit.len(), 40 | 64) {
            Ok(())
        } else {
            Err(AppError::invalid(
                "`commit` must be a full commit id: 40 (SHA-1) or 64 (SHA-256) lowercase hex digits",
            ))
        }
    }
}

/// Checks an image reference's placeholders: each `{` opens one of `{commit}`,
/// `{short_commit}` or `{branch}`, closed by `}`; a lone `}` is refused too. Returns whether it
/// names any.
pub fn image_template_validate(image: &str) -> AppResult<bool> {
    image_parts(image).map(|parts| parts.iter().any(|part| matches!(part, Part::Named(_))))
}

/// `image` with its placeholders filled in from `revision`. `{branch}` is written as an OCI
/// tag may hold it: characters other than letters, digits, `_`, `.` and `-` become `-`.
pub fn image_resolve(image: &str, revision: Option<&SourceRevision>) -> AppResult<String> {
    let mut resolved = String::with_capacity(image.len() + 64);
    for part in image_parts(image)? {
        match part {
            Part::Text(text) => resolved.push_str(text),
            Part::Named(name) => {
                let Some(revision) = revision else {
                    return Err(AppError::new(
                        ErrorCode::NoCommit,
                        format!(
                            "the image `{image}` names {{{name}}}, and this deployment has no commit: \
                             push to a bound branch, or deploy with `commit`"
                        ),
                    ));
                };
                match name {
                    "commit" => resolved.push_str(&revision.commit),
                    "short_commit" => resolved.push_str(revision.short_commit()),
                    _ => {
                        let Some(branch) = &revision.branch else {
                            return Err(AppError::new(
                                ErrorCode::NoCommit,
                                format!(
                                    "the image `{image}` names {{branch}}, and commit {} was given \
                                     without one: bind the service to a branch, or push",
                                    revision.commit
                                ),
                            ));
                        };
                        resolved.extend(branch.chars().map(|c| {
                            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                                c
                            } else {
                                '-'
                            }
                        }));
                    }
                }
            }
        }
    }
    Ok(resolved)
}

enum Part<'a> {
    Text(&'a str),
    Named(&'static str),
}

fn image_parts(image: &str) -> AppResult<Vec<Part<'_>>> {
    let invalid = |what: String| {
        AppError::invalid(format!(
            "`source.image` {what}: braces may only name {{commit}}, {{short_commit}} or {{branch}}"
        ))
    };
    let mut parts = Vec::new();
    let mut rest = image;
    while let Some(open) = rest.find(['{', '}']) {
        if rest.as_bytes()[open] == b'}' {
            return Err(invalid("has a `}` that closes nothing".into()));
        }
        parts.push(Part::Text(&rest[..open]));
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return Err(invalid("has a `{` that is not closed".into()));
        };
        let name = &after[..close];
        let Some(known) = PLACEHOLDERS.iter().find(|known| **known == name) else {
            return Err(invalid(format!(
                "names `{{{}}}`",
                name.chars().take(40).collect::<String>()
            )));
        };
        parts.push(Part::Named(known));
        rest = &after[close + 1..];
    }
    parts.push(Part::Text(rest));
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revision(branch: Option<&str>) -> SourceRevision {
        SourceRevision {
            commit: "0123456789abcdef0123456789abcdef01234567".into(),
            branch: branch.map(Into::into),
            repository: Some("acme/web".into()),
        }
    }

    #[test]
    fn placeholders_are_filled_in_from_the_revision() {
        let main = revision(Some("feature/Fix #2"));
        assert_eq!(
            image_resolve("ghcr.io/acme/web:{commit}", Some(&main)).unwrap(),
            "ghcr.io/acme/web:0123456789abcdef0123456789abcdef01234567"
        );
        assert_eq!(
            image_resolve("acme/web:{branch}-{short_commit}", Some(&main)).unwrap(),
            "acme/web:feature-Fix--2-0123456"
        );
        assert_eq!(image_resolve("acme/web:1", None).unwrap(), "acme/web:1");
    }

    #[test]
    fn unknown_or_unbalanced_braces_are_refused() {
        for bad in ["a:{sha}", "a:{commit", "a:commit}", "a:{}", "a:{{commit}}"] {
            let err = image_template_validate(bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidRequest, "{bad}");
        }
        assert!(image_template_validate("a:{commit}").unwrap());
        assert!(!image_template_validate("a:1").unwrap());
    }

    #[test]
    fn a_template_without_a_commit_or_branch_says_what_is_missing() {
        let err = image_resolve("a:{commit}", None).unwrap_err();
        assert_eq!(err.code, ErrorCode::NoCommit);
        let err = image_resolve("a:{branch}", Some(&revision(None))).unwrap_err();
        assert_eq!(err.code, ErrorCode::NoCommit);
        assert!(err.detail.contains("{branch}"), "{}", err.detail);
    }

    #[test]
    fn only_full_lowercase_commit_ids_are_taken() {
        assert!(SourceRevision::commit_validate(&"a".repeat(40)).is_ok());
        assert!(SourceRevision::commit_validate(&"0".repeat(64)).is_ok());
        for bad in [
            "abc1234",
            &"A".repeat(40),
            &"g".repeat(40),
            &"a".repeat(41),
            "",
        ] {
            assert!(SourceRevision::commit_validate(bad).is_err(), "{bad}");
        }
    }
}
