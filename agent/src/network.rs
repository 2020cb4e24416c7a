//! The network a workload sees. Where the agent runs as root, each workload gets a network
//! namespace of its own: its loopback, its interfaces and its ports are its own, so workloads of
//! different tenants on one machine cannot reach each other over loopback, nor the services of
//! the host, and only their port is reachable from outside.
//!
//! - **The namespace** is `bulkhead-UID` (the workload's uid, unique on the machine: see
//!   `isolation`), kept in `/run/netns` (as `ip netns` keeps them) so that it outlives an agent
//!   restart, with the workload still in it.
//! - **A veth pair** joins it to the host: `bhwUID` on the host, `eth0` inside, on a /30 of
//!   [`WORKLOAD_NETWORK`] chosen by the uid, IPv4 only. The host is the namespace's default
//!   route; the rest of [`WORKLOAD_NETWORK`] is a blackhole on the host.
//! - **The workload's port** stays the host port the agent gave it: nftables (the table
//!   `ip bulkhead`, shared by the machine's agents) forwards any TCP connection to a local
//!   address of the host on that port into the namespace (a map of host port → workload
//!   address, one element per workload), and the namespace's own rule hands it to its loopback,
//!   so a workload that listens on `127.0.0.1:PORT` is reached as before.
//! - **What the table drops:** connections from a workload to another workload (also through a
//!   host port), and from a workload to the host itself. A workload's own outbound connections
//!   to the rest of the network are masqueraded as the host, which forwards IPv4 for them.
//!
//! The agent configures all of this with the standard tools, `ip` (iproute2) and `nft`
//! (nftables), which it finds on `PATH`; it checks them at start. This module owns the host's
//! table, each workload's namespace (made afresh before each of its processes starts, removed
//! when it is deleted), and recognising a process as one of the namespace's. It does not start
//! processes: `process` joins the namespace between `fork` and `exec`.

use std::fs::File;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::Context;

/// The addresses of the workloads' veth pairs: a /30 each, 16,384 of them.
pub const WORKLOAD_NETWORK: &str = "10.77.0.0/16";
const NETWORK_BASE: u32 = u32::from_be_bytes([10, 77, 0, 0]);
/// How many workloads' networks [`WORKLOAD_NETWORK`] holds: uids that differ by a multiple of
/// it share one, so one machine's agents must take their uids within a span of this many.
pub(crate) const WORKLOAD_BLOCKS: u64 = 1 << 14;
const NETWORK_BLOCKS: u32 = WORKLOAD_BLOCKS as u32;
/// The host ports that workloads with namespaces of their own are given. The host forwards
/// every TCP connection to a local address on such a port into its workload's namespace, even
/// while the agent is down (the workload keeps serving), so the kernel must never hand one of
/// them to another program: they are below the usual ephemeral range (32768-60999), and the
/// agent adds them to `net.ipv4.ip_local_reserved_ports` for machines that widened it (as
/// Kubernetes keeps its node ports, 30000-32767, out of the ephemeral range).
pub const WORKLOAD_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;
/// The host-side interfaces are `bhw` followed by the uid; the rules match them by this prefix.
const HOST_INTERFACE_PREFIX: &str = "bhw";
/// The nftables table of the host (and of each namespace).
const TABLE: &str = "bulkhead";

/// What network the workloads of a running agent get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkIsolation {
    /// A network namespace each, reachable only on its port.
    NamespacePerWorkload,
    /// The host's network: workloads reach each other, and the host's services, over loopback.
    Shared,
}

impl std::fmt::Display for NetworkIsolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NetworkIsolation::NamespacePerWorkload => write!(
                f,
                "each workload has a network namespace of its own ({WORKLOAD_NETWORK}), \
                 reachable only on its port"
            ),
            NetworkIsolation::Shared => f.write_str(
                "INSECURE: workloads share the host's network and reach each other, and the \
                 host's services, over loopback",
            ),
        }
    }
}

/// The network of the workload that runs as `uid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkloadNetwork {
    uid: u32,
}

impl WorkloadNetwork {
    pub(crate) fn of(uid: u32) -> Self {
        Self { uid }
    }

    /// The namespace's name, as `ip netns` knows it.
    pub(crate) fn namespace(&self) -> String {
        format!("bulkhead-{}", self.uid)
    }

    fn namespace_path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(self.namespace())
    }

    fn host_interface(&self) -> String {
        format!("{HOST_INTERFACE_PREFIX}{}", self.uid)
    }

    /// The host's end of the pair and the workload's.
    pub(crate) fn addresses(&self) -> (Ipv4Addr, Ipv4Addr) {
        let block = NETWORK_BASE + (self.uid % NETWORK_BLOCKS) * 4;
        (Ipv4Addr::from(block + 1), Ipv4Addr::from(block + 2))
    }

    /// Makes the namespace afresh for a process about to start, forwarding `port` to it: what
    /// an earlier process of the workload had is removed first (nothing runs as its uid any
    /// more). Blocks for a few milliseconds (three `ip` and `nft` runs).
    pub(crate) fn create(&self, port: u16) -> anyhow::Result<()> {
        self.remove_links();
        let namespace = self.namespace();
        let host_if = self.host_interface();
        let (host, workload) = self.addresses();
        run_batch(
            &["-batch", "-"],
            &format!(
                "netns add {namespace}\n\
                 link add {host_if} type veth peer name eth0 netns {namespace}\n\
                 addr add {host}/30 dev {host_if}\n\
                 link set {host_if} up\n"
            ),
            "ip",
        )?;
        run_batch(
            &["-n", &namespace, "-batch", "-"],
            &format!(
                "link set lo up\n\
                 addr add {workload}/30 dev eth0\n\
                 link set eth0 up\n\
                 route add default via {host}\n"
            ),
            "ip",
        )?;
        // Connections from the host's loopback (the agent's probe, an edge on the same
        // machine) arrive with a loopback source, and reach the workload's loopback: both ends
        // must route those addresses. Neither end speaks IPv6, which the table does not
        // filter (a link-local address would reach the host's services).
        interface_settle(&host_if)?;
        let inside = File::open(self.namespace_path())
            .with_context(|| format!("opening the namespace {namespace}"))?;
        in_namespace(&inside, || {
            interface_settle("eth0")?;
            run_batch(
                &["-f", "-"],
                &format!(
                    "add table ip {TABLE}\n\
                     add chain ip {TABLE} prerouting {{ type nat hook prerouting priority dstnat; policy accept; }}\n\
                     add rule ip {TABLE} prerouting iifname \"eth0\" tcp dport {port} dnat to 127.0.0.1\n"
                ),
                "nft",
            )
        })?;
        self.port_forward(port)?;
        self.stale_ports_remove(port)
    }

    /// Removes the forwarding of every port but `port` to this workload's address: ports of
    /// earlier workloads of its uid, deleted while their agent was down or forgotten with
    /// their agent's state. (The uid is this workload's alone, so its address is too.)
    fn stale_ports_remove(&self, port: u16) -> anyhow::Result<()> {
        let (_, workload) = self.addresses();
        let stale: Vec<u16> = forwarded_ports()?
            .into_iter()
            .filter(|(other, address)| *address == workload && *other != port)
            .map(|(other, _)| other)
            .collect();
        if stale.is_empty() {
            return Ok(());
        }
        let list = stale
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        run_batch(
            &["-f", "-"],
            &format!("delete element ip {TABLE} ports {{ {list} }}\n"),
            "nft",
        )
    }

    /// Points the host's `port` at the workload: an element of the table's map, replacing one
    /// that an earlier process (or a workload deleted while its agent was down) left.
    pub(crate) fn port_forward(&self, port: u16) -> anyhow::Result<()> {
        if self.port_claim(port)? {
            return Ok(());
        }
        let add = self.port_element_add(port);
        run_batch(
            &["-f", "-"],
            &format!("delete element ip {TABLE} ports {{ {port} }}\n{add}"),
            "nft",
        )
    }

    /// Claims the host's `port` for a new workload: `false` when another workload's namespace
    /// has it.
    pub(crate) fn port_claim(&self, port: u16) -> anyhow::Result<bool> {
        match run_batch(&["-f", "-"], &self.port_element_add(port), "nft") {
            Ok(()) => Ok(true),
            Err(err) if err.to_string().contains("File exists") => Ok(false),
            Err(err) => Err(err),
        }
    }

    fn port_element_add(&self, port: u16) -> String {
        let (_, workload) = self.addresses();
        format!("add element ip {TABLE} ports {{ {port} : {workload} }}\n")
    }

    /// Removes the namespace, its veth pair and its port's forwarding, whatever of them exists.
    pub(crate) fn remove(&self, port: u16) {
        let _ = run_batch(
            &["-f", "-"],
            &format!("delete element ip {TABLE} ports {{ {port} }}\n"),
            "nft",
        );
        self.remove_links();
    }

    fn remove_links(&self) {
        // The host's end goes first: a namespace that a dying process still holds would keep
        // the pair alive, and the name taken.
        let _ = run_batch(
            &["-force", "-batch", "-"],
            &format!(
                "link del {}\nnetns del {}\n",
                self.host_interface(),
                self.namespace()
            ),
            "ip",
        );
    }

    /// The namespace, to join (see `process::spawn`).
    pub(crate) fn open(&self) -> std::io::Result<File> {
        File::open(self.namespace_path())
    }

    /// Whether process `pid` runs in this namespace.
    pub(crate) fn holds(&self, pid: u32) -> bool {
        let identity = |path: PathBuf| std::fs::metadata(path).map(|m| (m.dev(), m.ino())).ok();
        let process = identity(PathBuf::from(format!("/proc/{pid}/ns/net")));
        process.is_some() && process == identity(self.namespace_path())
    }
}

/// Lets `interface` (of the calling thread's network) route loopback addresses, and turns
/// IPv6 off on it (where the kernel has IPv6).
fn interface_settle(interface: &str) -> anyhow::Result<()> {
    std::fs::write(
        format!("/proc/sys/net/ipv4/conf/{interface}/route_localnet"),
        "1",
    )
    .with_context(|| format!("letting {interface} route loopback addresses"))?;
    match std::fs::write(
        format!("/proc/sys/net/ipv6/conf/{interface}/disable_ipv6"),
        "1",
    ) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            Err(err).with_context(|| format!("turning IPv6 off on {interface}"))
        }
        _ => Ok(()),
    }
}

/// Whether this machine can give workloads namespaces of their own: `ip` and `nft` run, and
/// the host's table is in place (made, or brought up to date: its rules are replaced at once,
/// its map of forwarded ports is kept). Also turns on IPv4 forwarding, which the workloads'
/// outbound connections and connections from other machines need.
pub(crate) fn host_prepare() -> anyhow::Result<()> {
    for (tool, package) in [("ip", "iproute2"), ("nft", "nftables")] {
        let found = Command::new(tool)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        anyhow::ensure!(
            found,
            "`{tool}` was not found on PATH (apt-get install {package})"
        );
    }
    run_batch(&["-f", "-"], &host_ruleset(), "nft").context("setting up the table ip bulkhead")?;
    // What is sent to a workload's address goes to its pair (a more specific route) or
    // nowhere: never out of the host towards its default route.
    run_batch(
        &["-batch", "-"],
        &format!("route replace blackhole {WORKLOAD_NETWORK}\n"),
        "ip",
    )?;
    ports_reserve()?;
    let forwarding = "/proc/sys/net/ipv4/ip_forward";
    if std::fs::read_to_string(forwarding).is_ok_and(|value| value.trim() != "1") {
        std::fs::write(forwarding, "1").context("turning on IPv4 forwarding")?;
        tracing::info!("turned on IPv4 forwarding, for the workloads' namespaces");
    }
    Ok(())
}

/// Adds [`WORKLOAD_PORTS`] to the ports the kernel never picks for a program that asks for
/// any port, keeping what the list held.
fn ports_reserve() -> anyhow::Result<()> {
    let path = "/proc/sys/net/ipv4/ip_local_reserved_ports";
    let range = format!("{}-{}", WORKLOAD_PORTS.start(), WORKLOAD_PORTS.end());
    let current = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let current = current.trim();
    if current.split(',').any(|entry| entry == range) {
        return Ok(());
    }
    let list = if current.is_empty() {
        range
    } else {
        format!("{current},{range}")
    };
    std::fs::write(path, &list).with_context(|| format!("writing {list} to {path}"))?;
    tracing::info!(
        "reserved the ports {list}: the kernel gives them to no program asking for any port"
    );
    Ok(())
}

/// The host's table, as one nftables transaction: chains made if missing and their rules
/// replaced; the map of forwarded ports made if missing and otherwise left as it is (other
/// agents' workloads are in it).
fn host_ruleset() -> String {
    let t = TABLE;
    let ifs = format!("\"{HOST_INTERFACE_PREFIX}*\"");
    let chains = [
        ("prerouting", "type nat hook prerouting priority dstnat"),
        ("output", "type nat hook output priority -100"),
        ("postrouting", "type nat hook postrouting priority srcnat"),
        ("forward", "type filter hook forward priority filter"),
        ("input", "type filter hook input priority filter"),
    ];
    let rules = [
        // A connection to a workload's port on any address of the host, from another machine
        // or from this one, goes to the workload.
        (
            "prerouting",
            "fib daddr type local meta l4proto tcp dnat to tcp dport map @ports".to_owned(),
        ),
        (
            "output",
            "fib daddr type local meta l4proto tcp dnat to tcp dport map @ports".to_owned(),
        ),
        // From the host's loopback: the workload answers the host's end of its pair.
        (
            "postrouting",
            format!("oifname {ifs} ip saddr 127.0.0.0/8 masquerade"),
        ),
        // A workload's own connections leave as the host.
        (
            "postrouting",
            format!("ip saddr {WORKLOAD_NETWORK} oifname != {ifs} masquerade"),
        ),
        // No workload reaches another, even through a host port.
        ("forward", format!("iifname {ifs} oifname {ifs} drop")),
        // Nor the host's own services: only answers to the host's connections come back.
        (
            "input",
            format!("iifname {ifs} ct state established,related accept"),
        ),
        ("input", format!("iifname {ifs} drop")),
    ];
    let mut text =
        format!("add table ip {t}\nadd map ip {t} ports {{ type inet_service : ipv4_addr; }}\n");
    for (chain, hook) in chains {
        text.push_str(&format!(
            "add chain ip {t} {chain} {{ {hook}; policy accept; }}\nflush chain ip {t} {chain}\n"
        ));
    }
    for (chain, rule) in rules {
        text.push_str(&format!("add rule ip {t} {chain} {rule}\n"));
    }
    text
}

/// The host's forwarded ports and the workload address each goes to.
fn forwarded_ports() -> anyhow::Result<Vec<(u16, Ipv4Addr)>> {
    let output = Command::new("nft")
        .args(["-j", "list", "map", "ip", TABLE, "ports"])
        .stdin(Stdio::null())
        .output()
        .context("running `nft`")?;
    anyhow::ensure!(
        output.status.success(),
        "`nft -j list map ip {TABLE} ports` failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    ports_parse(&output.stdout)
}

/// The elements of the map in `nft -j list map` output: `[[port, "address"], ...]`.
fn ports_parse(json: &[u8]) -> anyhow::Result<Vec<(u16, Ipv4Addr)>> {
    let listing: serde_json::Value = serde_json::from_slice(json).context("nft's JSON")?;
    let elements = listing["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| item["map"]["elem"].as_array())
        .flatten();
    elements
        .map(|pair| {
            let port = pair[0].as_u64().and_then(|port| u16::try_from(port).ok());
            let address = pair[1].as_str().and_then(|text| text.parse().ok());
            port.zip(address).ok_or_else(|| {
                anyhow::anyhow!("an element of the map that is not port : address: {pair}")
            })
        })
        .collect()
}

/// Runs `tool args` with `input` on its standard input; an error carries what it printed.
fn run_batch(args: &[&str], input: &str, tool: &str) -> anyhow::Result<()> {
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running `{tool}`"))?;
    let written = child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(input.as_bytes());
    let output = child.wait_with_output()?;
    written.with_context(|| format!("writing to `{tool}`"))?;
    anyhow::ensure!(
        output.status.success(),
        "`{tool} {}` failed ({}): {}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(())
}

/// Runs `work` on a thread of its own that has joined the network namespace `namespace`: what
/// it opens under `/proc/sys/net`, and the processes it starts, are the namespace's.
fn in_namespace<T: Send>(
    namespace: &File,
    work: impl FnOnce() -> anyhow::Result<T> + Send,
) -> anyhow::Result<T> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                nix::sched::setns(namespace, nix::sched::CloneFlags::CLONE_NEWNET)
                    .context("joining the workload's network namespace")?;
                work()
            })
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the namespace's thread panicked")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_uid_has_a_block_of_its_own() {
        let first = WorkloadNetwork::of(60600);
        assert_eq!(first.namespace(), "bulkhead-60600");
        assert_eq!(first.host_interface(), "bhw60600");
        let (host, workload) = first.addresses();
        // 60600 % 16384 = 11448, and 11448 * 4 = 45792 = 178 * 256 + 224.
        assert_eq!(host, Ipv4Addr::new(10, 77, 178, 225));
        assert_eq!(workload, Ipv4Addr::new(10, 77, 178, 226));
        let blocks: std::collections::HashSet<u32> = (60600..61100)
            .map(|uid| u32::from(WorkloadNetwork::of(uid).addresses().0) & !3)
            .collect();
        assert_eq!(blocks.len(), 500, "the default uids never share a block");
        // Interface names must fit in 15 characters, whatever the uid.
        assert!(WorkloadNetwork::of(u32::MAX - 1).host_interface().len() <= 15);
    }

    #[test]
    fn forwarded_ports_are_read_from_nft_json() {
        let listing =
            br#"{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"map": {"family": "ip",
            "name": "ports", "table": "bulkhead", "type": "inet_service", "map": "ipv4_addr",
            "elem": [[35873, "10.77.178.230"], [36315, "10.77.179.34"]]}}]}"#;
        assert_eq!(
            ports_parse(listing).unwrap(),
            [
                (35873, Ipv4Addr::new(10, 77, 178, 230)),
                (36315, Ipv4Addr::new(10, 77, 179, 34))
            ]
        );
        let empty = br#"{"nftables": [{"metainfo": {}}, {"map": {"name": "ports"}}]}"#;
        assert_eq!(ports_parse(empty).unwrap(), []);
        assert!(ports_parse(br#"{"nftables": [{"map": {"elem": [[1, "x"]]}}]}"#).is_err());
    }

    #[test]
    fn the_host_ruleset_replaces_rules_and_keeps_the_map() {
        let text = host_ruleset();
        assert!(text.contains("add map ip bulkhead ports"));
        assert!(!text.contains("flush map"), "{text}");
        assert!(!text.contains("flush table"), "{text}");
        for chain in ["prerouting", "output", "postrouting", "forward", "input"] {
            assert!(text.contains(&format!("flush chain ip bulkhead {chain}\n")));
        }
        assert!(text.contains("iifname \"bhw*\" oifname \"bhw*\" drop"));
    }
}
