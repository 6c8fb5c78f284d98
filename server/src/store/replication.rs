//! Where the primary's WAL is and how far a hot standby has replayed it: the
//! statements behind read routing and read-your-writes (`crate::db::replicas`).
//! Positions travel as [`Lsn`], a byte offset into the WAL.

use std::{fmt, str::FromStr};

use sqlx::PgExecutor;

/// A WAL position (PostgreSQL's `pg_lsn`), written as PostgreSQL writes it:
/// two hexadecimal halves, `16/B374D848`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("not a WAL position (expected two hexadecimal halves, e.g. 16/B374D848)")]
pub struct BadLsn;

impl FromStr for Lsn {
    type Err = BadLsn;

    fn from_str(s: &str) -> Result<Self, BadLsn> {
        let (hi, lo) = s.split_once('/').ok_or(BadLsn)?;
        let half = |h: &str| {
            if h.is_empty() || h.len() > 8 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(BadLsn);
            }
            u32::from_str_radix(h, 16).map_err(|_| BadLsn)
        };
        Ok(Lsn((u64::from(half(hi)?) << 32) | u64::from(half(lo)?)))
    }
}

fn lsn_of(bytes: i64) -> Lsn {
    Lsn(u64::try_from(bytes).unwrap_or(0))
}

/// The primary's WAL insert position, as the end of the last record inserted.
/// Taken after a commit, it is at or past that commit's record whatever
/// `synchronous_commit` says (the write and flush positions may still be
/// behind an asynchronous commit).
///
/// When the last record ended exactly at a page's end, PostgreSQL reports the
/// insert position past the next page's header (24 bytes, 40 at a segment's
/// start), which no standby reports as replayed until another record comes:
/// on an idle primary a standby would look behind for as long as it stays
/// idle. No record ends inside a header, so the header's start is the same
/// bound.
pub async fn read_wal_insert_lsn(db: impl PgExecutor<'_>) -> Result<Lsn, sqlx::Error> {
    let bytes: i64 = sqlx::query_scalar(
        "SELECT CASE WHEN pos % pg_size_bytes(current_setting('wal_segment_size')) = 40 THEN pos - 40
                     WHEN pos % current_setting('wal_block_size')::bigint = 24 THEN pos - 24
                     ELSE pos END
         FROM (SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint AS pos) AS insert",
    )
    .fetch_one(db)
    .await?;
    Ok(lsn_of(bytes))
}

/// The primary's WAL write position: what a standby can have received by now.
pub async fn read_wal_write_lsn(db: impl PgExecutor<'_>) -> Result<Lsn, sqlx::Error> {
    let bytes: i64 = sqlx::query_scalar("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint")
        .fetch_one(db)
        .await?;
    Ok(lsn_of(bytes))
}

/// What a server says about itself as a standby: `None` when it is not one
/// (a primary, or a standby since promoted); else how far it has replayed.
pub async fn read_replay_lsn(db: impl PgExecutor<'_>) -> Result<Option<Lsn>, sqlx::Error> {
    let (in_recovery, bytes): (bool, Option<i64>) = sqlx::query_as(
        "SELECT pg_is_in_recovery(), (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint",
    )
    .fetch_one(db)
    .await?;
    Ok(in_recovery.then(|| lsn_of(bytes.unwrap_or(0))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_read_and_write_as_postgresql_spells_them() {
        for text in ["0/0", "16/B374D848", "FFFFFFFF/FFFFFFFF", "0/3000148"] {
            assert_eq!(text.parse::<Lsn>().unwrap().to_string(), text);
        }
        assert_eq!("1/0".parse::<Lsn>().unwrap(), Lsn(1 << 32));
        assert!("1/0".parse::<Lsn>().unwrap() > "0/FFFFFFFF".parse::<Lsn>().unwrap());
        for bad in [
            "",
            "/",
            "1/",
            "/1",
            "12",
            "1/2/3",
            "G/0",
            "123456789/0",
            "-1/0",
            " 1/0",
        ] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad:?}");
        }
    }
}
