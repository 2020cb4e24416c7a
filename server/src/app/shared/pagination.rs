//! Cursor pagination, the same for every list: items are ordered by id (UUIDv7, so by creation
//! time) or by a unique name, and the cursor is the last key of a page, opaque to clients.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Select,
};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::view_cache::KeptView;
use crate::error::{AppError, AppResult, ErrorCode};
use crate::ids::{DeploymentId, EnvironmentId, InstanceId, ProjectId, ServiceId};

pub const DEFAULT_LIMIT: u64 = 50;
pub const MAX_LIMIT: u64 = 200;

/// Query parameters of every list.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// Items per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// The order of a list that can be read either way (by id, so by creation time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ListOrder {
    /// Oldest first.
    #[default]
    Asc,
    /// Newest first.
    Desc,
}

/// Query parameters of a list that can be read either way.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OrderedPageParams {
    /// `asc` (oldest first, the default) or `desc` (newest first). A cursor continues the
    /// order it was given in.
    pub order: Option<ListOrder>,
    /// Items per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

impl OrderedPageParams {
    /// The page wanted, and in which order.
    pub fn split(self) -> (PageParams, ListOrder) {
        let page = PageParams {
            limit: self.limit,
            cursor: self.cursor,
        };
        (page, self.order.unwrap_or_default())
    }
}

/// One page of a list.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            items: self.items.into_iter().map(f).collect(),
            next_cursor: self.next_cursor,
        }
    }

    /// [`Self::map`] with a conversion that may fail.
    pub fn try_map<U>(self, f: impl FnMut(T) -> AppResult<U>) -> AppResult<Page<U>> {
        Ok(Page {
            items: self
                .items
                .into_iter()
                .map(f)
                .collect::<AppResult<Vec<U>>>()?,
            next_cursor: self.next_cursor,
        })
    }
}

/// A page of views kept serialized ([`super::view_cache`]), written as a [`Page`] of them, with
/// a weak `ETag` made from its rows' ids and revisions (see [`ViewPage::new`]).
#[derive(Debug)]
pub struct ViewPage {
    pub items: Vec<Arc<KeptView>>,
    pub next_cursor: Option<String>,
    /// The weak tag, `W/"…"`.
    pub etag: String,
}

impl ViewPage {
    /// A page of the views of `table`'s rows (each with its id), and its tag: a hash of this
    /// build's version, the table, each row's id and revision, and the next page's cursor. A
    /// view being a function of its row's revision (as [`super::view_cache`] requires), equal
    /// tags mean equal pages, without serializing or hashing the page.
    pub fn new(table: &str, rows: Vec<(Uuid, Arc<KeptView>)>, next_cursor: Option<String>) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(env!("CARGO_PKG_VERSION"));
        hasher.update(b"\n");
        hasher.update(table);
        for (id, view) in &rows {
            hasher.update(id.as_bytes());
            hasher.update(view.revision.to_le_bytes());
        }
        if let Some(cursor) = &next_cursor {
            hasher.update(b"\n");
            hasher.update(cursor);
        }
        Self {
            etag: format!("W/\"{}\"", hex::encode(&hasher.finalize()[..16])),
            items: rows.into_iter().map(|(_, view)| view).collect(),
            next_cursor,
        }
    }
}

impl Serialize for ViewPage {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let items: Vec<&RawValue> = self.items.iter().map(|view| &*view.json).collect();
        let mut page = serializer.serialize_struct("Page", 2)?;
        page.serialize_field("items", &items)?;
        if let Some(cursor) = &self.next_cursor {
            page.serialize_field("next_cursor", cursor)?;
        }
        page.end()
    }
}

impl PageParams {
    fn limit(&self) -> AppResult<u64> {
        match self.limit.unwrap_or(DEFAULT_LIMIT) {
            limit @ 1..=MAX_LIMIT => Ok(limit),
            _ => Err(AppError::new(
                ErrorCode::InvalidQuery,
                format!("`limit` must be between 1 and {MAX_LIMIT}"),
            )),
        }
    }

    fn after<K: CursorKey>(&self) -> AppResult<Option<K>> {
        let Some(cursor) = &self.cursor else {
            return Ok(None);
        };
        URL_SAFE_NO_PAD
            .decode(cursor)
            .ok()
            .and_then(|bytes| K::from_cursor(&bytes))
            .map(Some)
            .ok_or_else(|| {
                AppError::new(
                    ErrorCode::InvalidCursor,
                    "`cursor` is not a cursor returned by this list",
                )
            })
    }
}

/// A key that lists are ordered by and that a cursor carries: a UUIDv7 id, or a unique name.
pub trait CursorKey: Sized + Into<sea_orm::Value> {
    fn to_cursor(&self) -> Vec<u8>;
    fn from_cursor(bytes: &[u8]) -> Option<Self>;
}

impl CursorKey for Uuid {
    fn to_cursor(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }

    fn from_cursor(bytes: &[u8]) -> Option<Self> {
        Uuid::from_slice(bytes).ok()
    }
}

impl CursorKey for String {
    fn to_cursor(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }

    fn from_cursor(bytes: &[u8]) -> Option<Self> {
        String::from_utf8(bytes.to_vec()).ok()
    }
}

/// A typed id's cursor is its UUID's.
macro_rules! uuid_cursor {
    ($($id:ty),*) => {
        $(
            impl CursorKey for $id {
                fn to_cursor(&self) -> Vec<u8> {
                    self.0.to_cursor()
                }

                fn from_cursor(bytes: &[u8]) -> Option<Self> {
                    Uuid::from_cursor(bytes).map(Self)
                }
            }
        )*
    };
}

uuid_cursor!(
    ProjectId,
    EnvironmentId,
    ServiceId,
    DeploymentId,
    InstanceId
);

/// Runs `select` for one page, ordered by `id_column`.
pub async fn paginate<E, C, K>(
    db: &impl ConnectionTrait,
    select: Select<E>,
    id_column: C,
    id_of: impl Fn(&E::Model) -> K,
    params: &PageParams,
) -> AppResult<Page<E::Model>>
where
    E: EntityTrait,
    C: ColumnTrait,
    K: CursorKey,
{
    paginate_ordered(db, select, id_column, id_of, params, ListOrder::Asc).await
}

/// [`paginate`] in `order`: newest first, each page's cursor is the oldest key it holds.
pub async fn paginate_ordered<E, C, K>(
    db: &impl ConnectionTrait,
    select: Select<E>,
    id_column: C,
    id_of: impl Fn(&E::Model) -> K,
    params: &PageParams,
    order: ListOrder,
) -> AppResult<Page<E::Model>>
where
    E: EntityTrait,
    C: ColumnTrait,
    K: CursorKey,
{
    let (select, limit) = page_select::<_, _, K>(select, id_column, params, order)?;
    let mut items = select.all(db).await?;
    let next_cursor = page_cut(&mut items, limit, id_of);
    Ok(Page { items, next_cursor })
}

/// `select` narrowed to one page in `order` after the cursor of `params`, asking for one row
/// more than the page's limit (to know whether another page follows); and that limit.
pub fn page_select<S, C, K>(
    select: S,
    id_column: C,
    params: &PageParams,
    order: ListOrder,
) -> AppResult<(S, u64)>
where
    S: QueryOrder + QueryFilter + QuerySelect,
    C: ColumnTrait,
    K: CursorKey,
{
    let limit = params.limit()?;
    let mut select = match order {
        ListOrder::Asc => select.order_by_asc(id_column),
        ListOrder::Desc => select.order_by_desc(id_column),
    }
    .limit(limit + 1);
    if let Some(after) = params.after::<K>()? {
        select = select.filter(match order {
            ListOrder::Asc => id_column.gt(after),
            ListOrder::Desc => id_column.lt(after),
        });
    }
    Ok((select, limit))
}

/// Cuts the rows of [`page_select`] to the page, and answers the cursor of the next page (the
/// last key of this one) when there is one.
pub fn page_cut<T, K: CursorKey>(
    items: &mut Vec<T>,
    limit: u64,
    key_of: impl Fn(&T) -> K,
) -> Option<String> {
    if items.len() as u64 <= limit {
        return None;
    }
    items.truncate(limit as usize);
    items
        .last()
        .map(|last| URL_SAFE_NO_PAD.encode(key_of(last).to_cursor()))
}
