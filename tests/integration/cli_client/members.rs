//! A project's members and invitations with the CLI: the owner invites, the invitee lists and
//! accepts (naming the project), the owner changes the role and removes them; an invitation is
//! withdrawn; names that are nobody's are refused.

use super::{Cli, row};
use crate::support::TestServer;

crate::db_tests!(an_owner_manages_members_and_invitations_with_the_cli);

async fn an_owner_manages_members_and_invitations_with_the_cli(s: TestServer) {
    s.user_create("ana@example.com").await;
    s.user_create("bob@example.com").await;
    let ana = Cli::new();
    ana.login(&s, "ana@example.com").await;
    let bob = Cli::new();
    bob.login(&s, "bob@example.com").await;
    ana.run("projects create shop").await.ok();

    let invited = ana
        .run("members invite -p shop bob@example.com --role viewer --output json")
        .await
        .json();
    assert_eq!(
        (invited["role"].as_str(), invited["project_name"].as_str()),
        (Some("viewer"), Some("shop"))
    );
    let pending = ana.run("members invitations -p shop").await;
    assert!(
        row(pending.ok(), "shop")
            .is_some_and(|r| r.contains("bob@example.com") && r.contains("viewer"))
    );
    let mine = bob.run("invitations list").await;
    assert!(row(mine.ok(), "shop").is_some_and(|r| r.contains("viewer")));
    bob.run("invitations accept nowhere").await.exits(5);
    // Another owner's project of the same name invites bob too: the name alone is refused.
    s.user_create("cid@example.com").await;
    let cid = Cli::new();
    cid.login(&s, "cid@example.com").await;
    cid.run("projects create shop").await.ok();
    cid.run("members invite -p shop bob@example.com --role admin")
        .await
        .ok();
    let ambiguous = bob.run("invitations accept shop").await;
    assert!(ambiguous.exits(7).contains("several invitations"));
    let cids = cid.run("projects list --output json").await.json();
    let cids_shop = cids["items"][0]["id"].as_str().unwrap().to_owned();
    bob.run(&format!("invitations decline {cids_shop}"))
        .await
        .ok();
    let joined = bob
        .run("invitations accept shop --output json")
        .await
        .json();
    assert_eq!(joined["role"], "viewer");
    // A viewer may not manage members.
    bob.run("members invite -p shop carl@example.com --role viewer")
        .await
        .exits(4);

    let members = ana.run("members list -p shop").await;
    assert!(row(members.ok(), "bob@example.com").is_some_and(|r| r.contains("viewer")));
    let promoted = ana
        .run("members set-role -p shop BOB@example.com member --output json")
        .await
        .json();
    assert_eq!(promoted["role"], "member");
    ana.run("members set-role -p shop bob@example.com emperor")
        .await
        .exits(2);
    ana.run("members remove -p shop nobody@example.com")
        .await
        .exits(5);
    ana.run("members remove -p shop bob@example.com").await.ok();
    let members = ana.run("members list -p shop --output json").await.json();
    let emails: Vec<&str> = members["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["email"].as_str().unwrap())
        .collect();
    assert_eq!(emails, ["ana@example.com"]);

    // An invitation withdrawn is gone for the invitee too.
    ana.run("members invite -p shop bob@example.com --role member")
        .await
        .ok();
    ana.run("members revoke -p shop bob@example.com").await.ok();
    ana.run("members revoke -p shop bob@example.com")
        .await
        .exits(5);
    let mine = bob.run("invitations list --output json").await.json();
    assert_eq!(mine["items"], serde_json::json!([]));
}
