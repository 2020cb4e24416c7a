//! Edges: each edge agent reports the routing-table revision it applied (with its API token,
//! which then owns that edge id), so that the fleet's convergence is visible: each edge's
//! revision, its lag behind the latest one, its last contact and its last refusal; and, for
//! an edge serving HTTPS, its certificates (issuer, expiry, last error).

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, EntityTrait, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::app::App;
use crate::app::shared::audit::{AuditEntry, audit_record};
use crate::app::shared::pagination::{Page, PageParams, paginate};
use crate::authz::{OpContext, Principal};
use crate::entity::edge;
use crate::error::{AppError, AppResult, ErrorCode};

/// What an edge agent reports.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EdgeStatusReport {
    /// The revision the edge serves.
    #[schema(minimum = 0)]
    pub revision: i64,
    /// Seconds since that revision was generated (how stale the edge is).
    #[serde(default)]
    #[schema(minimum = 0)]
    pub snapshot_age_seconds: Option<f64>,
    /// The last snapshot the edge refused, if any.
    #[serde(default)]
    pub last_refusal: Option<EdgeRefusal>,
    /// The agent's version (at most 64 characters).
    #[serde(default)]
    #[schema(max_length = 64)]
    pub agent_version: Option<String>,
    /// The certificates of the domains it serves over HTTPS (absent: plain HTTP alone).
    #[serde(default)]
    pub certificates: Option<EdgeCertificates>,
}

/// The most certificates one report lists (the counts cover every domain).
pub const EDGE_CERTIFICATES_LISTED: usize = 256;

/// An edge's certificates: counts over every domain it routes, and up to 256 of them listed,
/// failing ones first, then those without a certificate yet, then by expiry.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EdgeCertificates {
    /// Domains the edge routes.
    #[schema(minimum = 0)]
    pub domains: u32,
    /// Domains with a certificate (obtained at a domain's first HTTPS request).
    #[schema(minimum = 0)]
    pub issued: u32,
    /// Certificates expiring within 14 days.
    #[schema(minimum = 0)]
    pub expiring_soon: u32,
    /// Domains whose last attempt to obtain or renew a certificate failed.
    #[schema(minimum = 0)]
    pub failing: u32,
    #[schema(max_items = 256)]
    pub items: Vec<EdgeCertificate>,
}

/// One domain's certificate on an edge.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EdgeCertificate {
    #[schema(max_length = 253)]
    pub hostname: String,
    /// The common name of the issuing CA; absent before a certificate is obtained.
    #[serde(default)]
    #[schema(max_length = 200)]
    pub issuer: Option<String>,
    #[serde(default)]
    pub not_after: Option<DateTime<Utc>>,
    /// The last failure to obtain or renew it, as the ACME CA or Caddy put it (at most 500
    /// characters).
    #[serde(default)]
    #[schema(max_length = 500)]
    pub last_error: Option<String>,
}

impl EdgeCertificates {
    fn validate(self) -> AppResult<Self> {
        use crate::app::shared::validate::text_validate;
        if self.items.len() > EDGE_CERTIFICATES_LISTED {
            return Err(AppError::invalid(format!(
                "`certificates.items` lists at most {EDGE_CERTIFICATES_LISTED} certificates"
            )));
        }
        if self.issued > self.domains
            || self.failing > self.domains
            || self.expiring_soon > self.issued
        {
            return Err(AppError::invalid(
                "`certificates`: `issued` and `failing` count at most `domains`, `expiring_soon` at most `issued`",
            ));
        }
        let items = self
            .items
            .into_iter()
            .map(|item| {
                Ok(EdgeCertificate {
                    hostname: text_validate("certificates.items.hostname", &item.hostname, 253)?,
                    issuer: item
                        .issuer
                        .map(|issuer| text_validate("certificates.items.issuer", &issuer, 200))
                        .transpose()?,
                    not_after: item.not_after,
                    last_error: item
                        .last_error
                        .map(|error| text_validate("certificates.items.last_error", &error, 500))
                        .transpose()?,
                })
            })
            .collect::<AppResult<_>>()?;
        Ok(Self { items, ..self })
    }
}

/// A snapshot an edge refused, and why.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EdgeRefusal {
    #[schema(minimum = 0)]
    pub revision: i64,
    /// At most 500 characters.
    #[schema(max_length = 500)]
    pub reason: String,
}

/// An edge as the fleet view shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct EdgeView {
    pub id: String,
    pub revision: i64,
    /// Revisions behind the latest routing table.
    pub lag: i64,
    pub snapshot_age_seconds: Option<f64>,
    pub last_refusal: Option<EdgeRefusal>,
    pub agent_version: String,
    /// Its certificates, for an edge that serves HTTPS.
    pub certificates: Option<EdgeCertificates>,
    pub first_seen_at: DateTime<Utc>,
    /// The edge's last report.
    pub reported_at: DateTime<Utc>,
}

impl App {
    fn edge_view(&self, row: edge::Model) -> EdgeView {
        let latest = self.routing.current().map_or(0, |c| c.revision);
        EdgeView {
            lag: (latest - row.revision).max(0),
            last_refusal: row
                .last_refusal
                .and_then(|value| serde_json::from_value(value).ok()),
            certificates: row
                .certificates
                .and_then(|value| serde_json::from_value(value).ok()),
            id: row.id,
            revision: row.revision,
            snapshot_age_seconds: row.snapshot_age_seconds,
            agent_version: row.agent_version,
            first_seen_at: row.first_seen_at,
            reported_at: row.reported_at,
        }
    }

    /// Records what edge `id` reports (an API token with `routing:read`; the first token to
    /// report as `id` owns it).
    pub async fn edge_status_report(
        &self,
        principal: &Principal,
        id: &str,
        report: EdgeStatusReport,
    ) -> AppResult<EdgeView> {
        principal.require_routing_read()?;
        let token_id = principal.token_id().ok_or_else(|| {
            AppError::forbidden("edges report with an API token (scope `routing:read`)")
        })?;
        let id = crate::app::shared::validate::slug_validate("id", id)?;
        let latest = self.routing_current()?.revision;
        if !(0..=latest).contains(&report.revision) {
            return Err(AppError::invalid(format!(
                "`revision` must be 0 to {latest}, the latest routing table"
            )));
        }
        if report
            .snapshot_age_seconds
            .is_some_and(|age| !age.is_finite() || age < 0.0)
        {
            return Err(AppError::invalid(
                "`snapshot_age_seconds` must be a number of seconds, 0 or more",
            ));
        }
        let agent_version = match report.agent_version.as_deref() {
            None | Some("") => String::new(),
            Some(version) => {
                crate::app::shared::validate::text_validate("agent_version", version, 64)?
            }
        };
        let last_refusal = match report.last_refusal {
            None => None,
            Some(refusal) if refusal.revision < 0 => {
                return Err(AppError::invalid(
                    "`last_refusal.revision` must be 0 or more",
                ));
            }
            Some(refusal) => Some(EdgeRefusal {
                reason: crate::app::shared::validate::text_validate(
                    "last_refusal.reason",
                    &refusal.reason,
                    500,
                )?,
                revision: refusal.revision,
            }),
        };
        let certificates = report
            .certificates
            .map(EdgeCertificates::validate)
            .transpose()?
            .map(serde_json::to_value)
            .transpose()
            .map_err(AppError::internal)?;
        let txn = crate::db::begin_write(&self.db).await?;
        let existing = edge::Entity::find_by_id(id.clone()).one(&txn).await?;
        if existing.as_ref().is_some_and(|e| e.token_id != token_id) {
            return Err(AppError::new(
                ErrorCode::EdgeOwned,
                "another token reports as this edge",
            ));
        }
        let now = Utc::now();
        let row = edge::ActiveModel {
            id: Set(id),
            token_id: Set(token_id),
            revision: Set(report.revision),
            snapshot_age_seconds: Set(report.snapshot_age_seconds),
            last_refusal: Set(last_refusal
                .map(serde_json::to_value)
                .transpose()
                .map_err(AppError::internal)?),
            agent_version: Set(agent_version),
            certificates: Set(certificates),
            first_seen_at: Set(existing.as_ref().map_or(now, |e| e.first_seen_at)),
            reported_at: Set(now),
        };
        let row = match existing {
            Some(_) => row.update(&txn).await?,
            None => row.insert(&txn).await?,
        };
        txn.commit().await?;
        Ok(self.edge_view(row))
    }

    /// Every edge that reported (`routing:read`).
    pub async fn edge_list(
        &self,
        principal: &Principal,
        params: PageParams,
    ) -> AppResult<Page<EdgeView>> {
        principal.require_routing_read()?;
        let page = paginate(
            &self.db,
            edge::Entity::find(),
            edge::Column::Id,
            |row| row.id.clone(),
            &params,
        )
        .await?;
        Ok(page.map(|row| self.edge_view(row)))
    }

    /// Forgets edge `id` (administrators): a decommissioned edge, or one whose token changed.
    pub async fn edge_delete(&self, ctx: &OpContext, id: &str) -> AppResult<()> {
        ctx.principal.require_admin()?;
        let id = crate::app::shared::validate::slug_validate("id", id)?;
        let txn = crate::db::begin_write(&self.db).await?;
        let deleted = edge::Entity::delete_by_id(id.clone()).exec(&txn).await?;
        if deleted.rows_affected == 0 {
            return Err(AppError::not_found("edge"));
        }
        audit_record(
            &txn,
            ctx,
            AuditEntry {
                action: "edge.delete",
                resource_type: "edge",
                resource_id: id,
                project_id: None,
                details: serde_json::json!({}),
            },
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }
}
