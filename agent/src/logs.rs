//! Workload output, kept as numbered and timestamped lines.
//!
//! A workload's stdout and stderr go to `DATA_DIR/logs/KEY.out` and `KEY.err`, files the
//! process appends to directly: files rather than pipes to the agent, so that a workload keeps
//! running (no `SIGPIPE`, no blocked writes) while the agent restarts, and its output waits for
//! the agent that adopts it. The agent collects each file's new complete lines (every
//! [`COLLECT_INTERVAL`] while the workload runs) and appends them to `KEY.lines`, one JSON
//! record per line (`seq`, `time_ms`, `stream`, `text`), numbered from 1 and stamped with the
//! time the agent read them; its own notes about the workload (started, exited, stopping) go
//! there too, as stream `system`. `KEY.pos` keeps how far each output file was read and the next
//! number, so that a restarted agent reads on where the last one stopped, numbering on.
//!
//! Bounded: an output file read to its end and larger than [`TRUNCATE_BYTES`] is truncated (the
//! process appends, so it goes on writing at the new end; a line written between the agent's
//! check and the truncation is lost); past [`ROTATE_BYTES`], `KEY.lines` becomes `KEY.lines.1`,
//! replacing the one before. A line longer than [`MAX_LINE`] bytes is cut into pieces; an
//! unfinished line waits for its end. The newest lines are also kept in memory, where readers
//! that follow a workload find them without reading a file.
//!
//! The files are the agent's (mode 0600, in a 0700 directory): a workload writes its output
//! through the descriptors it was started with, but cannot open its own log, nor another
//! workload's, by path. `KEY.log`, the output file of agents before these records, is read as
//! stdout when a workload started by one is adopted.

use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// How often a running workload's output files are read.
pub(crate) const COLLECT_INTERVAL: Duration = Duration::from_millis(100);
/// An output file read to its end and larger than this is truncated.
pub(crate) const TRUNCATE_BYTES: u64 = 64 * 1024;
/// A line file larger than this is rotated.
pub(crate) const ROTATE_BYTES: u64 = 1024 * 1024;
/// A longer line is cut into pieces of this many bytes.
pub(crate) const MAX_LINE: usize = 16 * 1024;
/// At most this many lines are returned at once.
pub(crate) const MAX_LINES: usize = 1000;
/// At most this much text is returned at once.
pub(crate) const MAX_BYTES: usize = 1024 * 1024;
/// The newest lines kept in memory per workload: at most this much text...
const RECENT_BYTES: usize = 256 * 1024;
/// ... and this many lines.
const RECENT_LINES: usize = 2 * MAX_LINES;
/// Read at most this much of an output file per collection.
const READ_CHUNK: u64 = 256 * 1024;

/// Where a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Stream {
    Stdout,
    Stderr,
    /// The agent's note about the workload.
    System,
}

/// One line of a workload's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LogLine {
    /// Numbered from 1, one more for each line of the workload.
    pub(crate) seq: u64,
    /// When the agent read it, in milliseconds since the Unix epoch.
    pub(crate) time_ms: u64,
    pub(crate) stream: Stream,
    pub(crate) text: String,
}

/// The output files a workload writes, in the order they are read, and their streams.
const SOURCES: [(&str, Stream); 3] = [
    ("out", Stream::Stdout),
    ("err", Stream::Stderr),
    ("log", Stream::Stdout),
];

/// What a reader asks for.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LogQuery {
    /// The lines after this number; with neither this nor `since_ms`, the newest lines.
    pub(crate) after: Option<u64>,
    /// Without `after`: the first lines read at or after this time.
    pub(crate) since_ms: Option<u64>,
    /// At most this many lines (capped at [`MAX_LINES`]).
    pub(crate) limit: usize,
    /// At most this much text (capped at [`MAX_BYTES`]).
    pub(crate) max_bytes: usize,
}

/// The answer to a [`LogQuery`].
#[derive(Debug, Serialize)]
pub(crate) struct LogPage {
    /// Oldest first.
    pub(crate) lines: Vec<LogLine>,
    /// The number to read on after: the last line's, or else the query's (or the newest
    /// line's, for a query without `after`).
    pub(crate) next: u64,
    /// Lines the query asked for are no longer kept (rotated away), or `after` was a number
    /// this workload never had (its log was removed since): the page starts at the oldest line
    /// kept.
    pub(crate) gap: bool,
}

/// How far the output files were read, and the next line's number (`KEY.pos`).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Position {
    next_seq: u64,
    read: [u64; SOURCES.len()],
}

/// One workload's lines: where collection stands and the newest lines.
#[derive(Debug, Default)]
struct WorkloadLog {
    position: Position,
    recent: VecDeque<LogLine>,
    recent_bytes: usize,
}

impl WorkloadLog {
    fn remember(&mut self, line: LogLine) {
        self.recent_bytes += line.text.len();
        self.recent.push_back(line);
        while self.recent.len() > RECENT_LINES || self.recent_bytes > RECENT_BYTES {
            let Some(dropped) = self.recent.pop_front() else {
                break;
            };
            self.recent_bytes -= dropped.text.len();
        }
    }

    fn last_seq(&self) -> u64 {
        self.position.next_seq.saturating_sub(1)
    }
}

/// The directory of the workloads' output and lines.
#[derive(Debug)]
pub(crate) struct LogDir {
    dir: PathBuf,
    workloads: Mutex<HashMap<String, Arc<Mutex<WorkloadLog>>>>,
    /// Bumped whenever a line is added, for readers that wait for one.
    appended: watch::Sender<u64>,
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
        // Files loosened by hand (or by an older agent) are the agent's again.
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o600))?;
            }
        }
        Ok(Self {
            dir,
            workloads: Mutex::default(),
            appended: watch::Sender::new(0),
        })
    }

    fn path(&self, key: &str, extension: &str) -> PathBuf {
        self.dir.join(format!("{key}.{extension}"))
    }

    /// The files a new process of `key` writes its stdout and stderr to (owner-only, also when
    /// an older agent made them otherwise).
    pub(crate) fn open_outputs(&self, key: &str) -> std::io::Result<(File, File)> {
        let open = |extension: &str| {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(self.path(key, extension))?;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            Ok::<_, std::io::Error>(file)
        };
        Ok((open("out")?, open("err")?))
    }

    /// Learns of added lines: the value changes whenever a workload's log grows.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.appended.subscribe()
    }

    /// `key`'s log, loaded from its files the first time it is asked for.
    fn workload(&self, key: &str) -> Arc<Mutex<WorkloadLog>> {
        let mut workloads = self.workloads.lock().expect("not poisoned");
        workloads
            .entry(key.to_owned())
            .or_insert_with(|| Arc::new(Mutex::new(self.load(key))))
            .clone()
    }

    /// Where `key`'s collection stands and its newest lines, from its files.
    fn load(&self, key: &str) -> WorkloadLog {
        let mut log = WorkloadLog {
            position: std::fs::read(self.path(key, "pos"))
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok())
                .unwrap_or_default(),
            ..WorkloadLog::default()
        };
        let tail = read_tail(&self.path(key, "lines"), RECENT_BYTES as u64).unwrap_or_default();
        for line in records(&tail) {
            log.remember(line);
        }
        // The position is saved after the lines: a crash between them leaves it behind.
        let after_last = log.recent.back().map_or(0, |line| line.seq) + 1;
        log.position.next_seq = log.position.next_seq.max(after_last).max(1);
        log
    }

    /// Reads the new complete lines of `key`'s output files into its log.
    pub(crate) fn collect(&self, key: &str) -> std::io::Result<()> {
        let known = self
            .workloads
            .lock()
            .expect("not poisoned")
            .contains_key(key);
        if !known
            && !SOURCES
                .iter()
                .any(|(extension, _)| self.path(key, extension).exists())
        {
            return Ok(()); // removed, or never started
        }
        let workload = self.workload(key);
        let mut log = workload.lock().expect("not poisoned");
        self.collect_locked(key, &mut log)
    }

    fn collect_locked(&self, key: &str, log: &mut WorkloadLog) -> std::io::Result<()> {
        let now = now_ms();
        let mut added = Vec::new();
        let mut moved = false;
        for (index, (extension, stream)) in SOURCES.iter().enumerate() {
            let read = &mut log.position.read[index];
            let path = self.path(key, extension);
            // A stat per file and tick; the file is opened only when it grew.
            let length = match std::fs::metadata(&path) {
                Ok(metadata) => metadata.len(),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => return Err(err),
            };
            if length < *read {
                // Truncated by someone else, or made again: read it from the start.
                *read = 0;
                moved = true;
            }
            if length > *read {
                let mut file = File::open(&path)?;
                file.seek(SeekFrom::Start(*read))?;
                let mut bytes = Vec::new();
                file.take(READ_CHUNK).read_to_end(&mut bytes)?;
                let consumed = lines_complete(&bytes, |text| {
                    added.push((*stream, String::from_utf8_lossy(text).into_owned()));
                });
                *read += consumed as u64;
                moved |= consumed > 0;
            }
            if *read == length && length >= TRUNCATE_BYTES {
                OpenOptions::new().write(true).open(&path)?.set_len(0)?;
                *read = 0;
                moved = true;
            }
        }
        if !added.is_empty() {
            let lines = added
                .into_iter()
                .map(|(stream, text)| self.number(log, now, stream, text))
                .collect();
            self.append(key, log, lines)?;
        }
        if moved {
            self.position_save(key, &log.position)?;
        }
        Ok(())
    }

    fn number(&self, log: &mut WorkloadLog, time_ms: u64, stream: Stream, text: String) -> LogLine {
        let seq = log.position.next_seq;
        log.position.next_seq += 1;
        LogLine {
            seq,
            time_ms,
            stream,
            text,
        }
    }

    /// Appends numbered lines to `key`'s line file (rotating it when large) and memory.
    fn append(&self, key: &str, log: &mut WorkloadLog, lines: Vec<LogLine>) -> std::io::Result<()> {
        let mut bytes = Vec::new();
        for line in &lines {
            serde_json::to_writer(&mut bytes, line).map_err(std::io::Error::other)?;
            bytes.push(b'\n');
        }
        let path = self.path(key, "lines");
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)?;
        file.write_all(&bytes)?;
        if file.metadata()?.len() > ROTATE_BYTES {
            std::fs::rename(&path, self.path(key, "lines.1"))?;
        }
        for line in lines {
            log.remember(line);
        }
        self.appended.send_modify(|count| *count += 1);
        Ok(())
    }

    fn position_save(&self, key: &str, position: &Position) -> std::io::Result<()> {
        let path = self.path(key, "pos");
        let temporary = self.path(key, "pos.tmp");
        let _ = std::fs::remove_file(&temporary); // a leftover keeps its mode when reopened
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(&serde_json::to_vec(position).map_err(std::io::Error::other)?)?;
        std::fs::rename(&temporary, &path)
    }

    /// Adds a note of the agent's own to `key`'s log, after the output collected so far.
    /// Failing to is only logged.
    pub(crate) fn note(&self, key: &str, text: &str) {
        let workload = self.workload(key);
        let mut log = workload.lock().expect("not poisoned");
        let result = self.collect_locked(key, &mut log).and_then(|()| {
            let line = self.number(&mut log, now_ms(), Stream::System, text.to_owned());
            self.append(key, &mut log, vec![line])?;
            self.position_save(key, &log.position)
        });
        if let Err(err) = result {
            tracing::warn!(key, "writing to the workload's log failed: {err}");
        }
    }

    /// The lines of `key` that `query` asks for.
    pub(crate) fn read(&self, key: &str, query: LogQuery) -> std::io::Result<LogPage> {
        let limit = query.limit.clamp(1, MAX_LINES);
        let max_bytes = query.max_bytes.clamp(1, MAX_BYTES);
        let workload = self.workload(key);
        let log = workload.lock().expect("not poisoned");
        let last = log.last_seq();
        let oldest_recent = log.recent.front().map_or(last + 1, |line| line.seq);
        let (mut lines, after, gap) = match (query.after, query.since_ms) {
            (Some(after), _) if after > last => {
                // Not a number of this log: read it from its oldest line.
                let (lines, _) = self.since(key, &log, 0, limit)?;
                (lines, 0, true)
            }
            (Some(after), _) if after + 1 >= oldest_recent => {
                let lines = log
                    .recent
                    .iter()
                    .filter(|line| line.seq > after)
                    .take(limit)
                    .cloned()
                    .collect();
                (lines, after, false)
            }
            (Some(after), _) => {
                let lines = self.files_read(key, |line| line.seq > after, limit)?;
                let gap = lines.first().is_some_and(|line| line.seq > after + 1);
                (lines, after, gap)
            }
            (None, Some(since)) => {
                let (lines, gap) = self.since(key, &log, since, limit)?;
                (lines, last, gap)
            }
            (None, None) => {
                // The newest lines that fit: at least one, which `bound_bytes` cuts if need be.
                let mut bytes = 0;
                let newest = log
                    .recent
                    .iter()
                    .rev()
                    .take(limit)
                    .enumerate()
                    .take_while(|(n, line)| {
                        bytes += line.text.len();
                        *n == 0 || bytes <= max_bytes
                    })
                    .count();
                let skip = log.recent.len() - newest;
                (log.recent.iter().skip(skip).cloned().collect(), last, false)
            }
        };
        bound_bytes(&mut lines, max_bytes);
        let next = lines.last().map_or(after, |line| line.seq);
        Ok(LogPage { lines, next, gap })
    }

    /// The first lines read at or after `since`, and whether older ones that might have
    /// been were rotated away.
    fn since(
        &self,
        key: &str,
        log: &WorkloadLog,
        since: u64,
        limit: usize,
    ) -> std::io::Result<(Vec<LogLine>, bool)> {
        let lines: Vec<LogLine> = match log.recent.front() {
            Some(first) if first.time_ms < since || first.seq == 1 => log
                .recent
                .iter()
                .filter(|line| line.time_ms >= since)
                .take(limit)
                .cloned()
                .collect(),
            _ => self.files_read(key, |line| line.time_ms >= since, limit)?,
        };
        let gap = lines
            .first()
            .is_some_and(|line| line.seq > 1 && line.time_ms > since && since > 0);
        Ok((lines, gap))
    }

    /// The first `limit` lines of `key`'s line files that `wanted` takes, oldest first.
    fn files_read(
        &self,
        key: &str,
        wanted: impl Fn(&LogLine) -> bool,
        limit: usize,
    ) -> std::io::Result<Vec<LogLine>> {
        let mut lines = Vec::new();
        for extension in ["lines.1", "lines"] {
            let bytes = match std::fs::read(self.path(key, extension)) {
                Ok(bytes) => bytes,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => return Err(err),
            };
            lines.extend(records(&bytes).filter(&wanted).take(limit - lines.len()));
            if lines.len() >= limit {
                break;
            }
        }
        Ok(lines)
    }

    /// Forgets `key` and deletes its files.
    pub(crate) fn remove(&self, key: &str) {
        self.workloads.lock().expect("not poisoned").remove(key);
        for extension in ["out", "err", "log", "lines", "lines.1", "pos"] {
            let path = self.path(key, extension);
            if let Err(err) = std::fs::remove_file(&path)
                && err.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(key, "removing {} failed: {err}", path.display());
            }
        }
    }
}

/// Calls `line` with each complete line of `bytes` (without its ending), cutting lines longer
/// than [`MAX_LINE`]; returns how many bytes those lines took. An unfinished last line is left
/// for later, unless it is already [`MAX_LINE`] long.
fn lines_complete(bytes: &[u8], mut line: impl FnMut(&[u8])) -> usize {
    let mut consumed = 0;
    let mut rest = bytes;
    loop {
        match rest
            .iter()
            .take(MAX_LINE + 1)
            .position(|byte| *byte == b'\n')
        {
            Some(end) => {
                let text = &rest[..end];
                line(text.strip_suffix(b"\r").unwrap_or(text));
                consumed += end + 1;
                rest = &rest[end + 1..];
            }
            None if rest.len() >= MAX_LINE => {
                line(&rest[..MAX_LINE]);
                consumed += MAX_LINE;
                rest = &rest[MAX_LINE..];
            }
            None => return consumed,
        }
    }
}

/// The records of a line file's bytes; a partial or damaged record is skipped.
fn records(bytes: &[u8]) -> impl Iterator<Item = LogLine> + '_ {
    bytes
        .split(|byte| *byte == b'\n')
        .filter_map(|record| serde_json::from_slice(record).ok())
}

/// Keeps the first lines of `lines` that fit in `max_bytes` of text, cutting the first when it
/// alone is longer.
fn bound_bytes(lines: &mut Vec<LogLine>, max_bytes: usize) {
    let mut bytes = 0;
    let keep = lines
        .iter()
        .take_while(|line| {
            bytes += line.text.len();
            bytes <= max_bytes
        })
        .count();
    if keep == 0
        && let Some(first) = lines.first_mut()
    {
        let mut cut = max_bytes;
        while !first.text.is_char_boundary(cut) {
            cut -= 1;
        }
        first.text.truncate(cut);
        lines.truncate(1);
    } else {
        lines.truncate(keep);
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

fn now_ms() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    fn texts(page: &LogPage) -> Vec<&str> {
        page.lines.iter().map(|line| line.text.as_str()).collect()
    }

    fn query(after: Option<u64>) -> LogQuery {
        LogQuery {
            after,
            limit: MAX_LINES,
            max_bytes: MAX_BYTES,
            ..LogQuery::default()
        }
    }

    #[test]
    fn loose_modes_of_an_older_agent_are_tightened_and_its_output_read() {
        let dir = tempfile::tempdir().unwrap();
        let loose = std::fs::Permissions::from_mode(0o755);
        std::fs::create_dir(dir.path().join("logs")).unwrap();
        std::fs::set_permissions(dir.path().join("logs"), loose.clone()).unwrap();
        std::fs::write(dir.path().join("logs/web.log"), "old output\n").unwrap();
        std::fs::set_permissions(dir.path().join("logs/web.log"), loose.clone()).unwrap();
        std::fs::write(dir.path().join("logs/web.out"), "").unwrap();
        std::fs::set_permissions(dir.path().join("logs/web.out"), loose).unwrap();
        let logs = LogDir::new(dir.path()).unwrap();
        drop(logs.open_outputs("web").unwrap());
        logs.collect("web").unwrap();
        assert_eq!(mode(&logs.dir), 0o700);
        for extension in ["out", "err", "lines", "pos"] {
            assert_eq!(mode(&logs.path("web", extension)), 0o600, "{extension}");
        }
        let page = logs.read("web", query(None)).unwrap();
        assert_eq!(texts(&page), ["old output"]);
        assert_eq!(page.lines[0].stream, Stream::Stdout);
    }

    #[test]
    fn lines_are_numbered_across_streams_and_a_restarted_agent_numbers_on() {
        let dir = tempfile::tempdir().unwrap();
        let logs = LogDir::new(dir.path()).unwrap();
        let (mut out, mut err) = logs.open_outputs("web").unwrap();
        logs.note("web", "started");
        write!(out, "one\ntwo\r\nunfin").unwrap();
        writeln!(err, "oops").unwrap();
        logs.collect("web").unwrap();
        let page = logs.read("web", query(Some(0))).unwrap();
        assert_eq!(texts(&page), ["started", "one", "two", "oops"]);
        let streams: Vec<Stream> = page.lines.iter().map(|line| line.stream).collect();
        use Stream::*;
        assert_eq!(streams, [System, Stdout, Stdout, Stderr]);
        assert_eq!(page.next, 4);
        assert!(!page.gap);

        // The unfinished line comes once it ends; the agent restarts in between.
        writeln!(out, "ished").unwrap();
        drop(logs);
        let logs = LogDir::new(dir.path()).unwrap();
        logs.collect("web").unwrap();
        let page = logs.read("web", query(Some(4))).unwrap();
        assert_eq!(texts(&page), ["unfinished"]);
        assert_eq!(page.lines[0].seq, 5);
        assert_eq!(page.next, 5);
        // Nothing new: the cursor stays.
        let page = logs.read("web", query(Some(5))).unwrap();
        assert!(page.lines.is_empty());
        assert_eq!(page.next, 5);
        // A number this log never had reads it again from the start, saying so.
        let page = logs.read("web", query(Some(99))).unwrap();
        assert!(page.gap);
        assert_eq!(page.lines[0].seq, 1);

        // The newest lines, bounded by count and bytes; a line past the bytes is cut.
        let newest = logs
            .read(
                "web",
                LogQuery {
                    limit: 2,
                    max_bytes: MAX_BYTES,
                    ..LogQuery::default()
                },
            )
            .unwrap();
        assert_eq!(texts(&newest), ["oops", "unfinished"]);
        let cut = logs
            .read(
                "web",
                LogQuery {
                    after: Some(0),
                    limit: 10,
                    max_bytes: 4,
                    ..LogQuery::default()
                },
            )
            .unwrap();
        assert_eq!(texts(&cut), ["star"]);
        assert_eq!(cut.next, 1);
    }

    #[test]
    fn output_is_truncated_once_read_and_lines_rotate_keeping_their_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let logs = LogDir::new(dir.path()).unwrap();
        let (mut out, _err) = logs.open_outputs("web").unwrap();
        let filler = "x".repeat(1000);
        for round in 0..30 {
            for n in 0..100 {
                writeln!(out, "{round}-{n} {filler}").unwrap();
            }
            logs.collect("web").unwrap();
            // Read to its end and past the size: truncated, the process writing on at 0.
            assert!(std::fs::metadata(logs.path("web", "out")).unwrap().len() < TRUNCATE_BYTES);
        }
        writeln!(out, "last").unwrap();
        logs.collect("web").unwrap();
        assert!(logs.path("web", "lines.1").exists());
        assert!(std::fs::metadata(logs.path("web", "lines")).unwrap().len() <= ROTATE_BYTES);
        let newest = logs.read("web", query(None)).unwrap();
        assert_eq!(newest.lines.last().unwrap().text, "last");
        assert_eq!(newest.lines.last().unwrap().seq, 3001);
        // The oldest lines were rotated away: reading from the start says so.
        let oldest = logs.read("web", query(Some(0))).unwrap();
        assert!(oldest.gap);
        assert!(oldest.lines[0].seq > 1);
        let seqs: Vec<u64> = oldest.lines.iter().map(|line| line.seq).collect();
        assert!(
            seqs.windows(2).all(|pair| pair[1] == pair[0] + 1),
            "in order, none twice"
        );
        // Lines older than memory holds come from the files.
        let early = logs.read("web", query(Some(oldest.lines[0].seq))).unwrap();
        assert_eq!(early.lines[0].seq, oldest.lines[0].seq + 1);
        // A very long line is cut in pieces.
        writeln!(out, "{}", "y".repeat(MAX_LINE + 10)).unwrap();
        logs.collect("web").unwrap();
        let page = logs.read("web", query(Some(3001))).unwrap();
        let lengths: Vec<usize> = page.lines.iter().map(|line| line.text.len()).collect();
        assert_eq!(lengths, [MAX_LINE, 10]);

        logs.remove("web");
        assert!(logs.read("web", query(None)).unwrap().lines.is_empty());
        assert_eq!(std::fs::read_dir(&logs.dir).unwrap().count(), 0);
    }
}
