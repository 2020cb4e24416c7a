//! Housekeeping: expired idempotency records, invitations, sign-in addresses, old git
//! deliveries and expired outside sign-ins are purged, the login limiter forgets clients that
//! stopped trying, and plaintext secrets of earlier versions are sealed.
//! The purges run on the replica that leads [`Work::Maintenance`] (each is idempotent, so a
//! second one at a handover is harmless); the trim is of this replica's memory.

use std::time::Duration;

use tokio::sync::watch;

use crate::app::App;
use crate::app::cluster::leases::Work;
use crate::error::ApiResult;

/// How often the purges run (and once at start-up).
const PURGE_EVERY: Duration = Duration::from_secs(600);
/// How often the login limiter is trimmed.
const TRIM_EVERY: Duration = Duration::from_secs(60);

impl App {
    /// Seals the secrets (service secret variables, provider secrets) that an earlier version
    /// stored in plaintext; returns how many values it sealed. This is the data half of the
    /// migration to secrets at rest: it runs at start-up, after the schema migrations, because
    /// only the server holds the master key. Sealed values are left alone, so it is cheap to
    /// run again. (The signing key is sealed where it is loaded, [`crate::auth::JwtKeys`].)
    pub async fn secrets_seal_plaintext(&self) -> ApiResult<u64> {
        Ok(self.service_secrets_seal_plaintext().await?
            + self.provider_secrets_seal_plaintext().await?)
    }

    /// Runs the purges now; returns how many rows each removed.
    pub async fn maintenance_purge(&self) -> (u64, u64) {
        let idempotency = self.idempotency_purge().await.unwrap_or_else(|err| {
            tracing::warn!(error = %err, "idempotency purge failed");
            0
        });
        let invitations = self.invitations_purge().await.unwrap_or_else(|err| {
            tracing::warn!(error = %err, "invitation purge failed");
            0
        });
        let replicas = self.replicas_purge().await.unwrap_or_else(|err| {
            tracing::warn!(error = %err, "replica purge failed");
            0
        });
        let addresses = self.sign_in_addresses_purge().await.unwrap_or_else(|err| {
            tracing::warn!(error = %err, "sign-in address purge failed");
            0
        });
        let deliveries = self.git_deliveries_purge().await.unwrap_or_else(|err| {
            tracing::warn!(error = %err, "git delivery purge failed");
            0
        }) + self.sign_in_states_purge().await.unwrap_or_else(|err| {
            tracing::warn!(error = %err, "sign-in state purge failed");
            0
        });
        if idempotency + invitations + replicas + addresses + deliveries > 0 {
            tracing::info!(
                idempotency,
                invitations,
                replicas,
                addresses,
                deliveries,
                "purged expired records"
            );
        }
        (idempotency, invitations)
    }

    /// The housekeeping loop, until `stop` turns true.
    pub async fn maintenance_run(self, mut stop: watch::Receiver<bool>) {
        let mut purge = tokio::time::interval(PURGE_EVERY);
        let mut trim = tokio::time::interval(TRIM_EVERY);
        loop {
            tokio::select! {
                _ = stop.changed() => {
                    if *stop.borrow() {
                        return;
                    }
                }
                _ = purge.tick() => {
                    if self.leases.leads(Work::Maintenance) {
                        self.maintenance_purge().await;
                    }
                }
                _ = trim.tick() => self.login.forget_idle(),
            }
        }
    }
}
