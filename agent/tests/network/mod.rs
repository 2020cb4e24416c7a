//! Each workload's network namespace, end to end: what a workload can reach (its own port's
//! callers' answers, the outside network) and what it cannot (another workload, by any address;
//! the host's services), and that the platform reaches it on its host port from this machine and
//! from another one. "Another machine" is a network namespace the test makes, joined to this
//! host by a veth pair, as a second host on the network would be.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::mpsc;

use super::*;

/// Tries to open TCP connections to the addresses in `TARGETS` (`name=host:port,...`), one
/// second each, and prints what happened to each (`ok`, `refused`, `timeout` or the error's
/// name) as a `REPORT` line, with what `OUTSIDE` answered.
const REACHING_WORKLOAD: &str = r#"
import json, os, socket, time

def connect(address):
    host, port = address.rsplit(':', 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1) as s:
            s.settimeout(2)
            s.sendall(b'GET / HTTP/1.0\r\n\r\n')
            return 'ok', s.recv(64).decode(errors='replace')
    except ConnectionRefusedError:
        return 'refused', ''
    except (socket.timeout, TimeoutError):
        return 'timeout', ''
    except OSError as e:
        return type(e).__name__, ''

report = {}
for target in os.environ['TARGETS'].split(','):
    name, address = target.split('=')
    report[name], report[name + '_answer'] = connect(address)
print('REPORT ' + json.dumps(report), flush=True)
time.sleep(300)
"#;

/// A workload that serves HTTP on `127.0.0.1:PORT` only: the namespace's loopback.
const LOOPBACK_SERVER: &str = "python3 -c \"import http.server as h, os; \
    h.HTTPServer(('127.0.0.1', int(os.environ['PORT'])), h.SimpleHTTPRequestHandler).serve_forever()\"";

/// Another machine on the host's network: a namespace of its own, its address `10.78.0.2`, the
/// host's `10.78.0.1`. Removed when dropped.
struct OtherMachine {
    name: String,
    link: String,
}

impl OtherMachine {
    const ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
    const HOST: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);

    fn start() -> Self {
        let machine = Self {
            name: "bulkhead-test-other".into(),
            // Not `bhw…`: the agent's rules treat those as workloads'.
            link: "bhtother".into(),
        };
        machine.remove();
        let ip = |args: &[&str]| {
            let output = Command::new("ip").args(args).output().expect("`ip` runs");
            assert!(
                output.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        };
        let (name, link) = (machine.name.as_str(), machine.link.as_str());
        ip(&["netns", "add", name]);
        ip(&[
            "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", name,
        ]);
        ip(&["addr", "add", "10.78.0.1/30", "dev", link]);
        ip(&["link", "set", link, "up"]);
        ip(&["-n", name, "addr", "add", "10.78.0.2/30", "dev", "eth0"]);
        ip(&["-n", name, "link", "set", "eth0", "up"]);
        ip(&["-n", name, "link", "set", "lo", "up"]);
        machine
    }

    fn remove(&self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.link])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }

    /// Runs `work` on a thread in the other machine's network.
    fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> T {
        let namespace = File::open(format!("/run/netns/{}", self.name)).unwrap();
        std::thread::spawn(move || {
            nix::sched::setns(&namespace, nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("joining the other machine's network");
            work()
        })
        .join()
        .unwrap()
    }

    /// Serves, on the other machine, a line saying who called (the peer's address) to every
    /// connection; its address.
    fn serve_caller_address(&self) -> SocketAddr {
        let (sender, receiver) = mpsc::channel();
        let namespace = File::open(format!("/run/netns/{}", self.name)).unwrap();
        std::thread::spawn(move || {
            nix::sched::setns(&namespace, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let listener = TcpListener::bind((OtherMachine::ADDRESS, 0)).unwrap();
            sender.send(listener.local_addr().unwrap()).unwrap();
            for mut stream in listener.incoming().flatten() {
                let peer = stream.peer_addr().unwrap();
                let _ = stream.write_all(format!("caller {}", peer.ip()).as_bytes());
            }
        });
        receiver.recv().unwrap()
    }
}

impl Drop for OtherMachine {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Whether an HTTP server answers at `address`, asked from the calling thread's network.
fn answers_http_blocking(address: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_secs(2)) else {
        return false;
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let _ = stream.write_all(b"GET / HTTP/1.0\r\n\r\n");
    let mut head = [0u8; 5];
    stream.read_exact(&mut head).is_ok() && &head == b"HTTP/"
}

fn port_of(view: &Value) -> u16 {
    view["address"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The network namespace of process `pid` (its device and inode).
fn netns_of(pid: u32) -> (u64, u64) {
    let metadata = std::fs::metadata(format!("/proc/{pid}/ns/net")).unwrap();
    (metadata.dev(), metadata.ino())
}

/// The workload's end of its veth pair, from its uid (as the agent chooses it).
fn workload_address(uid: u32) -> Ipv4Addr {
    let block = u32::from_be_bytes([10, 77, 0, 0]) + (uid % (1 << 14)) * 4;
    Ipv4Addr::from(block + 2)
}

#[tokio::test]
async fn each_workload_has_a_network_of_its_own_reachable_only_on_its_port() {
    require_python();
    let other_machine = OtherMachine::start();
    let outside = other_machine.serve_caller_address();
    // A service of the host, on every address: no workload may reach it.
    let host_service = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
    let host_service_port = host_service.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in host_service.incoming().flatten() {
            let _ = stream.write_all(b"host service");
        }
    });

    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), 4).await;
    assert_eq!(
        agent.network,
        bulkhead_agent::NetworkIsolation::NamespacePerWorkload
    );
    let client = Client::new(&agent);
    let (status, web) = client.put("web", LOOPBACK_SERVER).await;
    assert_eq!(status, StatusCode::CREATED, "{web}");
    let web = client
        .wait_for("web", "running and healthy", running_and_healthy)
        .await;
    let web_port = port_of(&web);
    assert!(
        (30000..=32767).contains(&web_port),
        "a port the kernel hands to no other program: {web_port}"
    );
    let reserved = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_reserved_ports").unwrap();
    assert!(reserved.contains("30000-32767"), "{reserved}");
    let web_address = workload_address(uid_of(&web));

    // The platform reaches it on its host port: over loopback (the agent's address, as the
    // agent's probe just did), on the host's other addresses, and from another machine.
    let address = web["address"].as_str().unwrap().to_owned();
    assert!(answers(&address).await, "{address}");
    assert!(answers(&format!("{}:{web_port}", OtherMachine::HOST)).await);
    let from_other_machine = SocketAddr::from((OtherMachine::HOST, web_port));
    assert!(
        other_machine.run(move || answers_http_blocking(from_other_machine)),
        "another machine reaches the workload on the host's port {web_port}"
    );
    assert_ne!(
        netns_of(pid_of(&web)),
        netns_of(std::process::id()),
        "the workload is not in the host's network"
    );
    assert!(
        Path::new(&format!("/run/netns/bulkhead-{}", uid_of(&web))).exists(),
        "its namespace outlives the agent, under the name of its uid"
    );
    // IPv6, which the host's table does not filter, is off at both ends of its pair.
    let ipv6 = Command::new("ip")
        .args([
            "-n",
            &format!("bulkhead-{}", uid_of(&web)),
            "-6",
            "addr",
            "show",
            "dev",
            "eth0",
        ])
        .output()
        .unwrap();
    assert!(ipv6.status.success() && ipv6.stdout.is_empty(), "{ipv6:?}");
    let host_side_ipv6 = format!("/proc/sys/net/ipv6/conf/bhw{}/disable_ipv6", uid_of(&web));
    if let Ok(disabled) = std::fs::read_to_string(host_side_ipv6) {
        assert_eq!(disabled.trim(), "1");
    }

    let targets = [
        ("other_by_loopback", format!("127.0.0.1:{web_port}")),
        (
            "other_by_host_port",
            format!("{}:{web_port}", OtherMachine::HOST),
        ),
        ("other_directly", format!("{web_address}:{web_port}")),
        ("agent_api", format!("127.0.0.1:{}", agent.addr.port())),
        (
            "host_service",
            format!("{}:{host_service_port}", OtherMachine::HOST),
        ),
        ("outside", outside.to_string()),
    ];
    let targets = targets
        .iter()
        .map(|(name, address)| format!("{name}={address}"))
        .collect::<Vec<_>>()
        .join(",");
    let (status, prober) = client
        .call(
            reqwest::Method::PUT,
            "/v1/workloads/prober",
            Some(json!({
                "command": "python3 -c \"import os; exec(os.environ['PROBE'])\"",
                "env": {"PROBE": REACHING_WORKLOAD, "TARGETS": targets},
            })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{prober}");
    let report = report_of(&client, "prober").await;

    // Its loopback is its own: nothing of the other workload's, nor of the agent's, is there.
    assert_eq!(report["other_by_loopback"], "refused", "{report}");
    assert_eq!(report["agent_api"], "refused", "{report}");
    // The other workload is not reachable by any address, not even through its host port.
    assert_eq!(report["other_by_host_port"], "timeout", "{report}");
    assert_eq!(report["other_directly"], "timeout", "{report}");
    // Nor are the host's own services.
    assert_eq!(report["host_service"], "timeout", "{report}");
    // The rest of the network is, as the host: the other machine sees the host call.
    assert_eq!(report["outside"], "ok", "{report}");
    assert_eq!(
        report["outside_answer"],
        format!("caller {}", OtherMachine::HOST),
        "{report}"
    );

    // Deleted, the workload takes its namespace, its link and its port's forwarding along.
    let uid = uid_of(&web);
    assert_eq!(client.delete("web").await, StatusCode::NO_CONTENT);
    assert!(!Path::new(&format!("/run/netns/bulkhead-{uid}")).exists());
    assert!(!Path::new(&format!("/sys/class/net/bhw{uid}")).exists());
    let table = Command::new("nft")
        .args(["list", "map", "ip", "bulkhead", "ports"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        !table.contains(&format!("{web_port} : {web_address}")),
        "{table}"
    );
    assert!(
        !answers(&address).await,
        "nothing answers on its port any more"
    );

    let prober_pid = pid_of(&prober);
    agent.shutdown_and_stop_workloads().await;
    wait_dead(prober_pid).await;
    assert!(
        !Path::new(&format!("/run/netns/bulkhead-{}", uid_of(&prober))).exists(),
        "stopped with its agent, a workload leaves no namespace (the next agent makes it again)"
    );
}
