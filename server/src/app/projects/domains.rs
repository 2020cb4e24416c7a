//! Domains: hostnames bound to a service. A project's claim of a hostname is `pending` until
//! the project proves it controls the name's DNS ([`crate::app::projects::domain_verification`]); only
//! verified domains route. Several projects may claim a hostname nobody verified (a squatter's
//! claim locks nobody out); the first to prove control holds it, and then no other project may
//! claim it or a name under it. A name under a domain the project verified is verified at once.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use regex::Regex;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::projects::domain_verification::{challenge_name, challenge_value};
use crate::app::projects::scoped::scoped_find;
use crate::app::shared::audit::AuditEntry;
use crate::app::shared::limits::Limit;
use crate::app::shared::pagination::{PageParams, ViewPage};
use crate::authz::{OpContext, Principal, ProjectRole, Scope};
use crate::entity::{domain, service};
use crate::error::{AppError, AppResult, ErrorCode, unique_violation_as};
use crate::ids::{ProjectId, ServiceId};

/// Whether a domain routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DomainStatus {
    /// Claimed; routes once verified (`POST …/verify` after publishing `challenge`).
    Pending,
    /// The project proved it controls the hostname: it routes.
    Verified,
}

/// The DNS record that proves control of a pending domain.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DomainChallenge {
    /// Always `TXT`.
    #[schema(example = "TXT")]
    pub record_type: String,
    /// Where to publish it: `_bulkhead-challenge.<hostname>`.
    #[schema(example = "_bulkhead-challenge.app.example.com")]
    pub name: String,
    /// The record's value.
    #[schema(example = "bulkhead-verification=3f2a9c0e4b7d18a6c5e0f9b2d4a6c8e1")]
    pub value: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DomainView {
    pub id: Uuid,
    pub project_id: Uuid,
    pub service_id: Uuid,
    /// Lowercase, without a trailing dot.
    pub hostname: String,
    pub status: DomainStatus,
    /// When the project proved control of the hostname.
    pub verified_at: Option<DateTime<Utc>>,
    /// What to publish to verify the domain; only while it is pending.
    pub challenge: Option<DomainChallenge>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<domain::Model> for DomainView {
    fn from(m: domain::Model) -> Self {
        let challenge = match (&m.verified_at, &m.verification_token) {
            (None, Some(token)) => Some(DomainChallenge {
                record_type: "TXT".into(),
                name: challenge_name(&m.hostname),
                value: challenge_value(token),
            }),
            _ => None,
        };
        Self {
            id: m.id,
            project_id: m.project_id.into(),
            service_id: m.service_id.into(),
            status: if m.verified_at.is_some() {
                DomainStatus::Verified
            } else {
                DomainStatus::Pending
            },
            verified_at: m.verified_at,
            challenge,
            hostname: m.hostname,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

/// A hostname to bind to a service of the project.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DomainCreate {
    /// A DNS name (RFC 1123) such as `app.example.com`, in any case (it is stored lowercase):
    /// two labels or more of 1 to 63 letters, digits or `-` (not at either end), the last
    /// starting with a letter; no wildcard, no IP address, no trailing dot.
    #[schema(
        max_length = 253,
        pattern = "^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\\.)+[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$"
    )]
    pub hostname: String,
    pub service_id: Uuid,
}

/// Rebinds a domain to another service of the project.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DomainUpdate {
    pub service_id: Uuid,
}

/// What `DomainCreate.hostname` must match (its schema states the same pattern and length).
const HOSTNAME_PATTERN: &str =
    r"^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$";
const HOSTNAME_MAX: usize = 253;

/// Checks a DNS hostname against [`HOSTNAME_PATTERN`] and returns it lowercase.
pub fn hostname_validate(hostname: &str) -> AppResult<String> {
    static PATTERN: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(HOSTNAME_PATTERN).expect("the hostname pattern compiles"));
    if hostname.len() <= HOSTNAME_MAX && PATTERN.is_match(hostname) {
        Ok(hostname.to_ascii_lowercase())
    } else {
        Err(AppError::invalid(
            "`hostname` must be a DNS name such as `app.example.com` (no wildcards, no IP addresses, no trailing dot)",
        ))
    }
}

async fn service_of_project(
    db: &impl ConnectionTrait,
    project_id: ProjectId,
    service_id: ServiceId,
) -> AppResult<()> {
    service::Entity::find_by_id(service_id)
        .filter(service::Column::ProjectId.eq(project_id))
        .one(db)
        .await?
        .map(|_| ())
        .ok_or_else(|| AppError::invalid("`service_id` is not a service of this project"))
}

/// The names `hostname` is under, nearest first, down to two labels (`a.b.example.com`:
/// `b.example.com`, `example.com`).
fn hostname_parents(hostname: &str) -> Vec<&str> {
    let mut parents = Vec::new();
    let mut rest = hostname;
    while let Some((_, parent)) = rest.split_once('.') {
        if !parent.contains('.') {
            break;
        }
        parents.push(parent);
        rest = parent;
    }
    parents
}

/// Who verified `hostname` or a name it is under, as seen by `project_id`.
struct Verified {
    /// Another project holds the name or one above it.
    elsewhere: bool,
    /// `project_id` verified a name above it.
    parent_here: bool,
}

/// One read of the verified domains among `hostname` and the names it is under.
async fn verified_around(
    db: &impl ConnectionTrait,
    project_id: ProjectId,
    hostname: &str,
) -> AppResult<Verified> {
    let parents = hostname_parents(hostname);
    let mut names = parents.clone();
    names.push(hostname);
    let holders: Vec<(ProjectId, String)> = domain::Entity::find()
        .select_only()
        .column(domain::Column::ProjectId)
        .column(domain::Column::Hostname)
        .filter(domain::Column::Hostname.is_in(names))
        .filter(domain::Column::VerifiedAt.is_not_null())
        .into_tuple()
        .all(db)
        .await?;
    Ok(Verified {
        elsewhere: holders.iter().any(|(project, _)| *project != project_id),
        parent_here: holders
            .iter()
            .any(|(project, name)| *project == project_id && parents.contains(&name.as_str())),
    })
}

/// 409 for a hostname another project holds; it does not say which.
fn hostname_taken() -> AppError {
    AppError::new(
        ErrorCode::HostnameTaken,
        "this hostname, or a domain it is under, is verified by another project",
    )
}

/// 409 for a unique violation: this project claims the hostname already, or another project
/// verified it meanwhile.
const HOSTNAME_CLAIMED: &str =
    "this project already claims this hostname, or another project has verified it";

/// 422 naming what DNS holds at the challenge's name instead of the expected value.
fn challenge_missing(hostname: &str, found: &[String]) -> AppError {
    let name = challenge_name(hostname);
    let holds = if found.is_empty() {
        format!("DNS has no TXT record at `{name}`")
    } else {
        let shown: Vec<String> = found
            .iter()
            .take(5)
            .map(|value| format!("`{}`", value.chars().take(100).collect::<String>()))
            .collect();
        format!(
            "DNS has the TXT records {} at `{name}`, none of them this domain's challenge",
            shown.join(", ")
        )
    };
    AppError::new(
        ErrorCode::DomainUnverified,
        format!(
            "{holds}: publish the domain's `challenge` there, and try again once DNS serves it"
        ),
    )
}

impl App {
    pub async fn domain_list(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        params: PageParams,
    ) -> AppResult<ViewPage> {
        self.scoped_list_views::<domain::Entity, DomainView>(principal, project_id, params)
            .await
    }

    pub async fn domain_view(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        id: Uuid,
    ) -> AppResult<domain::Model> {
        self.scoped_view::<domain::Entity>(principal, project_id, id)
            .await
    }

    /// Claims `hostname` for a service of the project: pending (or verified at once, under a
    /// domain the project verified); 409 when another project verified it or a name above it.
    pub async fn domain_create(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        create: DomainCreate,
    ) -> AppResult<domain::Model> {
        let hostname = hostname_validate(&create.hostname)?;
        let write = self
            .project_write(ctx, project_id, ProjectRole::Member, Scope::Write)
            .await?;
        write
            .room_check(&self.settings.limits, Limit::DomainsPerProject)
            .await?;
        service_of_project(&write.txn, project_id, ServiceId(create.service_id)).await?;
        let verified = verified_around(&write.txn, project_id, &hostname).await?;
        if verified.elsewhere {
            return Err(hostname_taken());
        }
        let now = Utc::now();
        let verified_at = verified.parent_here.then_some(now);
        let created = domain::ActiveModel {
            id: Set(Uuid::now_v7()),
            project_id: Set(project_id),
            service_id: Set(ServiceId(create.service_id)),
            hostname: Set(hostname),
            verification_token: Set(Some(hex::encode(rand::random::<[u8; 16]>()))),
            verified_at: Set(verified_at),
            revision: Set(1),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&write.txn)
        .await
        .map_err(unique_violation_as(
            ErrorCode::HostnameTaken,
            HOSTNAME_CLAIMED,
        ))?;
        write
            .commit(domain_audit("domain.create", &created))
            .await?;
        if created.verified_at.is_some() {
            self.changes.routes_changed([created.service_id]);
        }
        Ok(created)
    }

    /// Verifies a pending domain: its challenge must be in DNS (422 `domain_unverified` when it
    /// is not, 503 `dns_unavailable` when DNS does not answer), and no other project may have
    /// verified the hostname or a name above it (409). A verified domain is answered as it is.
    pub async fn domain_verify(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        id: Uuid,
    ) -> AppResult<domain::Model> {
        self.project_authorize(
            &ctx.principal,
            project_id,
            ProjectRole::Member,
            Scope::Write,
        )
        .await?;
        let pending = scoped_find::<domain::Entity>(&self.db, project_id, id).await?;
        let Some(token) = pending.verification_token.clone() else {
            return Ok(pending);
        };
        if pending.verified_at.is_some() {
            return Ok(pending);
        }
        // DNS is asked outside the write transaction: a slow answer holds no lock.
        let found = self
            .challenges
            .txt_values(&challenge_name(&pending.hostname))
            .await?;
        if !found.contains(&challenge_value(&token)) {
            return Err(challenge_missing(&pending.hostname, &found));
        }
        let write = self
            .project_write(ctx, project_id, ProjectRole::Member, Scope::Write)
            .await?;
        let current = scoped_find::<domain::Entity>(&write.txn, project_id, id).await?;
        if current.verified_at.is_some() {
            return Ok(current);
        }
        if verified_around(&write.txn, project_id, &current.hostname)
            .await?
            .elsewhere
        {
            return Err(hostname_taken());
        }
        let mut active: domain::ActiveModel = current.into();
        active.verified_at = Set(Some(Utc::now()));
        let verified = write.save(active).await.map_err(unique_violation_as(
            ErrorCode::HostnameTaken,
            HOSTNAME_CLAIMED,
        ))?;
        write
            .commit(domain_audit("domain.verify", &verified))
            .await?;
        self.changes.routes_changed([verified.service_id]);
        Ok(verified)
    }

    pub async fn domain_update(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        id: Uuid,
        if_match: Option<&str>,
        update: DomainUpdate,
    ) -> AppResult<domain::Model> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Member, Scope::Write)
            .await?;
        let current = write.precondition(
            scoped_find::<domain::Entity>(&write.txn, project_id, id).await?,
            if_match,
        )?;
        service_of_project(&write.txn, project_id, ServiceId(update.service_id)).await?;
        let before = current.service_id;
        let mut active: domain::ActiveModel = current.into();
        active.service_id = Set(ServiceId(update.service_id));
        let updated = write.save(active).await?;
        write
            .commit(domain_audit("domain.update", &updated))
            .await?;
        self.changes.routes_changed([before, updated.service_id]);
        Ok(updated)
    }

    pub async fn domain_delete(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        id: Uuid,
        if_match: Option<&str>,
    ) -> AppResult<()> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Member, Scope::Write)
            .await?;
        let current = write.precondition(
            scoped_find::<domain::Entity>(&write.txn, project_id, id).await?,
            if_match,
        )?;
        domain::Entity::delete_by_id(id).exec(&write.txn).await?;
        write
            .commit(domain_audit("domain.delete", &current))
            .await?;
        self.changes.routes_changed([current.service_id]);
        Ok(())
    }
}

fn domain_audit(action: &'static str, domain: &domain::Model) -> AuditEntry {
    AuditEntry {
        action,
        resource_type: "domain",
        resource_id: domain.id.to_string(),
        project_id: Some(domain.project_id),
        details: serde_json::json!({
            "hostname": domain.hostname,
            "service_id": domain.service_id,
            "verified": domain.verified_at.is_some(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::{HOSTNAME_MAX, HOSTNAME_PATTERN, hostname_parents, hostname_validate};

    #[test]
    fn a_hostname_s_parents_stop_at_two_labels() {
        assert_eq!(
            hostname_parents("a.b.example.com"),
            ["b.example.com", "example.com"]
        );
        assert!(hostname_parents("example.com").is_empty());
    }

    #[test]
    fn hostnames_are_normalised_and_checked() {
        assert_eq!(
            hostname_validate("App.Example.COM").unwrap(),
            "app.example.com"
        );
        assert!(hostname_validate(&format!("{}.com", "a".repeat(63))).is_ok());
        let longest = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61)
        );
        assert_eq!(longest.len(), HOSTNAME_MAX);
        assert!(hostname_validate(&longest).is_ok());
        assert!(hostname_validate(&format!("{longest}e")).is_err());
        for bad in [
            " app.example.com",
            "app.example.com.",
            "app.example.1com",
            "localhost",
            "-a.example.com",
            "a..example.com",
            "*.example.com",
            "10.0.0.1",
            "a_b.example.com",
            "",
        ] {
            assert!(hostname_validate(bad).is_err(), "{bad} was accepted");
        }
        assert!(hostname_validate(&format!("{}.com", "a".repeat(64))).is_err());
    }

    #[test]
    fn the_schema_states_the_pattern_the_server_checks() {
        let schema =
            serde_json::to_value(<super::DomainCreate as utoipa::PartialSchema>::schema()).unwrap();
        assert_eq!(
            schema["properties"]["hostname"]["pattern"],
            HOSTNAME_PATTERN
        );
        assert_eq!(schema["properties"]["hostname"]["maxLength"], HOSTNAME_MAX);
    }
}
