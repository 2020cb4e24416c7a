//! Routes stored by domain: the table `routes` holds the current route of each domain (the
//! revision that set it, and its JSON), and a revision keeps only its changes. A revision then
//! writes the routes it changed, where it used to copy the whole table into its row (and clear
//! the row before it). The latest revision's routes move to `routes`, so an upgrade serves the
//! same table at the same revision; `content_hash` goes too (a revision is made when its
//! changes are not empty). `idx_domains_service` finds the domains of the services whose
//! routes changed.
//!
//! Down puts the routes back into the latest revision's row.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::prelude::Uuid;
use sea_orm_migration::sea_orm::{ConnectionTrait, JsonValue};

#[derive(DeriveMigrationName)]
pub struct Migration;

const INDEX: &str = "idx_domains_service";
/// Rows a statement inserts at most (SQLite binds at most 32,766 values).
const ROWS_PER_INSERT: usize = 1000;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("routes")
                    .col(string_len("domain", 253).primary_key())
                    .col(uuid("service_id"))
                    .col(big_integer("revision"))
                    .col(text("route"))
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        let latest = db
            .query_one(
                &Query::select()
                    .columns(["revision", "routes"])
                    .from("routing_revisions")
                    .order_by("revision", Order::Desc)
                    .limit(1)
                    .to_owned(),
            )
            .await?;
        if let Some(latest) = latest
            && let Some(routes) = latest.try_get_by_index::<Option<String>>(1)?
        {
            let revision: i64 = latest.try_get_by_index(0)?;
            let routes: Vec<JsonValue> = serde_json::from_str(&routes)
                .map_err(|err| DbErr::Migration(format!("the latest routes: {err}")))?;
            for chunk in routes.chunks(ROWS_PER_INSERT) {
                let mut insert = Query::insert()
                    .into_table("routes")
                    .columns(["domain", "service_id", "revision", "route"])
                    .to_owned();
                for route in chunk {
                    let field = |name: &str| {
                        route[name].as_str().map(str::to_owned).ok_or_else(|| {
                            DbErr::Migration(format!("a stored route has no `{name}`"))
                        })
                    };
                    let service: Uuid = field("service_id")?
                        .parse()
                        .map_err(|err| DbErr::Migration(format!("a route's service: {err}")))?;
                    insert.values_panic([
                        field("domain")?.into(),
                        service.into(),
                        revision.into(),
                        route.to_string().into(),
                    ]);
                }
                db.execute(&insert).await?;
            }
        }
        for column in ["routes", "content_hash"] {
            manager
                .alter_table(
                    Table::alter()
                        .table("routing_revisions")
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_index(
                Index::create()
                    .name(INDEX)
                    .table("domains")
                    .col("service_id")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(Index::drop().name(INDEX).table("domains").to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("routing_revisions")
                    .add_column(string_len("content_hash", 64).default(""))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("routing_revisions")
                    .add_column(text_null("routes"))
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        let stored = db
            .query_all(
                &Query::select()
                    .column("route")
                    .from("routes")
                    .order_by("domain", Order::Asc)
                    .to_owned(),
            )
            .await?;
        let mut routes = Vec::with_capacity(stored.len());
        for row in stored {
            let route: String = row.try_get_by_index(0)?;
            routes.push(
                serde_json::from_str::<JsonValue>(&route)
                    .map_err(|err| DbErr::Migration(format!("a stored route: {err}")))?,
            );
        }
        // The old server made a revision when the routes' hash changed: an empty hash makes
        // it publish the same routes once more, which changes nothing for edges.
        db.execute(
            &Query::update()
                .table("routing_revisions")
                .value("routes", JsonValue::Array(routes).to_string())
                .and_where(
                    Expr::col("revision").in_subquery(
                        Query::select()
                            .expr(Func::max(Expr::col("revision")))
                            .from("routing_revisions")
                            .to_owned(),
                    ),
                )
                .to_owned(),
        )
        .await?;
        manager
            .drop_table(Table::drop().table("routes").to_owned())
            .await
    }
}
