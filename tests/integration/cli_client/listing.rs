//! Lists longer than a page with the CLI: the first page says there is more and how to see
//! it, `--all` follows the cursor to the end, and names are found on any page.

use super::Cli;
use crate::support::TestServer;

crate::db_tests!(lists_longer_than_a_page_say_so_and_all_lists_every_item);

async fn lists_longer_than_a_page_say_so_and_all_lists_every_item(s: TestServer) {
    const PAGE: usize = 200;
    // More projects than a page, past what one user may own by default.
    let s = s
        .restart_with(|settings| settings.limits.projects_per_user = 1_000)
        .await;
    let token = s.user_with_session("many@example.com").await;
    for n in 0..=PAGE {
        s.project_create(&token, &format!("p{n:03}")).await;
    }
    let cli = Cli::new();
    cli.login(&s, "many@example.com").await;

    let first = cli.run("projects list").await;
    let rows = first.ok().lines().filter(|l| l.contains(" p")).count();
    assert_eq!(rows, PAGE, "{}", first.stdout);
    assert!(
        first.stderr.contains("The first 200 are listed; add --all"),
        "{}",
        first.stderr
    );
    let first = cli.run("projects list --output json").await.json();
    assert_eq!(first["items"].as_array().unwrap().len(), PAGE);
    assert!(first["next_cursor"].is_string(), "{first}");

    let all = cli.run("projects list --all --output json").await;
    assert!(!all.stderr.contains("--all"), "{}", all.stderr);
    let all = all.json();
    let names: Vec<&str> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), PAGE + 1);
    assert!(names.contains(&"p000") && names.contains(&"p200"));
    assert!(all.get("next_cursor").is_none(), "{all}");

    // A name on the second page is found.
    let last = cli.run("projects show p200 --output json").await.json();
    assert_eq!(last["name"], "p200");
}
