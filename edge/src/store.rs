//! The last-known-good snapshot on disk: `<state-dir>/snapshot.json`, the signed document as
//! received, written atomically (a temporary file, fsync, rename, fsync of the directory), so
//! that a crash at any moment leaves either the old snapshot or the new one, never half of
//! one. It is verified again when loaded: a file changed on disk is refused.

use std::path::Path;
use std::sync::Arc;

use super::Applied;
use bulkhead_routing::{SignedSnapshot, TrustedKeys};

const SNAPSHOT_FILE: &str = "snapshot.json";

/// The snapshot on disk, if any, verified against `trusted`.
pub fn load(dir: &Path, trusted: &TrustedKeys) -> anyhow::Result<Option<Applied>> {
    let path = dir.join(SNAPSHOT_FILE);
    let document = match std::fs::read(&path) {
        Ok(document) => document,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(anyhow::anyhow!("reading {}: {err}", path.display())),
    };
    let table = SignedSnapshot::verify(&document, trusted)
        .map_err(|err| anyhow::anyhow!("{}: {err}", path.display()))?;
    Ok(Some(Applied {
        table,
        document: Arc::new(document),
    }))
}

/// Replaces the snapshot on disk with `document`, atomically and durably.
pub fn save(dir: &Path, document: &[u8]) -> std::io::Result<()> {
    bulkhead_common::files::write_atomically(&dir.join(SNAPSHOT_FILE), document)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulkhead_routing::RoutingTable;
    use ed25519_dalek::SigningKey;

    #[test]
    fn a_saved_snapshot_loads_and_a_changed_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let key = SigningKey::from_bytes(&[3; 32]);
        let keys = serde_json::json!({ "keys": [{
            "id": bulkhead_routing::key_id_of(&key.verifying_key()),
            "public_key": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, key.verifying_key().as_bytes()),
            "state": "active",
            "created_at": "2026-11-30T00:00:00Z",
            "activated_at": null,
            "retired_at": null,
        }]});
        let trusted = TrustedKeys::from_document(keys.to_string().as_bytes()).unwrap();
        assert!(load(dir.path(), &trusted).unwrap().is_none());
        let table = RoutingTable {
            revision: 12,
            generated_at: chrono::Utc::now(),
            drop_intended: false,
            routes: vec![],
        };
        save(dir.path(), &SignedSnapshot::sign(&table, &key)).unwrap();
        let loaded = load(dir.path(), &trusted).unwrap().unwrap();
        assert_eq!(loaded.table.revision, 12);
        let path = dir.path().join(SNAPSHOT_FILE);
        let changed = std::fs::read_to_string(&path)
            .unwrap()
            .replace("\"revision\":12", "\"revision\":13");
        std::fs::write(&path, changed).unwrap();
        assert!(load(dir.path(), &trusted).is_err());
    }
}
