//! Lists as the CLI fetches them: one page of the largest size the server gives, or with
//! `--all` every page. A list printed in part says so on stderr, with how to see the rest, and
//! its JSON keeps the `next_cursor` of the rest, as the API's own page does.

use serde::Serialize;

use super::output::{self, OutputFormat, Row};

/// The largest page the server gives.
pub const PAGE: u64 = 200;

/// The paging options of a list command.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct Paging {
    /// List every item, page after page (otherwise the first 200).
    #[arg(long)]
    pub all: bool,
}

/// The items of a list that were fetched, and the cursor of the rest when not all were.
#[derive(Debug, Serialize)]
pub struct Listed<T> {
    pub items: Vec<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

impl<T: Row + Serialize> Listed<T> {
    /// Prints the list, and on stderr that it is partial when it is.
    pub fn print(&self, format: OutputFormat) {
        output::list(format, self, &self.items);
        if self.next_cursor.is_some() {
            output::done(format!(
                "The first {} are listed; add --all to list every one.",
                self.items.len()
            ));
        }
    }
}

/// Lists with a list operation of the generated client, `|c| c.project_list()`, through a
/// [`super::connection::Connection`]: the first page, or every page when `all` is true.
/// Evaluates to a [`Listed`].
macro_rules! list_pages {
    ($connection:expr, $all:expr, |$client:ident| $list:expr) => {{
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = $connection
                .call(async |$client| {
                    let mut request = $list.limit($crate::listing::PAGE);
                    if let Some(cursor) = &cursor {
                        request = request.cursor(cursor.clone());
                    }
                    request.send().await
                })
                .await?;
            items.extend(page.items);
            cursor = page.next_cursor;
            if !$all || cursor.is_none() {
                break;
            }
        }
        $crate::listing::Listed {
            items,
            next_cursor: cursor,
        }
    }};
}

pub(crate) use list_pages;
