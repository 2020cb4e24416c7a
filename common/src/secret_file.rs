//! Secrets read from files (`--token-file` of the host agent and of the edge agent, a TLS
//! private key). Not from the environment or the command line: those of a process are visible
//! in `/proc` (its command line to every user), and a workload running as the same user could
//! read its environment.
//!
//! The file must be this user's own and private (mode 0600 or stricter), as `ssh` demands of a
//! private key: a file that others may read is refused rather than warned about (a warning in a
//! log leaves the hole open; `chmod 600` closes it).

use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use anyhow::Context;

/// A token file is a line, not a document: refuse anything bigger.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// The token in `path` (surrounding whitespace, such as a final newline, removed), `what` naming
/// it in errors ("the agent's token"). Refuses a file that is not a regular file, that group or
/// others may access, or that another user owns.
pub fn token_file_read(path: &Path, what: &str) -> anyhow::Result<String> {
    let text = secret_file_read(path, what, MAX_TOKEN_FILE_BYTES)?;
    let token = text.trim();
    anyhow::ensure!(!token.is_empty(), "{what} file {} is empty", path.display());
    Ok(token.to_owned())
}

/// The text of the private file `path`, at most `max_bytes` long, with the checks of
/// [`token_file_read`].
pub fn secret_file_read(path: &Path, what: &str, max_bytes: u64) -> anyhow::Result<String> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("opening {what} file {}", path.display()))?;
    // The checks look at the file opened, not at the path (which could change in between).
    let metadata = file.metadata()?;
    anyhow::ensure!(
        metadata.is_file(),
        "{what} file {} is not a regular file",
        path.display()
    );
    let mode = metadata.permissions().mode() & 0o7777;
    anyhow::ensure!(
        mode & 0o077 == 0,
        "{what} file {} may be accessed by other users (mode {mode:04o}): anyone who reads it \
         holds the secret; make it private with `chmod 600 {}`",
        path.display(),
        path.display()
    );
    let user = nix::unistd::geteuid().as_raw();
    anyhow::ensure!(
        metadata.uid() == user,
        "{what} file {} belongs to uid {}, not to this process's user (uid {user}), so that \
         user can read or replace it; `chown {user} {}`",
        path.display(),
        metadata.uid(),
        path.display()
    );
    let mut text = String::new();
    file.take(max_bytes + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading {what} file {}", path.display()))?;
    anyhow::ensure!(
        text.len() as u64 <= max_bytes,
        "{what} file {} is larger than {max_bytes} bytes",
        path.display()
    );
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str, mode: u32) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_private_token_file_is_read_and_any_other_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent-token");

        write(&path, "the-fleet-agent-token-0001\n", 0o600);
        assert_eq!(
            token_file_read(&path, "the agent's token").unwrap(),
            "the-fleet-agent-token-0001"
        );
        write(&path, "  the-fleet-agent-token-0001  ", 0o400);
        assert_eq!(
            token_file_read(&path, "the agent's token").unwrap(),
            "the-fleet-agent-token-0001"
        );

        for mode in [0o644, 0o640, 0o604, 0o620, 0o602, 0o610] {
            write(&path, "the-fleet-agent-token-0001\n", mode);
            let err = token_file_read(&path, "the agent's token")
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("mode {mode:04o}")), "{err}");
            assert!(err.contains("chmod 600"), "{err}");
        }

        write(&path, "\n", 0o600);
        assert!(
            token_file_read(&path, "the agent's token")
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        write(&path, &"x".repeat(5000), 0o600);
        assert!(
            token_file_read(&path, "the agent's token")
                .unwrap_err()
                .to_string()
                .contains("larger")
        );
        assert!(
            token_file_read(dir.path(), "the agent's token").is_err(),
            "a directory"
        );
        assert!(token_file_read(&dir.path().join("missing"), "the agent's token").is_err());
    }

    #[test]
    fn a_token_file_of_another_user_is_refused() {
        if !nix::unistd::geteuid().is_root() {
            panic!(
                "this test needs root: it gives the token file to another user (run the tests as root, as CI does)"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent-token");
        write(&path, "the-fleet-agent-token-0001\n", 0o600);
        nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(61990)), None).unwrap();
        let err = token_file_read(&path, "the agent's token")
            .unwrap_err()
            .to_string();
        assert!(err.contains("belongs to uid 61990"), "{err}");
    }
}
