//! Who may do what: the authenticated [`Principal`], API-token [`Scope`]s and per-project
//! [`ProjectRole`]s.
//!
//! The rule for 403 versus 404, applied everywhere: a caller who may not know that a project
//! exists (not a member, not an administrator) gets 404, exactly as if it did not exist; a caller
//! who can see the resource but lacks the role or the token scope for the action gets 403.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use sea_orm::sea_query::LockType;
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, JoinType, QueryFilter, QuerySelect, QueryTrait,
    RelationTrait,
};

use crate::entity::{project, project_member, user};
use crate::error::{AppError, AppResult, ErrorCode};
use crate::ids::ProjectId;

/// What an API token may be used for.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
pub enum Scope {
    /// Everything the user may do, including administration if the user is an administrator.
    #[serde(rename = "admin")]
    Admin,
    /// Create, change and delete resources (implies `read` and `deploy`).
    #[serde(rename = "write")]
    Write,
    /// Read resources.
    #[serde(rename = "read")]
    Read,
    /// Start and manage deployments.
    #[serde(rename = "deploy")]
    Deploy,
    /// Read routing tables (for edge proxies).
    #[serde(rename = "routing:read")]
    RoutingRead,
}

impl Scope {
    pub const ALL: [Scope; 5] = [
        Scope::Admin,
        Scope::Write,
        Scope::Read,
        Scope::Deploy,
        Scope::RoutingRead,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Scope::Admin => "admin",
            Scope::Write => "write",
            Scope::Read => "read",
            Scope::Deploy => "deploy",
            Scope::RoutingRead => "routing:read",
        }
    }
}

/// A member's role in a project, from least to most powerful.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProjectRole {
    /// Reads everything in the project.
    Viewer,
    /// Also creates and changes environments, services and domains.
    Member,
    /// Also changes the project and manages members below owner.
    Admin,
    /// Also deletes the project and manages owners.
    Owner,
}

impl ProjectRole {
    pub fn as_str(self) -> &'static str {
        match self {
            ProjectRole::Viewer => "viewer",
            ProjectRole::Member => "member",
            ProjectRole::Admin => "admin",
            ProjectRole::Owner => "owner",
        }
    }

    pub fn parse(text: &str) -> AppResult<Self> {
        serde_json::from_value(serde_json::Value::String(text.into()))
            .map_err(|_| AppError::internal(format!("unknown role stored: {text}")))
    }
}

/// How the caller authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// A JWT access token from a password login, in the session (refresh-token family) it
    /// names: all of the user's powers.
    Session(Uuid),
    /// An API token, limited to its scopes.
    ApiToken(Uuid),
}

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub struct Principal {
    pub user: user::Model,
    pub credential: Credential,
    pub scopes: BTreeSet<Scope>,
}

impl Principal {
    pub fn user_id(&self) -> Uuid {
        self.user.id
    }

    pub fn token_id(&self) -> Option<Uuid> {
        match self.credential {
            Credential::ApiToken(id) => Some(id),
            Credential::Session(_) => None,
        }
    }

    /// A stable name of the credential (not of the user): `t:<token id>` or `s:<session id>`.
    /// Idempotency keys are scoped to it.
    pub fn credential_key(&self) -> String {
        match self.credential {
            Credential::ApiToken(id) => format!("t:{id}"),
            Credential::Session(family) => format!("s:{family}"),
        }
    }

    /// Requires a password session (not an API token): for changing credentials.
    pub fn require_session(&self) -> AppResult<()> {
        AuthzCheck::Session.record();
        match self.credential {
            Credential::Session(_) => Ok(()),
            Credential::ApiToken(_) => Err(AppError::new(
                ErrorCode::SessionRequired,
                "this needs a password session, not an API token",
            )),
        }
    }

    /// Whether the caller acts as a Bulkhead administrator: an administrator user with a
    /// credential that carries the `admin` scope.
    pub fn is_admin(&self) -> bool {
        self.user.is_admin && self.scopes.contains(&Scope::Admin)
    }

    /// Whether the credential allows `scope`: `admin` allows everything, `write` allows `read`
    /// and `deploy`.
    pub fn has_scope(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
            || self.scopes.contains(&Scope::Admin)
            || (matches!(scope, Scope::Read | Scope::Deploy) && self.scopes.contains(&Scope::Write))
    }

    pub fn require_scope(&self, scope: Scope) -> AppResult<()> {
        AuthzCheck::Scope(scope).record();
        if self.has_scope(scope) {
            Ok(())
        } else {
            Err(AppError::new(
                ErrorCode::InsufficientScope,
                format!("this token lacks the `{}` scope", scope.as_str()),
            ))
        }
    }

    /// Requires a credential of an administrator with `routing:read` (or `admin`): the routing
    /// table names every tenant's domains and workloads, so only the platform's operators (and
    /// the edges they run) read it.
    pub fn require_routing_read(&self) -> AppResult<()> {
        AuthzCheck::Routing.record();
        self.require_scope(Scope::RoutingRead)?;
        if self.user.is_admin {
            Ok(())
        } else {
            Err(AppError::forbidden(
                "routing tables are read with an administrator's token",
            ))
        }
    }

    /// Requires an administrator (and the `admin` scope).
    pub fn require_admin(&self) -> AppResult<()> {
        AuthzCheck::Admin.record();
        self.require_scope(Scope::Admin)?;
        if self.user.is_admin {
            Ok(())
        } else {
            Err(AppError::forbidden("only administrators may do this"))
        }
    }
}

/// The scope a route requires of its caller, checked by the [`Scoped`] extractor before the
/// request body is read (so that a too-narrow token is told 403, not a complaint about its
/// body). The application layer checks again, close to each action.
pub trait RouteScope: Send + Sync + 'static {
    const SCOPE: Scope;
}

/// Routes that create, change or delete resources: what a plain [`OpContext`] requires.
pub struct WriteScope;

impl RouteScope for WriteScope {
    const SCOPE: Scope = Scope::Write;
}

/// Routes that start and manage deployments (a `deploy` token may call them, and nothing else).
pub struct DeployScope;

impl RouteScope for DeployScope {
    const SCOPE: Scope = Scope::Deploy;
}

/// The [`OpContext`] of a route that states the scope `S` it needs. A handler taking
/// `OpContext` itself requires [`WriteScope`].
pub struct Scoped<S: RouteScope>(pub OpContext, pub std::marker::PhantomData<S>);

/// The principal and request id that an application operation runs for (recorded in the audit log).
#[derive(Debug, Clone)]
pub struct OpContext {
    pub principal: Principal,
    pub request_id: String,
}

/// One authorization check that a request passed. The checks of a request with an
/// `Idempotency-Key` are stored with its response, and a replay must pass them again, as a
/// fresh request would (a member demoted since, or an administrator no longer one, gets the
/// refusal, not the stored answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum AuthzCheck {
    Scope(Scope),
    Admin,
    /// An administrator's credential with `routing:read`.
    Routing,
    Session,
    Project {
        project_id: crate::ids::ProjectId,
        role: ProjectRole,
        scope: Scope,
    },
}

tokio::task_local! {
    static AUTHZ_TRAIL: std::sync::Arc<std::sync::Mutex<Vec<AuthzCheck>>>;
}

impl AuthzCheck {
    /// Adds this check to the trail of the request being handled, if one is being kept.
    pub fn record(self) {
        let _ = AUTHZ_TRAIL.try_with(|trail| {
            let mut trail = trail.lock().expect("not poisoned");
            if !trail.contains(&self) {
                trail.push(self);
            }
        });
    }
}

/// Runs `work` keeping the trail of the authorization checks it makes; returns its output and
/// the checks.
pub async fn authz_trail_keep<T>(work: impl Future<Output = T>) -> (T, Vec<AuthzCheck>) {
    let trail = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let output = AUTHZ_TRAIL.scope(trail.clone(), work).await;
    let checks = std::mem::take(&mut *trail.lock().expect("not poisoned"));
    (output, checks)
}

/// Whether `principal` may act on project `project_id` with `role` and `scope`, inside a
/// transaction (without the cache of [`crate::app::App::project_authorize`]). For writes the
/// project row is locked until the transaction ends (`FOR UPDATE OF projects` on PostgreSQL),
/// so that checks and writes on one project are serialized.
pub async fn project_authorize_in(
    db: &impl ConnectionTrait,
    principal: &Principal,
    project_id: ProjectId,
    role: ProjectRole,
    scope: Scope,
) -> AppResult<project::Model> {
    AuthzCheck::Project {
        project_id,
        role,
        scope,
    }
    .record();
    // A write locks the project's row against other writes in the project, as `FOR NO KEY
    // UPDATE`: unlike `FOR UPDATE`, it lets other transactions insert rows that reference the
    // project (the reconciler's instances, whose foreign key takes a `KEY SHARE` lock). With
    // `FOR UPDATE`, a rollback superseding a deployment the reconciler was placing deadlocked
    // on PostgreSQL: each waited for a row the other held.
    let lock = scope != Scope::Read;
    if principal.is_admin() {
        let mut select = project::Entity::find_by_id(project_id);
        if lock {
            select = select.lock(LockType::NoKeyUpdate);
        }
        let project = select.one(db).await?;
        return access_decide(principal, project, None, role, scope);
    }
    // The membership and its project in one query: this runs on every project-scoped request.
    let mut select = project_member::Entity::find()
        .filter(project_member::Column::ProjectId.eq(project_id))
        .filter(project_member::Column::UserId.eq(principal.user_id()))
        .join(JoinType::InnerJoin, project_member::Relation::Project.def())
        .select_also(project::Entity);
    if lock {
        QueryTrait::query(&mut select).lock_with_tables(LockType::NoKeyUpdate, [project::Entity]);
    }
    match select.one(db).await? {
        Some((membership, project)) => {
            let member_role = ProjectRole::parse(&membership.role)?;
            access_decide(principal, project, Some(member_role), role, scope)
        }
        None => access_decide(principal, None, None, role, scope),
    }
}

/// The rule: an administrator (with the `admin` scope) acts as an owner of every project; a
/// non-member may not learn that the project exists (404); a member below `role`, or a
/// credential without `scope`, gets 403.
pub fn access_decide(
    principal: &Principal,
    project: Option<project::Model>,
    member_role: Option<ProjectRole>,
    role: ProjectRole,
    scope: Scope,
) -> AppResult<project::Model> {
    let project = project.ok_or_else(|| AppError::not_found("project"))?;
    if principal.is_admin() {
        principal.require_scope(scope)?;
        return Ok(project);
    }
    let member_role = member_role.ok_or_else(|| AppError::not_found("project"))?;
    principal.require_scope(scope)?;
    if member_role < role {
        return Err(AppError::forbidden(format!(
            "this requires the `{}` role in the project",
            role.as_str()
        )));
    }
    Ok(project)
}
