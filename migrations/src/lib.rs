//! Schema migrations of the Bulkhead control plane.
//!
//! One migration per file, applied in the order of [`Migrator::migrations`]. Every migration is
//! reversible; a `down` never deletes rows of a table that an earlier migration created, so
//! user-made records (users, terms-of-service acceptances, audit events) survive every later
//! migration and every rollback of one. The integration tests check exactly that on SQLite and
//! PostgreSQL.

pub use sea_orm_migration::prelude::*;

/// The condition of the partial indexes of the deploy queue (`idx_instances_due`,
/// `idx_instances_project_due`): a query uses them only if its own condition says the same,
/// in so many words.
pub const INSTANCES_DUE: &str = "state IN ('pending', 'provisioning', 'removing', 'failed')";

mod m20261130_000001_identity;
mod m20261130_000002_terms_and_audit;
mod m20261130_000003_projects;
mod m20261130_000004_services_and_domains;
mod m20261130_000005_idempotency;
mod m20261130_000006_user_last_login;
mod m20261130_000007_plugin_registry;
mod m20261130_000008_provider_health;
mod m20261130_000009_invitations;
mod m20261130_000010_credential_lineage;
mod m20261130_000011_data_keys;
mod m20261130_000012_deployments;
mod m20261130_000013_plugin_contract_0_3;
mod m20261130_000014_routing;
mod m20261201_000015_replicas_and_leases;
mod m20261202_000016_token_sessions;
mod m20261202_000017_domain_verification;
mod m20261202_000018_sign_in_addresses;
mod m20261202_000019_instance_health_index;
mod m20261203_000020_routes_by_domain;
mod m20261203_000021_deploy_queue;
mod m20261203_000022_example_provider_off;
mod m20261203_000023_services_by_project;
mod m20261205_000024_git_intake;
mod m20261205_000025_outside_sign_in;
mod m20261205_000026_sign_in_provider_holds;
mod m20261207_000027_edge_certificates;
mod m20261207_000028_service_sizes;
mod m20261207_000029_idempotency_took_effect;

/// The ordered list of Bulkhead's migrations.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261130_000001_identity::Migration),
            Box::new(m20261130_000002_terms_and_audit::Migration),
            Box::new(m20261130_000003_projects::Migration),
            Box::new(m20261130_000004_services_and_domains::Migration),
            Box::new(m20261130_000005_idempotency::Migration),
            Box::new(m20261130_000006_user_last_login::Migration),
            Box::new(m20261130_000007_plugin_registry::Migration),
            Box::new(m20261130_000008_provider_health::Migration),
            Box::new(m20261130_000009_invitations::Migration),
            Box::new(m20261130_000010_credential_lineage::Migration),
            Box::new(m20261130_000011_data_keys::Migration),
            Box::new(m20261130_000012_deployments::Migration),
            Box::new(m20261130_000013_plugin_contract_0_3::Migration),
            Box::new(m20261130_000014_routing::Migration),
            Box::new(m20261201_000015_replicas_and_leases::Migration),
            Box::new(m20261202_000016_token_sessions::Migration),
            Box::new(m20261202_000017_domain_verification::Migration),
            Box::new(m20261202_000018_sign_in_addresses::Migration),
            Box::new(m20261202_000019_instance_health_index::Migration),
            Box::new(m20261203_000020_routes_by_domain::Migration),
            Box::new(m20261203_000021_deploy_queue::Migration),
            Box::new(m20261203_000022_example_provider_off::Migration),
            Box::new(m20261203_000023_services_by_project::Migration),
            Box::new(m20261205_000024_git_intake::Migration),
            Box::new(m20261205_000025_outside_sign_in::Migration),
            Box::new(m20261205_000026_sign_in_provider_holds::Migration),
            Box::new(m20261207_000027_edge_certificates::Migration),
            Box::new(m20261207_000028_service_sizes::Migration),
            Box::new(m20261207_000029_idempotency_took_effect::Migration),
        ]
    }
}

/// Drops the given tables, children first.
pub(crate) async fn drop_tables(
    manager: &SchemaManager<'_>,
    tables: &[&'static str],
) -> Result<(), DbErr> {
    for table in tables {
        manager
            .drop_table(Table::drop().table(*table).to_owned())
            .await?;
    }
    Ok(())
}

/// A foreign key from `table.column` to `parent.id` that deletes the row with its parent.
pub(crate) fn cascade_fk(
    table: &'static str,
    column: &'static str,
    parent: &'static str,
) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .name(format!("fk_{table}_{column}"))
        .from(table, column)
        .to(parent, "id")
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned()
}
