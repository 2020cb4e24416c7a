//! Several replicas over one database: each replica's heartbeat, the leases that give one
//! replica at a time each kind of background work (with fencing terms), and the change feed
//! that tells the other replicas what changed here.
//!
//! Uses no domain: the domains use it.

pub mod change_feed;
pub mod changes;
pub mod leases;
pub mod replicas;
