//! The agent's token, read from a file (`--token-file`). Not from the environment or the
//! command line: those of a process are visible in `/proc` (its command line to every user),
//! and a workload running as the agent's user could read its environment.
//!
//! The file must be the agent user's own and private (mode 0600 or stricter), as `ssh` demands
//! of a private key: anyone who reads the token can run any command on every machine of the
//! fleet, so a file that others may read is refused rather than warned about (a warning in a
//! log leaves the hole open; `chmod 600` closes it).

use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use anyhow::Context;

/// A token file is a line, not a document: refuse anything bigger.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// The token in `path` (surrounding whitespace, such as a final newline, removed). Refuses a
/// file that is not a regular file, that group or others may access, or that another user owns.
pub fn token_file_read(path: &Path) -> anyhow::Result<String> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("opening the agent's token file {}", path.display()))?;
    // The checks look at the file opened, not at the path (which could change in between).
    let metadata = file.metadata()?;
    anyhow::ensure!(
        metadata.is_file(),
        "the agent's token file {} is not a regular file",
        path.display()
    );
    let mode = metadata.permissions().mode() & 0o7777;
    anyhow::ensure!(
        mode & 0o077 == 0,
        "the agent's token file {} may be accessed by other users (mode {mode:04o}): anyone who \
         reads it can run commands on this machine; make it private with `chmod 600 {}`",
        path.display(),
        path.display()
    );
    let agent = nix::unistd::geteuid().as_raw();
    anyhow::ensure!(
        metadata.uid() == agent,
        "the agent's token file {} belongs to uid {}, not to the agent's user (uid {agent}), \
         so that user can read or replace it; `chown {agent} {}`",
        path.display(),
        metadata.uid(),
        path.display()
    );
    let mut text = String::new();
    file.take(MAX_TOKEN_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading the agent's token file {}", path.display()))?;
    anyhow::ensure!(
        text.len() as u64 <= MAX_TOKEN_FILE_BYTES,
        "the agent's token file {} is larger than {MAX_TOKEN_FILE_BYTES} bytes: it should hold \
         the token alone",
        path.display()
    );
    let token = text.trim();
    anyhow::ensure!(
        !token.is_empty(),
        "the agent's token file {} is empty",
        path.display()
    );
    Ok(token.to_owned())
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
            token_file_read(&path).unwrap(),
            "the-fleet-agent-token-0001"
        );
        write(&path, "  the-fleet-agent-token-0001  ", 0o400);
        assert_eq!(
            token_file_read(&path).unwrap(),
            "the-fleet-agent-token-0001"
        );

        for mode in [0o644, 0o640, 0o604, 0o620, 0o602, 0o610] {
            write(&path, "the-fleet-agent-token-0001\n", mode);
            let err = token_file_read(&path).unwrap_err().to_string();
            assert!(err.contains(&format!("mode {mode:04o}")), "{err}");
            assert!(err.contains("chmod 600"), "{err}");
        }

        write(&path, "\n", 0o600);
        assert!(
            token_file_read(&path)
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        write(&path, &"x".repeat(5000), 0o600);
        assert!(
            token_file_read(&path)
                .unwrap_err()
                .to_string()
                .contains("larger")
        );
        assert!(token_file_read(dir.path()).is_err(), "a directory");
        assert!(token_file_read(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn a_token_file_of_another_user_is_refused() {
        crate::test_require_root("it gives the token file to another user");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent-token");
        write(&path, "the-fleet-agent-token-0001\n", 0o600);
        nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(61990)), None).unwrap();
        let err = token_file_read(&path).unwrap_err().to_string();
        assert!(err.contains("belongs to uid 61990"), "{err}");
    }
}
