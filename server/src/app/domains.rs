//! Domains: hostnames bound to a service, unique across Bulkhead. The routing tables of a later
//! issue are built from them.

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::App;
use super::audit::AuditEntry;
use super::pagination::{Page, PageParams, paginate};
use crate::authz::{OpContext, Principal, ProjectRole, Scope};
use crate::entity::{domain, service};
use crate::error::{ApiError, ApiResult, ErrorCode, unique_violation_as};

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DomainView {
    pub id: Uuid,
    pub project_id: Uuid,
    pub service_id: Uuid,
    /// Lowercase, without a trailing dot.
    pub hostname: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<domain::Model> for DomainView {
    fn from(m: domain::Model) -> Self {
        Self {
            id: m.id,
            project_id: m.project_id,
            service_id: m.service_id,
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
    pub hostname: String,
    pub service_id: Uuid,
}

/// Rebinds a domain to another service of the project.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DomainUpdate {
    pub service_id: Uuid,
}

/// Normalises and checks a DNS hostname (RFC 1123): at least two labels of 1 to 63 letters,
/// digits or `-` (not at either end), 253 characters at most, and a non-numeric last label.
/// Wildcards are not accepted.
pub fn hostname_validate(hostname: &str) -> ApiResult<String> {
    let hostname = hostname.trim().trim_end_matches('.').to_ascii_lowercase();
    let labels: Vec<&str> = hostname.split('.').collect();
    let label_ok = |label: &&str| {
        (1..=63).contains(&label.len())
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    let valid = hostname.len() <= 253
        && labels.len() >= 2
        && labels.iter().all(label_ok)
        && labels
            .last()
            .is_some_and(|tld| !tld.chars().all(|c| c.is_ascii_digit()));
    if valid {
        Ok(hostname)
    } else {
        Err(ApiError::invalid(
            "`hostname` must be a DNS name such as `app.example.com` (no wildcards, no IP addresses)",
        ))
    }
}

async fn service_of_project(
    db: &impl ConnectionTrait,
    project_id: Uuid,
    service_id: Uuid,
) -> ApiResult<()> {
    service::Entity::find_by_id(service_id)
        .filter(service::Column::ProjectId.eq(project_id))
        .one(db)
        .await?
        .map(|_| ())
        .ok_or_else(|| ApiError::invalid("`service_id` is not a service of this project"))
}

async fn domain_find(
    db: &impl ConnectionTrait,
    project_id: Uuid,
    id: Uuid,
) -> ApiResult<domain::Model> {
    domain::Entity::find_by_id(id)
        .filter(domain::Column::ProjectId.eq(project_id))
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found("domain"))
}

impl App {
    pub async fn domain_list(
        &self,
        principal: &Principal,
        project_id: Uuid,
        params: PageParams,
    ) -> ApiResult<Page<domain::Model>> {
        self.project_authorize(principal, project_id, ProjectRole::Viewer, Scope::Read)
            .await?;
        let select = domain::Entity::find().filter(domain::Column::ProjectId.eq(project_id));
        paginate(&self.db, select, domain::Column::Id, |m| m.id, &params).await
    }

    pub async fn domain_view(
        &self,
        principal: &Principal,
        project_id: Uuid,
        id: Uuid,
    ) -> ApiResult<domain::Model> {
        self.project_authorize(principal, project_id, ProjectRole::Viewer, Scope::Read)
            .await?;
        domain_find(&self.db, project_id, id).await
    }

    pub async fn domain_create(
        &self,
        ctx: &OpContext,
        project_id: Uuid,
        create: DomainCreate,
    ) -> ApiResult<domain::Model> {
        let hostname = hostname_validate(&create.hostname)?;
        let write = self
            .project_write(ctx, project_id, ProjectRole::Member, Scope::Write)
            .await?;
        service_of_project(&write.txn, project_id, create.service_id).await?;
        let now = Utc::now();
        let created = domain::ActiveModel {
            id: Set(Uuid::now_v7()),
            project_id: Set(project_id),
            service_id: Set(create.service_id),
            hostname: Set(hostname),
            revision: Set(1),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&write.txn)
        .await
        .map_err(unique_violation_as(
            ErrorCode::HostnameTaken,
            "this hostname is already bound",
        ))?;
        write
            .commit(domain_audit("domain.create", &created))
            .await?;
        self.changes.routes.notify();
        Ok(created)
    }

    pub async fn domain_update(
        &self,
        ctx: &OpContext,
        project_id: Uuid,
        id: Uuid,
        if_match: Option<&str>,
        update: DomainUpdate,
    ) -> ApiResult<domain::Model> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Member, Scope::Write)
            .await?;
        let current =
            write.precondition(domain_find(&write.txn, project_id, id).await?, if_match)?;
        service_of_project(&write.txn, project_id, update.service_id).await?;
        let mut active: domain::ActiveModel = current.into();
        active.service_id = Set(update.service_id);
        let updated = write.save(active).await?;
        write
            .commit(domain_audit("domain.update", &updated))
            .await?;
        self.changes.routes.notify();
        Ok(updated)
    }

    pub async fn domain_delete(
        &self,
        ctx: &OpContext,
        project_id: Uuid,
        id: Uuid,
        if_match: Option<&str>,
    ) -> ApiResult<()> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Member, Scope::Write)
            .await?;
        let current =
            write.precondition(domain_find(&write.txn, project_id, id).await?, if_match)?;
        domain::Entity::delete_by_id(id).exec(&write.txn).await?;
        write
            .commit(domain_audit("domain.delete", &current))
            .await?;
        self.changes.routes.notify();
        Ok(())
    }
}

fn domain_audit(action: &'static str, domain: &domain::Model) -> AuditEntry {
    AuditEntry {
        action,
        resource_type: "domain",
        resource_id: domain.id.to_string(),
        project_id: Some(domain.project_id),
        details: serde_json::json!({ "hostname": domain.hostname, "service_id": domain.service_id }),
    }
}

#[cfg(test)]
mod tests {
    use super::hostname_validate;

    #[test]
    fn hostnames_are_normalised_and_checked() {
        assert_eq!(
            hostname_validate(" App.Example.COM. ").unwrap(),
            "app.example.com"
        );
        for bad in [
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
}
