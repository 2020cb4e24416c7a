//! Git installations: a project's webhook at a forge (GitHub's format), with the secret the
//! forge signs its deliveries with and the bindings that say which pushes deploy which
//! service. The secret is generated here, shown once (at creation and at each rotation) and
//! stored sealed; after a rotation the previous secret is still accepted for
//! [`SECRET_OVERLAP`], so that deliveries the forge signed before the new secret was pasted
//! there are not refused. What a delivery does is [`crate::app::git::intake`]'s.
//!
//! Admins (and owners) of the project manage installations with a `write` token; members and
//! viewers read them and their deliveries.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use ipnet::IpNet;
use regex::Regex;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::projects::scoped::scoped_find;
use crate::app::projects::write::{RevisionBump, Revisioned};
use crate::app::shared::audit::AuditEntry;
use crate::app::shared::limits::Limit;
use crate::app::shared::outbound_addresses;
use crate::app::shared::pagination::{Page, PageParams};
use crate::auth::opaque_token_generate;
use crate::authz::{OpContext, Principal, ProjectRole, Scope};
use crate::entity::{git_installation, service};
use crate::error::{AppError, AppResult};
use crate::ids::ProjectId;
use crate::ids::ServiceId;

/// How long the secret before a rotation is still accepted.
pub const SECRET_OVERLAP: chrono::Duration = chrono::Duration::hours(1);
/// The most bindings an installation holds.
pub const BINDINGS_MAX: usize = 100;
/// The path the forge posts deliveries to; the installation's id goes in `?installation=`.
pub const HOOK_PATH: &str = "/v1/hooks/github";

/// `owner/name` of a GitHub repository.
const REPOSITORY_PATTERN: &str = r"^[A-Za-z0-9-]{1,39}/[A-Za-z0-9_.-]{1,100}$";
/// A branch name: `/`-separated parts of letters, digits and `_+@-`, with single dots inside
/// a part (no `..`, no part starting or ending with a dot).
const BRANCH_PATTERN: &str =
    r"^[A-Za-z0-9_+@-]+(\.[A-Za-z0-9_+@-]+)*(/[A-Za-z0-9_+@-]+(\.[A-Za-z0-9_+@-]+)*)*$";
const BRANCH_MAX: usize = 255;

/// Which forge an installation is at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Forge {
    /// GitHub's webhook format: `X-Hub-Signature-256`, `X-GitHub-Event`, `X-GitHub-Delivery`.
    Github,
}

/// Pushes to `branch` of `repository` deploy `service_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PushBinding {
    /// `owner/name` as on GitHub; compared without regard to case.
    #[schema(
        max_length = 140,
        pattern = "^[A-Za-z0-9-]{1,39}/[A-Za-z0-9_.-]{1,100}$",
        example = "acme/storefront"
    )]
    pub repository: String,
    /// The branch, without `refs/heads/`: `/`-separated parts of letters, digits and `_+@-`,
    /// with single dots inside a part.
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = "^[A-Za-z0-9_+@-]+(\\.[A-Za-z0-9_+@-]+)*(/[A-Za-z0-9_+@-]+(\\.[A-Za-z0-9_+@-]+)*)*$",
        example = "main"
    )]
    pub branch: String,
    /// A service of the project.
    pub service_id: Uuid,
}

/// Where an installation reports the commit statuses of the deployments its pushes made.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitStatusesInput {
    /// The forge's API: `https://api.github.com`, or a GitHub Enterprise Server's
    /// `https://<host>/api/v3`. It must not reach a private, loopback or link-local address
    /// (named, or resolved to at each call) unless the operator allowed its network
    /// (`--webhook-allowed-networks`); `http` only to such an allowed address. No user, query
    /// or fragment.
    #[schema(min_length = 1, max_length = 500, example = "https://api.github.com")]
    pub api_url: String,
    /// A token that may write commit statuses (a fine-grained token or an app's with
    /// `statuses: write`). Stored sealed and never shown.
    #[schema(min_length = 1, max_length = 500, pattern = "^[!-~]+$")]
    pub token: String,
}

/// Where an installation reports commit statuses (never its token).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CommitStatusesView {
    pub api_url: String,
    /// Seconds until the forge's rate limit lets this server call it again, while it holds
    /// the calls back.
    pub held_for_secs: Option<u64>,
}

/// A git installation, without its secret.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GitInstallationView {
    pub id: Uuid,
    pub project_id: Uuid,
    pub forge: Forge,
    pub bindings: Vec<PushBinding>,
    /// Where the forge must post deliveries (this server's origin before it), as the
    /// webhook's payload URL; content type `application/json` or
    /// `application/x-www-form-urlencoded`.
    #[schema(example = "/v1/hooks/github?installation=0193a5c2-7b1e-7cc0-9a4e-3f1c2b8d9e01")]
    pub hook_path: String,
    /// Until when the secret before the last rotation is still accepted.
    pub previous_secret_until: Option<DateTime<Utc>>,
    /// Where the deployments' commit statuses go; absent: none are sent.
    pub commit_statuses: Option<CommitStatusesView>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A git installation with its secret, shown once: paste it into the forge's webhook
/// settings.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GitInstallationCreated {
    #[serde(flatten)]
    pub installation: GitInstallationView,
    /// The webhook secret. It cannot be shown again (rotate it to get a new one).
    pub secret: String,
}

/// A new installation.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GitInstallationCreate {
    /// Which pushes deploy which service (at most 100; none: deliveries are recorded and
    /// deploy nothing).
    #[serde(default)]
    #[schema(max_items = 100)]
    pub bindings: Vec<PushBinding>,
    /// Where to report commit statuses; absent: none are sent.
    pub commit_statuses: Option<CommitStatusesInput>,
}

/// Changes to an installation; a field left out keeps its value.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GitInstallationUpdate {
    /// The bindings, replaced as a whole (at most 100).
    #[schema(max_items = 100)]
    pub bindings: Option<Vec<PushBinding>>,
    /// Where to report commit statuses (its token replaced too); `null`: no more statuses.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<CommitStatusesInput>)]
    pub commit_statuses: Option<Option<CommitStatusesInput>>,
}

/// A field that is present, `null` or not (`Some(None)` for `null`), so that a PATCH tells
/// "remove" from "keep".
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

impl Revisioned for git_installation::Model {
    fn revision(&self) -> i64 {
        self.revision
    }
}

impl RevisionBump for git_installation::ActiveModel {
    fn revision_bump(&mut self) {
        let next = *self.revision.as_ref() + 1;
        self.revision = Set(next);
        self.updated_at = Set(Utc::now());
    }
}

/// What a secret of installation `id` is sealed for.
pub(crate) fn secret_purpose(id: Uuid) -> String {
    format!("git-installation-secret:{id}")
}

/// What the commit-status token of installation `id` is sealed for.
pub(crate) fn status_token_purpose(id: Uuid) -> String {
    format!("git-installation-status-token:{id}")
}

/// Checks a forge's API address as a project's outbound calls are checked
/// ([`outbound_addresses::url_check`]), and that it has no query. Returns it without a
/// trailing `/`.
fn api_url_check(allowed: &[IpNet], text: &str) -> AppResult<String> {
    let url = outbound_addresses::url_check(allowed, "commit_statuses.api_url", text, 500)?;
    if url.query().is_some() {
        return Err(AppError::invalid(
            "`commit_statuses.api_url` must not have a query",
        ));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

fn secret_generate() -> String {
    opaque_token_generate("bhwh_")
}

/// Whether `repository` names a GitHub repository (`owner/name`).
pub(crate) fn repository_valid(repository: &str) -> bool {
    static PATTERN: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(REPOSITORY_PATTERN).expect("the pattern compiles"));
    PATTERN.is_match(repository)
}

/// Whether `branch` is a branch name a binding may hold.
pub(crate) fn branch_valid(branch: &str) -> bool {
    static PATTERN: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(BRANCH_PATTERN).expect("the pattern compiles"));
    branch.len() <= BRANCH_MAX && PATTERN.is_match(branch)
}

/// Checks `bindings` (each repository and branch well formed, each service one of the
/// project's, none twice) and returns them as stored.
async fn bindings_check(
    db: &impl ConnectionTrait,
    project_id: ProjectId,
    bindings: Vec<PushBinding>,
) -> AppResult<serde_json::Value> {
    if bindings.len() > BINDINGS_MAX {
        return Err(AppError::invalid(format!(
            "an installation holds at most {BINDINGS_MAX} bindings"
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, binding) in bindings.iter().enumerate() {
        if !repository_valid(&binding.repository) {
            return Err(AppError::invalid(format!(
                "`bindings[{i}].repository` must be `owner/name` as on GitHub"
            )));
        }
        if !branch_valid(&binding.branch) {
            return Err(AppError::invalid(format!(
                "`bindings[{i}].branch` must be a branch name without `refs/heads/`: parts of letters, digits and `_+@-` separated by `/`, with single dots inside a part"
            )));
        }
        if !seen.insert((
            binding.repository.to_ascii_lowercase(),
            binding.branch.clone(),
            binding.service_id,
        )) {
            return Err(AppError::invalid(format!(
                "`bindings[{i}]` repeats an earlier binding"
            )));
        }
    }
    let services: Vec<ServiceId> = bindings.iter().map(|b| ServiceId(b.service_id)).collect();
    let found: std::collections::HashSet<ServiceId> = service::Entity::find()
        .filter(service::Column::ProjectId.eq(project_id))
        .filter(service::Column::Id.is_in(services))
        .all(db)
        .await?
        .into_iter()
        .map(|s| s.id)
        .collect();
    if let Some((i, _)) = bindings
        .iter()
        .enumerate()
        .find(|(_, b)| !found.contains(&ServiceId(b.service_id)))
    {
        return Err(AppError::invalid(format!(
            "`bindings[{i}].service_id` is not a service of this project"
        )));
    }
    serde_json::to_value(&bindings).map_err(AppError::internal)
}

fn installation_audit(action: &'static str, m: &git_installation::Model) -> AuditEntry {
    AuditEntry {
        action,
        resource_type: "git_installation",
        resource_id: m.id.to_string(),
        project_id: Some(m.project_id),
        details: serde_json::json!({
            "forge": m.forge,
            "bindings": m.bindings,
            "status_api_url": m.status_api_url,
        }),
    }
}

impl App {
    /// An installation as shown: never its secret or token; how long its forge holds this
    /// server's calls back.
    pub fn git_installation_present(
        &self,
        m: git_installation::Model,
    ) -> AppResult<GitInstallationView> {
        Ok(GitInstallationView {
            id: m.id,
            project_id: m.project_id.into(),
            forge: Forge::Github,
            bindings: serde_json::from_value(m.bindings).map_err(AppError::internal)?,
            hook_path: format!("{HOOK_PATH}?installation={}", m.id),
            previous_secret_until: m.previous_secret_until.filter(|until| *until > Utc::now()),
            commit_statuses: m.status_api_url.map(|api_url| CommitStatusesView {
                api_url,
                held_for_secs: self
                    .forge
                    .held_for(m.id)
                    .map(|held| held.as_secs_f64().ceil() as u64),
            }),
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }

    /// The checked API address and the sealed token of commit statuses.
    fn commit_statuses_seal(
        &self,
        id: Uuid,
        input: CommitStatusesInput,
    ) -> AppResult<(String, String)> {
        let url = api_url_check(&self.settings.webhook_allowed_networks, &input.api_url)?;
        if input.token.is_empty()
            || input.token.len() > 500
            || !input.token.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(AppError::invalid(
                "`commit_statuses.token` must be 1 to 500 visible ASCII characters",
            ));
        }
        Ok((
            url,
            self.secrets.seal(&status_token_purpose(id), &input.token),
        ))
    }

    pub async fn git_installation_list(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        params: PageParams,
    ) -> AppResult<Page<git_installation::Model>> {
        self.scoped_list::<git_installation::Entity>(principal, project_id, params)
            .await
    }

    pub async fn git_installation_view(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        id: Uuid,
    ) -> AppResult<git_installation::Model> {
        self.scoped_view::<git_installation::Entity>(principal, project_id, id)
            .await
    }

    /// Creates an installation with a new secret (returned once).
    pub async fn git_installation_create(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        create: GitInstallationCreate,
    ) -> AppResult<(git_installation::Model, String)> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Admin, Scope::Write)
            .await?;
        write
            .room_check(&self.settings.limits, Limit::GitInstallationsPerProject)
            .await?;
        let bindings = bindings_check(&write.txn, project_id, create.bindings).await?;
        let id = Uuid::now_v7();
        let statuses = create
            .commit_statuses
            .map(|input| self.commit_statuses_seal(id, input))
            .transpose()?;
        let secret = secret_generate();
        let now = Utc::now();
        let created = git_installation::ActiveModel {
            id: Set(id),
            project_id: Set(project_id),
            forge: Set("github".into()),
            secret: Set(self.secrets.seal(&secret_purpose(id), &secret)),
            previous_secret: Set(None),
            previous_secret_until: Set(None),
            bindings: Set(bindings),
            status_api_url: Set(statuses.as_ref().map(|(url, _)| url.clone())),
            status_token: Set(statuses.map(|(_, token)| token)),
            created_by: Set(Some(ctx.principal.user_id())),
            revision: Set(1),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&write.txn)
        .await?;
        write
            .commit(installation_audit("git_installation.create", &created))
            .await?;
        Ok((created, secret))
    }

    /// Changes the bindings or the commit statuses of an installation.
    pub async fn git_installation_update(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        id: Uuid,
        if_match: Option<&str>,
        update: GitInstallationUpdate,
    ) -> AppResult<git_installation::Model> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Admin, Scope::Write)
            .await?;
        let found = write.precondition(
            scoped_find::<git_installation::Entity>(&write.txn, project_id, id).await?,
            if_match,
        )?;
        let mut active = found.clone().into_active_model();
        if let Some(bindings) = update.bindings {
            active.bindings = Set(bindings_check(&write.txn, project_id, bindings).await?);
        }
        if let Some(statuses) = update.commit_statuses {
            let statuses = statuses
                .map(|input| self.commit_statuses_seal(found.id, input))
                .transpose()?;
            active.status_api_url = Set(statuses.as_ref().map(|(url, _)| url.clone()));
            active.status_token = Set(statuses.map(|(_, token)| token));
        }
        let saved = write.save(active).await?;
        write
            .commit(installation_audit("git_installation.update", &saved))
            .await?;
        Ok(saved)
    }

    /// Gives an installation a new secret (returned once); the one before stays accepted for
    /// [`SECRET_OVERLAP`].
    pub async fn git_installation_secret_rotate(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        id: Uuid,
    ) -> AppResult<(git_installation::Model, String)> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Admin, Scope::Write)
            .await?;
        let found = scoped_find::<git_installation::Entity>(&write.txn, project_id, id).await?;
        let secret = secret_generate();
        let mut active = found.clone().into_active_model();
        active.previous_secret = Set(Some(found.secret));
        active.previous_secret_until = Set(Some(Utc::now() + SECRET_OVERLAP));
        active.secret = Set(self.secrets.seal(&secret_purpose(id), &secret));
        let saved = write.save(active).await?;
        write
            .commit(installation_audit("git_installation.secret_rotate", &saved))
            .await?;
        Ok((saved, secret))
    }

    /// Deletes an installation and its deliveries (the deployments made from them stay).
    pub async fn git_installation_delete(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        id: Uuid,
        if_match: Option<&str>,
    ) -> AppResult<()> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Admin, Scope::Write)
            .await?;
        let found = write.precondition(
            scoped_find::<git_installation::Entity>(&write.txn, project_id, id).await?,
            if_match,
        )?;
        git_installation::Entity::delete_by_id(found.id)
            .exec(&write.txn)
            .await?;
        write
            .commit(installation_audit("git_installation.delete", &found))
            .await
    }

    /// The secrets a delivery to `installation` may be signed with: the current one, and the
    /// one before while it is still accepted.
    pub(crate) fn git_installation_secrets(
        &self,
        installation: &git_installation::Model,
    ) -> AppResult<Vec<String>> {
        let purpose = secret_purpose(installation.id);
        let open = |sealed: &str| {
            self.secrets
                .open_value(&purpose, sealed)
                .map_err(|err| AppError::internal(format!("{err:#}")))
        };
        let mut secrets = vec![open(&installation.secret)?];
        if let (Some(previous), Some(until)) = (
            &installation.previous_secret,
            installation.previous_secret_until,
        ) && until > Utc::now()
        {
            secrets.push(open(previous)?);
        }
        Ok(secrets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_and_branches_are_checked() {
        for ok in ["acme/storefront", "a-b/c.d_e-f", "x/y"] {
            assert!(repository_valid(ok), "{ok}");
        }
        for bad in ["acme", "acme/", "/x", "a/b/c", "ac me/x", "a_b/x"] {
            assert!(!repository_valid(bad), "{bad}");
        }
        for ok in ["main", "release/1.2", "feature/x-y_z+w@v", "v1.0.0"] {
            assert!(branch_valid(ok), "{ok}");
        }
        for bad in [
            "",
            "refs heads",
            "a..b",
            ".hidden",
            "x/",
            "/x",
            "a//b",
            "end.",
            "a~1",
            "what?",
        ] {
            assert!(!branch_valid(bad), "{bad}");
        }
        assert!(!branch_valid(&"b".repeat(256)));
    }

    #[test]
    fn forge_addresses_are_public_https_or_allowed() {
        let none: &[IpNet] = &[];
        let loopback: &[IpNet] = &["127.0.0.0/8".parse().unwrap()];
        assert_eq!(
            api_url_check(none, "https://api.github.com/").unwrap(),
            "https://api.github.com"
        );
        assert_eq!(
            api_url_check(none, "https://ghe.example.com/api/v3").unwrap(),
            "https://ghe.example.com/api/v3"
        );
        assert!(api_url_check(loopback, "http://127.0.0.1:8080").is_ok());
        for bad in [
            "http://127.0.0.1:8080",
            "https://127.0.0.1:8080",
            "https://169.254.169.254/latest",
            "http://api.github.com",
            "https://10.0.0.1",
            "ftp://x.example.com",
            "https://user:pw@api.github.com",
            "https://api.github.com?x=1",
            "not a url",
        ] {
            assert!(api_url_check(none, bad).is_err(), "{bad}");
        }
    }
}
