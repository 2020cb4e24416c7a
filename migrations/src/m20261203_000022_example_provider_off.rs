//! The bundled `example` provider is a demo whose instances nothing serves. Servers no longer
//! bundle it, but a database from before keeps its provider enabled, and default placement
//! would put real replicas on it (deployments that never become healthy). This turns it off
//! where it is on; an operator who wants it turns it on again (`PATCH /v1/providers/example`).
//! Going down leaves it off: which databases had it on is not known then.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .exec_stmt(
                Query::update()
                    .table("providers")
                    .value("enabled", false)
                    .value("revision", Expr::col("revision").add(1))
                    .and_where(Expr::col("name").eq("example"))
                    .and_where(Expr::col("enabled").eq(true))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Ok(())
    }
}
