//! PostgreSQL itself restarted under load. Two replicas run on a PostgreSQL cluster of the
//! test's own (`initdb` and `pg_ctl` of the installed server, on a port of its own: the
//! shared one is not restarted under the other tests). While it restarts, writes go on
//! through both replicas: each is answered 201 or 503 `not_ready` (never a 500), every one
//! acknowledged is there afterwards, and both replicas recover without a restart of their
//! own — ready, every kind of work led by one of them, listening to changes again (a token
//! revoked through one is refused by the other within 1 s).
//!
//! Runs where the other PostgreSQL tests run (`BULKHEAD_TEST_POSTGRES_URL` set), and then
//! needs PostgreSQL's server programs (`apt-get install postgresql`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulkhead::app::cluster::leases::Work;
use serde_json::json;

use crate::replica_changes::within;
use crate::support::{ADMIN_TOKEN, Backend, TestServer, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_recover_on_their_own_when_postgres_restarts_under_load() {
    if std::env::var("BULKHEAD_TEST_POSTGRES_URL").map_or(true, |url| url.is_empty()) {
        crate::support::postgres_skipped();
        return;
    }
    let postgres = OwnPostgres::start();
    // The writers make a project every 20 ms each for as long as the restart takes: more than
    // one user may own by default.
    let unlimited = |settings: &mut bulkhead::config::Settings| {
        settings.limits.projects_per_user = 100_000;
    };
    let a = TestServer::replica_start_with(Backend::Postgres, &postgres.url(), unlimited).await;
    let b = TestServer::replica_start_with(Backend::Postgres, &postgres.url(), unlimited).await;
    let (a, b) = (Arc::new(a), Arc::new(b));

    // Writes through both replicas, one at a time each, for the whole test.
    let acknowledged: Arc<Mutex<Vec<String>>> = Arc::default();
    let refused: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = [a.clone(), b.clone()]
        .into_iter()
        .enumerate()
        .map(|(n, replica)| {
            let (acknowledged, refused, stop) =
                (acknowledged.clone(), refused.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    i += 1;
                    let name = format!("r{n}-{i}");
                    let answer = replica
                        .post("/v1/projects", ADMIN_TOKEN, json!({ "name": name }))
                        .await;
                    match answer.status {
                        201 => acknowledged
                            .lock()
                            .unwrap()
                            .push(answer.body["id"].as_str().unwrap().to_owned()),
                        503 => {
                            assert_eq!(answer.body["code"], "not_ready", "{}", answer.text);
                            refused.lock().unwrap().push(name);
                        }
                        status => panic!("{name}: {status} {}", answer.text),
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        })
        .collect();
    eventually("writes acknowledged before the restart", async || {
        acknowledged.lock().unwrap().len() >= 20
    })
    .await;

    // PostgreSQL restarts, down for 2 s: every connection of every replica is closed by the
    // server, and new ones are refused meanwhile.
    let restarted = Instant::now();
    tokio::task::block_in_place(|| postgres.restart(Duration::from_secs(2)));
    eprintln!(
        "PostgreSQL stopped and started again in {:?}",
        restarted.elapsed()
    );
    let before = acknowledged.lock().unwrap().len();
    for (name, replica) in [("a", &a), ("b", &b)] {
        let took = within(
            &format!("{name} ready again"),
            Duration::from_secs(10),
            async || replica.get("/readyz", ADMIN_TOKEN).await.status == 200,
        )
        .await;
        eprintln!("{name} ready {took:?} after the restart");
        within(
            &format!("{name} listens to changes again"),
            Duration::from_secs(10),
            async || replica.app().changes.listening(),
        )
        .await;
    }
    within(
        "every kind of work led by exactly one replica",
        Duration::from_secs(10),
        async || {
            Work::ALL
                .into_iter()
                .all(|work| a.app().leases.leads(work) != b.app().leases.leads(work))
        },
    )
    .await;
    within(
        "writes acknowledged after the restart",
        Duration::from_secs(10),
        async || acknowledged.lock().unwrap().len() >= before + 20,
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Release);
    for writer in writers {
        writer
            .await
            .expect("a writer saw only 201 and 503 not_ready");
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    eprintln!(
        "{} writes acknowledged, {} refused with 503 while PostgreSQL restarted",
        acknowledged.len(),
        refused.lock().unwrap().len()
    );
    for id in &acknowledged {
        b.get(&format!("/v1/projects/{id}"), ADMIN_TOKEN)
            .await
            .assert_status(200);
    }

    // The change feed works again: a token revoked through a is refused by b within 1 s.
    let token = a
        .post(
            "/v1/tokens",
            ADMIN_TOKEN,
            json!({ "name": "after-restart", "scopes": ["read"] }),
        )
        .await;
    let token = token.assert_status(201).clone();
    let (id, secret) = (
        token["id"].as_str().unwrap().to_owned(),
        token["secret"].as_str().unwrap().to_owned(),
    );
    b.get("/v1/projects", &secret).await.assert_status(200);
    a.delete(&format!("/v1/tokens/{id}"), ADMIN_TOKEN)
        .await
        .assert_status(204);
    within(
        "b refuses the revoked token",
        Duration::from_secs(1),
        async || b.get("/v1/projects", &secret).await.status == 401,
    )
    .await;

    for replica in [a, b] {
        Arc::into_inner(replica)
            .expect("the writers ended")
            .stop()
            .await;
    }
}

/// A PostgreSQL cluster of the test's own, on a free loopback port, removed when dropped.
struct OwnPostgres {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    /// Holds the data directory.
    _dir: tempfile::TempDir,
}

impl OwnPostgres {
    fn start() -> Self {
        let bin = server_programs();
        let dir = tempfile::tempdir().expect("temporary directory");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        // PostgreSQL refuses to run as root: as root, its programs run as `postgres`.
        if let Some(uid) = postgres_user_ids() {
            for path in [dir.path(), &data] {
                std::os::unix::fs::chown(path, Some(uid.0), Some(uid.1)).unwrap();
            }
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let postgres = Self {
            bin,
            data,
            port,
            _dir: dir,
        };
        postgres.run(
            "initdb",
            &["-A", "trust", "-U", "postgres", "--no-sync", "-D"],
            true,
        );
        postgres.pg_ctl("start");
        postgres
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server (`-m fast`: every session is ended), leaves it down for `down`, and
    /// starts it again, as a restart for an upgrade or a failover does.
    fn restart(&self, down: Duration) {
        self.pg_ctl("stop");
        std::thread::sleep(down);
        self.pg_ctl("start");
    }

    fn pg_ctl(&self, action: &str) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off",
            self.port,
            self.data.display()
        );
        self.run(
            "pg_ctl",
            &[
                action,
                "-w",
                "-m",
                "fast",
                "-l",
                "postgres.log",
                "-o",
                &options,
                "-D",
            ],
            true,
        );
    }

    /// Runs `program args… <data dir>` (as `postgres` when this is root).
    fn run(&self, program: &str, args: &[&str], check: bool) {
        let program = self.bin.join(program);
        let mut command = if postgres_user_ids().is_some() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&program);
            command
        } else {
            Command::new(&program)
        };
        let output = command
            .args(args)
            .arg(&self.data)
            .current_dir(&self.data)
            .output()
            .unwrap_or_else(|err| panic!("{}: {err}", program.display()));
        assert!(
            !check || output.status.success(),
            "{} {args:?}: {}\n{}\n{}",
            program.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        self.run("pg_ctl", &["stop", "-m", "immediate", "-D"], false);
    }
}

/// Where PostgreSQL's server programs are: `pg_config --bindir`, else Debian's
/// `/usr/lib/postgresql/<newest>/bin`.
fn server_programs() -> PathBuf {
    let configured = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()));
    let debian = std::fs::read_dir("/usr/lib/postgresql")
        .ok()
        .and_then(|dirs| {
            dirs.filter_map(|d| d.ok())
                .filter_map(|d| d.file_name().to_str()?.parse::<u32>().ok())
                .max()
                .map(|version| PathBuf::from(format!("/usr/lib/postgresql/{version}/bin")))
        });
    [configured, debian]
        .into_iter()
        .flatten()
        .find(|dir| has_program(dir, "initdb") && has_program(dir, "pg_ctl"))
        .expect(
            "this test runs its own PostgreSQL: install PostgreSQL's server programs \
             (`apt-get install postgresql`; initdb and pg_ctl)",
        )
}

fn has_program(dir: &Path, name: &str) -> bool {
    dir.join(name).is_file()
}

/// The uid and gid of `postgres` when this process is root (PostgreSQL will not run as root).
fn postgres_user_ids() -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").ok()?.uid() != 0 {
        return None;
    }
    let id = |flag: &str| -> Option<u32> {
        let output = Command::new("id").args([flag, "postgres"]).output().ok()?;
        String::from_utf8_lossy(&output.stdout).trim().parse().ok()
    };
    Some((
        id("-u").expect("running as root, PostgreSQL needs a `postgres` user"),
        id("-g")?,
    ))
}
