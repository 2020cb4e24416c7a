//! A bounded, short-lived cache of what authenticating and authorizing a read costs: the
//! principal behind a bearer credential (its token or session checked, its user loaded), and a
//! user's access to a project (the project and the user's role in it).
//!
//! Correctness rests on a generation counter rather than on finding the entries to remove:
//! every change that can narrow access on this server — a token revoked, a user disabled or
//! demoted, a password changed, a membership changed, a project changed or deleted — bumps the
//! generation after its transaction commits ([`App::auth_changed`]), and an entry of an older
//! generation is never used. An entry read from the database is stored only if no change was
//! made while it was read, so a lookup that raced a change cannot bring the old answer back.
//!
//! Other replicas learn of a change through the change feed ([`crate::app::cluster::change_feed`]), which
//! bumps their generation too; while a replica is not listening to it, its cache is not
//! trusted ([`AuthCache::trust`]), and without a feed (SQLite) another process honours a
//! change within [`AUTH_CACHE_TTL`], the life of an entry. Writes never use the cache: they
//! authorize inside their transaction.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use moka::sync::Cache;
use uuid::Uuid;

use crate::app::App;
use crate::authz::{Principal, ProjectRole};
use crate::entity::project;
use crate::ids::ProjectId;

/// How long an entry lives: how soon another process honours a revocation made there when
/// no change feed tells of it.
pub const AUTH_CACHE_TTL: Duration = Duration::from_secs(5);
const CAPACITY: u64 = 100_000;

/// A verified bearer credential.
pub struct CachedPrincipal {
    pub principal: Principal,
    /// When the credential expires (unix seconds), checked on every use.
    pub expires_at: Option<i64>,
    /// When its use was last written to `api_tokens.last_used_at` (unix seconds).
    pub last_used_recorded: AtomicI64,
    generation: u64,
}

/// A user's access to a project: the project (`None`: no such project) and the user's role in
/// it (`None`: not a member).
pub struct CachedAccess {
    pub project: Option<project::Model>,
    pub role: Option<ProjectRole>,
    generation: u64,
}

pub struct AuthCache {
    generation: AtomicU64,
    /// Whether entries may be used: false while another replica's change could go unheard.
    trusted: AtomicBool,
    /// By SHA-256 of the bearer string.
    principals: Cache<[u8; 32], Arc<CachedPrincipal>>,
    /// By (user, project).
    access: Cache<(Uuid, ProjectId), Arc<CachedAccess>>,
}

impl Default for AuthCache {
    fn default() -> Self {
        Self {
            generation: AtomicU64::new(0),
            trusted: AtomicBool::new(true),
            principals: Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(AUTH_CACHE_TTL)
                .build(),
            access: Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(AUTH_CACHE_TTL)
                .build(),
        }
    }
}

impl AuthCache {
    /// The generation to pass to [`Self::principal_insert`] / [`Self::access_insert`]: read
    /// it before reading the database.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Uses entries again (`true`), or stops using and keeping them (`false`) while changes
    /// made by other replicas could go unheard. Either way, what is cached now is dropped.
    pub fn trust(&self, trusted: bool) {
        self.trusted.store(trusted, Ordering::Release);
        self.invalidate();
    }

    /// The generation, if entries may be used.
    fn usable(&self) -> Option<u64> {
        self.trusted
            .load(Ordering::Acquire)
            .then(|| self.generation())
    }

    pub fn principal(&self, bearer: &[u8; 32]) -> Option<Arc<CachedPrincipal>> {
        self.principals
            .get(bearer)
            .filter(|entry| Some(entry.generation) == self.usable())
    }

    pub fn principal_insert(
        &self,
        bearer: [u8; 32],
        generation: u64,
        principal: Principal,
        expires_at: Option<i64>,
        last_used_recorded: i64,
    ) {
        if Some(generation) == self.usable() {
            self.principals.insert(
                bearer,
                Arc::new(CachedPrincipal {
                    principal,
                    expires_at,
                    last_used_recorded: AtomicI64::new(last_used_recorded),
                    generation,
                }),
            );
        }
    }

    pub fn access(&self, user_id: Uuid, project_id: ProjectId) -> Option<Arc<CachedAccess>> {
        self.access
            .get(&(user_id, project_id))
            .filter(|entry| Some(entry.generation) == self.usable())
    }

    pub fn access_insert(
        &self,
        user_id: Uuid,
        project_id: ProjectId,
        generation: u64,
        project: Option<project::Model>,
        role: Option<ProjectRole>,
    ) {
        if Some(generation) == self.usable() {
            self.access.insert(
                (user_id, project_id),
                Arc::new(CachedAccess {
                    project,
                    role,
                    generation,
                }),
            );
        }
    }

    /// Forgets everything (see [`App::auth_changed`]).
    pub fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.principals.invalidate_all();
        self.access.invalidate_all();
    }
}

impl App {
    /// Call after committing any change that can narrow what a credential may do or see:
    /// cached authentications and project accesses are dropped at once here, and on the other
    /// replicas once the change feed tells them.
    pub fn auth_changed(&self) {
        self.auth_cache.invalidate();
        self.changes.auth.notify();
    }
}
