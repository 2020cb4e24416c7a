//! Workload output: each workload's stdout and stderr go to `DATA_DIR/logs/KEY.log`, a file
//! the process appends to directly. A file rather than a pipe to the agent, so that a workload
//! keeps running (no `SIGPIPE`, no blocked writes) while the agent restarts, and its output is
//! still there for the agent that adopts it. The agent adds its own lines (starts, exits),
//! prefixed with `[bulkhead-agent]`.
//!
//! The file is bounded: past [`ROTATE_BYTES`] its last [`TAIL_BYTES`] are copied to `KEY.log.1`
//! and it is truncated (the process appends, so it goes on writing at the new end; lines written
//! during the copy can be lost). The logs endpoint returns the last [`TAIL_LINES`] lines of the
//! two files, at most [`TAIL_BYTES`] of them.
//!
//! The files are the agent's (mode 0600, in a 0700 directory): a workload writes its output
//! through the descriptor it was started with, but cannot open its own log, nor another
//! workload's, by path.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A log file larger than this is rotated.
pub(crate) const ROTATE_BYTES: u64 = 1024 * 1024;
/// At most this much output is kept after a rotation and returned by the logs endpoint.
pub(crate) const TAIL_BYTES: u64 = 256 * 1024;
/// At most this many lines are returned by the logs endpoint.
pub(crate) const TAIL_LINES: usize = 1000;

/// The directory of the workloads' output files.
#[derive(Debug, Clone)]
pub(crate) struct LogDir {
    dir: PathBuf,
}

impl LogDir {
    /// The `logs` directory of `data_dir`, created owner-only (and made so if it exists).
    pub(crate) fn new(data_dir: &Path) -> std::io::Result<Self> {
        let dir = data_dir.join("logs");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        Ok(Self { dir })
    }

    fn current(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.log"))
    }

    fn previous(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.log.1"))
    }

    /// The file a new process of `key` writes its output to (owner-only, also when an older
    /// agent made it otherwise).
    pub(crate) fn open_output(&self, key: &str) -> std::io::Result<File> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(self.current(key))?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        Ok(file)
    }

    /// Adds a line of the agent's own to `key`'s output. Failing to is only logged.
    pub(crate) fn note(&self, key: &str, line: &str) {
        let stamp = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ");
        let result = self
            .open_output(key)
            .and_then(|mut file| writeln!(file, "[bulkhead-agent] {stamp} {line}"));
        if let Err(err) = result {
            tracing::warn!(key, "writing to the workload's log failed: {err}");
        }
    }

    /// Rotates `key`'s output file when it has grown past [`ROTATE_BYTES`].
    pub(crate) fn rotate_if_large(&self, key: &str) -> std::io::Result<()> {
        let current = self.current(key);
        let Ok(metadata) = std::fs::metadata(&current) else {
            return Ok(());
        };
        if metadata.len() <= ROTATE_BYTES {
            return Ok(());
        }
        let tail = read_tail(&current, TAIL_BYTES)?;
        let previous = self.previous(key);
        let temporary = previous.with_extension("1.tmp");
        let _ = std::fs::remove_file(&temporary); // a leftover keeps its mode when reopened
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)?
            .write_all(&tail)?;
        std::fs::rename(&temporary, &previous)?;
        OpenOptions::new().write(true).open(&current)?.set_len(0)
    }

    /// The last lines of `key`'s output, oldest first.
    pub(crate) fn tail(&self, key: &str) -> std::io::Result<Vec<String>> {
        let mut bytes = read_tail(&self.previous(key), TAIL_BYTES)?;
        bytes.extend(read_tail(&self.current(key), TAIL_BYTES)?);
        let start = bytes.len().saturating_sub(TAIL_BYTES as usize);
        let mut window = &bytes[start..];
        if start > 0 {
            // Drop the partial line the window starts in.
            if let Some(newline) = window.iter().position(|byte| *byte == b'\n') {
                window = &window[newline + 1..];
            }
        }
        let text = String::from_utf8_lossy(window);
        let lines: Vec<&str> = text.lines().collect();
        let skip = lines.len().saturating_sub(TAIL_LINES);
        Ok(lines[skip..]
            .iter()
            .map(|line| (*line).to_owned())
            .collect())
    }

    /// Deletes `key`'s output files.
    pub(crate) fn remove(&self, key: &str) {
        for path in [self.current(key), self.previous(key)] {
            if let Err(err) = std::fs::remove_file(&path)
                && err.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(key, "removing {} failed: {err}", path.display());
            }
        }
    }
}

/// The last `limit` bytes of a file; nothing when it does not exist.
fn read_tail(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let length = file.metadata()?.len();
    file.seek(SeekFrom::Start(length.saturating_sub(limit)))?;
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loose_modes_of_an_older_agent_are_tightened() {
        let dir = tempfile::tempdir().unwrap();
        let loose = std::fs::Permissions::from_mode(0o755);
        std::fs::create_dir(dir.path().join("logs")).unwrap();
        std::fs::set_permissions(dir.path().join("logs"), loose.clone()).unwrap();
        std::fs::write(dir.path().join("logs/web.log"), "old output\n").unwrap();
        std::fs::set_permissions(dir.path().join("logs/web.log"), loose).unwrap();
        let logs = LogDir::new(dir.path()).unwrap();
        drop(logs.open_output("web").unwrap());
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&logs.dir), 0o700);
        assert_eq!(mode(&logs.current("web")), 0o600);
        assert_eq!(logs.tail("web").unwrap(), ["old output"]);
    }

    #[test]
    fn tail_is_bounded_by_lines_and_survives_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let logs = LogDir::new(dir.path()).unwrap();
        let mut output = logs.open_output("web").unwrap();
        for n in 0..3000 {
            writeln!(output, "line {n}").unwrap();
        }
        let lines = logs.tail("web").unwrap();
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines.last().unwrap(), "line 2999");

        // Grow past the rotation size, rotate, keep writing through the same handle.
        let filler = "x".repeat(1023);
        for _ in 0..1100 {
            writeln!(output, "{filler}").unwrap();
        }
        writeln!(output, "before rotation").unwrap();
        logs.rotate_if_large("web").unwrap();
        assert_eq!(std::fs::metadata(logs.current("web")).unwrap().len(), 0);
        writeln!(output, "after rotation").unwrap();
        logs.note("web", "restarting");
        let lines = logs.tail("web").unwrap();
        let at = |text: &str| lines.iter().position(|line| line.contains(text)).unwrap();
        assert!(at("before rotation") < at("after rotation"));
        assert!(lines.last().unwrap().starts_with("[bulkhead-agent] "));
        assert!(lines.iter().map(|line| line.len() + 1).sum::<usize>() <= TAIL_BYTES as usize);
        // Only the last lines survive the rotation: the file was truncated.
        assert!(std::fs::metadata(logs.current("web")).unwrap().len() < 1000);
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&logs.dir), 0o700);
        assert_eq!(mode(&logs.current("web")), 0o600);
        assert_eq!(mode(&logs.previous("web")), 0o600);

        logs.remove("web");
        assert!(logs.tail("web").unwrap().is_empty());
    }
}
