//! Operating-system processes: starting a workload's command in a process group of its own
//! (as its own user when it has one: see `isolation`), signalling that group, describing how a
//! process ended, and recognising a process again by its pid through `/proc` (alive, not a
//! zombie, same start time, same program, same user) after an agent restart, when it is no
//! longer the agent's child.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// The agent's own environment variables a workload inherits; everything else stays out of
/// it. `HOME` and `TMPDIR` are the workload's working directory instead: the agent's would be
/// another user's, and a shared temporary directory outlives the workload.
const INHERITED_ENV: &[&str] = &["PATH", "LANG", "LC_ALL", "TZ"];

/// How to start one workload process.
pub(crate) struct Launch<'a> {
    pub argv: &'a [String],
    pub env: &'a BTreeMap<String, String>,
    pub port: u16,
    /// Its `HOME` and `TMPDIR`.
    pub work_dir: &'a Path,
    /// Where it starts: `work_dir`, or its code's directory in it.
    pub cwd: &'a Path,
    /// Where its stdout and stderr go (opened for appending).
    pub output: (File, File),
    /// The user (and group: the same number) it runs as; `None`: the agent's own.
    pub uid: Option<u32>,
    /// The network namespace it runs in (see `network`); `None`: the agent's.
    pub netns: Option<&'a File>,
    /// The `cgroup.procs` files of its cgroup (see `limits`), which it joins before its
    /// program runs; empty: it stays in the agent's.
    pub cgroup: &'a [File],
}

/// Starts the process, leader of a new process group, with a minimal environment plus the
/// workload's variables and `PORT`. Stdin is closed. It is not killed when its handle is
/// dropped: an agent restart leaves it running, to be adopted.
///
/// The process first joins its cgroup (writing `0`, itself, to each `cgroup.procs` file), so
/// that nothing it starts runs outside it. With a network namespace, it joins it next, while
/// it is still root. With a uid,
/// it then runs as that user and group with no supplementary groups, and is checked before its
/// program starts: no supplementary group left, no way back to root. In every case it gets no
/// new privileges (`PR_SET_NO_NEW_PRIVS`: set-user-ID programs and file capabilities give it
/// nothing).
pub(crate) fn spawn(launch: Launch<'_>) -> std::io::Result<Child> {
    let (program, args) = launch
        .argv
        .split_first()
        .ok_or_else(|| std::io::Error::other("empty command"))?;
    let mut command = Command::new(program);
    command.args(args).env_clear();
    for name in INHERITED_ENV {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
        .envs(launch.env)
        .env("PORT", launch.port.to_string())
        .env("HOME", launch.work_dir)
        .env("TMPDIR", launch.work_dir)
        .current_dir(launch.cwd)
        .stdin(Stdio::null())
        .stdout(launch.output.0)
        .stderr(launch.output.1)
        .process_group(0)
        .kill_on_drop(false);
    let uid = launch.uid;
    let netns = launch.netns.map(|file| file.as_raw_fd());
    let cgroup_procs: Vec<_> = launch.cgroup.iter().map(AsRawFd::as_raw_fd).collect();
    // SAFETY: the closure runs in the child between fork and exec; it makes only
    // async-signal-safe calls (write, setns, setgroups, setgid, setuid, prctl, getgroups) and
    // allocates nothing (the errors are raw OS errors; the descriptors' list was made before
    // the fork). The cgroup's and namespace's descriptors stay open in the parent until
    // `spawn` returns, and are closed on exec.
    unsafe {
        command.pre_exec(move || {
            let check = |result: nix::libc::c_int| {
                if result == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            };
            for fd in &cgroup_procs {
                // `0` is the writing process itself.
                if nix::libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(fd) = netns {
                // Joining a network namespace takes root: before the switch.
                check(nix::libc::setns(fd, nix::libc::CLONE_NEWNET))?;
            }
            if let Some(uid) = uid {
                check(nix::libc::setgroups(0, std::ptr::null()))?;
                check(nix::libc::setgid(uid))?;
                check(nix::libc::setuid(uid))?;
            }
            nix::sys::prctl::set_no_new_privs()?;
            if uid.is_some() {
                // SAFETY: a null list of size 0 asks only for the number of groups.
                let groups = nix::libc::getgroups(0, std::ptr::null_mut());
                let regains_root = nix::unistd::setuid(nix::unistd::Uid::from_raw(0)).is_ok();
                if groups != 0 || regains_root {
                    return Err(std::io::Error::from_raw_os_error(nix::libc::EPERM));
                }
            }
            Ok(())
        });
    }
    command.spawn()
}

/// Sends `signal` to the process group led by `pid`. A group that is already gone is fine.
pub(crate) fn signal_group(pid: u32, signal: Signal) {
    let Ok(raw) = i32::try_from(pid) else { return };
    if raw <= 1 {
        return; // never signal "every process" or init
    }
    if let Err(err) = killpg(Pid::from_raw(raw), signal)
        && err != nix::errno::Errno::ESRCH
    {
        tracing::warn!(pid, ?signal, "signalling the process group failed: {err}");
    }
}

/// How a child process ended, for people (`exited with status 1`, `killed by signal 9 (SIGKILL)`).
pub(crate) fn describe_exit(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    match status.signal() {
        Some(number) => match Signal::try_from(number) {
            Ok(signal) => format!("killed by signal {number} ({})", signal.as_str()),
            Err(_) => format!("killed by signal {number}"),
        },
        None => format!("ended: {status}"),
    }
}

/// What `/proc` says about a live process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcInfo {
    /// Start time in clock ticks since boot: with the pid, identifies the process.
    pub start_time: u64,
    pub cmdline: Vec<String>,
}

/// The process `pid` if it exists and is not a zombie (a zombie has ended: it only waits for
/// its parent to collect its status).
pub(crate) fn proc_info(pid: u32) -> Option<ProcInfo> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`: comm may hold spaces and parentheses, so cut at the last ')'.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    let state = *fields.first()?;
    if state == "Z" || state == "X" {
        return None;
    }
    // Field 22 of the whole line is the start time; `fields` starts at field 3.
    let start_time = fields.get(19)?.parse().ok()?;
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let cmdline = raw
        .split(|byte| *byte == 0)
        .filter(|arg| !arg.is_empty())
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect();
    Some(ProcInfo {
        start_time,
        cmdline,
    })
}

/// The real uid of process `pid`, if it exists.
pub(crate) fn proc_uid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    // `Uid:\treal\teffective\tsaved\tfilesystem`
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Whether `pid` is still the process the agent started: alive, started at `start_time` when
/// known, and running the program of `argv`.
pub(crate) fn is_same_process(pid: u32, start_time: Option<u64>, argv: &[String]) -> bool {
    match proc_info(pid) {
        Some(info) => {
            start_time.is_none_or(|start| start == info.start_time)
                && cmdline_matches(&info.cmdline, argv)
        }
        None => false,
    }
}

/// Whether a process's command line is that of `argv`: the same, or — when the program
/// re-executed itself through a launcher or interpreter (`python3` through a version-manager
/// shim becomes `/opt/python/bin/python3 ...`, a script becomes `sh script ...`) — a command
/// line that ends with the same arguments and names the same program.
pub(crate) fn cmdline_matches(cmdline: &[String], argv: &[String]) -> bool {
    if cmdline == argv {
        return true;
    }
    let Some((program, args)) = argv.split_first() else {
        return false;
    };
    let base = |path: &str| path.rsplit('/').next().unwrap_or(path).to_owned();
    let program = base(program);
    cmdline.len() > args.len()
        && cmdline.ends_with(args)
        && cmdline[..cmdline.len() - args.len()]
            .iter()
            .any(|arg| base(arg) == program)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn command_lines_match_through_launchers() {
        let argv = words("python3 -m http.server");
        assert!(cmdline_matches(&argv, &argv));
        assert!(cmdline_matches(
            &words("/opt/py/bin/python3 -m http.server"),
            &argv
        ));
        assert!(cmdline_matches(
            &words("bash /root/.pyenv/shims/python3 -m http.server"),
            &argv
        ));
        assert!(!cmdline_matches(&words("python3 -m other"), &argv));
        assert!(!cmdline_matches(&words("/usr/bin/sleep 100"), &argv));
        assert!(!cmdline_matches(&[], &argv));
    }

    #[test]
    fn this_process_is_recognised_and_a_wrong_start_time_is_not() {
        let me = std::process::id();
        let info = proc_info(me).expect("/proc of this process");
        assert!(is_same_process(me, Some(info.start_time), &info.cmdline));
        assert!(!is_same_process(
            me,
            Some(info.start_time + 1),
            &info.cmdline
        ));
        assert!(!is_same_process(me, None, &words("no-such-program --flag")));
        assert_eq!(proc_uid(me), Some(nix::unistd::getuid().as_raw()));
        assert_eq!(proc_uid(u32::MAX), None);
    }

    #[test]
    fn exits_are_described() {
        assert_eq!(
            describe_exit(ExitStatus::from_raw(1 << 8)),
            "exited with status 1"
        );
        assert_eq!(
            describe_exit(ExitStatus::from_raw(9)),
            "killed by signal 9 (SIGKILL)"
        );
    }
}
