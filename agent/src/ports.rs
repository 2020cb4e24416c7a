//! Host ports for workloads: workloads on one machine cannot share a port, so the agent picks
//! a free one for each (asking the kernel for an unused port) and never hands out a port that
//! another of its workloads holds, running or not. A workload in a network namespace of its
//! own listens on its port inside it, so the agent holds the port on the host for it (bound,
//! not listening: nothing else of the host may take it) and claims it in the host's table of
//! forwarded ports, where the other agents of the machine see it. Those ports come from
//! [`WORKLOAD_PORTS`], which the kernel gives to no program asking for any port: the host
//! forwards them to their workloads even while the agent is down.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};

use tokio::net::TcpSocket;

use crate::network::{WORKLOAD_PORTS, WorkloadNetwork};

/// A port that nothing listens on now (on any address) and that is not in `taken`.
pub(crate) fn allocate(taken: &HashSet<u16>) -> std::io::Result<u16> {
    for _ in 0..64 {
        let port = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))?
            .local_addr()?
            .port();
        if !taken.contains(&port) {
            return Ok(port);
        }
    }
    Err(std::io::Error::other("no free port found"))
}

/// A port of [`WORKLOAD_PORTS`] for a workload with a network namespace of its own: free on
/// the host (and then held by the returned socket), not in `taken`, and claimed for `network`
/// in the host's table. The search starts at a place of its own in each call, so that agents
/// starting workloads at once rarely try the same ports.
pub(crate) fn claim(
    taken: &HashSet<u16>,
    network: &WorkloadNetwork,
) -> anyhow::Result<(u16, TcpSocket)> {
    let first = *WORKLOAD_PORTS.start();
    let count = u32::from(WORKLOAD_PORTS.end() - first) + 1;
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |now| now.subsec_nanos())
        % count;
    for step in 0..count {
        let port = first + ((start + step) % count) as u16;
        if taken.contains(&port) {
            continue;
        }
        let Ok(held) = hold(port) else {
            continue; // another program of the host has it
        };
        if network.port_claim(port)? {
            return Ok((port, held));
        }
    }
    anyhow::bail!(
        "every port of {}-{} is taken",
        WORKLOAD_PORTS.start(),
        WORKLOAD_PORTS.end()
    )
}

/// Holds `port` on the host again (after an agent restart), for a workload that listens on it
/// in its namespace.
pub(crate) fn hold(port: u16) -> std::io::Result<TcpSocket> {
    let held = TcpSocket::new_v4()?;
    held.bind((Ipv4Addr::UNSPECIFIED, port).into())?;
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocated_ports_are_free_and_not_taken() {
        let first = allocate(&HashSet::new()).unwrap();
        let taken = HashSet::from([first]);
        for _ in 0..20 {
            let port = allocate(&taken).unwrap();
            assert_ne!(port, first);
            TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("the port is free");
        }
    }
}
