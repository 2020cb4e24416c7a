//! How client commands print answers: `--output json` prints the API's answer as JSON (for
//! `jq`); `--output table` prints a list as a table of the columns its [`Row`] names, and one
//! resource as a table of its fields. Messages about what was done go to stderr, so that
//! stdout holds only answers.

use comfy_table::{ContentArrangement, Table, presets};
use serde::Serialize;
use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

/// A resource shown as one row of a list's table.
pub trait Row {
    const HEADER: &'static [&'static str];
    fn row(&self) -> Vec<String>;
}

/// Prints a list: `answer` as JSON, or `rows` as a table.
pub fn list<R: Row>(format: OutputFormat, answer: &impl Serialize, rows: &[R]) {
    match format {
        OutputFormat::Json => json(answer),
        OutputFormat::Table => println!("{}", table(R::HEADER, rows.iter().map(Row::row))),
    }
}

/// Prints one resource: as JSON, or a table of its fields (nested values as compact JSON).
pub fn one(format: OutputFormat, answer: &impl Serialize) {
    match format {
        OutputFormat::Json => json(answer),
        OutputFormat::Table => {
            let value = serde_json::to_value(answer).expect("an answer serializes");
            let fields = match value {
                Value::Object(fields) => fields.into_iter().collect(),
                other => vec![("value".to_owned(), other)],
            };
            let rows = fields
                .into_iter()
                .map(|(name, value)| vec![name, cell(&value)]);
            println!("{}", table(&["FIELD", "VALUE"], rows));
        }
    }
}

/// Prints `answer` as pretty JSON on stdout.
pub fn json(answer: &impl Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(answer).expect("an answer serializes")
    );
}

/// Tells the user what was done (stderr: stdout is for answers).
pub fn done(message: impl std::fmt::Display) {
    eprintln!("{message}");
}

/// A table without borders, easy to read and to `grep`.
pub fn table(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> Table {
    let mut table = Table::new();
    table
        .load_style(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().copied());
    for row in rows {
        table.add_row(row);
    }
    table
}

/// A JSON value as a cell: strings as they are, `-` for null, the rest as compact JSON.
pub fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// An optional value as a cell (`-` when absent).
pub fn optional(value: Option<impl std::fmt::Display>) -> String {
    value.map_or_else(|| "-".into(), |value| value.to_string())
}
