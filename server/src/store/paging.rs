//! Paging of list endpoints (deliveries, team members): one cursor format and
//! one helper.
//!
//! Lists are ordered by a unique key and paged by keyset: a page is the first
//! `limit` rows after the cursor's key. The cursor is the last key of the
//! previous page, as text, base64url-encoded without padding (so any key
//! survives a query string); clients treat it as opaque. Rows are fetched
//! `limit + 1` at a time, so `next_cursor` is present exactly when another
//! row exists: the last page has none, and nobody fetches an empty page.
//!
//! (A team-member cursor of the earlier format — base64url of the last user
//! id — is this format. A delivery cursor of the earlier format, the bare
//! decimal id, is refused with 400 `invalid_cursor`: digits never decode to
//! a decimal id, so an old cursor can fail but never page from a wrong place.)
//!
//! The feed is not a list in this sense: it pages by feed position, with the
//! core's checksummed cursors (`tidings_core::Position`).

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use tidings_core::UserId;

/// A key lists are ordered and paged by.
pub trait CursorKey: Sized {
    fn to_text(&self) -> String;
    fn from_text(text: &str) -> Option<Self>;
}

/// Delivery ids: positive integers.
impl CursorKey for i64 {
    fn to_text(&self) -> String {
        self.to_string()
    }

    fn from_text(text: &str) -> Option<Self> {
        text.parse().ok().filter(|id| *id > 0)
    }
}

/// Team members are ordered by user id.
impl CursorKey for UserId {
    fn to_text(&self) -> String {
        self.to_string()
    }

    fn from_text(text: &str) -> Option<Self> {
        UserId::parse(text).ok()
    }
}

/// Webhook endpoints are ordered by id (UUIDv7: creation order).
impl CursorKey for uuid::Uuid {
    fn to_text(&self) -> String {
        self.to_string()
    }

    fn from_text(text: &str) -> Option<Self> {
        text.parse().ok()
    }
}

/// An alert's deliveries are ordered by (recipient, channel, delivery id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertDeliveryKey {
    pub recipient_id: String,
    pub channel: String,
    pub id: i64,
}

impl CursorKey for AlertDeliveryKey {
    // Newline-separated, recipient last: ids and channel names never hold a
    // control character, and the recipient may hold anything else.
    fn to_text(&self) -> String {
        format!("{}\n{}\n{}", self.id, self.channel, self.recipient_id)
    }

    fn from_text(text: &str) -> Option<Self> {
        let mut parts = text.splitn(3, '\n');
        let id = parts.next()?.parse().ok().filter(|id: &i64| *id > 0)?;
        let channel = parts.next()?.to_string();
        let recipient_id = parts.next()?.to_string();
        Some(AlertDeliveryKey {
            recipient_id,
            channel,
            id,
        })
    }
}

/// Templates are ordered by (event type, channel).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateKey {
    pub event_type: String,
    pub channel: String,
}

impl CursorKey for TemplateKey {
    // Channel first: channel names hold no newline, event types no control
    // character at all.
    fn to_text(&self) -> String {
        format!("{}\n{}", self.channel, self.event_type)
    }

    fn from_text(text: &str) -> Option<Self> {
        let (channel, event_type) = text.split_once('\n')?;
        Some(TemplateKey {
            event_type: event_type.to_string(),
            channel: channel.to_string(),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PagingError {
    #[error("limit must be 1..={max}")]
    Limit { max: u32 },
    #[error("cursor is not one this API issued")]
    Cursor,
}

/// A page size: `1..=max`, `default` when absent.
pub fn limit(value: Option<u32>, default: u32, max: u32) -> Result<u32, PagingError> {
    let limit = value.unwrap_or(default);
    if (1..=max).contains(&limit) {
        Ok(limit)
    } else {
        Err(PagingError::Limit { max })
    }
}

/// Which page of a list to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest<K> {
    /// Rows strictly after this key; `None`: from the start.
    pub after: Option<K>,
    pub limit: u32,
}

impl<K: CursorKey> PageRequest<K> {
    pub fn parse(
        cursor: Option<&str>,
        limit: Option<u32>,
        default_limit: u32,
        max_limit: u32,
    ) -> Result<Self, PagingError> {
        let limit = self::limit(limit, default_limit, max_limit)?;
        let after = cursor.map(decode).transpose()?;
        Ok(PageRequest { after, limit })
    }

    /// How many rows to fetch: one more than the page, to learn whether
    /// another page exists.
    pub fn fetch_limit(&self) -> i64 {
        i64::from(self.limit) + 1
    }

    /// Cuts `rows` (fetched with [`fetch_limit`](Self::fetch_limit)) to the
    /// page, with a cursor when more rows exist.
    pub fn page<T>(&self, mut rows: Vec<T>, key: impl Fn(&T) -> &K) -> Page<T> {
        let limit = self.limit as usize;
        let next_cursor = if rows.len() > limit {
            rows.truncate(limit);
            rows.last().map(|last| encode(key(last)))
        } else {
            None
        };
        Page {
            items: rows,
            next_cursor,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Present exactly when rows exist after `items`.
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            items: self.items.into_iter().map(f).collect(),
            next_cursor: self.next_cursor,
        }
    }
}

fn encode<K: CursorKey>(key: &K) -> String {
    URL_SAFE_NO_PAD.encode(key.to_text())
}

fn decode<K: CursorKey>(cursor: &str) -> Result<K, PagingError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| PagingError::Cursor)?;
    let text = String::from_utf8(bytes).map_err(|_| PagingError::Cursor)?;
    K::from_text(&text).ok_or(PagingError::Cursor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(cursor: Option<&str>, limit: u32) -> PageRequest<i64> {
        PageRequest::parse(cursor, Some(limit), 50, 100).expect("valid")
    }

    #[test]
    fn a_cursor_only_when_more_rows_exist() {
        let two = request(None, 2);
        assert_eq!(two.fetch_limit(), 3);
        let full = two.page(vec![1i64, 2, 3], |r| r);
        assert_eq!(full.items, vec![1, 2]);
        let next = full.next_cursor.expect("a third row exists");
        assert_eq!(request(Some(&next), 2).after, Some(2));
        // Exactly `limit` rows: the last page, no cursor, no empty page after.
        assert_eq!(two.page(vec![3i64, 4], |r| r).next_cursor, None);
        assert_eq!(two.page(Vec::<i64>::new(), |r| r).next_cursor, None);
    }

    #[test]
    fn alert_delivery_cursors_round_trip_whatever_the_recipient_holds() {
        for recipient in ["m1", "a\\nb:c", "ünï cödé", "7"] {
            let key = AlertDeliveryKey {
                recipient_id: recipient.to_string(),
                channel: "webhook".to_string(),
                id: 42,
            };
            assert_eq!(decode::<AlertDeliveryKey>(&encode(&key)), Ok(key));
        }
        assert_eq!(
            decode::<AlertDeliveryKey>(&encode(&7i64)),
            Err(PagingError::Cursor)
        );
    }

    #[test]
    fn cursors_round_trip_any_user_id() {
        for id in ["m1", "a:b/c?d=e&f", "ünïcödé", "with space"] {
            let id = UserId::parse(id).expect("valid");
            let cursor = encode(&id);
            assert!(cursor
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
            assert_eq!(decode::<UserId>(&cursor), Ok(id));
        }
        // The member cursors issued before this module are this format.
        assert_eq!(encode(&UserId::parse("m2").expect("valid")), "bTI");
    }

    #[test]
    fn bad_cursors_and_limits_are_refused() {
        for bad in ["abc", "%%%", "", "MA", "LTE"] {
            // "MA" is "0" and "LTE" is "-1": not delivery ids.
            assert_eq!(
                PageRequest::<i64>::parse(Some(bad), None, 50, 100),
                Err(PagingError::Cursor),
                "{bad}"
            );
        }
        // Old delivery cursors (bare decimal ids) never decode to an id.
        for old in ["1", "42", "1234", "99999999"] {
            assert!(PageRequest::<i64>::parse(Some(old), None, 50, 100).is_err());
        }
        assert_eq!(
            limit(Some(0), 50, 100),
            Err(PagingError::Limit { max: 100 })
        );
        assert_eq!(
            limit(Some(101), 50, 100),
            Err(PagingError::Limit { max: 100 })
        );
        assert_eq!(limit(None, 50, 100), Ok(50));
    }
}
