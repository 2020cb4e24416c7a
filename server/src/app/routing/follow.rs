//! Following, on every replica: a server brings its routes up to the latest stored revision
//! by applying the changes of the revisions it lacks (or, holding none or lacking too many, by
//! reading `routes`), announces the revision to its watchers, then signs the table and serves
//! it.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::Arc;

use bulkhead_routing::{SignedSnapshot, snapshot_etag};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};

use super::{
    Current, Prepared, RevisionChanges, RoutesIndex, change_json, latest_revision, revision_changes,
};
use crate::app::App;
use crate::app::routing::keys::RoutingSigner;
use crate::entity::{route, routing_revision};
use crate::error::{AppError, AppResult};

impl App {
    /// Brings this server up to the latest published revision (announcing it), and signs and
    /// serves it if it (or the signing key) is newer than what this server serves.
    pub async fn routing_prepare(&self) -> AppResult<()> {
        {
            let _one_at_a_time = self.routing.publishing.lock().await;
            self.routing_follow_locked().await?;
        }
        self.routing_sign().await
    }

    /// The latest stored revision, as this server now holds it (caller holds `publishing`).
    pub(super) async fn routing_follow_locked(&self) -> AppResult<Arc<Current>> {
        let latest = latest_revision(&self.db).await?;
        let current = self.routing.current.load_full();
        if let Some(current) = &current
            && current.revision >= latest
        {
            return Ok(current.clone());
        }
        let keep = self.routing_recent_keep();
        let applied = match &current {
            Some(current) if latest - current.revision <= keep as i64 => {
                self.routing_apply_stored(current, latest).await?
            }
            _ => None,
        };
        let caught_up = match applied {
            Some(applied) => applied,
            None => self.routing_load().await?,
        };
        let caught_up = Arc::new(caught_up);
        self.routing_announce(caught_up.clone());
        Ok(caught_up)
    }

    /// `current` with the stored changes of the revisions after it, up to `latest`; `None`
    /// when some are no longer stored.
    async fn routing_apply_stored(
        &self,
        current: &Current,
        latest: i64,
    ) -> AppResult<Option<Current>> {
        let rows = routing_revision::Entity::find()
            .filter(routing_revision::Column::Revision.gt(current.revision))
            .filter(routing_revision::Column::Revision.lte(latest))
            .order_by_asc(routing_revision::Column::Revision)
            .all(&self.db)
            .await?;
        let revisions: Vec<RevisionChanges> = rows
            .into_iter()
            .map(revision_changes)
            .collect::<AppResult<_>>()?;
        if !follows(current.revision, &revisions) {
            return Ok(None);
        }
        let mut next = Current {
            revision: current.revision,
            generated_at: current.generated_at,
            drop_intended: current.drop_intended,
            routes: current.routes.clone(),
            recent: current.recent.clone(),
        };
        for revision in &revisions {
            next.routes.apply(&revision.changes);
            self.routing_recent_push(&mut next.recent, revision)?;
            next.revision = revision.revision;
            next.generated_at = revision.generated_at;
            next.drop_intended = revision.drop_intended;
        }
        Ok(Some(next))
    }

    /// The latest revision read whole: the stored routes, then the revisions stored while
    /// they were read (applied on top: each change is a domain's whole route, so applying
    /// one the routes already had changes nothing).
    async fn routing_load(&self) -> AppResult<Current> {
        let keep = self.routing_recent_keep() as i64;
        let before = latest_revision(&self.db).await?;
        let routes = route::Entity::find()
            .all(&self.db)
            .await?
            .into_iter()
            .map(|row| serde_json::from_str(&row.route))
            .collect::<Result<Vec<_>, _>>()
            .map_err(AppError::internal)?;
        let mut loaded = Current::none();
        loaded.routes = RoutesIndex::new(routes);
        let window: Vec<RevisionChanges> = routing_revision::Entity::find()
            .filter(routing_revision::Column::Revision.gt(before - keep))
            .order_by_asc(routing_revision::Column::Revision)
            .all(&self.db)
            .await?
            .into_iter()
            .map(revision_changes)
            .collect::<AppResult<_>>()?;
        let after: Vec<&RevisionChanges> = window.iter().filter(|r| r.revision > before).collect();
        if !follows(before, after.iter().copied()) {
            return Err(AppError::internal(
                "routing table: revisions were pruned while the routes were read",
            ));
        }
        for revision in after {
            loaded.routes.apply(&revision.changes);
        }
        for revision in &window {
            self.routing_recent_push(&mut loaded.recent, revision)?;
        }
        if let Some(last) = window.last() {
            loaded.revision = last.revision;
            loaded.generated_at = last.generated_at;
            loaded.drop_intended = last.drop_intended;
        } else if before > 0 {
            // The latest revision's row is outside the window only when the history keeps
            // fewer revisions than were published: read it.
            let row = routing_revision::Entity::find_by_id(before)
                .one(&self.db)
                .await?
                .ok_or_else(|| AppError::internal("routing table: the latest revision is gone"))?;
            loaded.revision = row.revision;
            loaded.generated_at = row.created_at;
            loaded.drop_intended = row.drop_intended;
        }
        Ok(loaded)
    }

    fn routing_recent_push(
        &self,
        recent: &mut VecDeque<(i64, Arc<str>)>,
        revision: &RevisionChanges,
    ) -> AppResult<()> {
        recent.push_back((revision.revision, change_json(revision)?));
        while recent.len() > self.routing_recent_keep() {
            recent.pop_front();
        }
        Ok(())
    }

    /// Makes `current` what this server knows and tells its watchers, unless it knows a
    /// newer revision already.
    pub(super) fn routing_announce(&self, current: Arc<Current>) {
        let revision = current.revision;
        let previous = self.routing.current.rcu(|known| match known {
            Some(known) if known.revision >= revision => Some(known.clone()),
            _ => Some(current.clone()),
        });
        let newer = previous.is_none_or(|previous| previous.revision < revision);
        if newer && revision > 0 {
            self.routing.revision.send_replace(revision as u64);
        }
    }

    /// Signs the latest revision this server knows, if it does not serve it yet (or serves it
    /// signed by a key that no longer signs); its gzip is made in the background.
    async fn routing_sign(&self) -> AppResult<()> {
        let Some(current) = self.routing.current() else {
            return Ok(());
        };
        let signer = self.routing_signer().await?;
        if let Some(served) = self.routing.prepared()
            && served.revision >= current.revision
            && served.key_id == signer.id
        {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let prepared = tokio::task::spawn_blocking(move || sign(&current, &signer))
            .await
            .map_err(AppError::internal)?;
        metrics::histogram!("bulkhead_routing_sign_seconds")
            .record(started.elapsed().as_secs_f64());
        let revision = prepared.revision;
        let prepared = Arc::new(prepared);
        let previous = self.routing.prepared.rcu(|served| match served {
            Some(served) if served.revision > revision => Some(served.clone()),
            _ => Some(prepared.clone()),
        });
        if previous.is_some_and(|previous| previous.revision > revision) {
            return Ok(());
        }
        self.routing.signed.send_replace(revision as u64);
        tokio::task::spawn_blocking(move || match gzip(&prepared.identity) {
            Ok(zipped) => {
                let _ = prepared.gzip.set(zipped.into());
            }
            Err(err) => tracing::warn!(error = %err, "routing table: could not compress"),
        });
        Ok(())
    }
}

/// Whether `revisions` are exactly the ones after `revision`, in order.
fn follows<'a>(revision: i64, revisions: impl IntoIterator<Item = &'a RevisionChanges>) -> bool {
    revisions
        .into_iter()
        .enumerate()
        .all(|(n, next)| next.revision == revision + 1 + n as i64)
}

/// The signed snapshot of `current`.
fn sign(current: &Current, signer: &RoutingSigner) -> Prepared {
    let table = current.routes.table_json(
        current.revision,
        current.generated_at,
        current.drop_intended,
    );
    let identity = SignedSnapshot::sign_json(table, &signer.key);
    Prepared {
        revision: current.revision,
        etag: snapshot_etag(&identity),
        identity: identity.into(),
        gzip: std::sync::OnceLock::new(),
        key_id: signer.id.clone(),
    }
}

fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes)?;
    encoder.finish()
}
