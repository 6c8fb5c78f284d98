//! The one injective byte encoding that every hash in this crate is taken over.
//!
//! Each hashed message is `lp(tag) || lp(part_1) || … || lp(part_n)` where
//! `lp(x)` is the length of `x` in bytes as a big-endian `u64` followed by the
//! bytes of `x`. Length prefixes make the concatenation a prefix-free code, so
//! two different sequences of parts can never produce the same bytes (unlike
//! `format!("{a}:{b}")`, where `"a:b" + "c"` equals `"a" + "b:c"`). The tag
//! separates domains: a cursor checksum can never equal a lock key's input.
//!
//! **These bytes are frozen.** Golden vectors in `core/golden.json` pin them;
//! changing anything here changes every stored key.

use sha2::{Digest, Sha256};

/// Domain tag for notification key digests.
pub(crate) const TAG_NOTIFICATION_KEY: &str = "tidings/notification-key/v1";
/// Domain tag for advisory lock keys.
pub(crate) const TAG_LOCK_KEY: &str = "tidings/advisory-lock/v1";
/// Domain tag for feed cursor checksums.
pub(crate) const TAG_CURSOR: &str = "tidings/cursor/v1";

fn update_length_prefixed(hasher: &mut Sha256, bytes: &[u8]) {
    // `usize` is at most 64 bits on every target we build for (wasm32 is 32).
    hasher.update((bytes.len() as u64).to_be_bytes());
    hasher.update(bytes);
}

/// SHA-256 over the tagged, length-prefixed encoding of `parts`.
pub(crate) fn tagged_digest<'a>(tag: &str, parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    let mut hasher = Sha256::new();
    update_length_prefixed(&mut hasher, tag.as_bytes());
    for part in parts {
        update_length_prefixed(&mut hasher, part);
    }
    hasher.finalize().into()
}

/// Lowercase hexadecimal, two digits per byte.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_and_two_digits_per_byte() {
        assert_eq!(to_hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
    }

    #[test]
    fn moving_a_byte_between_parts_changes_the_digest() {
        let a = tagged_digest("t", [b"a:b".as_slice(), b"c".as_slice()]);
        let b = tagged_digest("t", [b"a".as_slice(), b"b:c".as_slice()]);
        assert_ne!(a, b);
    }

    #[test]
    fn the_tag_separates_domains() {
        let a = tagged_digest("one", [b"x".as_slice()]);
        let b = tagged_digest("two", [b"x".as_slice()]);
        assert_ne!(a, b);
    }

    #[test]
    fn empty_parts_are_not_the_same_as_no_parts() {
        let none = tagged_digest("t", std::iter::empty::<&[u8]>());
        let one_empty = tagged_digest("t", [b"".as_slice()]);
        assert_ne!(none, one_empty);
    }
}
