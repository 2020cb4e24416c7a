//! Caps on what one tenant creates: projects and API tokens per user; environments, services,
//! domains, git installations, webhook endpoints, pending invitations and members per project.
//! Without them one account can fill the database, or make every list and every pass of the
//! deploy pipeline slow for everyone, a row at a time.
//!
//! Each cap has a default that fits a real platform ([`TenantLimits::default`]) and is set by
//! operators (`--limit NAME=N`, or `[limits]` in the configuration file). A create that would
//! pass a cap is refused with 409 `limit_reached`, saying which cap and how to raise it.
//!
//! A cap is checked inside the create's write transaction, after the row that serializes
//! creates of its kind is locked (the project for per-project caps, the user for per-user
//! ones), so concurrent creates cannot pass it together. What each cap counts is said once
//! ([`Limit::held`]): by the creates it refuses, and to users who ask how close they are.

use chrono::Utc;
use sea_orm::{ColumnTrait, Condition, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter};
use uuid::Uuid;

use crate::authz::ProjectRole;
use crate::entity::{
    api_token, domain, environment, git_installation, project_invitation, project_member, service,
    webhook_endpoint,
};
use crate::error::{AppError, AppResult, ErrorCode};
use crate::ids::ProjectId;

/// One cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    ProjectsPerUser,
    TokensPerUser,
    EnvironmentsPerProject,
    ServicesPerProject,
    DomainsPerProject,
    GitInstallationsPerProject,
    WebhookEndpointsPerProject,
    InvitationsPerProject,
    MembersPerProject,
}

impl Limit {
    pub const ALL: [Limit; 9] = [
        Limit::ProjectsPerUser,
        Limit::TokensPerUser,
        Limit::EnvironmentsPerProject,
        Limit::ServicesPerProject,
        Limit::DomainsPerProject,
        Limit::GitInstallationsPerProject,
        Limit::WebhookEndpointsPerProject,
        Limit::InvitationsPerProject,
        Limit::MembersPerProject,
    ];

    /// Its name in `--limit NAME=N` and in the configuration file.
    pub const fn name(self) -> &'static str {
        match self {
            Limit::ProjectsPerUser => "projects_per_user",
            Limit::TokensPerUser => "tokens_per_user",
            Limit::EnvironmentsPerProject => "environments_per_project",
            Limit::ServicesPerProject => "services_per_project",
            Limit::DomainsPerProject => "domains_per_project",
            Limit::GitInstallationsPerProject => "git_installations_per_project",
            Limit::WebhookEndpointsPerProject => "webhook_endpoints_per_project",
            Limit::InvitationsPerProject => "invitations_per_project",
            Limit::MembersPerProject => "members_per_project",
        }
    }

    /// Whether it counts a project's rows (otherwise a user's).
    pub const fn per_project(self) -> bool {
        !matches!(self, Limit::ProjectsPerUser | Limit::TokensPerUser)
    }

    /// What it counts: "projects", "API tokens", ...
    pub const fn counts(self) -> &'static str {
        self.counted().0
    }

    /// How many rows it counts for `holder` now: what a create checks against the cap.
    pub async fn held(self, db: &impl ConnectionTrait, holder: Holder) -> AppResult<u64> {
        let now = Utc::now();
        let count = match (self, holder) {
            (Limit::ProjectsPerUser, Holder::User(user)) => {
                project_member::Entity::find()
                    .filter(project_member::Column::UserId.eq(user))
                    .filter(project_member::Column::Role.eq(ProjectRole::Owner.as_str()))
                    .count(db)
                    .await?
            }
            (Limit::TokensPerUser, Holder::User(user)) => {
                api_token::Entity::find()
                    .filter(api_token::Column::UserId.eq(user))
                    .filter(api_token::Column::RevokedAt.is_null())
                    .filter(
                        Condition::any()
                            .add(api_token::Column::ExpiresAt.is_null())
                            .add(api_token::Column::ExpiresAt.gt(now)),
                    )
                    .count(db)
                    .await?
            }
            (Limit::EnvironmentsPerProject, Holder::Project(project)) => {
                project_rows::<environment::Entity>(db, environment::Column::ProjectId, project)
                    .await?
            }
            (Limit::ServicesPerProject, Holder::Project(project)) => {
                project_rows::<service::Entity>(db, service::Column::ProjectId, project).await?
            }
            (Limit::DomainsPerProject, Holder::Project(project)) => {
                project_rows::<domain::Entity>(db, domain::Column::ProjectId, project).await?
            }
            (Limit::GitInstallationsPerProject, Holder::Project(project)) => {
                project_rows::<git_installation::Entity>(
                    db,
                    git_installation::Column::ProjectId,
                    project,
                )
                .await?
            }
            (Limit::WebhookEndpointsPerProject, Holder::Project(project)) => {
                project_rows::<webhook_endpoint::Entity>(
                    db,
                    webhook_endpoint::Column::ProjectId,
                    project,
                )
                .await?
            }
            (Limit::InvitationsPerProject, Holder::Project(project)) => {
                project_invitation::Entity::find()
                    .filter(project_invitation::Column::ProjectId.eq(project))
                    .filter(project_invitation::Column::ExpiresAt.gt(now))
                    .count(db)
                    .await?
            }
            (Limit::MembersPerProject, Holder::Project(project)) => {
                project_rows::<project_member::Entity>(
                    db,
                    project_member::Column::ProjectId,
                    project,
                )
                .await?
            }
            (limit, holder) => {
                return Err(AppError::internal(format!(
                    "the limit `{}` does not count {holder:?}",
                    limit.name()
                )));
            }
        };
        Ok(count)
    }

    /// What it counts, and whose: ("projects", "you own").
    const fn counted(self) -> (&'static str, &'static str) {
        match self {
            Limit::ProjectsPerUser => ("projects", "you own"),
            Limit::TokensPerUser => ("API tokens", "you hold (not revoked or expired)"),
            Limit::EnvironmentsPerProject => ("environments", "this project has"),
            Limit::ServicesPerProject => ("services", "this project has"),
            Limit::DomainsPerProject => ("domains", "this project has"),
            Limit::GitInstallationsPerProject => ("git installations", "this project has"),
            Limit::WebhookEndpointsPerProject => ("webhook endpoints", "this project has"),
            Limit::InvitationsPerProject => ("pending invitations", "this project has"),
            Limit::MembersPerProject => ("members", "this project has"),
        }
    }
}

/// How many rows of `E` have `project` in `column`.
async fn project_rows<E>(
    db: &impl ConnectionTrait,
    column: E::Column,
    project: ProjectId,
) -> AppResult<u64>
where
    E: EntityTrait,
    E::Model: sea_orm::FromQueryResult + Send + Sync,
{
    Ok(E::find().filter(column.eq(project)).count(db).await?)
}

/// Whose rows a cap counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    User(Uuid),
    Project(ProjectId),
}

/// How much one tenant may hold (see the module's docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantLimits {
    pub projects_per_user: u64,
    pub tokens_per_user: u64,
    pub environments_per_project: u64,
    pub services_per_project: u64,
    pub domains_per_project: u64,
    pub git_installations_per_project: u64,
    pub webhook_endpoints_per_project: u64,
    pub invitations_per_project: u64,
    pub members_per_project: u64,
}

impl Default for TenantLimits {
    /// The OpenAPI document states these (a test keeps it so).
    fn default() -> Self {
        Self {
            projects_per_user: 50,
            tokens_per_user: 50,
            environments_per_project: 20,
            services_per_project: 100,
            domains_per_project: 100,
            git_installations_per_project: 10,
            webhook_endpoints_per_project: 20,
            invitations_per_project: 50,
            members_per_project: 100,
        }
    }
}

/// The `[limits]` table of the configuration file: any of the caps, by name.
pub type LimitsTable = std::collections::BTreeMap<String, u64>;

impl TenantLimits {
    pub fn get(&self, limit: Limit) -> u64 {
        let mut copy = *self;
        *copy.slot(limit)
    }

    fn slot(&mut self, limit: Limit) -> &mut u64 {
        match limit {
            Limit::ProjectsPerUser => &mut self.projects_per_user,
            Limit::TokensPerUser => &mut self.tokens_per_user,
            Limit::EnvironmentsPerProject => &mut self.environments_per_project,
            Limit::ServicesPerProject => &mut self.services_per_project,
            Limit::DomainsPerProject => &mut self.domains_per_project,
            Limit::GitInstallationsPerProject => &mut self.git_installations_per_project,
            Limit::WebhookEndpointsPerProject => &mut self.webhook_endpoints_per_project,
            Limit::InvitationsPerProject => &mut self.invitations_per_project,
            Limit::MembersPerProject => &mut self.members_per_project,
        }
    }

    /// Sets the cap called `name` (as [`Limit::name`]); an unknown name or a cap of 0 is an
    /// error that lists the names.
    pub fn set(&mut self, name: &str, value: u64) -> anyhow::Result<()> {
        let Some(limit) = Limit::ALL.into_iter().find(|limit| limit.name() == name) else {
            let names: Vec<_> = Limit::ALL.iter().map(|limit| limit.name()).collect();
            anyhow::bail!(
                "no limit is called `{name}`; the limits: {}",
                names.join(", ")
            );
        };
        anyhow::ensure!(value > 0, "the limit `{name}` must be at least 1");
        *self.slot(limit) = value;
        Ok(())
    }

    /// Sets each `NAME=N` of `--limit`.
    pub fn set_all<'a>(
        &mut self,
        settings: impl IntoIterator<Item = &'a str>,
    ) -> anyhow::Result<()> {
        for setting in settings {
            let (name, value) = setting
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("--limit `{setting}` is not NAME=N"))?;
            let value = value.trim().parse().map_err(|_| {
                anyhow::anyhow!("--limit `{setting}`: `{value}` is not a whole number")
            })?;
            self.set(name.trim(), value)?;
        }
        Ok(())
    }

    /// `Ok` if one more fits beside the `held` that `limit` counts; 409 `limit_reached`
    /// otherwise.
    pub fn room_check(&self, limit: Limit, held: u64) -> AppResult<()> {
        let most = self.get(limit);
        if held < most {
            return Ok(());
        }
        let (what, whose) = limit.counted();
        Err(AppError::new(
            ErrorCode::LimitReached,
            format!(
                "{whose} {held} {what}, the most allowed (the limit `{}` is {most}): delete \
                 one first, or ask the operator to raise it",
                limit.name()
            ),
        ))
    }

    /// Counts what `limit` counts for `holder` and checks that one more fits.
    pub async fn room_check_held(
        &self,
        db: &impl ConnectionTrait,
        limit: Limit,
        holder: Holder,
    ) -> AppResult<()> {
        self.room_check(limit, limit.held(db, holder).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_set_by_name_and_refused_with_the_names() {
        let mut limits = TenantLimits::default();
        limits
            .set_all(["projects_per_user=3", " members_per_project = 7"])
            .unwrap();
        assert_eq!(limits.get(Limit::ProjectsPerUser), 3);
        assert_eq!(limits.get(Limit::MembersPerProject), 7);
        let unknown = limits.set_all(["project=3"]).unwrap_err().to_string();
        assert!(
            unknown.contains("projects_per_user, tokens_per_user"),
            "{unknown}"
        );
        assert!(limits.set_all(["tokens_per_user"]).is_err());
        assert!(limits.set_all(["tokens_per_user=-1"]).is_err());
        assert!(limits.set_all(["tokens_per_user=0"]).is_err());
        assert_eq!(
            limits.get(Limit::TokensPerUser),
            50,
            "a refused setting changes nothing"
        );
        for limit in Limit::ALL {
            limits.set(limit.name(), 11).unwrap();
            assert_eq!(limits.get(limit), 11, "{}", limit.name());
        }
    }

    #[test]
    fn the_operators_guide_states_every_limit_and_its_default() {
        let guide = include_str!("../../../../docs/operations/configuration.md");
        let defaults = TenantLimits::default();
        for limit in Limit::ALL {
            let row = format!("| `{}` | {} |", limit.name(), defaults.get(limit));
            assert!(guide.contains(&row), "configuration.md lacks {row}");
        }
    }

    #[test]
    fn a_full_quota_is_refused_with_its_name() {
        let limits = TenantLimits::default();
        assert!(limits.room_check(Limit::EnvironmentsPerProject, 19).is_ok());
        let err = limits
            .room_check(Limit::EnvironmentsPerProject, 20)
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::LimitReached);
        assert!(
            err.detail.contains("environments_per_project"),
            "{}",
            err.detail
        );
    }
}
