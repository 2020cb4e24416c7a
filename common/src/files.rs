//! Files of a process's own state: directories only its user may enter, and files replaced
//! atomically and durably.

use std::path::Path;

/// Creates `dir` (and its parents) if missing, readable by this user only (0700).
pub fn private_dir_create(dir: &Path) -> std::io::Result<()> {
    if dir.exists() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Replaces the file at `path` with `bytes`, owner-only (0600), atomically and durably: a
/// temporary file beside it, fsync, rename, fsync of the directory. A crash at any moment
/// leaves the old content or the new, never half of one.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = std::path::PathBuf::from(temporary);
    // A leftover of a crash keeps its mode when reopened: start afresh.
    let _ = std::fs::remove_file(&temporary);
    {
        // Owner-only: state files may hold secrets (a workload's environment, a token).
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&temporary, path)?;
    // Make the rename itself durable.
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_file_written_atomically_is_private_and_replaces_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("private").join("state");
        private_dir_create(&state).unwrap();
        let mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let file = state.join("snapshot.json");
        write_atomically(&file, b"one").unwrap();
        write_atomically(&file, b"two").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> = std::fs::read_dir(&state)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["snapshot.json"], "no temporary file is left");
    }
}
