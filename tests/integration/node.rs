//! Node.js packages of the repository, for the tests that build and run them: the TypeScript
//! client (`openapi/typescript`), the dashboard (`dashboard/`) and the sign-in tests' OpenID
//! Provider (`tests/oidc-provider`). Finds `node` and `npm` (or
//! fails saying how to install them), installs a package's locked dependencies when they are
//! missing or stale, and runs its scripts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::SystemTime;

pub const INSTALL_HINT: &str = "install Node.js 18.17 or later (20.19 for the OpenID Provider of the sign-in tests) and npm: `apt-get install nodejs npm` on Debian or Ubuntu, or see https://nodejs.org";

/// The TypeScript client package.
pub const CLIENT_PACKAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi/typescript");
/// The dashboard package (it builds on the client's sources and their `node_modules`).
pub const DASHBOARD_PACKAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../dashboard");

/// Held while `npm ci` runs: tests run at once, and two installs into one `node_modules` would
/// trip over each other.
static INSTALLING: Mutex<()> = Mutex::new(());

/// `node` and `npm`, found on the PATH.
pub struct Node {
    pub node: PathBuf,
    npm: PathBuf,
}

impl Node {
    pub fn find() -> Self {
        let node = program_find("node").unwrap_or_else(|| {
            panic!("this test needs `node`, which is not on the PATH: {INSTALL_HINT}")
        });
        let npm = program_find("npm").unwrap_or_else(|| {
            panic!("this test needs `npm`, which is not on the PATH: {INSTALL_HINT}")
        });
        let version = run(Command::new(&node).arg("--version"), "node --version");
        let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
        let major: u32 = version
            .trim_start_matches('v')
            .split('.')
            .next()
            .and_then(|major| major.parse().ok())
            .unwrap_or(0);
        assert!(
            major >= 18,
            "this test needs Node.js 18.17 or later, and `node` is {version}: {INSTALL_HINT}"
        );
        Self { node, npm }
    }

    pub fn npm(&self, package: &str) -> Command {
        let mut command = Command::new(&self.npm);
        command
            .current_dir(package)
            .env("npm_config_update_notifier", "false")
            .env("npm_config_fund", "false")
            .env("npm_config_audit", "false");
        command
    }

    /// `npm ci` in `package`, when its `node_modules` is missing or older than the lock file
    /// (npm writes `node_modules/.package-lock.json` at each install).
    pub fn install(&self, package: &str) {
        let _installing = INSTALLING
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let dir = Path::new(package);
        let lock = modified(&dir.join("package-lock.json"))
            .unwrap_or_else(|| panic!("{package}/package-lock.json is committed"));
        let installed = modified(&dir.join("node_modules/.package-lock.json"));
        if installed.is_some_and(|installed| installed >= lock) {
            return;
        }
        eprintln!("npm ci in {package}");
        run(
            self.npm(package).arg("ci"),
            &format!("npm ci (in {package})"),
        );
    }

    pub fn npm_run(&self, package: &str, script: &str) -> Output {
        run(
            self.npm(package).args(["run", "--silent", script]),
            &format!("npm run {script} (in {package})"),
        )
    }
}

/// Runs `command` to its end; fails, showing its output, unless it succeeds.
pub fn run(command: &mut Command, what: &str) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("{what} does not start: {err}"));
    if !output.status.success() {
        let (stdout, stderr) = texts(&output);
        panic!("{what} failed ({}):\n{stdout}{stderr}", output.status);
    }
    output
}

pub fn texts(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The first executable file `name` in the directories of the PATH.
pub fn program_find(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}
