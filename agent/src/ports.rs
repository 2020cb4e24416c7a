//! Host ports for workloads: workloads on one machine cannot share a port, so the agent picks
//! a free one for each (asking the kernel for an unused port) and never hands out a port that
//! another of its workloads holds, running or not. A workload in a network namespace of its
//! own listens on its port inside it, so the agent holds the port on the host for it (bound,
//! not listening: nothing else of the host may take it) and claims it in the host's table of
//! forwarded ports, where the other agents of the machine see it.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};

use tokio::net::TcpSocket;

use crate::network::WorkloadNetwork;

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

/// A port for a workload with a network namespace of its own: free on the host (and then held
/// by the returned socket), not in `taken`, and claimed for `network` in the host's table.
pub(crate) fn claim(
    taken: &HashSet<u16>,
    network: &WorkloadNetwork,
) -> anyhow::Result<(u16, TcpSocket)> {
    for _ in 0..64 {
        let held = TcpSocket::new_v4()?;
        held.bind((Ipv4Addr::UNSPECIFIED, 0).into())?;
        let port = held.local_addr()?.port();
        if !taken.contains(&port) && network.port_claim(port)? {
            return Ok((port, held));
        }
    }
    anyhow::bail!("no free port found")
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
