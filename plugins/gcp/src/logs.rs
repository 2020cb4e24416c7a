//! An instance's output, read from Cloud Logging (`entries.list` at `logging_endpoint`): the
//! entries of resource type `gce_instance` with the instance's numeric id, the log
//! `…/logs/stdout` as stdout, `…/logs/stderr` as stderr, any other log as the provider's own
//! notes (`system`).
//!
//! A cursor says where a page ended: the timestamp of its last entry and the `insertId`s read
//! at that timestamp (`g1|TIMESTAMP|ids:ID,ID`). The next page asks for `timestamp>="T"` and
//! skips those ids, so that entries sharing a timestamp are neither repeated nor lost. When
//! too many ids share one timestamp for the cursor's 1000 bytes, it keeps only the greatest
//! (`g1|T|upto:ID`) and skips every id up to it, relying on Google's order of equal
//! timestamps (by `insertId`). `g1` alone reads from the first entry Google keeps.
//!
//! Without a cursor, the newest lines are one page ordered `timestamp desc`, reversed; with
//! `since-ms`, the entries from that time on, oldest first. Entries that arrive late, with a
//! timestamp before a cursor's, are not read (Cloud Logging orders by the time an entry
//! carries, not by arrival).

use bulkhead_sdk::http::Request;
use bulkhead_sdk::{LogLine, LogPage, LogRequest, LogStream, ProviderError};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{Client, api_error, parse};

const CURSOR_VERSION: &str = "g1";
/// The contract's bound on a cursor.
const MAX_CURSOR_BYTES: usize = 1000;
/// `pageSize`'s maximum at Google.
const MAX_PAGE_SIZE: usize = 1000;
/// `entries:list` calls made for one page at most.
const MAX_LIST_CALLS: usize = 5;
/// Where the instance of a key was last found, in the provider's cache.
const ZONE_CACHE_PREFIX: &str = "gcp:zone-of/";

/// Which entries at the cursor's timestamp were read already.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Ids(Vec<String>),
    /// Every id up to this one (ids at one timestamp come in `insertId` order).
    UpTo(String),
}

impl Seen {
    fn covers(&self, insert_id: &str) -> bool {
        match self {
            Seen::Ids(ids) => ids.iter().any(|id| id == insert_id),
            Seen::UpTo(last) => insert_id <= last.as_str(),
        }
    }
}

/// Where a page ended: `None` before the first entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cursor(Option<(i128, Seen)>);

/// `%`, `,` and `|` escaped, so that any `insertId` fits the cursor's syntax.
fn escape(id: &str) -> String {
    id.replace('%', "%25")
        .replace(',', "%2C")
        .replace('|', "%7C")
}

fn unescape(id: &str) -> String {
    id.replace("%2C", ",")
        .replace("%7C", "|")
        .replace("%25", "%")
}

impl Cursor {
    fn parse(text: &str) -> Result<Cursor, ProviderError> {
        let invalid = || ProviderError::InvalidSpec(format!("`{text}` is not a cursor of gcp's"));
        let mut parts = text.split('|');
        if parts.next() != Some(CURSOR_VERSION) {
            return Err(invalid());
        }
        let Some(time) = parts.next() else {
            return Ok(Cursor(None));
        };
        let time = rfc3339_nanos(time).ok_or_else(invalid)?;
        let seen = match parts.next() {
            Some(ids) if ids.starts_with("ids:") => Seen::Ids(
                ids["ids:".len()..]
                    .split(',')
                    .filter(|id| !id.is_empty())
                    .map(unescape)
                    .collect(),
            ),
            Some(last) if last.starts_with("upto:") => Seen::UpTo(unescape(&last["upto:".len()..])),
            _ => return Err(invalid()),
        };
        if parts.next().is_some() {
            return Err(invalid());
        }
        Ok(Cursor(Some((time, seen))))
    }

    /// The cursor's text, at most [`MAX_CURSOR_BYTES`]: too many ids become `upto`.
    fn render(&self) -> String {
        let Some((time, seen)) = &self.0 else {
            return CURSOR_VERSION.to_owned();
        };
        let head = format!("{CURSOR_VERSION}|{}|", rfc3339(*time));
        let text = match seen {
            Seen::Ids(ids) => {
                let ids: Vec<String> = ids.iter().map(|id| escape(id)).collect();
                format!("{head}ids:{}", ids.join(","))
            }
            Seen::UpTo(last) => format!("{head}upto:{}", escape(last)),
        };
        if text.len() <= MAX_CURSOR_BYTES {
            return text;
        }
        let greatest = match seen {
            Seen::Ids(ids) => ids.iter().max().cloned().unwrap_or_default(),
            Seen::UpTo(last) => last.clone(),
        };
        let mut last = escape(&greatest);
        // An id that alone is too long is cut: ids sharing its prefix and timestamp are
        // skipped too, the least of evils for a cursor that must fit.
        last.truncate(MAX_CURSOR_BYTES.saturating_sub(head.len() + "upto:".len()));
        format!("{head}upto:{last}")
    }

    /// Whether an entry at `time` with `insert_id` is at or before the cursor.
    fn covers(&self, time: i128, insert_id: &str) -> bool {
        match &self.0 {
            None => false,
            Some((at, seen)) => time < *at || (time == *at && seen.covers(insert_id)),
        }
    }

    /// The cursor after `read` (oldest first), read from this one.
    fn after(&self, read: &[Read]) -> Cursor {
        let Some(last) = read.last() else {
            return self.clone();
        };
        let mut ids: Vec<String> = match &self.0 {
            Some((at, Seen::Ids(ids))) if *at == last.time => ids.clone(),
            Some((at, Seen::UpTo(upto))) if *at == last.time => {
                let mut greatest = upto.clone();
                for entry in read.iter().filter(|entry| entry.time == last.time) {
                    greatest = greatest.max(entry.insert_id.clone());
                }
                return Cursor(Some((last.time, Seen::UpTo(greatest))));
            }
            _ => Vec::new(),
        };
        ids.extend(
            read.iter()
                .filter(|entry| entry.time == last.time)
                .map(|entry| entry.insert_id.clone()),
        );
        Cursor(Some((last.time, Seen::Ids(ids))))
    }
}

/// An entry read, as a line.
#[derive(Debug, Clone)]
struct Read {
    time: i128,
    insert_id: String,
    line: LogLine,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EntriesPage {
    #[serde(default)]
    entries: Vec<Entry>,
    #[serde(default)]
    next_page_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(default)]
    log_name: String,
    #[serde(default)]
    timestamp: String,
    #[serde(default)]
    insert_id: String,
    #[serde(default)]
    text_payload: Option<String>,
    #[serde(default)]
    json_payload: Option<Value>,
}

impl Entry {
    fn read(self) -> Option<Read> {
        let time = rfc3339_nanos(&self.timestamp)?;
        let stream = match self.log_name.rsplit_once("/logs/").map(|(_, id)| id) {
            Some("stdout") => LogStream::Stdout,
            Some("stderr") => LogStream::Stderr,
            _ => LogStream::System,
        };
        let text = match (self.text_payload, self.json_payload) {
            (Some(text), _) => text,
            (None, Some(json)) => match json.get("message").and_then(Value::as_str) {
                Some(message) => message.to_owned(),
                None => json.to_string(),
            },
            (None, None) => String::new(),
        };
        let text = text.strip_suffix('\n').map(str::to_owned).unwrap_or(text);
        Some(Read {
            time,
            insert_id: self.insert_id,
            line: LogLine {
                time_ms: u64::try_from(time.div_euclid(1_000_000)).unwrap_or(0),
                stream,
                text,
            },
        })
    }
}

impl Client {
    /// The numeric id of the instance Bulkhead made for `instance_key`, from the zone it was
    /// last found in first.
    fn instance_id_of(&self, instance_key: &str) -> Result<String, ProviderError> {
        let remembered = format!("{ZONE_CACHE_PREFIX}{instance_key}");
        let known = bulkhead_sdk::cache::get_string(&remembered);
        let mut zones = self.settings.zones.clone();
        zones.sort_by_key(|zone| Some(zone) != known.as_ref());
        for zone in &zones {
            if let Some(found) = self.instance_get(zone, instance_key)?
                && found.made_for(instance_key)
            {
                if Some(zone) != known.as_ref() {
                    let day = std::time::Duration::from_secs(24 * 3600);
                    let _ = bulkhead_sdk::cache::set(&remembered, zone.as_bytes(), day);
                }
                return Ok(crate::id_text(&found.id));
            }
        }
        Err(ProviderError::NotFound(format!(
            "no instance `{instance_key}` in {}",
            self.settings.zones.join(", ")
        )))
    }

    /// One `entries:list` call.
    fn entries_list(&self, body: &Value) -> Result<EntriesPage, ProviderError> {
        let what = "listing log entries";
        let url = format!("{}/v2/entries:list", self.settings.logging_endpoint);
        let response = self.send(Request::post(url).json(body))?;
        if !(200..300).contains(&response.status) {
            return Err(api_error(what, &response));
        }
        parse(&response, what)
    }
}

/// A page of the output of the instance of `instance_key`.
pub(crate) fn logs(instance_key: &str, request: &LogRequest) -> Result<LogPage, ProviderError> {
    let cursor = request.after.as_deref().map(Cursor::parse).transpose()?;
    let client = Client::new()?;
    let instance_id = client.instance_id_of(instance_key)?;
    let mut filter =
        format!("resource.type=\"gce_instance\" AND resource.labels.instance_id=\"{instance_id}\"");
    let max_lines = (request.max_lines as usize).clamp(1, MAX_PAGE_SIZE);
    let query = |filter: &str, order: &str, size: usize| {
        json!({
            "resourceNames": [format!("projects/{}", client.settings.project)],
            "filter": filter,
            "orderBy": order,
            "pageSize": size.clamp(1, MAX_PAGE_SIZE),
        })
    };

    let (from, since) = match (cursor, request.since_ms) {
        (Some(cursor), _) => (cursor, None),
        (None, Some(since_ms)) => (Cursor(None), Some(i128::from(since_ms) * 1_000_000)),
        (None, None) => {
            let page = client.entries_list(&query(&filter, "timestamp desc", max_lines))?;
            let mut read: Vec<Read> = page.entries.into_iter().filter_map(Entry::read).collect();
            read.reverse();
            let read = request.newest(read, |read| &mut read.line);
            let next = Cursor(None).after(&read).render();
            return Ok(LogPage {
                lines: read.into_iter().map(|entry| entry.line).collect(),
                next,
                gap: false,
            });
        }
    };

    let skipped = match &from.0 {
        Some((_, Seen::Ids(ids))) => ids.len(),
        _ => 0,
    };
    if let Some(at) = from.0.as_ref().map(|(at, _)| *at).or(since) {
        filter.push_str(&format!(" AND timestamp>=\"{}\"", rfc3339(at)));
    }
    let mut body = query(&filter, "timestamp asc", max_lines + skipped);
    let mut read: Vec<Read> = Vec::new();
    let mut bytes = 0usize;
    for _ in 0..MAX_LIST_CALLS {
        let page = client.entries_list(&body)?;
        for entry in page.entries.into_iter().filter_map(Entry::read) {
            if !from.covers(entry.time, &entry.insert_id) {
                bytes += entry.line.text.len();
                read.push(entry);
            }
        }
        let full = read.len() >= max_lines || bytes >= request.max_bytes as usize;
        match page.next_page_token.filter(|token| !token.is_empty()) {
            Some(token) if !full => body["pageToken"] = json!(token),
            _ => break,
        }
    }
    // `bounded` keeps the oldest lines that fit; the cursor follows the ones kept.
    let kept = request
        .bounded(read.iter().map(|entry| entry.line.clone()))
        .len();
    read.truncate(kept);
    let next = match (&request.after, read.is_empty()) {
        (Some(after), true) => after.clone(),
        _ => {
            // From `since`, before any line: the next page starts there too.
            let start = match (&from.0, since) {
                (None, Some(at)) if read.is_empty() => Cursor(Some((at, Seen::Ids(Vec::new())))),
                _ => from.clone(),
            };
            start.after(&read).render()
        }
    };
    Ok(LogPage {
        lines: read.into_iter().map(|entry| entry.line).collect(),
        next,
        gap: false,
    })
}

/// Nanoseconds since the Unix epoch of an RFC 3339 time (`2026-05-01T10:20:30.123456789Z`,
/// any fraction, `Z` or an offset).
pub(crate) fn rfc3339_nanos(text: &str) -> Option<i128> {
    let bytes = text.as_bytes();
    if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[13] != b':' {
        return None;
    }
    if !matches!(bytes[10], b'T' | b't' | b' ') || bytes[16] != b':' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = text.get(range)?;
        digits
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| digits.parse().ok())?
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut nanos: i128 = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let kept = &fraction[..digits.min(9)];
        nanos = kept.parse::<i128>().ok()? * 10i128.pow(9 - kept.len() as u32);
        rest = &fraction[digits..];
    }
    let offset_secs: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            sign * (number_in(&rest[1..3])? * 3600 + number_in(&rest[4..6])? * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    Some(i128::from(secs) * 1_000_000_000 + nanos)
}

fn number_in(digits: &str) -> Option<i64> {
    digits
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| digits.parse().ok())?
}

/// `2026-05-01T10:20:30.123456789Z` of nanoseconds since the Unix epoch.
pub(crate) fn rfc3339(nanos: i128) -> String {
    let secs = nanos.div_euclid(1_000_000_000) as i64;
    let fraction = nanos.rem_euclid(1_000_000_000);
    let (days, of_day) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{fraction:09}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_and_write_as_rfc3339() {
        let nanos = rfc3339_nanos("2024-02-29T12:34:56.789Z").unwrap();
        assert_eq!(nanos, 1_709_210_096_789_000_000);
        assert_eq!(rfc3339(nanos), "2024-02-29T12:34:56.789000000Z");
        assert_eq!(
            rfc3339_nanos("2024-02-29T13:34:56.789000001+01:00"),
            Some(nanos + 1)
        );
        assert_eq!(rfc3339_nanos("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999999999Z");
        for bad in [
            "",
            "2024-02-29",
            "2024-13-01T00:00:00Z",
            "2024-02-29T12:34:56.Z",
        ] {
            assert_eq!(rfc3339_nanos(bad), None, "{bad}");
        }
    }

    #[test]
    fn cursors_read_back_and_stay_within_their_bound() {
        let at = rfc3339_nanos("2026-05-01T10:20:30.123456789Z").unwrap();
        let cursor = Cursor(Some((at, Seen::Ids(vec!["a,b".into(), "c|d%".into()]))));
        let text = cursor.render();
        assert_eq!(text, "g1|2026-05-01T10:20:30.123456789Z|ids:a%2Cb,c%7Cd%25");
        assert_eq!(Cursor::parse(&text).unwrap(), cursor);
        assert_eq!(Cursor::parse("g1").unwrap(), Cursor(None));
        for bad in [
            "",
            "g2",
            "g1|yesterday|ids:",
            "g1|2026-05-01T10:20:30Z|x",
            "7",
        ] {
            assert!(Cursor::parse(bad).is_err(), "{bad}");
        }

        let many: Vec<String> = (0..200).map(|n| format!("id-{n:05}")).collect();
        let crowded = Cursor(Some((at, Seen::Ids(many))));
        let text = crowded.render();
        assert!(text.len() <= MAX_CURSOR_BYTES);
        let read_back = Cursor::parse(&text).unwrap();
        assert_eq!(read_back, Cursor(Some((at, Seen::UpTo("id-00199".into())))));
        assert!(read_back.covers(at, "id-00150") && !read_back.covers(at, "id-00200"));
        assert!(read_back.covers(at - 1, "zzz") && !read_back.covers(at + 1, ""));
    }
}
