//! A service's logs: the lines its instances printed, read from each instance's provider
//! (contract 0.5.0's `logs`), merged by time, paged with one cursor and followed.
//!
//! Logs degrade per provider like everything else: an instance whose provider is disabled,
//! suspended, unavailable, has its breaker open or has no logs is left out of the page and
//! named in `missing` with the reason, while the other instances' lines keep coming. Each
//! provider's instances are read in one [`App::provider_call`], so its breaker hears of its
//! failures and a provider whose breaker is open is not called at all.
//!
//! The cursor holds, for each instance read so far, the provider's own cursor and how many of
//! the lines after it were already given (a provider's cursor points after a whole page; a page
//! of the service may end inside one), and the time the reading started: an instance that
//! appears later (a new deployment) is read from that time. It is opaque to clients, checked
//! like any other input (its instances must be the service's), and at most [`CURSOR_MAX`]
//! bytes.
//!
//! Lines of one page are in time order across instances: a page stops at the earliest last
//! line of the instances whose provider page was full (their next line may be earlier than
//! another instance's). Following, a provider slower to record a line can deliver it after
//! later lines of others were sent.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::app::App;
use crate::app::deploys::instances as states;
use crate::app::projects::scoped::scoped_find;
use crate::authz::Principal;
use crate::entity::{instance, service};
use crate::error::{AppError, AppResult, ErrorCode};
use crate::ids::{DeploymentId, ProjectId, ServiceId};
use crate::plugins::{LogLine, LogPage, LogRequest, LogStream, PluginError, ProviderError};

/// At most this many lines in a page.
pub const LINES_MAX: u32 = 1000;
/// Lines in a page unless the client asks for another number.
const LINES_DEFAULT: u32 = 100;
/// At most this much text in a page.
const PAGE_BYTES: usize = 1024 * 1024;
/// Each instance's provider is asked for at least this much text.
const INSTANCE_BYTES_MIN: usize = 64 * 1024;
/// A cursor longer than this is refused.
pub const CURSOR_MAX: usize = 64 * 1024;
/// A provider's cursor longer than this is refused (the contract's bound).
const PROVIDER_CURSOR_MAX: usize = 1000;
/// Provider calls one page makes at once.
const CALLS_AT_ONCE: usize = 16;
/// Followers of one project's logs at once, on one replica.
pub const FOLLOWERS_PER_PROJECT: usize = 20;
/// How often a follower reads again.
pub const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// What to read of a service's logs.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LogParams {
    /// Only the instances of this deployment.
    pub deployment: Option<Uuid>,
    /// Only this instance (its key).
    #[param(max_length = 63)]
    pub instance: Option<String>,
    /// Without a cursor: the first lines printed at or after this time (RFC 3339). With
    /// neither: the newest lines.
    pub since: Option<DateTime<Utc>>,
    /// Where the previous page ended (its `next_cursor`); a follower's `Last-Event-ID` takes
    /// its place.
    #[param(max_length = 65536)]
    pub cursor: Option<String>,
    /// Lines in the page: 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// Where a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogStreamName {
    Stdout,
    Stderr,
    /// The provider's note about the instance (started, exited, ...).
    System,
}

impl From<LogStream> for LogStreamName {
    fn from(stream: LogStream) -> Self {
        match stream {
            LogStream::Stdout => Self::Stdout,
            LogStream::Stderr => Self::Stderr,
            LogStream::System => Self::System,
        }
    }
}

/// One line an instance printed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LogLineView {
    /// When its provider recorded it.
    pub time: DateTime<Utc>,
    pub instance_key: String,
    pub deployment_id: Uuid,
    pub stream: LogStreamName,
    pub text: String,
}

/// An instance whose lines are not in the page, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LogsMissing {
    pub instance_key: String,
    pub provider: String,
    /// The problem code its provider's call came to (`provider_account_suspended`,
    /// `provider_unavailable`, `no_logs`, ...).
    pub code: ErrorCode,
    /// What the code means, in a sentence. Never the provider's own answer, which names the
    /// platform's accounts, hosts and resources: operators find it in the provider's events.
    pub detail: String,
}

impl LogsMissing {
    fn new(instance_key: &str, provider: &str, code: ErrorCode) -> Self {
        use ErrorCode::*;
        let why = match code {
            NoLogs => "keeps no logs",
            ProviderAccountSuspended => "reports its account suspended",
            ProviderDisabled => "is disabled",
            ProviderNotServing | ProviderUnavailable | ProviderRateLimited | ProviderTimeout => {
                "cannot be read now"
            }
            _ => "could not read this instance's lines",
        };
        Self {
            instance_key: instance_key.to_owned(),
            provider: provider.to_owned(),
            code,
            detail: format!("provider `{provider}` {why} ({code})"),
        }
    }
}

/// A page of a service's logs.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LogPageView {
    /// Oldest first.
    pub lines: Vec<LogLineView>,
    /// Where to read on from: give it as `cursor` (or follow).
    pub next_cursor: String,
    /// Instances left out of this page, and why; their lines come once they can be read.
    pub missing: Vec<LogsMissing>,
    /// Instances whose lines between the cursor and this page are no longer kept by their
    /// provider.
    pub gaps: Vec<String>,
}

/// Where reading stands for one instance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct InstanceCursor {
    /// The provider's cursor; none: from `since_ms`.
    #[serde(rename = "a", default, skip_serializing_if = "Option::is_none")]
    after: Option<String>,
    /// Lines after it already given.
    #[serde(rename = "s", default, skip_serializing_if = "is_zero")]
    skip: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The cursor of a service's logs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ServiceCursor {
    /// Instances not yet read are read from this time (ms since the Unix epoch).
    #[serde(rename = "t")]
    since_ms: u64,
    #[serde(rename = "i")]
    instances: BTreeMap<String, InstanceCursor>,
}

impl ServiceCursor {
    fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).expect("serializable"))
    }

    fn decode(text: &str) -> AppResult<Self> {
        let invalid = || AppError::new(ErrorCode::InvalidCursor, "not a cursor of these logs");
        if text.len() > CURSOR_MAX {
            return Err(invalid());
        }
        let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| invalid())?;
        let cursor: Self = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
        let too_long = cursor.instances.iter().any(|(key, at)| {
            key.len() > 63
                || at
                    .after
                    .as_ref()
                    .is_some_and(|after| after.len() > PROVIDER_CURSOR_MAX)
                || at.skip >= LINES_MAX
        });
        if too_long {
            return Err(invalid());
        }
        Ok(cursor)
    }
}

/// What was validated of a [`LogParams`]: the instances to read and where from.
#[derive(Debug, Clone)]
pub struct LogRead {
    project_id: ProjectId,
    service_id: ServiceId,
    deployment: Option<DeploymentId>,
    instance: Option<String>,
    since_ms: Option<u64>,
    cursor: Option<ServiceCursor>,
    limit: u32,
}

impl LogRead {
    /// Reads on from `cursor` (a follower's `Last-Event-ID`, or the page before's).
    pub fn resume(&mut self, cursor: &str) -> AppResult<()> {
        self.cursor = Some(ServiceCursor::decode(cursor)?);
        Ok(())
    }

    /// Reads on from `cursor` (where the last page ended).
    fn after(&mut self, cursor: ServiceCursor) {
        self.cursor = Some(cursor);
    }
}

/// One instance to read, as the database knows it.
struct Source {
    key: String,
    provider: String,
    deployment_id: Uuid,
}

/// What one instance's provider answered.
struct Read {
    source: usize,
    /// The lines after those already given, oldest first.
    lines: Vec<LogLine>,
    /// The provider's page held all it was asked for: more may follow its last line.
    full: bool,
    cursor_before: InstanceCursor,
    next: String,
    gap: bool,
}

/// Followers of each project's logs on this replica.
#[derive(Debug, Default)]
pub struct LogFollowers {
    open: Mutex<BTreeMap<ProjectId, usize>>,
}

/// A follower's place, given back when dropped.
pub struct FollowerPermit {
    followers: Arc<LogFollowers>,
    project_id: ProjectId,
}

impl LogFollowers {
    /// A place for one more follower of `project_id`'s logs, unless it has
    /// [`FOLLOWERS_PER_PROJECT`] already.
    pub fn admit(self: &Arc<Self>, project_id: ProjectId) -> AppResult<FollowerPermit> {
        let mut open = self.open.lock().expect("not poisoned");
        let count = open.entry(project_id).or_default();
        if *count >= FOLLOWERS_PER_PROJECT {
            return Err(AppError::new(
                ErrorCode::LimitReached,
                format!(
                    "this project's logs have {FOLLOWERS_PER_PROJECT} followers already; close one"
                ),
            ));
        }
        *count += 1;
        Ok(FollowerPermit {
            followers: self.clone(),
            project_id,
        })
    }
}

impl Drop for FollowerPermit {
    fn drop(&mut self) {
        let mut open = self.followers.open.lock().expect("not poisoned");
        if let Some(count) = open.get_mut(&self.project_id) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.project_id);
            }
        }
    }
}

fn ms_of(time: DateTime<Utc>) -> u64 {
    u64::try_from(time.timestamp_millis()).unwrap_or(0)
}

fn time_of(ms: u64) -> DateTime<Utc> {
    i64::try_from(ms)
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .unwrap_or_default()
}

impl App {
    /// Checks that `principal` may read the service's logs and what `params` asks for.
    pub async fn service_logs_authorize(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        service_id: ServiceId,
        params: LogParams,
    ) -> AppResult<LogRead> {
        self.project_stream_allowed(principal, project_id).await?;
        scoped_find::<service::Entity>(&self.db, project_id, service_id).await?;
        let limit = params.limit.unwrap_or(LINES_DEFAULT);
        if !(1..=LINES_MAX).contains(&limit) {
            return Err(AppError::invalid(format!(
                "`limit` must be 1 to {LINES_MAX}"
            )));
        }
        if let Some(key) = &params.instance
            && crate::app::shared::validate::slug_validate("instance", key).is_err()
        {
            return Err(AppError::invalid("`instance` is not an instance key"));
        }
        let cursor = params
            .cursor
            .as_deref()
            .map(ServiceCursor::decode)
            .transpose()?;
        if params
            .since
            .is_some_and(|since| since > Utc::now() + chrono::Duration::days(1))
        {
            return Err(AppError::invalid("`since` is in the future"));
        }
        Ok(LogRead {
            project_id,
            service_id,
            deployment: params.deployment.map(DeploymentId::from),
            instance: params.instance,
            since_ms: params.since.map(ms_of),
            cursor,
            limit,
        })
    }

    /// The instances `read` covers that may have output at their provider.
    async fn log_sources(&self, read: &LogRead) -> AppResult<Vec<Source>> {
        let mut select = instance::Entity::find()
            .filter(instance::Column::ProjectId.eq(read.project_id))
            .filter(instance::Column::ServiceId.eq(read.service_id))
            .filter(states::live())
            .order_by_asc(instance::Column::InstanceKey);
        if let Some(deployment) = read.deployment {
            select = select.filter(instance::Column::DeploymentId.eq(deployment));
        }
        if let Some(key) = &read.instance {
            select = select.filter(instance::Column::InstanceKey.eq(key.as_str()));
        }
        Ok(select
            .all(&self.db)
            .await?
            .into_iter()
            .map(|m| Source {
                key: m.instance_key,
                provider: m.provider,
                deployment_id: m.deployment_id.into(),
            })
            .collect())
    }

    /// A page of the service's logs (see the module documentation).
    pub async fn service_logs(&self, read: &LogRead) -> AppResult<LogPageView> {
        Ok(self.service_logs_read(read).await?.0)
    }

    /// A page of the service's logs, and the cursor after it.
    async fn service_logs_read(&self, read: &LogRead) -> AppResult<(LogPageView, ServiceCursor)> {
        let sources = self.log_sources(read).await?;
        let newest = read.cursor.is_none() && read.since_ms.is_none();
        let cursor = read.cursor.clone().unwrap_or_else(|| ServiceCursor {
            since_ms: read.since_ms.unwrap_or_else(|| ms_of(Utc::now())),
            instances: BTreeMap::new(),
        });
        let per_instance_bytes = (PAGE_BYTES / sources.len().max(1)).max(INSTANCE_BYTES_MIN) as u32;
        let mut by_provider: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (index, source) in sources.iter().enumerate() {
            by_provider.entry(&source.provider).or_default().push(index);
        }
        let mut reads = Vec::new();
        let mut missing = Vec::new();
        for (provider, indexes) in by_provider {
            let requests: Vec<(usize, InstanceCursor, LogRequest)> = indexes
                .iter()
                .map(|&index| {
                    let at = cursor
                        .instances
                        .get(&sources[index].key)
                        .cloned()
                        .unwrap_or_default();
                    let request = LogRequest {
                        since_ms: (at.after.is_none() && !newest).then_some(cursor.since_ms),
                        after: at.after.clone(),
                        max_lines: (at.skip + read.limit).min(LINES_MAX),
                        max_bytes: per_instance_bytes,
                    };
                    (index, at, request)
                })
                .collect();
            match self.provider_logs(provider, &sources, requests).await {
                Ok(answers) => {
                    for answer in answers {
                        match answer {
                            Ok(read) => reads.push(read),
                            Err((index, err)) => {
                                if err.code != ErrorCode::NotFound {
                                    missing.push(LogsMissing::new(
                                        &sources[index].key,
                                        provider,
                                        err.code,
                                    ));
                                }
                            }
                        }
                    }
                }
                Err(err) => missing.extend(
                    indexes
                        .iter()
                        .map(|&index| LogsMissing::new(&sources[index].key, provider, err.code)),
                ),
            }
        }
        Ok(merge(&sources, cursor, reads, missing, read.limit, newest))
    }

    /// Reads each requested instance of `provider` in one provider call: the call fails as a
    /// whole when the provider cannot be called (disabled, breaker open, no logs) or when one
    /// of its reads fails for the whole provider (suspended, unauthorized, unavailable);
    /// otherwise each instance's read stands alone (a deleted one is `not_found`).
    async fn provider_logs(
        &self,
        provider: &str,
        sources: &[Source],
        requests: Vec<(usize, InstanceCursor, LogRequest)>,
    ) -> AppResult<Vec<Result<Read, (usize, AppError)>>> {
        let keys: Vec<String> = requests
            .iter()
            .map(|(index, ..)| sources[*index].key.clone())
            .collect();
        let (_, answers) = self
            .provider_call(provider, false, async move |host, active| {
                let info = active
                    .info
                    .get_or_try_init(|| host.plugin_info(&active.plugin, &active.env))
                    .await?;
                if !info.capabilities.iter().any(|name| name == "logs") {
                    return Ok(None);
                }
                let mut answers: Vec<_> =
                    futures_util::stream::iter(requests.into_iter().zip(keys))
                        .map(|((index, at, request), key)| {
                            let active = active.clone();
                            async move {
                                let max_lines = request.max_lines;
                                let answer = host
                                    .plugin_logs(&active.plugin, &active.env, key, request)
                                    .await;
                                (index, at, max_lines, answer)
                            }
                        })
                        .buffered(CALLS_AT_ONCE)
                        .collect()
                        .await;
                // A failure of the whole provider fails the call, for its breaker.
                if let Some(at) = answers
                    .iter()
                    .position(|(.., answer)| matches!(answer, Err(err) if provider_wide(err)))
                    && let (.., Err(err)) = answers.swap_remove(at)
                {
                    return Err(err);
                }
                Ok(Some(answers))
            })
            .await?;
        let Some(answers) = answers else {
            return Err(AppError::new(
                ErrorCode::NoLogs,
                format!("provider `{provider}`'s plugin keeps no logs"),
            ));
        };
        Ok(answers
            .into_iter()
            .map(|(index, at, max_lines, answer)| match answer {
                Ok(page) => Ok(instance_read(index, at, max_lines, page)),
                Err(err) => Err((
                    index,
                    crate::app::providers::instances::plugin_error_to_api(provider, err),
                )),
            })
            .collect())
    }
}

/// Whether a failed read says the whole provider cannot be used now.
fn provider_wide(err: &PluginError) -> bool {
    match err {
        PluginError::Provider(error) => matches!(
            error,
            ProviderError::Unauthorized(_)
                | ProviderError::AccountSuspended(_)
                | ProviderError::Misconfigured(_)
                | ProviderError::RateLimited(_)
                | ProviderError::Unavailable(_)
        ),
        PluginError::Timeout(_) => true,
        _ => false,
    }
}

/// One instance's answer, less the lines given before.
fn instance_read(source: usize, at: InstanceCursor, max_lines: u32, page: LogPage) -> Read {
    let full = page.lines.len() >= max_lines as usize;
    let lines = page.lines.into_iter().skip(at.skip as usize).collect();
    Read {
        source,
        lines,
        full,
        cursor_before: at,
        next: page.next,
        gap: page.gap,
    }
}

/// The page the instances' reads make: their lines in time order, up to `limit` and
/// [`PAGE_BYTES`] (the newest ones, for a first page without a cursor or a time), stopping
/// where an instance may have earlier lines not yet read, and the cursor after them.
fn merge(
    sources: &[Source],
    mut cursor: ServiceCursor,
    reads: Vec<Read>,
    mut missing: Vec<LogsMissing>,
    limit: u32,
    newest: bool,
) -> (LogPageView, ServiceCursor) {
    // Past the earliest last line of a full page, another line of that instance may come first.
    let horizon = reads
        .iter()
        .filter(|read| read.full && !newest)
        .filter_map(|read| read.lines.last().map(|line| line.time_ms))
        .min();
    let mut order: Vec<(u64, usize, usize)> = reads
        .iter()
        .enumerate()
        .flat_map(|(r, read)| {
            read.lines
                .iter()
                .enumerate()
                .map(move |(i, line)| (line.time_ms, r, i))
        })
        .filter(|(time, ..)| horizon.is_none_or(|horizon| *time <= horizon))
        .collect();
    order.sort_by_key(|(time, r, i)| (*time, sources[reads[*r].source].key.clone(), *i));
    if newest {
        // The newest lines: every instance's cursor moves past its page.
        let skip = order.len().saturating_sub(limit as usize);
        order.drain(..skip);
    }
    let mut taken = vec![0usize; reads.len()];
    let mut lines = Vec::new();
    let mut bytes = 0;
    for (_, r, i) in order {
        let line = &reads[r].lines[i];
        if lines.len() >= limit as usize
            || (!lines.is_empty() && bytes + line.text.len() > PAGE_BYTES)
        {
            break;
        }
        bytes += line.text.len();
        taken[r] = taken[r].max(i + 1);
        let source = &sources[reads[r].source];
        lines.push(LogLineView {
            time: time_of(line.time_ms),
            instance_key: source.key.clone(),
            deployment_id: source.deployment_id,
            stream: line.stream.into(),
            text: line.text.clone(),
        });
    }
    let mut gaps = Vec::new();
    for (read, taken) in reads.iter().zip(taken) {
        let key = sources[read.source].key.clone();
        if read.gap {
            gaps.push(key.clone());
        }
        let at = if newest || taken == read.lines.len() {
            InstanceCursor {
                after: Some(read.next.clone()),
                skip: 0,
            }
        } else {
            InstanceCursor {
                after: read.cursor_before.after.clone(),
                skip: read.cursor_before.skip + taken as u32,
            }
        };
        cursor.instances.insert(key, at);
    }
    // Instances gone from the service are forgotten.
    cursor
        .instances
        .retain(|key, _| sources.iter().any(|source| &source.key == key));
    missing.sort_by(|a, b| a.instance_key.cmp(&b.instance_key));
    let page = LogPageView {
        lines,
        next_cursor: cursor.encode(),
        missing,
        gaps,
    };
    (page, cursor)
}

/// A follower's reads: each from where the last ended.
pub struct LogFollow {
    pub read: LogRead,
    /// What was said of missing instances last, to say it again only when it changes.
    missing: Vec<LogsMissing>,
    _permit: FollowerPermit,
}

impl LogFollow {
    pub fn new(read: LogRead, permit: FollowerPermit) -> Self {
        Self {
            read,
            missing: Vec::new(),
            _permit: permit,
        }
    }

    /// The next page, and whether it has anything new to say (lines, or other missing
    /// instances).
    pub async fn next(&mut self, app: &App) -> AppResult<Option<LogPageView>> {
        let (page, cursor) = app.service_logs_read(&self.read).await?;
        self.read.after(cursor);
        let news = !page.lines.is_empty() || page.missing != self.missing || !page.gaps.is_empty();
        self.missing = page.missing.clone();
        Ok(news.then_some(page))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(key: &str) -> Source {
        Source {
            key: key.into(),
            provider: "metal".into(),
            deployment_id: Uuid::nil(),
        }
    }

    fn line(time_ms: u64, text: &str) -> LogLine {
        LogLine {
            time_ms,
            stream: LogStream::Stdout,
            text: text.into(),
        }
    }

    fn read(source: usize, lines: Vec<LogLine>, full: bool, next: &str) -> Read {
        Read {
            source,
            lines,
            full,
            cursor_before: InstanceCursor::default(),
            next: next.into(),
            gap: false,
        }
    }

    fn texts(page: &LogPageView) -> Vec<&str> {
        page.lines.iter().map(|line| line.text.as_str()).collect()
    }

    #[test]
    fn lines_merge_by_time_and_stop_where_a_full_page_may_hide_earlier_ones() {
        let sources = [source("web-a"), source("web-b")];
        let reads = vec![
            read(0, vec![line(1, "a1"), line(5, "a5")], true, "a-next"),
            read(
                1,
                vec![line(2, "b2"), line(3, "b3"), line(9, "b9")],
                false,
                "b-next",
            ),
        ];
        let (page, _) = merge(&sources, ServiceCursor::default(), reads, vec![], 10, false);
        // a's page was full: b9 may come after a's next lines, so it waits.
        assert_eq!(texts(&page), ["a1", "b2", "b3", "a5"]);
        let cursor = ServiceCursor::decode(&page.next_cursor).unwrap();
        assert_eq!(cursor.instances["web-a"].after.as_deref(), Some("a-next"));
        assert_eq!(cursor.instances["web-b"].after, None, "b9 is still to come");
        assert_eq!(cursor.instances["web-b"].skip, 2);
    }

    #[test]
    fn a_page_ending_inside_an_instance_page_skips_what_it_gave_next_time() {
        let sources = [source("web-a")];
        let reads = vec![read(
            0,
            vec![line(1, "1"), line(2, "2"), line(3, "3")],
            false,
            "n3",
        )];
        let (page, _) = merge(&sources, ServiceCursor::default(), reads, vec![], 2, false);
        assert_eq!(texts(&page), ["1", "2"]);
        let cursor = ServiceCursor::decode(&page.next_cursor).unwrap();
        assert_eq!(
            cursor.instances["web-a"],
            InstanceCursor {
                after: None,
                skip: 2
            }
        );
        // The provider answers the same page again; the two given are skipped.
        let again = LogPage {
            lines: vec![line(1, "1"), line(2, "2"), line(3, "3")],
            next: "n3".into(),
            gap: false,
        };
        let read = instance_read(0, cursor.instances["web-a"].clone(), 4, again);
        let (page, _) = merge(&sources, cursor, vec![read], vec![], 2, false);
        assert_eq!(texts(&page), ["3"]);
        let cursor = ServiceCursor::decode(&page.next_cursor).unwrap();
        assert_eq!(cursor.instances["web-a"].after.as_deref(), Some("n3"));
        assert_eq!(cursor.instances["web-a"].skip, 0);
    }

    #[test]
    fn the_newest_lines_are_the_last_of_all_instances() {
        let sources = [source("web-a"), source("web-b")];
        let reads = vec![
            read(0, vec![line(1, "a1"), line(5, "a5")], true, "a"),
            read(1, vec![line(2, "b2"), line(9, "b9")], true, "b"),
        ];
        let (page, _) = merge(&sources, ServiceCursor::default(), reads, vec![], 3, true);
        assert_eq!(texts(&page), ["b2", "a5", "b9"]);
        let cursor = ServiceCursor::decode(&page.next_cursor).unwrap();
        assert_eq!(cursor.instances["web-a"].after.as_deref(), Some("a"));
        assert_eq!(cursor.instances["web-b"].after.as_deref(), Some("b"));
    }

    #[test]
    fn cursors_are_checked() {
        for bad in ["", "!!", "e30", &"A".repeat(CURSOR_MAX + 1)] {
            if bad == "e30" {
                // `{}`: no `t`.
                assert!(ServiceCursor::decode(bad).is_err());
                continue;
            }
            assert!(ServiceCursor::decode(bad).is_err(), "{bad}");
        }
        let mut cursor = ServiceCursor::default();
        cursor.instances.insert(
            "web-a".into(),
            InstanceCursor {
                after: Some("x".repeat(PROVIDER_CURSOR_MAX + 1)),
                skip: 0,
            },
        );
        assert!(ServiceCursor::decode(&cursor.encode()).is_err());
        cursor.instances.insert(
            "web-a".into(),
            InstanceCursor {
                after: None,
                skip: LINES_MAX,
            },
        );
        assert!(ServiceCursor::decode(&cursor.encode()).is_err());
        cursor.instances.clear();
        assert_eq!(ServiceCursor::decode(&cursor.encode()).unwrap(), cursor);
    }
}
