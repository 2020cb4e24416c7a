//! Deploys: deployments of a service's spec, their events and live streams, the durable queue
//! of provider operations and its backpressure, placement, make-before-break rollouts,
//! evacuations, the reconciler that converges instances towards the deployments, the health
//! of deployed instances, and their logs.
//!
//! Uses `projects` (a service's spec) and `webhooks` (events that webhooks carry); nothing
//! here is used by `projects` or `identity`.

pub mod deployments;
pub mod evacuations;
pub mod events;
pub mod health;
pub mod instances;
pub mod logs;
pub mod operations;
pub mod pipeline;
pub mod placement;
pub mod queue;
pub mod reconciler;
pub mod replacement;
pub mod rollouts;
pub mod watch;
