//! Who a workload runs as. As root (the production shape), the agent runs each workload as a
//! uid of its own, taken from a configured range: gid the same number, no supplementary groups,
//! no new privileges. A workload then cannot read the agent's token, state or logs (root's,
//! mode 0600 in 0700 directories), nor another workload's files, environment (`/proc/PID/environ`)
//! or processes. An agent that cannot switch users runs workloads as its own user only when told
//! `--insecure-same-user`: they could then read all of that.
//!
//! This module owns that decision and the uid primitives it needs: trying the switch in a child
//! process, reserving a range of uids for one agent of the machine, and killing every process
//! of a uid (what a workload left behind, even outside its process group). It does not hand out
//! uids (the supervisor does) nor start workloads (`process` does).

use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::Context;
use nix::errno::Errno;
use nix::fcntl::{FcntlArg, fcntl};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{
    AccessFlags, ForkResult, Gid, Pid, Uid, access, fork, setgid, setgroups, setuid,
};

/// The uids workloads run as unless told otherwise: inside the block that systemd documents as
/// unused (60578–61183), below its `DynamicUser=` range (61184–65519) and above the regular
/// users (up to 60000), so that no account of the machine and no systemd service shares them.
pub const DEFAULT_WORKLOAD_UIDS: UidRange = UidRange {
    first: 60600,
    last: 61099,
};

/// A range of uids, `FIRST-LAST` (both included), none of them root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    first: u32,
    last: u32,
}

impl UidRange {
    pub fn new(first: u32, last: u32) -> Result<Self, String> {
        if first == 0 {
            return Err("the workload uids must not include 0 (root)".into());
        }
        if last < first {
            return Err(format!(
                "the workload uids {first}-{last} are an empty range"
            ));
        }
        // (uid_t)-1 means "leave unchanged" to setuid(2) and friends.
        if last == u32::MAX {
            return Err(format!("{} is not a usable uid", u32::MAX));
        }
        Ok(Self { first, last })
    }

    pub fn first(&self) -> u32 {
        self.first
    }

    pub fn last(&self) -> u32 {
        self.last
    }

    /// How many uids the range holds.
    pub fn count(&self) -> u64 {
        u64::from(self.last - self.first) + 1
    }

    pub fn contains(&self, uid: u32) -> bool {
        (self.first..=self.last).contains(&uid)
    }

    /// The range cut into consecutive ranges of `size` uids (the last one may be shorter).
    pub fn blocks(self, size: u32) -> impl Iterator<Item = UidRange> {
        let size = size.max(1);
        (self.first..=self.last)
            .step_by(size as usize)
            .map(move |first| UidRange {
                first,
                last: first.saturating_add(size - 1).min(self.last),
            })
    }

    /// The uid after `uid` in the range, wrapping around to the first.
    pub(crate) fn after(&self, uid: u32) -> u32 {
        if uid >= self.last || uid < self.first {
            self.first
        } else {
            uid + 1
        }
    }
}

impl std::str::FromStr for UidRange {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (first, last) = text
            .split_once('-')
            .ok_or_else(|| format!("`{text}` is not a uid range FIRST-LAST (e.g. 60600-61099)"))?;
        let number = |part: &str| {
            part.trim()
                .parse::<u32>()
                .map_err(|_| format!("`{part}` in `{text}` is not a uid"))
        };
        Self::new(number(first)?, number(last)?)
    }
}

impl std::fmt::Display for UidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// Who the workloads of a running agent run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Each workload as a uid of its own from this range.
    UserPerWorkload(UidRange),
    /// Every workload as the agent's own user (`--insecure-same-user`): a workload can read the
    /// agent's token, its state (every workload's environment) and the other workloads' logs.
    SameUser,
}

impl std::fmt::Display for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Isolation::UserPerWorkload(uids) => {
                write!(f, "each workload runs as a user of its own (uids {uids})")
            }
            Isolation::SameUser => f.write_str(
                "INSECURE: workloads run as the agent's own user and can read its token, its \
                 state and the other workloads' logs",
            ),
        }
    }
}

/// The file whose bytes stand for uids: an agent that runs workloads as users of their own
/// holds a lock on the bytes of its range, so that two agents of one machine never share a uid
/// (each would kill the other's workloads as its own leftovers, and they could read each
/// other's files). Root's, in `/run`: workloads cannot open it, let alone lock it.
pub const UID_LOCK_FILE: &str = "/run/bulkhead-agent-uids.lock";

/// Another agent of this machine holds some of these workload uids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidsTaken {
    pub uids: UidRange,
}

impl std::fmt::Display for UidsTaken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "another agent of this machine runs workloads as some of the uids {}: give each \
             agent a range of its own (--workload-uids)",
            self.uids
        )
    }
}

impl std::error::Error for UidsTaken {}

/// Reserves `uids` for this agent until the returned file is closed (when the agent ends, or
/// its process does): a write lock on their bytes of [`UID_LOCK_FILE`], of the open file
/// description (so that two agents of one process conflict too). [`UidsTaken`] when another
/// agent holds any of them.
pub(crate) fn uids_reserve(uids: UidRange) -> anyhow::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(UID_LOCK_FILE)
        .with_context(|| format!("opening {UID_LOCK_FILE}"))?;
    // SAFETY: a plain C struct, for which all zeroes is a valid value.
    let mut lock: nix::libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = nix::libc::F_WRLCK as i16;
    lock.l_whence = nix::libc::SEEK_SET as i16;
    lock.l_start = i64::from(uids.first());
    lock.l_len = uids.count() as i64;
    match fcntl(&file, FcntlArg::F_OFD_SETLK(&lock)) {
        Ok(_) => Ok(file),
        Err(Errno::EAGAIN | Errno::EACCES) => Err(UidsTaken { uids }.into()),
        Err(errno) => Err(errno).with_context(|| format!("locking {UID_LOCK_FILE}")),
    }
}

/// What trying to switch to a workload uid found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SwitchProbe {
    /// A process switched to the uid, could not become root again and could reach the
    /// directory that holds the data directory.
    Works,
    /// Switching failed: the agent is not root (or, in a user namespace, the uid is not mapped).
    CannotSwitch(Errno),
    /// After switching, the process could become root again: the agent holds capabilities
    /// that survive the switch (a non-root agent given `CAP_SETUID`).
    RegainsRoot,
    /// The uid cannot search the directory that holds the data directory, so a workload could
    /// not reach its working directory.
    CannotReach,
}

/// Exit codes of the probe's child, above every errno (which the child exits with when a
/// switch fails).
const EXIT_REGAINS_ROOT: i32 = 200;
const EXIT_CANNOT_REACH: i32 = 201;

/// Tries, in a child process, what starting a workload as `uid` needs: switching to it (and
/// not back), and searching `reach` (the directory that holds the data directory).
pub(crate) fn switch_probe(uid: u32, reach: &Path) -> std::io::Result<SwitchProbe> {
    let reach = CString::new(reach.as_os_str().as_bytes())?;
    // SAFETY: the action makes only async-signal-safe calls (setuid, access) and allocates
    // nothing (the path was made above).
    let code = unsafe {
        run_as(uid, || {
            if setuid(Uid::from_raw(0)).is_ok() {
                EXIT_REGAINS_ROOT
            } else if access(reach.as_c_str(), AccessFlags::X_OK).is_err() {
                EXIT_CANNOT_REACH
            } else {
                0
            }
        })?
    };
    Ok(match code {
        0 => SwitchProbe::Works,
        EXIT_REGAINS_ROOT => SwitchProbe::RegainsRoot,
        EXIT_CANNOT_REACH => SwitchProbe::CannotReach,
        errno => SwitchProbe::CannotSwitch(Errno::from_raw(errno)),
    })
}

/// How workloads will run, from what [`switch_probe`] found and whether the operator accepts
/// running them as the agent's own user. `reach` is the directory the probe searched.
pub(crate) fn isolation_choose(
    probe: SwitchProbe,
    uids: UidRange,
    reach: &Path,
    insecure_same_user: bool,
) -> anyhow::Result<Isolation> {
    match probe {
        SwitchProbe::Works => Ok(Isolation::UserPerWorkload(uids)),
        SwitchProbe::CannotSwitch(_) if insecure_same_user => Ok(Isolation::SameUser),
        SwitchProbe::CannotSwitch(errno) => Err(anyhow::anyhow!(
            "the agent cannot run workloads as users of their own (switching to uid {first} \
             failed: {errno}): run it as root. Otherwise every workload runs as the agent's own \
             user and can read the agent's token, its state file (every workload's environment, \
             secrets included) and the other workloads' logs; to accept that risk (a \
             developer's machine, never a shared one), pass --insecure-same-user",
            first = uids.first()
        )),
        SwitchProbe::RegainsRoot => Err(anyhow::anyhow!(
            "a process switched to uid {first} could become root again: the agent holds \
             capabilities (CAP_SETUID?) that survive the switch; run it as root, which drops \
             every capability when it switches a workload to its uid",
            first = uids.first()
        )),
        SwitchProbe::CannotReach => Err(anyhow::anyhow!(
            "the workload uids cannot reach the data directory: {dir} is not searchable by \
             other users ({hint}), and each workload's working directory is inside the data \
             directory; make it searchable (chmod o+x) or put the data directory elsewhere \
             (e.g. /var/lib/bulkhead-agent)",
            dir = reach.display(),
            hint = unsearchable_ancestor(reach)
                .map(|(path, mode)| format!("{} has mode {mode:04o}", path.display()))
                .unwrap_or_else(|| "an ACL or security module denies it".into()),
        )),
    }
}

/// The first directory on the way to `path` (included) that others may not search.
fn unsearchable_ancestor(path: &Path) -> Option<(&Path, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut ancestors: Vec<&Path> = path.ancestors().collect();
    ancestors.reverse();
    ancestors.into_iter().find_map(|dir| {
        let mode = std::fs::metadata(dir).ok()?.permissions().mode() & 0o7777;
        (mode & 0o001 == 0).then_some((dir, mode))
    })
}

/// Kills every process that runs as `uid`: a process of that uid sends `SIGKILL` to `-1`,
/// which reaches exactly the processes that uid may signal (its own), whatever their process
/// group or session. The kernel makes a `fork` racing with it fail, so nothing escapes.
pub(crate) fn uid_kill_all(uid: u32) -> std::io::Result<()> {
    // SAFETY: the action makes one async-signal-safe call (kill) and allocates nothing.
    let code = unsafe {
        run_as(uid, || match kill(Pid::from_raw(-1), Signal::SIGKILL) {
            Ok(()) | Err(Errno::ESRCH) => 0, // ESRCH: no process to kill
            Err(errno) => errno as i32,
        })?
    };
    match code {
        0 => Ok(()),
        errno => Err(std::io::Error::from_raw_os_error(errno)),
    }
}

/// Whether `uid` belongs to a named user of this machine (`/etc/passwd`, or any NSS source):
/// such a uid is someone's, never a workload's.
pub(crate) fn uid_is_named(uid: u32) -> bool {
    nix::unistd::User::from_uid(Uid::from_raw(uid)).is_ok_and(|user| user.is_some())
}

/// Runs `action` in a forked child switched to `uid` (gid the same number, no supplementary
/// groups) and returns the child's exit code: the errno of a failed switch, or what `action`
/// returned. Blocks until the child ends (a few milliseconds).
///
/// # Safety
///
/// `action` runs in the child of a multi-threaded process, between `fork` and `_exit`: it must
/// make only async-signal-safe calls and must not allocate or take locks.
unsafe fn run_as(uid: u32, action: impl FnOnce() -> i32) -> std::io::Result<i32> {
    // SAFETY: the child makes only async-signal-safe calls (setgroups, setgid, setuid, the
    // caller's action, _exit); see this function's contract.
    match unsafe { fork() }? {
        ForkResult::Child => {
            let switched = setgroups(&[])
                .and_then(|()| setgid(Gid::from_raw(uid)))
                .and_then(|()| setuid(Uid::from_raw(uid)));
            let code = match switched {
                Ok(()) => action(),
                Err(errno) => errno as i32,
            };
            // SAFETY: ends the child at once, without running the parent's exit handlers.
            unsafe { nix::libc::_exit(code) }
        }
        ForkResult::Parent { child } => loop {
            match waitpid(child, None) {
                Ok(WaitStatus::Exited(_, code)) => return Ok(code),
                Ok(WaitStatus::Signaled(_, signal, _)) => {
                    return Err(std::io::Error::other(format!(
                        "the uid {uid} helper process was killed by {signal}"
                    )));
                }
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(errno) => return Err(errno.into()),
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_ranges_parse_and_refuse_root_and_empty_ranges() {
        let range: UidRange = "61000-61999".parse().unwrap();
        assert_eq!(
            (range.first(), range.last(), range.count()),
            (61000, 61999, 1000)
        );
        assert_eq!(range.to_string(), "61000-61999");
        assert!(range.contains(61000) && range.contains(61999) && !range.contains(62000));
        assert_eq!(range.after(61000), 61001);
        assert_eq!(range.after(61999), 61000, "wraps around");
        assert_eq!(range.after(5), 61000, "out of the range: start again");
        assert_eq!("7-7".parse::<UidRange>().unwrap().count(), 1);
        for bad in ["0-10", "10-9", "61000", "a-b", "1-4294967295", ""] {
            assert!(bad.parse::<UidRange>().is_err(), "{bad}");
        }
        assert!(DEFAULT_WORKLOAD_UIDS.count() >= u64::from(crate::DEFAULT_SLOTS));
        let blocks: Vec<String> = "10-24"
            .parse::<UidRange>()
            .unwrap()
            .blocks(6)
            .map(|block| block.to_string())
            .collect();
        assert_eq!(blocks, ["10-15", "16-21", "22-24"]);
    }

    #[test]
    fn two_agents_cannot_reserve_overlapping_uids() {
        crate::test_require_root(&format!("it locks {UID_LOCK_FILE}"));
        let range = |text: &str| text.parse::<UidRange>().unwrap();
        let held = uids_reserve(range("3000000000-3000000099")).unwrap();
        for overlapping in [
            "3000000099-3000000200",
            "2999999000-3000000000",
            "3000000050-3000000050",
        ] {
            let err = uids_reserve(range(overlapping)).unwrap_err();
            assert_eq!(
                err.downcast_ref::<UidsTaken>(),
                Some(&UidsTaken {
                    uids: range(overlapping)
                }),
                "{err:#}"
            );
            assert!(err.to_string().contains("--workload-uids"), "{err}");
        }
        let beside = uids_reserve(range("3000000100-3000000199")).unwrap();
        drop(held);
        let again = uids_reserve(range("3000000000-3000000099")).unwrap();
        drop((beside, again));
    }

    #[test]
    fn an_agent_that_cannot_switch_users_refuses_unless_told_insecure_same_user() {
        let uids = DEFAULT_WORKLOAD_UIDS;
        let reach = Path::new("/var/lib");
        let not_root = SwitchProbe::CannotSwitch(Errno::EPERM);

        let err = isolation_choose(not_root, uids, reach, false).unwrap_err();
        let message = err.to_string();
        for needed in [
            "--insecure-same-user",
            "run it as root",
            "token",
            "state file",
            "other workloads' logs",
            "EPERM",
        ] {
            assert!(message.contains(needed), "`{needed}` in: {message}");
        }
        assert_eq!(
            isolation_choose(not_root, uids, reach, true).unwrap(),
            Isolation::SameUser
        );
        assert!(Isolation::SameUser.to_string().starts_with("INSECURE"));

        // Root isolates, whether or not the insecure mode is allowed.
        for insecure in [false, true] {
            assert_eq!(
                isolation_choose(SwitchProbe::Works, uids, reach, insecure).unwrap(),
                Isolation::UserPerWorkload(uids)
            );
        }
        // Never run workloads that could become root, nor ones that cannot reach their
        // directory, even when the insecure mode is allowed.
        for probe in [SwitchProbe::RegainsRoot, SwitchProbe::CannotReach] {
            assert!(
                isolation_choose(probe, uids, reach, true).is_err(),
                "{probe:?}"
            );
        }
    }

    #[test]
    fn an_unsearchable_directory_is_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("inner");
        std::fs::create_dir(&inner).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o750)).unwrap();
        std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = isolation_choose(
            SwitchProbe::CannotReach,
            DEFAULT_WORKLOAD_UIDS,
            &inner,
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(&format!("{} has mode 0750", dir.path().display())),
            "{err}"
        );
    }

    #[test]
    fn the_switch_probe_and_kill_sweep_work_as_root() {
        crate::test_require_root("it switches processes to workload uids");
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        assert_eq!(switch_probe(61990, dir.path()).unwrap(), SwitchProbe::Works);
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(
            switch_probe(61990, dir.path()).unwrap(),
            SwitchProbe::CannotReach,
            "another uid cannot search root's 0700 directory"
        );
        // Nothing runs as the uid: killing is fine.
        uid_kill_all(61991).unwrap();

        // A process of the uid dies, in whatever process group it is; root's does not.
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        let sleep = |uid: Option<u32>| {
            let mut command = std::process::Command::new("sleep");
            command.arg("300").process_group(0);
            if let Some(uid) = uid {
                command.uid(uid).gid(uid);
            }
            command.spawn().expect("sleep starts")
        };
        let mut workload = sleep(Some(61991));
        let mut bystander = sleep(None);
        uid_kill_all(61991).unwrap();
        assert_eq!(workload.wait().unwrap().signal(), Some(9));
        assert!(
            bystander.try_wait().unwrap().is_none(),
            "root's process lives"
        );
        bystander.kill().unwrap();
        bystander.wait().unwrap();
        assert!(uid_is_named(0));
        assert!(!uid_is_named(61991));
    }
}
