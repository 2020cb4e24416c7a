//! The Ed25519 keys that sign routing tables, apart from every other key of Bulkhead: the
//! first is made on first start; the private halves are sealed like every secret at rest.
//!
//! Rotation without an edge ever refusing a snapshot: `POST /v1/routing-table/keys` publishes a
//! `next` key (edges are told to trust it), `POST …/keys/{id}/activate` makes it sign and
//! retires the one before (still published: snapshots on edges' disks were signed with it),
//! and `DELETE …/keys/{id}` withdraws a key that no longer signs.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::Utc;
use ed25519_dalek::SigningKey;
use rand::RngCore;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, Set,
};

use crate::app::App;
use crate::app::shared::audit::{AuditEntry, audit_record};
use crate::authz::{OpContext, Principal};
use crate::entity::routing_key;
use crate::entity::routing_key::RoutingKeyState;
use crate::error::{AppError, AppResult, ErrorCode};
use bulkhead_routing::{PublishedKey, PublishedKeys, key_id_of};

/// The active key, opened.
pub struct RoutingSigner {
    pub id: String,
    pub key: SigningKey,
}

fn private_purpose(id: &str) -> String {
    format!("routing-key:{id}")
}

fn key_audit(action: &'static str, id: String, details: serde_json::Value) -> AuditEntry {
    AuditEntry {
        action,
        resource_type: "routing_key",
        resource_id: id,
        project_id: None,
        details,
    }
}

fn published(row: routing_key::Model) -> PublishedKey {
    PublishedKey {
        id: row.id,
        public_key: row.public_key,
        state: row.state.to_string(),
        created_at: row.created_at,
        activated_at: row.activated_at,
        retired_at: row.retired_at,
    }
}

impl App {
    /// A new key, stored in `state`.
    async fn routing_key_insert(
        &self,
        db: &impl ConnectionTrait,
        state: RoutingKeyState,
    ) -> AppResult<routing_key::Model> {
        let mut seed = [0u8; 32];
        rand::rng().fill_bytes(&mut seed);
        let key = SigningKey::from_bytes(&seed);
        let id = key_id_of(&key.verifying_key());
        let now = Utc::now();
        let seed_text = BASE64.encode(seed);
        Ok(routing_key::ActiveModel {
            private_key: Set(self.secrets.seal(&private_purpose(&id), &seed_text)),
            public_key: Set(BASE64.encode(key.verifying_key().as_bytes())),
            id: Set(id),
            state: Set(state.to_owned()),
            created_at: Set(now),
            activated_at: Set((state == RoutingKeyState::Active).then_some(now)),
            retired_at: Set(None),
        }
        .insert(db)
        .await?)
    }

    /// The key that signs: the active one (made on first start), opened once per server.
    pub(crate) async fn routing_signer(&self) -> AppResult<Arc<RoutingSigner>> {
        let active = routing_key::Entity::find()
            .filter(routing_key::Column::State.eq(RoutingKeyState::Active))
            .order_by_desc(routing_key::Column::ActivatedAt)
            .one(&self.db)
            .await?;
        let active = match active {
            Some(active) => active,
            // Two replicas starting together may both make one; the later activation signs.
            None => {
                self.routing_key_insert(&self.db, RoutingKeyState::Active)
                    .await?
            }
        };
        if let Some(signer) = self.routing.signer.lock().expect("not poisoned").as_ref()
            && signer.id == active.id
        {
            return Ok(signer.clone());
        }
        let seed = self
            .secrets
            .open_value(&private_purpose(&active.id), &active.private_key)
            .map_err(|err| AppError::internal(format!("{err:#}")))?;
        let seed: [u8; 32] = BASE64
            .decode(seed)
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or_else(|| AppError::internal("a routing key's seed is not 32 bytes"))?;
        let signer = Arc::new(RoutingSigner {
            id: active.id,
            key: SigningKey::from_bytes(&seed),
        });
        *self.routing.signer.lock().expect("not poisoned") = Some(signer.clone());
        Ok(signer)
    }

    /// Every published key (`routing:read`).
    pub async fn routing_key_list(&self, principal: &Principal) -> AppResult<PublishedKeys> {
        principal.require_routing_read()?;
        let keys = routing_key::Entity::find()
            .order_by_asc(routing_key::Column::CreatedAt)
            .all(&self.db)
            .await?;
        Ok(PublishedKeys {
            keys: keys.into_iter().map(published).collect(),
        })
    }

    /// Publishes a new key that does not sign yet (administrators).
    pub async fn routing_key_create(&self, ctx: &OpContext) -> AppResult<PublishedKey> {
        ctx.principal.require_admin()?;
        let txn = crate::db::begin_write(&self.db).await?;
        let key = self.routing_key_insert(&txn, RoutingKeyState::Next).await?;
        audit_record(
            &txn,
            ctx,
            key_audit("routing_key.create", key.id.clone(), serde_json::json!({})),
        )
        .await?;
        txn.commit().await?;
        Ok(published(key))
    }

    /// Makes key `id` sign new snapshots and retires the one that did (administrators).
    pub async fn routing_key_activate(&self, ctx: &OpContext, id: &str) -> AppResult<PublishedKey> {
        ctx.principal.require_admin()?;
        let txn = crate::db::begin_write(&self.db).await?;
        let key = routing_key::Entity::find_by_id(id.to_owned())
            .one(&txn)
            .await?
            .ok_or_else(|| AppError::not_found("routing key"))?;
        let now = Utc::now();
        routing_key::Entity::update_many()
            .col_expr(routing_key::Column::State, RoutingKeyState::Retired.into())
            .col_expr(routing_key::Column::RetiredAt, Some(now).into())
            .filter(routing_key::Column::State.eq(RoutingKeyState::Active))
            .filter(routing_key::Column::Id.ne(id))
            .exec(&txn)
            .await?;
        let mut active: routing_key::ActiveModel = key.into();
        active.state = Set(RoutingKeyState::Active);
        active.activated_at = Set(Some(now));
        active.retired_at = Set(None);
        let key = active.update(&txn).await?;
        audit_record(
            &txn,
            ctx,
            key_audit(
                "routing_key.activate",
                key.id.clone(),
                serde_json::json!({}),
            ),
        )
        .await?;
        txn.commit().await?;
        // Re-signed at once here; other replicas within their refresh interval.
        self.routing_prepare().await?;
        Ok(published(key))
    }

    /// Withdraws key `id`, which must not be the one signing (administrators).
    pub async fn routing_key_delete(&self, ctx: &OpContext, id: &str) -> AppResult<()> {
        ctx.principal.require_admin()?;
        let txn = crate::db::begin_write(&self.db).await?;
        let key = routing_key::Entity::find_by_id(id.to_owned())
            .one(&txn)
            .await?
            .ok_or_else(|| AppError::not_found("routing key"))?;
        if key.state == RoutingKeyState::Active {
            return Err(AppError::new(
                ErrorCode::RoutingKeyActive,
                "this key signs the routing table: activate another one first",
            ));
        }
        routing_key::Entity::delete_by_id(key.id.clone())
            .exec(&txn)
            .await?;
        audit_record(
            &txn,
            ctx,
            key_audit(
                "routing_key.delete",
                key.id,
                serde_json::json!({ "state": key.state }),
            ),
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }
}
