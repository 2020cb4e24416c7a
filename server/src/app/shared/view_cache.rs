//! Rows' views as served, kept serialized by (table, id, revision), so that a list whose rows
//! have not changed since the last read is written from bytes instead of decoded, converted and
//! serialized again row by row.
//!
//! It never decides *what* a list holds: a list still asks the database for its page's ids
//! and revisions on every read, and a kept view is used only for the revision the database
//! answered (a row whose revision moved is read and converted again). So it is as fresh as
//! the database across replicas, and needs no invalidation. What it relies on: every change
//! to what a row's view shows makes the row's next revision (as a project write's `save`
//! does), and the view depends on the row alone, never on who asks.

use std::sync::Arc;

use serde::Serialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::error::{AppError, AppResult};

/// The bytes the cache may hold, all tables together.
const CAPACITY_BYTES: u64 = 32 * 1024 * 1024;

/// One row's serialized view at one revision.
#[derive(Debug)]
pub struct KeptView {
    pub revision: i64,
    pub json: Box<RawValue>,
}

/// Serialized views by (table, id); see the module's documentation.
pub struct ViewCache {
    views: moka::sync::Cache<(&'static str, Uuid), Arc<KeptView>>,
}

impl Default for ViewCache {
    fn default() -> Self {
        Self {
            views: moka::sync::Cache::builder()
                .max_capacity(CAPACITY_BYTES)
                .weigher(|_, view: &Arc<KeptView>| {
                    u32::try_from(view.json.get().len() + 64).unwrap_or(u32::MAX)
                })
                .build(),
        }
    }
}

impl ViewCache {
    /// The view of `table`'s row `id` at `revision`, if kept.
    pub fn get(&self, table: &'static str, id: Uuid, revision: i64) -> Option<Arc<KeptView>> {
        self.views
            .get(&(table, id))
            .filter(|view| view.revision == revision)
    }

    /// Serializes `view`, the view of `table`'s row `id` at `revision`, and keeps it.
    pub fn put(
        &self,
        table: &'static str,
        id: Uuid,
        revision: i64,
        view: &impl Serialize,
    ) -> AppResult<Arc<KeptView>> {
        let json = serde_json::value::to_raw_value(view).map_err(AppError::internal)?;
        let kept = Arc::new(KeptView { revision, json });
        self.views.insert((table, id), kept.clone());
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_is_served_only_at_its_revision() {
        let cache = ViewCache::default();
        let id = Uuid::now_v7();
        cache
            .put("services", id, 3, &serde_json::json!({"name": "web"}))
            .unwrap();
        assert_eq!(
            cache.get("services", id, 3).unwrap().json.get(),
            r#"{"name":"web"}"#
        );
        assert!(cache.get("services", id, 4).is_none(), "a newer revision");
        assert!(cache.get("services", id, 2).is_none(), "an older revision");
        assert!(cache.get("domains", id, 3).is_none(), "another table");
        cache
            .put("services", id, 4, &serde_json::json!({"name": "api"}))
            .unwrap();
        assert!(cache.get("services", id, 3).is_none(), "replaced");
    }
}
