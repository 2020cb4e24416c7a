//! The routing table edges route by: built from the domains and the instances that are
//! `running` and `healthy` by their own health checks (never by their provider's API health),
//! published as a new revision whenever it changes, and served from bytes prepared once per
//! revision.
//!
//! - **Publishing** ([`App::routing_publish`]): rebuilds the routes from the database and, when
//!   they differ from the latest revision's (by content hash), stores revision + 1 with its
//!   routes and the changes from the one before. Only the latest revision keeps its routes;
//!   the changes of the last `routing_history` revisions are kept for `changes?since=`.
//! - **Preparing** ([`App::routing_prepare`]): once per revision (and per signing key) each
//!   server signs the latest table, compresses it and keeps the bytes, their ETag and the
//!   recent changes in memory ([`Prepared`]); readers and watchers never touch the database.
//! - **The loop** ([`App::routing_run`]): the routing leader (one replica, by lease) publishes
//!   when routes change on any replica (the change feed tells it), and rebuilds every
//!   [`REBUILD_EVERY`] in case a hint was lost; each publication is fenced by the lease's term.
//!   Every replica prepares a revision as soon as it is told of it, and every
//!   [`REFRESH_EVERY`]. Ed25519 signatures are deterministic: every replica serves the same
//!   bytes, with the same ETag, for a revision.
//!
//! Keys: see [`super::routing_keys`]; edges' reports: [`super::edges`].

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use serde::Serialize;
use tokio::sync::watch;
use utoipa::ToSchema;

use super::App;
use crate::entity::{domain, instance, routing_revision};
use crate::error::{ApiError, ApiResult, ErrorCode};
use bulkhead_routing::{
    Route, RouteChange, RoutingTable, SignedSnapshot, Upstream, changes_between, sha256_hex,
    snapshot_etag,
};

/// How often each server looks for revisions published by other replicas.
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);
/// How often each server rebuilds the routes even though nothing woke it.
pub const REBUILD_EVERY: Duration = Duration::from_secs(30);
/// Revisions whose changes each server keeps in memory for watchers.
const RECENT_IN_MEMORY: usize = 256;

/// A revision this server just published: its table and its changes.
pub struct Published {
    pub table: RoutingTable,
    pub changes: RevisionChanges,
}

/// The changes of one revision: what `changes?since=` lists and watchers receive.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RevisionChanges {
    pub revision: i64,
    pub generated_at: DateTime<Utc>,
    pub drop_intended: bool,
    pub changes: Vec<RouteChange>,
}

/// The changes after a revision.
#[derive(Debug, Serialize, ToSchema)]
pub struct RoutingChanges {
    /// The revision asked about.
    pub since: i64,
    /// The latest revision.
    pub revision: i64,
    /// Oldest first, at most `limit` revisions.
    pub revisions: Vec<RevisionChanges>,
    /// Whether more revisions follow the last one listed (ask again with its revision).
    pub more: bool,
}

/// The latest revision as served: signed, compressed and tagged once.
pub struct Prepared {
    pub revision: i64,
    /// Strong ETag (quoted): a hash of the snapshot document.
    pub etag: String,
    /// The signed snapshot document.
    pub identity: Bytes,
    /// The same, gzip-compressed: made off the path of watchers, right after the revision is
    /// served (until it is ready, gzip-accepting clients get the identity bytes).
    pub gzip: std::sync::OnceLock<Bytes>,
    pub table: RoutingTable,
    /// The key that signed it.
    pub key_id: String,
    /// The changes of the latest revisions, oldest first (their JSON, as watchers get it).
    recent: VecDeque<(i64, Arc<str>)>,
}

impl Prepared {
    /// The JSON of the changes of each revision after `since`, if this server still holds
    /// all of them in memory.
    pub fn changes_after(&self, since: i64) -> Option<Vec<(i64, Arc<str>)>> {
        if since >= self.revision {
            return Some(Vec::new());
        }
        let oldest = self.recent.front()?.0;
        (oldest <= since + 1).then(|| {
            self.recent
                .iter()
                .filter(|(revision, _)| *revision > since)
                .cloned()
                .collect()
        })
    }
}

/// The routing table of this server: what it serves, and who waits for a new revision.
pub struct RoutingState {
    prepared: ArcSwapOption<Prepared>,
    revision: watch::Sender<u64>,
    /// One rebuild at a time on this server.
    publishing: tokio::sync::Mutex<()>,
    /// The active signing key, opened.
    pub(super) signer: std::sync::Mutex<Option<Arc<super::routing_keys::RoutingSigner>>>,
}

impl Default for RoutingState {
    fn default() -> Self {
        Self {
            prepared: ArcSwapOption::empty(),
            revision: watch::channel(0).0,
            publishing: tokio::sync::Mutex::new(()),
            signer: std::sync::Mutex::new(None),
        }
    }
}

impl RoutingState {
    /// The latest prepared revision (none before the first is prepared, at start-up).
    pub fn prepared(&self) -> Option<Arc<Prepared>> {
        self.prepared.load_full()
    }

    /// A receiver woken when a new revision is prepared.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.revision.subscribe()
    }
}

impl App {
    /// The latest revision as served, or 503 while none is prepared.
    pub fn routing_prepared(&self) -> ApiResult<Arc<Prepared>> {
        self.routing.prepared().ok_or_else(|| {
            ApiError::new(
                http::StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::RoutingTableNotReady,
                "the routing table is being built",
            )
            .retry_after(1)
        })
    }

    /// On the routing leader, publishes and prepares when routes change (here or, told by
    /// the change feed, on another replica); on every replica, prepares when a revision is
    /// published and every [`REFRESH_EVERY`]; until `stop` turns true.
    pub async fn routing_run(self, mut stop: watch::Receiver<bool>) {
        let mut routes = self.changes.routes.subscribe();
        let mut revisions = self.changes.routing.subscribe();
        let mut published_at = tokio::time::Instant::now();
        let mut publish = true;
        let mut leading = false;
        loop {
            // A replica that has just become the leader rebuilds at once: its predecessor may
            // have stopped before publishing a change. A rebuild now and then covers a hint
            // that never came.
            let leads = self.leases.leads(super::leases::Work::Routing);
            publish |= leads && !leading;
            leading = leads;
            let served = if leads && (publish || published_at.elapsed() >= REBUILD_EVERY) {
                published_at = tokio::time::Instant::now();
                self.routing_refresh().await
            } else {
                self.routing_prepare().await
            };
            if let Err(err) = served {
                tracing::warn!(error = %err, "routing table: could not publish or prepare");
            }
            publish = tokio::select! {
                _ = routes.changed() => true,
                _ = revisions.changed() => false,
                _ = tokio::time::sleep(REFRESH_EVERY) => false,
                _ = stop.wait_for(|stopped| *stopped) => return,
            };
        }
    }

    /// Publishes a revision if the routes changed, then prepares the latest.
    pub async fn routing_refresh(&self) -> ApiResult<()> {
        match self.routing_publish().await? {
            Some(published) => self.routing_prepare_published(published).await,
            None => self.routing_prepare().await,
        }
    }

    /// Stores a new revision if the routes differ from the latest one's; returns it.
    pub async fn routing_publish(&self) -> ApiResult<Option<Published>> {
        let _one_at_a_time = self.routing.publishing.lock().await;
        let routes = routes_build(&self.db).await?;
        let routes_json = serde_json::to_string(&routes).map_err(ApiError::internal)?;
        let content_hash = sha256_hex(routes_json.as_bytes());
        let latest = routing_revision::Entity::find()
            .order_by_desc(routing_revision::Column::Revision)
            .one(&self.db)
            .await?;
        if latest.as_ref().map(|l| &l.content_hash) == Some(&content_hash) {
            return Ok(None);
        }
        // The routes of the latest revision: those this server serves, if they are its.
        let served = self
            .routing
            .prepared()
            .filter(|p| latest.as_ref().is_some_and(|l| l.revision == p.revision));
        let old_routes: Vec<Route> = match served {
            Some(served) => served.table.routes.clone(),
            None => latest
                .as_ref()
                .and_then(|l| l.routes.as_deref())
                .map(serde_json::from_str)
                .transpose()
                .map_err(ApiError::internal)?
                .unwrap_or_default(),
        };
        let changes = changes_between(&old_routes, &routes);
        let drop_intended = drop_intended(&self.db, &old_routes, &routes).await?;
        let revision = latest.as_ref().map_or(0, |l| l.revision) + 1;
        // Microseconds, as PostgreSQL keeps them: every replica signs the same bytes.
        let created_at = chrono::SubsecRound::trunc_subsecs(Utc::now(), 6);
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, super::leases::Work::Routing).await?;
        let inserted = routing_revision::ActiveModel {
            revision: Set(revision),
            content_hash: Set(content_hash),
            changes: Set(serde_json::to_string(&changes).map_err(ApiError::internal)?),
            drop_intended: Set(drop_intended),
            routes: Set(Some(routes_json)),
            created_at: Set(created_at),
        }
        .insert(&txn)
        .await;
        if let Err(err) = inserted {
            // Another replica published this revision first: its routes are as current.
            tracing::debug!(revision, error = %err, "routing table: revision taken");
            return Ok(None);
        }
        routing_revision::Entity::update_many()
            .col_expr(
                routing_revision::Column::Routes,
                sea_orm::sea_query::Expr::value(Option::<String>::None),
            )
            .filter(routing_revision::Column::Revision.lt(revision))
            .filter(routing_revision::Column::Routes.is_not_null())
            .exec(&txn)
            .await?;
        routing_revision::Entity::delete_many()
            .filter(
                routing_revision::Column::Revision.lte(revision - self.settings.routing_history),
            )
            .exec(&txn)
            .await?;
        txn.commit().await?;
        // This server prepares what it published itself (`routing_prepare_published`).
        self.changes.routing.notify_others();
        metrics::gauge!("bulkhead_routing_revision").set(revision as f64);
        tracing::info!(
            revision,
            changes = changes.len(),
            drop_intended,
            "routing table: published"
        );
        Ok(Some(Published {
            table: RoutingTable {
                revision,
                generated_at: created_at,
                drop_intended,
                routes,
            },
            changes: RevisionChanges {
                revision,
                generated_at: created_at,
                drop_intended,
                changes,
            },
        }))
    }

    /// Serves what this server just published, from memory.
    pub async fn routing_prepare_published(&self, published: Published) -> ApiResult<()> {
        let signer = self.routing_signer().await?;
        let current = self.routing.prepared();
        let keep = self.routing_recent_keep();
        let follows = current
            .as_ref()
            .is_some_and(|c| c.revision + 1 == published.table.revision);
        let recent = if follows {
            let mut recent = current
                .as_ref()
                .map(|c| c.recent.clone())
                .unwrap_or_default();
            recent.push_back((published.table.revision, change_json(&published.changes)?));
            while recent.len() > keep {
                recent.pop_front();
            }
            recent
        } else {
            recent_changes(&self.db, current.as_deref(), published.table.revision, keep).await?
        };
        self.routing_serve(published.table, &signer, recent);
        Ok(())
    }

    fn routing_recent_keep(&self) -> usize {
        (self.settings.routing_history.max(1) as usize).min(RECENT_IN_MEMORY)
    }

    /// Signs `table` and serves it; its gzip is made in the background.
    fn routing_serve(
        &self,
        table: RoutingTable,
        signer: &super::routing_keys::RoutingSigner,
        recent: VecDeque<(i64, Arc<str>)>,
    ) {
        let identity = SignedSnapshot::sign(&table, &signer.key);
        let prepared = Arc::new(Prepared {
            revision: table.revision,
            etag: snapshot_etag(&identity),
            identity: identity.into(),
            gzip: std::sync::OnceLock::new(),
            table,
            key_id: signer.id.clone(),
            recent,
        });
        let revision = prepared.revision;
        self.routing.prepared.store(Some(prepared.clone()));
        self.routing.revision.send_replace(revision.max(0) as u64);
        tokio::task::spawn_blocking(move || match gzip(&prepared.identity) {
            Ok(zipped) => {
                let _ = prepared.gzip.set(zipped.into());
            }
            Err(err) => tracing::warn!(error = %err, "routing table: could not compress"),
        });
    }

    /// Signs, compresses and keeps the latest revision, if it (or the signing key) is newer
    /// than what this server serves.
    pub async fn routing_prepare(&self) -> ApiResult<()> {
        let Some(latest) = routing_revision::Entity::find()
            .order_by_desc(routing_revision::Column::Revision)
            .one(&self.db)
            .await?
        else {
            return Ok(());
        };
        let signer = self.routing_signer().await?;
        let current = self.routing.prepared();
        if let Some(current) = &current
            && current.revision >= latest.revision
            && current.key_id == signer.id
        {
            return Ok(());
        }
        let Some(routes) = latest.routes.as_deref() else {
            // A newer revision was published meanwhile; the next refresh prepares it.
            return Ok(());
        };
        let table = RoutingTable {
            revision: latest.revision,
            generated_at: latest.created_at,
            drop_intended: latest.drop_intended,
            routes: serde_json::from_str(routes).map_err(ApiError::internal)?,
        };
        let keep = self.routing_recent_keep();
        let recent = recent_changes(&self.db, current.as_deref(), latest.revision, keep).await?;
        self.routing_serve(table, &signer, recent);
        Ok(())
    }

    /// The changes after revision `since`, at most `limit` revisions; 410 when the history no
    /// longer reaches back to `since` (or `since` is ahead of the table).
    pub async fn routing_changes(&self, since: i64, limit: u64) -> ApiResult<RoutingChanges> {
        let prepared = self.routing_prepared()?;
        let latest = prepared.revision;
        if since > latest {
            return Err(history_gone(since));
        }
        let rows = routing_revision::Entity::find()
            .filter(routing_revision::Column::Revision.gt(since))
            .filter(routing_revision::Column::Revision.lte(latest))
            .order_by_asc(routing_revision::Column::Revision)
            .limit(limit + 1)
            .all(&self.db)
            .await?;
        if since < latest && rows.first().map(|row| row.revision) != Some(since + 1) {
            return Err(history_gone(since));
        }
        let more = rows.len() as u64 > limit;
        let revisions = rows
            .into_iter()
            .take(limit as usize)
            .map(revision_changes)
            .collect::<ApiResult<_>>()?;
        Ok(RoutingChanges {
            since,
            revision: latest,
            revisions,
            more,
        })
    }

    /// The JSON of each revision's changes after `since` (up to the latest prepared), from
    /// memory when it holds them; `None` when the history no longer reaches back that far.
    pub async fn routing_changes_json(
        &self,
        since: i64,
    ) -> ApiResult<Option<Vec<(i64, Arc<str>)>>> {
        let prepared = self.routing_prepared()?;
        if since > prepared.revision {
            return Ok(None);
        }
        if let Some(changes) = prepared.changes_after(since) {
            return Ok(Some(changes));
        }
        match self.routing_changes(since, 1000).await {
            Ok(listed) => Ok(Some(
                listed
                    .revisions
                    .iter()
                    .map(|changes| Ok((changes.revision, change_json(changes)?)))
                    .collect::<ApiResult<_>>()?,
            )),
            Err(err) if err.status == http::StatusCode::GONE => Ok(None),
            Err(err) => Err(err),
        }
    }
}

fn history_gone(since: i64) -> ApiError {
    ApiError::new(
        http::StatusCode::GONE,
        ErrorCode::RoutingHistoryGone,
        format!(
            "the changes after revision {since} are no longer kept: fetch the whole table (GET /v1/routing-table)"
        ),
    )
}

fn revision_changes(row: routing_revision::Model) -> ApiResult<RevisionChanges> {
    Ok(RevisionChanges {
        revision: row.revision,
        generated_at: row.created_at,
        drop_intended: row.drop_intended,
        changes: serde_json::from_str(&row.changes).map_err(ApiError::internal)?,
    })
}

fn change_json(changes: &RevisionChanges) -> ApiResult<Arc<str>> {
    Ok(serde_json::to_string(changes)
        .map_err(ApiError::internal)?
        .into())
}

/// The changes of the `keep` revisions up to `latest` (no more than the stored history):
/// those already in memory, plus the newer ones read.
async fn recent_changes(
    db: &impl ConnectionTrait,
    current: Option<&Prepared>,
    latest: i64,
    keep: usize,
) -> ApiResult<VecDeque<(i64, Arc<str>)>> {
    let mut recent = current.map(|c| c.recent.clone()).unwrap_or_default();
    let after = recent
        .back()
        .map_or(latest - keep as i64, |(revision, _)| *revision);
    let rows = routing_revision::Entity::find()
        .filter(routing_revision::Column::Revision.gt(after))
        .filter(routing_revision::Column::Revision.lte(latest))
        .order_by_asc(routing_revision::Column::Revision)
        .all(db)
        .await?;
    if rows.first().is_some_and(|row| row.revision != after + 1) {
        // A gap (history pruned meanwhile): start over from what is stored.
        recent.clear();
    }
    for row in rows {
        let revision = row.revision;
        recent.push_back((revision, change_json(&revision_changes(row)?)?));
    }
    while recent.len() > keep {
        recent.pop_front();
    }
    Ok(recent)
}

fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes)?;
    encoder.finish()
}

/// The routes as the database says now: every verified domain, with the `running` and `healthy`
/// instances of its service (sorted by domain, then instance key).
async fn routes_build(db: &impl ConnectionTrait) -> ApiResult<Vec<Route>> {
    let domains = domain::Entity::find()
        .filter(domain::Column::VerifiedAt.is_not_null())
        .order_by_asc(domain::Column::Hostname)
        .all(db)
        .await?;
    let instances = instance::Entity::find()
        .filter(instance::Column::State.eq("running"))
        .filter(instance::Column::Health.eq("healthy"))
        .filter(instance::Column::Address.is_not_null())
        .order_by_asc(instance::Column::InstanceKey)
        .all(db)
        .await?;
    let mut by_service: HashMap<uuid::Uuid, Vec<Upstream>> = HashMap::new();
    for instance in instances {
        by_service
            .entry(instance.service_id)
            .or_default()
            .push(Upstream {
                address: instance.address.unwrap_or_default(),
                provider: instance.provider,
                region: instance.region,
                instance_key: instance.instance_key,
                // The placement policy's weights already decide how many instances each
                // provider runs: each instance takes an equal share.
                weight: 1,
            });
    }
    Ok(domains
        .into_iter()
        .map(|domain| Route {
            upstreams: by_service
                .get(&domain.service_id)
                .cloned()
                .unwrap_or_default(),
            domain: domain.hostname,
            project_id: domain.project_id,
            service_id: domain.service_id,
        })
        .collect())
}

/// Whether every route and upstream in `old` but not in `new` was taken away on purpose: its
/// domain deleted, or its instance being drained or removed (by a rollout, a cancel, an
/// evacuation). An instance that failed its health checks or its provider was not.
async fn drop_intended(db: &impl ConnectionTrait, old: &[Route], new: &[Route]) -> ApiResult<bool> {
    let kept: BTreeSet<&str> = new
        .iter()
        .flat_map(|route| route.upstreams.iter().map(|u| u.instance_key.as_str()))
        .collect();
    // A route gone altogether had its domain deleted: on purpose, with its upstreams.
    let domains: BTreeSet<&str> = new.iter().map(|route| route.domain.as_str()).collect();
    let dropped: BTreeSet<String> = old
        .iter()
        .filter(|route| domains.contains(route.domain.as_str()))
        .flat_map(|route| route.upstreams.iter())
        .filter(|u| !kept.contains(u.instance_key.as_str()))
        .map(|u| u.instance_key.clone())
        .collect();
    if dropped.is_empty() {
        return Ok(true);
    }
    let found = instance::Entity::find()
        .filter(instance::Column::InstanceKey.is_in(dropped.iter().cloned()))
        .all(db)
        .await?;
    let deliberate: BTreeSet<&str> = found
        .iter()
        .filter(|i| matches!(i.state.as_str(), "draining" | "removing" | "removed"))
        .map(|i| i.instance_key.as_str())
        .collect();
    let present: BTreeSet<&str> = found.iter().map(|i| i.instance_key.as_str()).collect();
    // An instance row gone altogether went with its service or project.
    Ok(dropped
        .iter()
        .all(|key| deliberate.contains(key.as_str()) || !present.contains(key.as_str())))
}
