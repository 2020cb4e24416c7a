//! Host ports for workloads: workloads on one machine cannot share a port, so the agent picks
//! a free one for each (asking the kernel for an unused port) and never hands out a port that
//! another of its workloads holds, running or not.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};

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
