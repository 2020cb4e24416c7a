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

use crate::entity::user;
use crate::error::{ApiError, ApiResult};

/// What an API token may be used for.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
pub enum Scope {
    /// Everything the user may do, including administration if the user is an administrator.
    #[serde(rename = "admin")]
    Admin,
    /// Create, change and delete resources (implies `read`).
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

    pub fn parse(text: &str) -> ApiResult<Self> {
        serde_json::from_value(serde_json::Value::String(text.into()))
            .map_err(|_| ApiError::internal(format!("unknown role stored: {text}")))
    }
}

/// How the caller authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// A JWT access token from a password login: all of the user's powers.
    Session,
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
            Credential::Session => None,
        }
    }

    /// Whether the caller acts as a Bulkhead administrator: an administrator user with a
    /// credential that carries the `admin` scope.
    pub fn is_admin(&self) -> bool {
        self.user.is_admin && self.scopes.contains(&Scope::Admin)
    }

    /// Whether the credential allows `scope`: `admin` allows everything, `write` allows `read`.
    pub fn has_scope(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
            || self.scopes.contains(&Scope::Admin)
            || (scope == Scope::Read && self.scopes.contains(&Scope::Write))
    }

    pub fn require_scope(&self, scope: Scope) -> ApiResult<()> {
        if self.has_scope(scope) {
            Ok(())
        } else {
            Err(ApiError::new(
                http::StatusCode::FORBIDDEN,
                "insufficient_scope",
                format!("this token lacks the `{}` scope", scope.as_str()),
            ))
        }
    }

    /// Requires an administrator (and the `admin` scope).
    pub fn require_admin(&self) -> ApiResult<()> {
        self.require_scope(Scope::Admin)?;
        if self.user.is_admin {
            Ok(())
        } else {
            Err(ApiError::forbidden("only administrators may do this"))
        }
    }
}

/// The principal and request id that an application operation runs for (recorded in the audit log).
#[derive(Debug, Clone)]
pub struct OpContext {
    pub principal: Principal,
    pub request_id: String,
}
