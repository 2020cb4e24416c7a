//! Services: what runs in an environment (an artifact or a command, its port, replica count,
//! regions and environment variables). Secret variable values are write-only: they are stored,
//! later given to the deploy pipeline, and never returned by the API.
//!
//! Deployments, placement and routing (later issues) reference `services.id` and read the
//! desired state from here.

use std::collections::BTreeSet;

use bulkhead_common::git_source::repository_url_check;
use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

pub mod revision;
pub mod spec;

use crate::app::App;
use crate::app::projects::scoped::scoped_find;
use crate::app::shared::audit::AuditEntry;
use crate::app::shared::limits::Limit;
use crate::app::shared::pagination::{PageParams, ViewPage};
use crate::app::shared::validate::slug_validate;
use crate::authz::{OpContext, Principal, ProjectRole, Scope};
use crate::entity::environment;
use crate::entity::{instance, service};
use crate::error::{AppError, AppResult, ErrorCode, unique_violation_as};
use crate::ids::EnvironmentId;
use crate::ids::{ProjectId, ServiceId};
use crate::secrets::SecretBox;
use spec::json_or_default;
use spec::{
    HealthCheckSpec, PlacementPolicy, ServiceSize, ServiceSizes, ServiceSource, ServiceSpec,
};

pub const MAX_REPLICAS: u32 = 100;
pub const MAX_VARIABLES: usize = 200;
pub const MAX_VARIABLE_VALUE_BYTES: usize = 32 * 1024;

/// An environment variable as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredVariable {
    name: String,
    value: String,
    secret: bool,
}

/// An environment variable to set.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VariableInput {
    /// `[A-Z_][A-Z0-9_]*`, unique in the service.
    pub name: String,
    /// The value. On update, leaving it out keeps the stored value of an existing variable
    /// (so that a dashboard can resubmit secrets it cannot read).
    pub value: Option<String>,
    /// A secret's value is never returned. Left out: the stored flag of an existing variable
    /// (`false` for a new one). A secret becomes plain only with a new `value`.
    pub secret: Option<bool>,
}

/// An environment variable as shown: secret values are withheld.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct VariableView {
    pub name: String,
    pub secret: bool,
    /// The value; absent for secrets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ServiceView {
    pub id: Uuid,
    pub project_id: Uuid,
    pub environment_id: Uuid,
    pub name: String,
    pub source: ServiceSource,
    /// The port the workload listens on.
    pub port: u16,
    pub replicas: u32,
    /// Regions to run in, in order of preference.
    pub regions: Vec<String>,
    pub variables: Vec<VariableView>,
    /// Where its instances may run.
    pub placement: PlacementPolicy,
    /// How the control plane checks its instances.
    pub health_check: HealthCheckSpec,
    /// What each of its instances is given.
    pub size: ServiceSize,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Variables as shown: secret values withheld.
pub(crate) fn variables_view(stored: &serde_json::Value) -> AppResult<Vec<VariableView>> {
    let variables: Vec<StoredVariable> =
        serde_json::from_value(stored.clone()).map_err(AppError::internal)?;
    Ok(variables
        .into_iter()
        .map(|v| VariableView {
            value: (!v.secret).then_some(v.value),
            name: v.name,
            secret: v.secret,
        })
        .collect())
}

/// A service's spec as shown (secret values withheld).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ServiceSpecView {
    pub source: ServiceSource,
    pub port: u16,
    pub replicas: u32,
    pub regions: Vec<String>,
    pub variables: Vec<VariableView>,
    pub placement: PlacementPolicy,
    pub health_check: HealthCheckSpec,
    /// What each instance is given; none for a deployment made before sizes (its instances
    /// get the operator's default size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<ServiceSize>,
}

impl TryFrom<ServiceSpec> for ServiceSpecView {
    type Error = AppError;

    fn try_from(spec: ServiceSpec) -> AppResult<Self> {
        Ok(Self {
            variables: variables_view(&spec.variables)?,
            source: spec.source,
            port: spec.port,
            replicas: spec.replicas,
            regions: spec.regions,
            placement: spec.placement,
            health_check: spec.health_check,
            size: spec.size,
        })
    }
}

impl TryFrom<service::Model> for ServiceView {
    type Error = AppError;

    fn try_from(m: service::Model) -> AppResult<Self> {
        Ok(Self {
            placement: json_or_default(&m.placement)?,
            health_check: json_or_default(&m.health_check)?,
            // Every service has one since the migration that added sizes.
            size: match m.size {
                Some(size) => serde_json::from_value(size).map_err(AppError::internal)?,
                None => ServiceSizes::default().default,
            },
            id: m.id.into(),
            project_id: m.project_id.into(),
            environment_id: m.environment_id.into(),
            name: m.name,
            source: serde_json::from_value(m.source).map_err(AppError::internal)?,
            port: u16::try_from(m.port).map_err(AppError::internal)?,
            replicas: u32::try_from(m.replicas).map_err(AppError::internal)?,
            regions: serde_json::from_value(m.regions).map_err(AppError::internal)?,
            variables: variables_view(&m.variables)?,
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }
}

fn default_replicas() -> u32 {
    1
}

/// A new service.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceCreate {
    pub environment_id: Uuid,
    /// Unique in the environment: lowercase letters, digits and `-`.
    #[schema(
        min_length = 1,
        max_length = 63,
        pattern = "^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"
    )]
    pub name: String,
    pub source: ServiceSource,
    #[schema(minimum = 1, maximum = 65535)]
    pub port: u16,
    /// 0 to 100 (default 1).
    #[serde(default = "default_replicas")]
    pub replicas: u32,
    #[serde(default)]
    pub regions: Vec<String>,
    #[serde(default)]
    pub variables: Vec<VariableInput>,
    /// Where its instances may run; default: spread over every provider.
    pub placement: Option<PlacementPolicy>,
    /// How the control plane checks its instances; default: `GET /` every 2 s.
    pub health_check: Option<HealthCheckSpec>,
    /// What each instance is given; default: the operator's default size (500m CPU, 512 MiB
    /// unless set). Within the operator's maximum (`GET /v1/projects/{id}/limits` says both).
    pub size: Option<ServiceSize>,
}

/// Changes to a service; absent fields are unchanged. `variables`, when present, replaces the
/// whole set.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceUpdate {
    #[schema(
        min_length = 1,
        max_length = 63,
        pattern = "^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"
    )]
    pub name: Option<String>,
    pub source: Option<ServiceSource>,
    #[schema(minimum = 1, maximum = 65535)]
    pub port: Option<u16>,
    pub replicas: Option<u32>,
    pub regions: Option<Vec<String>>,
    pub variables: Option<Vec<VariableInput>>,
    pub placement: Option<PlacementPolicy>,
    pub health_check: Option<HealthCheckSpec>,
    /// A new size: deploy the service for its instances to get it.
    pub size: Option<ServiceSize>,
}

fn placement_json(policy: &PlacementPolicy) -> AppResult<serde_json::Value> {
    policy.validate()?;
    serde_json::to_value(policy).map_err(AppError::internal)
}

fn health_check_json(check: &HealthCheckSpec) -> AppResult<serde_json::Value> {
    check.validate()?;
    serde_json::to_value(check).map_err(AppError::internal)
}

/// Checks a list of arguments (`source.command`, `source.build`).
fn arguments_validate(field: &str, arguments: &[String]) -> AppResult<()> {
    if arguments.is_empty() || arguments.len() > 100 {
        return Err(AppError::invalid(format!(
            "`{field}` must have 1 to 100 arguments"
        )));
    }
    if arguments
        .iter()
        .any(|arg| arg.len() > 4096 || arg.contains('\0'))
    {
        return Err(AppError::invalid(format!(
            "`{field}` arguments must be at most 4096 bytes, without NUL"
        )));
    }
    Ok(())
}

/// Checks a repository URL (the rule the host agent checks again), and that a token would
/// go over `https` only.
fn repository_validate(url: &str, token: bool) -> AppResult<()> {
    repository_url_check(url).map_err(|why| {
        AppError::invalid(format!(
            "`source.repository` {}",
            why.replace(
                "give a token instead",
                "put a token in a secret variable and name it in `source.token_variable`"
            )
        ))
    })?;
    if token && !url.starts_with("https://") {
        return Err(AppError::invalid(
            "`source.repository` must be `https://` to be given a token",
        ));
    }
    Ok(())
}

fn source_validate(source: ServiceSource) -> AppResult<serde_json::Value> {
    if let ServiceSource::Git {
        repository,
        build,
        command,
        token_variable,
    } = &source
    {
        repository_validate(repository, token_variable.is_some())?;
        arguments_validate("source.command", command)?;
        if let Some(build) = build {
            arguments_validate("source.build", build)?;
        }
        if let Some(name) = token_variable
            && !variable_name_valid(name)
        {
            return Err(AppError::invalid(
                "`source.token_variable` must match [A-Z_][A-Z0-9_]*",
            ));
        }
    }
    match &source {
        ServiceSource::Artifact { image }
            if image.trim().is_empty() || image.chars().count() > 500 =>
        {
            return Err(AppError::invalid(
                "`source.image` must be 1 to 500 characters",
            ));
        }
        ServiceSource::Command { command } if command.is_empty() || command.len() > 100 => {
            return Err(AppError::invalid(
                "`source.command` must have 1 to 100 arguments",
            ));
        }
        ServiceSource::Command { command }
            if command
                .iter()
                .any(|arg| arg.len() > 4096 || arg.contains('\0')) =>
        {
            return Err(AppError::invalid(
                "`source.command` arguments must be at most 4096 bytes, without NUL",
            ));
        }
        ServiceSource::Artifact { image } => {
            revision::image_template_validate(image)?;
        }
        _ => {}
    }
    serde_json::to_value(source).map_err(AppError::internal)
}

fn port_validate(port: u16) -> AppResult<i32> {
    if port == 0 {
        return Err(AppError::invalid("`port` must be 1 to 65535"));
    }
    Ok(i32::from(port))
}

fn replicas_validate(replicas: u32) -> AppResult<i32> {
    if replicas > MAX_REPLICAS {
        return Err(AppError::invalid(format!(
            "`replicas` must be 0 to {MAX_REPLICAS}"
        )));
    }
    Ok(replicas as i32)
}

fn regions_validate(regions: Vec<String>) -> AppResult<serde_json::Value> {
    if regions.len() > 20 {
        return Err(AppError::invalid("`regions` may list at most 20 regions"));
    }
    let mut seen = BTreeSet::new();
    for region in &regions {
        slug_validate("regions[]", region)?;
        if !seen.insert(region) {
            return Err(AppError::invalid(format!(
                "region `{region}` is listed twice"
            )));
        }
    }
    serde_json::to_value(regions).map_err(AppError::internal)
}

/// `[A-Z_][A-Z0-9_]*`, up to 128 characters.
fn variable_name_valid(name: &str) -> bool {
    name.len() <= 128
        && name.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// Checks that `spec`'s `source.token_variable`, if any, names one of its secret variables:
/// a token kept in plain text would be shown by the API.
pub(crate) fn token_variable_check(spec: &ServiceSpec) -> AppResult<()> {
    let Some(name) = spec.token_variable() else {
        return Ok(());
    };
    let variables: Vec<StoredVariable> =
        serde_json::from_value(spec.variables.clone()).map_err(AppError::internal)?;
    match variables.iter().find(|v| v.name == name) {
        Some(v) if v.secret => Ok(()),
        Some(_) => Err(AppError::invalid(format!(
            "`source.token_variable` names `{name}`, which is not secret: make it secret"
        ))),
        None => Err(AppError::invalid(format!(
            "`source.token_variable` names `{name}`, which is not a variable of the service"
        ))),
    }
}

fn variable_purpose(service_id: ServiceId, name: &str) -> String {
    format!("service-variable:{service_id}:{name}")
}

/// Validates `inputs` and merges them with the `existing` variables of service `service_id`
/// (whose values are kept where an input leaves its value out). Secret values are stored
/// sealed.
fn variables_validate(
    inputs: Vec<VariableInput>,
    existing: &[StoredVariable],
    secrets: &SecretBox,
    service_id: ServiceId,
) -> AppResult<serde_json::Value> {
    if inputs.len() > MAX_VARIABLES {
        return Err(AppError::invalid(format!(
            "a service may have at most {MAX_VARIABLES} variables"
        )));
    }
    let mut seen = BTreeSet::new();
    let mut stored = Vec::with_capacity(inputs.len());
    for input in inputs {
        if !variable_name_valid(&input.name) {
            return Err(AppError::invalid(format!(
                "variable name `{}` must match [A-Z_][A-Z0-9_]*",
                input.name
            )));
        }
        if !seen.insert(input.name.clone()) {
            return Err(AppError::invalid(format!(
                "variable `{}` is listed twice",
                input.name
            )));
        }
        let stored_before = existing.iter().find(|v| v.name == input.name);
        let secret = input
            .secret
            .unwrap_or(stored_before.is_some_and(|v| v.secret));
        let kept = input.value.is_none();
        let value = match (input.value, stored_before) {
            (Some(value), _) => value,
            // Keeping a secret's value while making it plain would reveal it.
            (None, Some(before)) if before.secret && !secret => {
                return Err(AppError::invalid(format!(
                    "variable `{}` is secret: making it plain needs a new `value`",
                    input.name
                )));
            }
            (None, Some(before)) => before.value.clone(),
            (None, None) => {
                return Err(AppError::invalid(format!(
                    "variable `{}` needs a value",
                    input.name
                )));
            }
        };
        // A kept secret value is stored sealed already (a kept plain one, made secret now, is not).
        let already_sealed = kept && stored_before.is_some_and(|v| v.secret);
        if !already_sealed && (value.len() > MAX_VARIABLE_VALUE_BYTES || value.contains('\0')) {
            // The message never repeats the value: it may be a secret.
            return Err(AppError::invalid(format!(
                "the value of `{}` must be at most {MAX_VARIABLE_VALUE_BYTES} bytes, without NUL",
                input.name
            )));
        }
        let value = if secret && !already_sealed {
            secrets.seal(&variable_purpose(service_id, &input.name), &value)
        } else {
            value
        };
        stored.push(StoredVariable {
            name: input.name,
            value,
            secret,
        });
    }
    serde_json::to_value(stored).map_err(AppError::internal)
}

impl App {
    /// The environment a service's workload gets: every variable, secrets opened. For the
    /// deploy pipeline only; never for an API response, a log or an event.
    pub fn service_environment(
        &self,
        service: &service::Model,
    ) -> AppResult<std::collections::BTreeMap<String, String>> {
        self.variables_open(service.id, &service.variables)
    }

    /// Variables of service `service_id` as stored (in a service or a deployment's spec),
    /// secrets opened: a workload's environment.
    pub fn variables_open(
        &self,
        service_id: ServiceId,
        stored: &serde_json::Value,
    ) -> AppResult<std::collections::BTreeMap<String, String>> {
        let variables: Vec<StoredVariable> =
            serde_json::from_value(stored.clone()).map_err(AppError::internal)?;
        variables
            .into_iter()
            .map(|v| {
                let value = if v.secret {
                    self.secrets
                        .open_value(&variable_purpose(service_id, &v.name), &v.value)
                        .map_err(|err| AppError::internal(format!("{err:#}")))?
                } else {
                    v.value
                };
                Ok((v.name, value))
            })
            .collect()
    }

    /// Seals the secret variables that an earlier version stored in plaintext; returns how
    /// many values it sealed.
    pub(crate) async fn service_secrets_seal_plaintext(&self) -> AppResult<u64> {
        let mut sealed = 0;
        for service in service::Entity::find().all(&self.db).await? {
            let mut variables: Vec<StoredVariable> =
                serde_json::from_value(service.variables.clone()).map_err(AppError::internal)?;
            let mut changed = false;
            for v in variables
                .iter_mut()
                .filter(|v| v.secret && !SecretBox::is_sealed(&v.value))
            {
                v.value = self
                    .secrets
                    .seal(&variable_purpose(service.id, &v.name), &v.value);
                changed = true;
                sealed += 1;
            }
            if changed {
                service::Entity::update_many()
                    .col_expr(
                        service::Column::Variables,
                        sea_orm::sea_query::Expr::value(
                            serde_json::to_value(&variables).map_err(AppError::internal)?,
                        ),
                    )
                    .filter(service::Column::Id.eq(service.id))
                    .filter(service::Column::Revision.eq(service.revision))
                    .exec(&self.db)
                    .await?;
            }
        }
        Ok(sealed)
    }

    pub async fn service_list(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        params: PageParams,
    ) -> AppResult<ViewPage> {
        self.scoped_list_views::<service::Entity, ServiceView>(principal, project_id, params)
            .await
    }

    pub async fn service_view(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        id: ServiceId,
    ) -> AppResult<service::Model> {
        self.scoped_view::<service::Entity>(principal, project_id, id)
            .await
    }

    pub async fn service_create(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        create: ServiceCreate,
    ) -> AppResult<service::Model> {
        let name = slug_validate("name", &create.name)?;
        let source = source_validate(create.source)?;
        let port = port_validate(create.port)?;
        let replicas = replicas_validate(create.replicas)?;
        let regions = regions_validate(create.regions)?;
        let id = ServiceId::new();
        let environment_id = EnvironmentId(create.environment_id);
        let variables = variables_validate(create.variables, &[], &self.secrets, id)?;
        let sizes = &self.settings.service_sizes;
        let size = sizes.check(create.size.unwrap_or(sizes.default))?;
        let write = self
            .project_write(ctx, project_id, ProjectRole::Member, Scope::Write)
            .await?;
        write
            .room_check(&self.settings.limits, Limit::ServicesPerProject)
            .await?;
        scoped_find::<environment::Entity>(&write.txn, project_id, environment_id)
            .await
            .map_err(|_| {
                AppError::invalid("`environment_id` is not an environment of this project")
            })?;
        let now = Utc::now();
        let created = service::ActiveModel {
            id: Set(id),
            project_id: Set(project_id),
            environment_id: Set(environment_id),
            name: Set(name),
            source: Set(source),
            port: Set(port),
            replicas: Set(replicas),
            regions: Set(regions),
            variables: Set(variables),
            placement: Set(create.placement.as_ref().map(placement_json).transpose()?),
            health_check: Set(create
                .health_check
                .as_ref()
                .map(health_check_json)
                .transpose()?),
            size: Set(Some(
                serde_json::to_value(size).map_err(AppError::internal)?,
            )),
            revision: Set(1),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&write.txn)
        .await
        .map_err(name_taken)?;
        write
            .commit(service_audit("service.create", &created))
            .await?;
        Ok(created)
    }

    pub async fn service_update(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        id: ServiceId,
        if_match: Option<&str>,
        update: ServiceUpdate,
    ) -> AppResult<service::Model> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Member, Scope::Write)
            .await?;
        let current = write.precondition(
            scoped_find::<service::Entity>(&write.txn, project_id, id).await?,
            if_match,
        )?;
        let mut active: service::ActiveModel = current.clone().into();
        if let Some(name) = update.name {
            active.name = Set(slug_validate("name", &name)?);
        }
        if let Some(source) = update.source {
            active.source = Set(source_validate(source)?);
        }
        if let Some(port) = update.port {
            active.port = Set(port_validate(port)?);
        }
        if let Some(replicas) = update.replicas {
            active.replicas = Set(replicas_validate(replicas)?);
        }
        if let Some(regions) = update.regions {
            active.regions = Set(regions_validate(regions)?);
        }
        if let Some(placement) = &update.placement {
            active.placement = Set(Some(placement_json(placement)?));
        }
        if let Some(check) = &update.health_check {
            active.health_check = Set(Some(health_check_json(check)?));
        }
        if let Some(size) = update.size {
            let size = self.settings.service_sizes.check(size)?;
            active.size = Set(Some(
                serde_json::to_value(size).map_err(AppError::internal)?,
            ));
        }
        if let Some(variables) = update.variables {
            let existing: Vec<StoredVariable> =
                serde_json::from_value(current.variables.clone()).map_err(AppError::internal)?;
            active.variables = Set(variables_validate(variables, &existing, &self.secrets, id)?);
        }
        let updated = write.save(active).await.map_err(name_taken)?;
        write
            .commit(service_audit("service.update", &updated))
            .await?;
        Ok(updated)
    }

    /// Deletes a service and the domains bound to it.
    pub async fn service_delete(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        id: ServiceId,
        if_match: Option<&str>,
    ) -> AppResult<()> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Member, Scope::Write)
            .await?;
        let current = write.precondition(
            scoped_find::<service::Entity>(&write.txn, project_id, id).await?,
            if_match,
        )?;
        instances_none_live(&write.txn, instance::Column::ServiceId.eq(id)).await?;
        service::Entity::delete_by_id(id).exec(&write.txn).await?;
        write
            .commit(service_audit("service.delete", &current))
            .await?;
        // Its domains went with it.
        self.changes.routes_changed([id]);
        Ok(())
    }
}

/// Refuses (409) while instances matching `filter` still run somewhere: deleting their service
/// or project would leave them running at their providers with nothing to remove them.
pub(crate) async fn instances_none_live(
    db: &impl sea_orm::ConnectionTrait,
    filter: impl sea_orm::sea_query::IntoCondition,
) -> AppResult<()> {
    use sea_orm::PaginatorTrait;
    let live = instance::Entity::find()
        .filter(filter)
        .filter(instance::Column::State.ne("removed"))
        .count(db)
        .await?;
    if live > 0 {
        return Err(AppError::new(
            ErrorCode::InstancesRunning,
            format!(
                "{live} instance(s) still run: deploy the service with 0 replicas first, and wait for them to be removed"
            ),
        ));
    }
    Ok(())
}

fn name_taken(err: sea_orm::DbErr) -> AppError {
    unique_violation_as(
        ErrorCode::NameTaken,
        "the environment has a service with this name",
    )(err)
}

/// Audit details name the variables that are set, never their values.
fn service_audit(action: &'static str, service: &service::Model) -> AuditEntry {
    let variable_names: Vec<String> =
        serde_json::from_value::<Vec<StoredVariable>>(service.variables.clone())
            .map(|vars| vars.into_iter().map(|v| v.name).collect())
            .unwrap_or_default();
    AuditEntry {
        action,
        resource_type: "service",
        resource_id: service.id.to_string(),
        project_id: Some(service.project_id),
        details: serde_json::json!({
            "name": service.name,
            "port": service.port,
            "replicas": service.replicas,
            "size": service.size,
            "variables": variable_names,
        }),
    }
}
