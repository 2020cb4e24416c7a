//! The user records an outage must never touch — accounts, project memberships,
//! terms-of-service acceptances and the audit log — read through the API before the outage
//! and compared after it.

use std::collections::BTreeMap;

use bulkhead_client::Client;
use serde_json::Value;
use uuid::Uuid;

/// The records, each as the API shows it, by id.
#[derive(Debug, Clone, PartialEq)]
pub struct Records {
    pub users: BTreeMap<String, Value>,
    pub memberships: BTreeMap<String, Value>,
    pub terms_acceptances: BTreeMap<String, Value>,
    pub audit_events: BTreeMap<String, Value>,
}

/// Every page of a list: `fetch` gets a page from a cursor and answers its items and the
/// next cursor.
pub async fn all_pages<T, F>(fetch: F) -> anyhow::Result<Vec<T>>
where
    F: AsyncFn(Option<String>) -> anyhow::Result<(Vec<T>, Option<String>)>,
{
    let mut items = Vec::new();
    let mut cursor = None;
    loop {
        let (page, next) = fetch(cursor).await?;
        items.extend(page);
        match next {
            Some(next) => cursor = Some(next),
            None => return Ok(items),
        }
    }
}

fn by_key<T: serde::Serialize>(
    items: Vec<T>,
    key: impl Fn(&T) -> String,
) -> anyhow::Result<BTreeMap<String, Value>> {
    items
        .into_iter()
        .map(|item| Ok((key(&item), serde_json::to_value(&item)?)))
        .collect()
}

impl Records {
    /// Reads them: `admin` sees users, memberships of `project` and the audit log; each of
    /// `users` (a client per user) reads their own acceptances.
    pub async fn read(admin: &Client, project: Uuid, users: &[Client]) -> anyhow::Result<Self> {
        let all_users = all_pages(async |cursor| {
            let mut request = admin.user_list().limit(200);
            if let Some(cursor) = cursor {
                request = request.cursor(cursor);
            }
            let page = request.send().await?.into_inner();
            Ok((page.items, page.next_cursor))
        })
        .await?;
        let memberships = all_pages(async |cursor| {
            let mut request = admin.member_list().project_id(project).limit(200);
            if let Some(cursor) = cursor {
                request = request.cursor(cursor);
            }
            let page = request.send().await?.into_inner();
            Ok((page.items, page.next_cursor))
        })
        .await?;
        let audit_events = all_pages(async |cursor| {
            let mut request = admin.audit_event_list().limit(200);
            if let Some(cursor) = cursor {
                request = request.cursor(cursor);
            }
            let page = request.send().await?.into_inner();
            Ok((page.items, page.next_cursor))
        })
        .await?;
        let mut acceptances = Vec::new();
        for user in users {
            let me = user.me_view().send().await?.into_inner();
            let theirs = user.me_terms_acceptance_list().send().await?.into_inner();
            acceptances.extend(theirs.items.into_iter().map(|a| (me.id, a)));
        }
        let mut users = by_key(all_users, |u| u.id.to_string())?;
        // Signing in moves a user's last sign-in time (the drill's users sign in during it):
        // the rest of the account must stay as it was.
        for user in users.values_mut() {
            if let Some(user) = user.as_object_mut() {
                user.remove("last_login_at");
            }
        }
        Ok(Self {
            users,
            memberships: by_key(memberships, |m| m.user_id.to_string())?,
            terms_acceptances: by_key(acceptances, |(user, a)| format!("{user}/{}", a.id))?,
            audit_events: by_key(audit_events, |e| e.id.to_string())?,
        })
    }

    /// What of `self` is missing or changed in `later` (records added since are fine):
    /// one line per record.
    pub fn lost_or_changed(&self, later: &Records) -> Vec<String> {
        let kinds = [
            ("user", &self.users, &later.users),
            ("membership", &self.memberships, &later.memberships),
            (
                "terms acceptance",
                &self.terms_acceptances,
                &later.terms_acceptances,
            ),
            ("audit event", &self.audit_events, &later.audit_events),
        ];
        let mut differences = Vec::new();
        for (kind, before, after) in kinds {
            for (id, record) in before {
                match after.get(id) {
                    None => differences.push(format!("{kind} {id} lost")),
                    Some(now) if now != record => {
                        differences.push(format!("{kind} {id} changed: {record} -> {now}"))
                    }
                    Some(_) => {}
                }
            }
        }
        differences
    }

    /// How many of each there are.
    pub fn counts(&self) -> Value {
        serde_json::json!({
            "users": self.users.len(),
            "memberships": self.memberships.len(),
            "terms_acceptances": self.terms_acceptances.len(),
            "audit_events": self.audit_events.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_or_changed_record_is_named_and_new_ones_are_fine() {
        let record = |name: &str| serde_json::json!({ "name": name });
        let before = Records {
            users: [("u1".into(), record("Ana")), ("u2".into(), record("Bo"))].into(),
            memberships: BTreeMap::new(),
            terms_acceptances: [("u1/t1".into(), record("2026-11"))].into(),
            audit_events: BTreeMap::new(),
        };
        let mut after = before.clone();
        after.audit_events.insert("e1".into(), record("new"));
        assert!(before.lost_or_changed(&after).is_empty());
        after.users.insert("u2".into(), record("Bob"));
        after.terms_acceptances.clear();
        let differences = before.lost_or_changed(&after);
        assert_eq!(differences.len(), 2, "{differences:?}");
        assert!(
            differences[0].starts_with("user u2 changed"),
            "{differences:?}"
        );
        assert_eq!(differences[1], "terms acceptance u1/t1 lost");
    }
}
