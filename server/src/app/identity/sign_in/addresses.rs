//! The addresses each account signed in from (`sign_in_addresses`): an address its owner used in
//! the last [`KNOWN_ADDRESS_TTL`] is exempt from the account-wide login limit
//! ([`crate::app::identity::sign_in::throttle`]). They are in the database, so every replica, and a server
//! restarted in the middle of a flood, still lets the owner in. Each replica keeps an account's
//! set for [`KNOWN_CACHE_TTL`] (a flood of attempts on one account reads it once a minute);
//! the replica that saw a sign-in knows it at once, the others within that time.
//!
//! An address is stored as a SHA-256 of the user's id and the address: the table names no
//! address in clear (it hides them from a casual read; an address space is small enough to
//! be searched).

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use sea_orm::sea_query::OnConflict;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect, Set};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::app::App;
use crate::app::identity::sign_in::throttle::KNOWN_ADDRESS_TTL;
use crate::entity::sign_in_address;
use crate::error::AppResult;

/// How long a replica keeps an account's known addresses before reading them again.
pub const KNOWN_CACHE_TTL: Duration = Duration::from_secs(60);
const KNOWN_CACHE_ACCOUNTS: u64 = 100_000;

/// Each account's known addresses (hashed), as this replica last read them.
pub struct KnownAddresses {
    cache: moka::sync::Cache<Uuid, Arc<HashSet<String>>>,
}

impl Default for KnownAddresses {
    fn default() -> Self {
        Self {
            cache: moka::sync::Cache::builder()
                .max_capacity(KNOWN_CACHE_ACCOUNTS)
                .time_to_live(KNOWN_CACHE_TTL)
                .build(),
        }
    }
}

fn address_hash(user_id: Uuid, address: IpAddr) -> String {
    hex::encode(Sha256::digest(format!("{user_id}/{address}").as_bytes()))
}

fn known_since() -> chrono::DateTime<Utc> {
    Utc::now() - chrono::Duration::from_std(KNOWN_ADDRESS_TTL).expect("a month fits")
}

impl App {
    /// Whether the account `user_id` signed in from `client` lately (on any replica).
    pub async fn sign_in_address_known(&self, user_id: Uuid, client: IpAddr) -> AppResult<bool> {
        let hash = address_hash(user_id, client);
        if let Some(known) = self.known_addresses.cache.get(&user_id) {
            return Ok(known.contains(&hash));
        }
        let known: HashSet<String> = sign_in_address::Entity::find()
            .select_only()
            .column(sign_in_address::Column::AddressHash)
            .filter(sign_in_address::Column::UserId.eq(user_id))
            .filter(sign_in_address::Column::SignedInAt.gt(known_since()))
            .into_tuple()
            .all(&self.db)
            .await?
            .into_iter()
            .collect();
        let found = known.contains(&hash);
        self.known_addresses.cache.insert(user_id, Arc::new(known));
        Ok(found)
    }

    /// Records, in `txn`, that `user_id` signed in from `client` now.
    pub async fn sign_in_address_record(
        txn: &impl ConnectionTrait,
        user_id: Uuid,
        client: IpAddr,
    ) -> AppResult<()> {
        sign_in_address::Entity::insert(sign_in_address::ActiveModel {
            user_id: Set(user_id),
            address_hash: Set(address_hash(user_id, client)),
            signed_in_at: Set(Utc::now()),
        })
        .on_conflict(
            OnConflict::columns([
                sign_in_address::Column::UserId,
                sign_in_address::Column::AddressHash,
            ])
            .update_column(sign_in_address::Column::SignedInAt)
            .to_owned(),
        )
        .exec(txn)
        .await?;
        Ok(())
    }

    /// After a sign-in's commit: this replica reads the account's addresses again, so that it
    /// knows the new one at once (the others within [`KNOWN_CACHE_TTL`]).
    pub fn sign_in_addresses_changed(&self, user_id: Uuid) {
        self.known_addresses.cache.invalidate(&user_id);
    }

    /// Deletes addresses not signed in from within [`KNOWN_ADDRESS_TTL`]; returns how many.
    pub async fn sign_in_addresses_purge(&self) -> AppResult<u64> {
        let deleted = sign_in_address::Entity::delete_many()
            .filter(sign_in_address::Column::SignedInAt.lte(known_since()))
            .exec(&self.db)
            .await?;
        Ok(deleted.rows_affected)
    }
}
