//! The queue of instances waiting for a provider operation (to provision, or to remove), read
//! and written so that a pass costs what it dispatches, not what is queued:
//!
//! - **Turns are fair between projects** ([`dispatch_order_next`]): an instance joins the
//!   queue right after the last waiting instance of its own project, and never before the head
//!   of the queue (start-time fair queuing, as network schedulers share a link). A project that
//!   queues a thousand deployments takes a thousand consecutive turns; another project's single
//!   deployment takes the turn at the head, so it waits for one of them, not for all.
//! - **A pass reads the head of the queue** ([`due_head`]), in turn, as far as it has room
//!   for, through the partial index `idx_instances_due` (migration 21), and skips the providers
//!   that must wait (rate limited, held) in the query itself, so that their instances do not
//!   fill the page. The queries state the index's condition word for word
//!   ([`bulkhead_migrations::INSTANCES_DUE`]), and on SQLite name the index: without
//!   statistics SQLite prefers `idx_instances_state` and sorts every queued instance.
//! - **Claims of a pass are one transaction** ([`claims_take`]).
//!
//! What this module must not do: decide what an instance needs (the reconciler and
//! [`crate::app::deploys::operations`] do), or call a provider.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, Func};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DbBackend, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, QueryTrait, Statement,
};

use crate::entity::instance;
use crate::entity::instance::InstanceState;
use crate::error::AppResult;
use crate::ids::ProjectId;
use bulkhead_migrations::INSTANCES_DUE;

/// The turn of the next instance of `project_id` to join the queue: after the project's last
/// waiting instance, and not before the head of the queue.
pub async fn dispatch_order_next(
    db: &impl ConnectionTrait,
    project_id: ProjectId,
) -> AppResult<i64> {
    let order = Expr::col(instance::Column::DispatchOrder);
    let head = order_bound(db, Func::min(order.clone()), None, "idx_instances_due").await?;
    let last = order_bound(
        db,
        Func::max(order),
        Some(project_id),
        "idx_instances_project_due",
    )
    .await?;
    Ok(match (head, last) {
        (Some(head), Some(last)) => head.max(last + 1),
        (Some(head), None) => head,
        // Nothing waits: any turn is the first.
        (None, _) => 0,
    })
}

/// The least or greatest turn among the waiting instances (of `project_id`, if given).
async fn order_bound(
    db: &impl ConnectionTrait,
    bound: sea_orm::sea_query::FunctionCall,
    project_id: Option<ProjectId>,
    index: &str,
) -> AppResult<Option<i64>> {
    let mut select = instance::Entity::find()
        .select_only()
        .expr(bound)
        .filter(Expr::cust(INSTANCES_DUE));
    if let Some(project_id) = project_id {
        select = select.filter(instance::Column::ProjectId.eq(project_id));
    }
    let statement = indexed_by(db.get_database_backend(), select, index);
    Ok(db
        .query_one_raw(statement)
        .await?
        .map(|row| row.try_get_by_index::<Option<i64>>(0))
        .transpose()?
        .flatten())
}

/// `select` as a statement for `backend`; on SQLite, told to read through `index`.
fn indexed_by<S: QueryTrait>(backend: DbBackend, query: S, index: &str) -> Statement {
    let mut statement = query.build(backend);
    if backend == DbBackend::Sqlite {
        let table = if statement.sql.starts_with("UPDATE") {
            r#"UPDATE "instances""#
        } else {
            r#"FROM "instances""#
        };
        statement.sql =
            statement
                .sql
                .replacen(table, &format!(r#"{table} INDEXED BY "{index}""#), 1);
    }
    statement
}

/// Makes the instances of `provider` that wait for room (`last_error` starting with
/// `waiting`) due now: an instance of that provider was removed. Through the state index, so
/// that it costs the provisioning instances, not every instance the provider ever had (on
/// SQLite, without statistics, the provider's index was chosen: 19 ms at 100,000 removed
/// instances, in the removal's write transaction, against 4 µs).
pub async fn room_waiters_wake(
    db: &impl ConnectionTrait,
    provider: &str,
    waiting: &str,
) -> AppResult<()> {
    let update = instance::Entity::update_many()
        .col_expr(instance::Column::NextAttemptAt, Expr::value(Utc::now()))
        .filter(instance::Column::State.eq(InstanceState::Provisioning))
        .filter(instance::Column::Provider.eq(provider))
        .filter(instance::Column::LastError.starts_with(waiting))
        .filter(instance::Column::ClaimedBy.is_null());
    db.execute_raw(indexed_by(
        db.get_database_backend(),
        update,
        "idx_instances_state",
    ))
    .await?;
    Ok(())
}

/// Instances waiting for an operation now: not claimed by a live runner, not backing off.
fn due(now: DateTime<Utc>) -> Condition {
    Condition::all()
        .add(Expr::cust(INSTANCES_DUE))
        .add(
            Condition::any()
                .add(instance::Column::ClaimedUntil.is_null())
                .add(instance::Column::ClaimedUntil.lt(now)),
        )
        .add(
            Condition::any()
                .add(instance::Column::NextAttemptAt.is_null())
                .add(instance::Column::NextAttemptAt.lte(now)),
        )
}

/// The head of the queue: at most `limit` instances due now, in turn, none of the providers
/// in `skip`.
pub async fn due_head(
    db: &impl ConnectionTrait,
    now: DateTime<Utc>,
    skip: &HashSet<String>,
    limit: u64,
) -> AppResult<Vec<instance::Model>> {
    let mut select = instance::Entity::find().filter(due(now));
    if !skip.is_empty() {
        select = select.filter(instance::Column::Provider.is_not_in(skip.iter().cloned()));
    }
    let select = select
        .order_by_asc(instance::Column::DispatchOrder)
        .order_by_asc(instance::Column::CreatedAt)
        .limit(limit);
    let statement = indexed_by(db.get_database_backend(), select, "idx_instances_due");
    Ok(instance::Entity::find()
        .from_raw_sql(statement)
        .all(db)
        .await?)
}

/// How many instances are due now.
pub async fn due_count(db: &impl ConnectionTrait, now: DateTime<Utc>) -> AppResult<u64> {
    use sea_orm::PaginatorTrait;
    Ok(instance::Entity::find().filter(due(now)).count(db).await?)
}

/// Claims each of `rows` for `runner` until `until` (and moves a pending one to
/// `provisioning`), in one transaction `txn`; answers those it claimed (another runner, or a
/// change of state, may have taken the others).
pub async fn claims_take(
    txn: &impl ConnectionTrait,
    rows: Vec<instance::Model>,
    runner: &str,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
) -> AppResult<Vec<instance::Model>> {
    let mut claimed = Vec::with_capacity(rows.len());
    for row in rows {
        let next_state = if row.state == InstanceState::Pending {
            InstanceState::Provisioning
        } else {
            row.state
        };
        let taken = instance::Entity::update_many()
            .col_expr(instance::Column::ClaimedBy, Expr::value(runner))
            .col_expr(instance::Column::ClaimedUntil, Expr::value(until))
            .col_expr(instance::Column::State, Expr::value(next_state))
            .col_expr(instance::Column::UpdatedAt, Expr::value(now))
            .filter(instance::Column::Id.eq(row.id))
            .filter(instance::Column::State.eq(row.state))
            .filter(
                Condition::any()
                    .add(instance::Column::ClaimedUntil.is_null())
                    .add(instance::Column::ClaimedUntil.lt(now)),
            )
            .exec(txn)
            .await?;
        if taken.rows_affected == 1 {
            claimed.push(row);
        }
    }
    Ok(claimed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_indexes_condition_names_the_states_that_wait_for_an_operation() {
        let waiting = [
            InstanceState::Pending,
            InstanceState::Provisioning,
            InstanceState::Removing,
            InstanceState::Failed,
        ]
        .map(|state| format!("'{state}'"));
        assert_eq!(INSTANCES_DUE, format!("state IN ({})", waiting.join(", ")));
    }

    #[test]
    fn sqlite_reads_the_queue_through_its_index() {
        let select = instance::Entity::find().filter(due(Utc::now())).limit(5);
        let sqlite = indexed_by(DbBackend::Sqlite, select.clone(), "idx_instances_due");
        assert!(
            sqlite
                .sql
                .contains(r#"FROM "instances" INDEXED BY "idx_instances_due" WHERE"#),
            "{}",
            sqlite.sql
        );
        assert!(sqlite.sql.contains(INSTANCES_DUE));
        let postgres = indexed_by(DbBackend::Postgres, select, "idx_instances_due");
        assert!(!postgres.sql.contains("INDEXED BY"));
    }
}
