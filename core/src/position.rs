//! Feed positions and the opaque cursors that carry them to clients.
//!
//! A cursor is 21 bytes — version `0x01`, `tx` and `id` as big-endian `i64`,
//! then the first 4 bytes of SHA-256 over the first 17 under a domain tag —
//! written as unpadded base64url: 28 characters, safe in a query string.
//!
//! The checksum is not a secret (anyone can compute it); it exists so that a
//! truncated, mangled or hand-edited cursor is refused with a clear error
//! instead of silently paging from a wrong place (ARCHITECTURE.md, invariant 10).

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::encoding::{tagged_digest, TAG_CURSOR};

/// A feed position: `tx` is the writing transaction's id (PostgreSQL `xid8`
/// stored as `bigint`), `id` a row id from one sequence shared by all feed
/// items. Ordered by `(tx, id)` — the derived `Ord` compares fields in
/// declaration order, which is exactly that. See ARCHITECTURE.md, invariant 2: rows
/// become visible in commit order, which `tx` follows and `id` does not.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
pub struct Position {
    pub tx: i64,
    pub id: i64,
}

const CURSOR_VERSION: u8 = 1;
const PAYLOAD_LEN: usize = 1 + 8 + 8;
const CHECKSUM_LEN: usize = 4;
const CURSOR_BYTES: usize = PAYLOAD_LEN + CHECKSUM_LEN;
/// Anything longer than this cannot be a cursor; refuse it before decoding.
const MAX_CURSOR_CHARS: usize = 64;

/// Why a cursor string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error("cursor is empty")]
    Empty,
    #[error("cursor is {len} characters long; a cursor is at most 64")]
    TooLong { len: usize },
    #[error("cursor is not valid base64url")]
    NotBase64,
    #[error("cursor decodes to {len} bytes; expected 21")]
    WrongLength { len: usize },
    #[error("cursor has unknown version {0}")]
    UnknownVersion(u8),
    #[error("cursor checksum does not match; it was truncated or altered")]
    ChecksumMismatch,
    #[error("cursor holds a negative position")]
    Negative,
}

impl Position {
    /// The position before every item: a new user's watermarks start here.
    pub const ORIGIN: Position = Position { tx: 0, id: 0 };

    pub const fn new(tx: i64, id: i64) -> Self {
        Position { tx, id }
    }

    /// Opaque cursor for this position. Positions from the database are never
    /// negative; a negative one still encodes, but
    /// [`from_cursor`](Self::from_cursor) refuses it.
    pub fn to_cursor(&self) -> String {
        let mut bytes = [0u8; CURSOR_BYTES];
        bytes[0] = CURSOR_VERSION;
        bytes[1..9].copy_from_slice(&self.tx.to_be_bytes());
        bytes[9..17].copy_from_slice(&self.id.to_be_bytes());
        let sum = checksum(&bytes[..PAYLOAD_LEN]);
        bytes[PAYLOAD_LEN..].copy_from_slice(&sum);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    pub fn from_cursor(s: &str) -> Result<Position, CursorError> {
        if s.is_empty() {
            return Err(CursorError::Empty);
        }
        if s.len() > MAX_CURSOR_CHARS {
            return Err(CursorError::TooLong { len: s.len() });
        }
        // The engine rejects padding, the standard alphabet's `+` and `/`, and
        // non-zero trailing bits, so each cursor has exactly one spelling.
        let bytes = URL_SAFE_NO_PAD
            .decode(s)
            .map_err(|_| CursorError::NotBase64)?;
        if bytes.len() != CURSOR_BYTES {
            return Err(CursorError::WrongLength { len: bytes.len() });
        }
        if bytes[0] != CURSOR_VERSION {
            return Err(CursorError::UnknownVersion(bytes[0]));
        }
        if checksum(&bytes[..PAYLOAD_LEN]) != bytes[PAYLOAD_LEN..] {
            return Err(CursorError::ChecksumMismatch);
        }
        let tx = i64::from_be_bytes(be8(&bytes[1..9]));
        let id = i64::from_be_bytes(be8(&bytes[9..17]));
        if tx < 0 || id < 0 {
            return Err(CursorError::Negative);
        }
        Ok(Position { tx, id })
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {})", self.tx, self.id)
    }
}

fn checksum(payload: &[u8]) -> [u8; CHECKSUM_LEN] {
    let digest = tagged_digest(TAG_CURSOR, [payload]);
    let mut sum = [0u8; CHECKSUM_LEN];
    sum.copy_from_slice(&digest[..CHECKSUM_LEN]);
    sum
}

fn be8(slice: &[u8]) -> [u8; 8] {
    let mut out = [0u8; 8];
    out.copy_from_slice(slice);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn positions_order_by_transaction_first_then_id() {
        // A row with a smaller id that committed in a later transaction comes
        // later: the order follows commit visibility, not id allocation.
        assert!(Position::new(1, 900) < Position::new(2, 5));
        assert!(Position::new(2, 5) < Position::new(2, 6));
        assert_eq!(Position::default(), Position::ORIGIN);
    }

    #[test]
    fn cursors_are_short_and_url_safe() {
        let c = Position::new(i64::MAX, i64::MAX).to_cursor();
        assert_eq!(c.len(), 28);
        assert!(c
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    }

    #[test]
    fn cursor_errors_are_typed() {
        let good = Position::new(7, 42).to_cursor();
        assert_eq!(Position::from_cursor(""), Err(CursorError::Empty));
        assert_eq!(
            Position::from_cursor(&"A".repeat(65)),
            Err(CursorError::TooLong { len: 65 })
        );
        assert_eq!(
            Position::from_cursor("not a cursor!"),
            Err(CursorError::NotBase64)
        );
        assert_eq!(
            Position::from_cursor(&format!("{good}=")),
            Err(CursorError::NotBase64)
        );
        assert_eq!(
            Position::from_cursor(&good[..24]),
            Err(CursorError::WrongLength { len: 18 })
        );
        let mut bytes = URL_SAFE_NO_PAD.decode(&good).expect("decodes");
        bytes[0] = 2;
        assert_eq!(
            Position::from_cursor(&URL_SAFE_NO_PAD.encode(&bytes)),
            Err(CursorError::UnknownVersion(2))
        );
        bytes[0] = 1;
        bytes[16] ^= 1;
        assert_eq!(
            Position::from_cursor(&URL_SAFE_NO_PAD.encode(&bytes)),
            Err(CursorError::ChecksumMismatch)
        );
        assert_eq!(
            Position::from_cursor(&Position::new(-1, 5).to_cursor()),
            Err(CursorError::Negative)
        );
        assert_eq!(
            Position::from_cursor(&Position::new(5, i64::MIN).to_cursor()),
            Err(CursorError::Negative)
        );
    }

    fn position() -> impl Strategy<Value = Position> {
        (0..=i64::MAX, 0..=i64::MAX).prop_map(|(tx, id)| Position::new(tx, id))
    }

    proptest! {
        #[test]
        fn every_nonnegative_position_round_trips(p in position()) {
            prop_assert_eq!(Position::from_cursor(&p.to_cursor()), Ok(p));
        }

        #[test]
        fn position_order_is_tuple_order(a in position(), b in position()) {
            prop_assert_eq!(a.cmp(&b), (a.tx, a.id).cmp(&(b.tx, b.id)));
        }

        #[test]
        fn any_truncation_is_rejected(p in position(), keep in 0usize..28) {
            let c = p.to_cursor();
            prop_assert!(Position::from_cursor(&c[..keep]).is_err());
        }

        #[test]
        fn any_single_bit_flip_is_rejected(p in position(), byte in 0usize..28, bit in 0u8..8) {
            let mut raw = p.to_cursor().into_bytes();
            raw[byte] ^= 1 << bit;
            // A flip may leave ASCII; compare as bytes, refuse as a string.
            let flipped = String::from_utf8_lossy(&raw).into_owned();
            prop_assert!(Position::from_cursor(&flipped).is_err());
        }

        #[test]
        fn garbage_is_rejected_without_panicking(s in "\\PC{0,80}") {
            // The odds that random text carries a valid 32-bit checksum are
            // negligible; a hit here would mean the check is not applied.
            prop_assert!(Position::from_cursor(&s).is_err());
        }

        #[test]
        fn well_formed_base64_with_a_wrong_checksum_is_rejected(bytes in proptest::collection::vec(any::<u8>(), 21)) {
            let mut bytes = bytes;
            bytes[0] = CURSOR_VERSION;
            let c = URL_SAFE_NO_PAD.encode(&bytes);
            let expected = checksum(&bytes[..PAYLOAD_LEN]);
            prop_assume!(expected[..] != bytes[PAYLOAD_LEN..]);
            prop_assert_eq!(Position::from_cursor(&c), Err(CursorError::ChecksumMismatch));
        }
    }
}
