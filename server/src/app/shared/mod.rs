//! What every domain uses: the audit log, pagination, idempotency keys, tenant limits, service
//! sizes, input validation, throttles (concurrency, rates, retry budgets), the checks of
//! outbound addresses and the cache of rows' serialized views.
//!
//! Uses no domain.

pub mod audit;
pub mod backpressure;
pub mod idempotency;
pub mod limits;
pub mod outbound_addresses;
pub mod pagination;
pub mod sizes;
pub mod validate;
pub mod view_cache;
