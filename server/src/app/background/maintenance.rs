//! Housekeeping: expired idempotency records, invitations, sign-in addresses, old git
//! deliveries and expired outside sign-ins are purged, the login limiter forgets clients that
//! stopped trying, and plaintext secrets of earlier versions are sealed.
//! The purges run on the replica that leads the maintenance work (each is idempotent, so a
//! second one at a handover is harmless); the trim is of this replica's memory.

use std::time::Duration;

use crate::app::App;
use crate::error::AppResult;

/// How often the purges run (and once at start-up).
pub const PURGE_EVERY: Duration = Duration::from_secs(600);
/// How often the login limiter is trimmed.
pub const TRIM_EVERY: Duration = Duration::from_secs(60);

impl App {
    /// Seals the secrets (service secret variables, provider secrets) that an earlier version
    /// stored in plaintext; returns how many values it sealed. This is the data half of the
    /// migration to secrets at rest: it runs at start-up, after the schema migrations, because
    /// only the server holds the master key. Sealed values are left alone, so it is cheap to
    /// run again. (The signing key is sealed where it is loaded, [`crate::auth::JwtKeys`].)
    pub async fn secrets_seal_plaintext(&self) -> AppResult<u64> {
        Ok(self.service_secrets_seal_plaintext().await?
            + self.provider_secrets_seal_plaintext().await?)
    }

    /// Runs every purge now (one that fails does not keep the others from running); fails
    /// with the first failure, once all were tried.
    pub async fn maintenance_purge(&self) -> AppResult<()> {
        let purges = [
            ("idempotency records", self.idempotency_purge().await),
            ("invitations", self.invitations_purge().await),
            ("replicas", self.replicas_purge().await),
            ("sign-in addresses", self.sign_in_addresses_purge().await),
            ("git deliveries", self.git_deliveries_purge().await),
            ("sign-in states", self.sign_in_states_purge().await),
        ];
        let mut failed = None;
        for (what, purged) in purges {
            match purged {
                Ok(0) => {}
                Ok(rows) => tracing::info!(rows, "purged expired {what}"),
                Err(err) => {
                    tracing::warn!(error = %err, "purging expired {what} failed");
                    failed.get_or_insert(err);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }
}
