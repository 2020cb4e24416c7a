//! Git: installations that bind a repository's branches to services, the intake of pushes
//! (received, verified, deduplicated, then deployed by a worker), and the commit statuses
//! reported back to the forge; and which commit a deployment made by hand deploys.

pub mod github;
pub mod installations;
pub mod intake;
pub mod intake_worker;
pub mod revisions;
pub mod statuses;
