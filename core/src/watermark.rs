//! Seen/read watermarks and badge arithmetic (ARCHITECTURE.md, invariant 3).
//!
//! A user has two watermarks: everything at or below `seen` has been shown in
//! the bell, everything at or below `read` has been opened. Items read one by
//! one above the read watermark live in a bounded [`ReadSet`]. The server keeps
//! these in PostgreSQL and the browser keeps a copy; both compute with the
//! functions below so they always agree.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::position::Position;

/// How many items may be read individually above the read watermark. Past
/// this the client should mark all read (which prunes the set); the bound
/// keeps the per-user row small and every request's work constant.
pub const MAX_INDIVIDUAL_READS: usize = 1000;

/// Badges stop counting here and show "999+"-style text instead: a user does
/// not read a thousand notifications, and counting them all costs a scan.
pub const BADGE_CAP: u32 = 1000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatermarkError {
    #[error("too many items read individually (limit {max}); mark all as read instead")]
    Full { max: usize },
}

/// The new watermark: `max(current, min(proposed, head))`.
///
/// `proposed` is what the client says it saw or read; clamping to `head` (the
/// newest position the server could have shown it) stops a client from marking
/// future items, and taking the max with `current` makes a late or replayed
/// request harmless: a watermark never moves back.
pub fn advance(current: Position, proposed: Position, head: Position) -> Position {
    current.max(proposed.min(head))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Watermarks {
    pub seen: Position,
    pub read: Position,
}

impl Watermarks {
    /// Moves `seen` by [`advance`]; returns whether it changed (so the server
    /// can skip a write and the client a re-render).
    pub fn advance_seen(&mut self, proposed: Position, head: Position) -> bool {
        let next = advance(self.seen, proposed, head);
        let changed = next != self.seen;
        self.seen = next;
        changed
    }

    /// Moves `read` by [`advance`]. Leaves `seen` alone: the two are stored
    /// separately, and [`classify`] already treats read items as seen.
    pub fn advance_read(&mut self, proposed: Position, head: Position) -> bool {
        let next = advance(self.read, proposed, head);
        let changed = next != self.read;
        self.read = next;
        changed
    }

    /// The mark to count *unseen* items against: reading implies seeing, so
    /// an item below the read watermark is never unseen.
    pub fn effective_seen(&self) -> Position {
        self.seen.max(self.read)
    }
}

/// Items read one by one above the read watermark. Bounded by
/// [`MAX_INDIVIDUAL_READS`]; [`ReadSet::prune`] drops entries the watermark
/// has overtaken.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "Vec<Position>", into = "Vec<Position>")]
pub struct ReadSet {
    items: BTreeSet<Position>,
}

impl ReadSet {
    pub fn new() -> Self {
        ReadSet::default()
    }

    /// Adds `p`; `Ok(true)` if it was new, `Ok(false)` if already present.
    /// Refuses a new entry when full rather than evicting one, because
    /// evicting would silently turn a read item unread again.
    pub fn insert(&mut self, p: Position) -> Result<bool, WatermarkError> {
        if self.items.contains(&p) {
            return Ok(false);
        }
        if self.items.len() >= MAX_INDIVIDUAL_READS {
            return Err(WatermarkError::Full {
                max: MAX_INDIVIDUAL_READS,
            });
        }
        Ok(self.items.insert(p))
    }

    pub fn contains(&self, p: Position) -> bool {
        self.items.contains(&p)
    }

    /// Drops every entry at or below `read_mark`: the watermark covers them.
    pub fn prune(&mut self, read_mark: Position) {
        self.items = self.items.split_off(&read_mark);
        self.items.remove(&read_mark);
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Entries in position order.
    pub fn iter(&self) -> impl Iterator<Item = Position> + '_ {
        self.items.iter().copied()
    }
}

impl TryFrom<Vec<Position>> for ReadSet {
    type Error = WatermarkError;

    fn try_from(positions: Vec<Position>) -> Result<Self, Self::Error> {
        let mut set = ReadSet::new();
        for p in positions {
            set.insert(p)?;
        }
        Ok(set)
    }
}

impl From<ReadSet> for Vec<Position> {
    fn from(set: ReadSet) -> Self {
        set.items.into_iter().collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemState {
    pub seen: bool,
    pub read: bool,
}

/// An item is read if at or below the read watermark or in the read set; it is
/// seen if at or below the seen watermark or read (reading implies seeing).
pub fn classify(item: Position, marks: &Watermarks, individually_read: &ReadSet) -> ItemState {
    item_state(item, marks, individually_read.contains(item))
}

/// What a delayed delivery (an email or webhook sent only if the in-app
/// item is still unread) waits on: the item being read, or being seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unless {
    Read,
    Seen,
}

impl Unless {
    pub const fn as_str(self) -> &'static str {
        match self {
            Unless::Read => "read",
            Unless::Seen => "seen",
        }
    }

    pub fn parse(s: &str) -> Option<Unless> {
        match s {
            "read" => Some(Unless::Read),
            "seen" => Some(Unless::Seen),
            _ => None,
        }
    }

    /// The watermark this condition is decided against, the one a decision
    /// records: the read watermark, or the later of the two for `seen`
    /// (reading implies seeing, [`Watermarks::effective_seen`]).
    pub fn mark(self, marks: &Watermarks) -> Position {
        match self {
            Unless::Read => marks.read,
            Unless::Seen => marks.effective_seen(),
        }
    }
}

/// The decision on a delayed delivery whose delay has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    Send,
    /// Not sent: the item was read (by a watermark or one by one).
    SkipRead,
    /// Not sent: the item was seen, not read.
    SkipSeen,
}

/// Whether a delayed delivery of the in-app item at `item` goes out, given
/// the user's watermarks and whether the item was read one by one, all read
/// under the lock every read path takes (the server's claim). The same
/// [`classify`] the badges use decides, so the email never disagrees with
/// the bell: an item the badge does not count as unread (or unseen) is not
/// emailed. A user with no watermarks yet is at the origin: everything is
/// unread, and the delivery is sent.
pub fn decide_fallback(
    item: Position,
    unless: Unless,
    marks: &Watermarks,
    read_one_by_one: bool,
) -> Fallback {
    let state = item_state(item, marks, read_one_by_one);
    match unless {
        _ if state.read => Fallback::SkipRead,
        Unless::Seen if state.seen => Fallback::SkipSeen,
        _ => Fallback::Send,
    }
}

/// What a digest's flush decided: the items the email holds, in feed order
/// (newest first), or why there is none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DigestContent {
    /// Indexes into the items given, of those still unread (unseen).
    Send(Vec<usize>),
    /// Every item was read (`SkipRead`) or seen (`SkipSeen`, when some was
    /// seen and not read) before the flush.
    Empty(Fallback),
}

/// The content of a digest at its flush: each item is kept when
/// [`decide_fallback`] would send it, decided against the same watermarks
/// and one-by-one reads, read under the user's lock. `items`: each item's
/// position and whether it was read one by one.
pub fn decide_digest(
    items: &[(Position, bool)],
    unless: Unless,
    marks: &Watermarks,
) -> DigestContent {
    let mut keep = Vec::new();
    let mut any_seen_only = false;
    for (index, &(item, one_by_one)) in items.iter().enumerate() {
        match decide_fallback(item, unless, marks, one_by_one) {
            Fallback::Send => keep.push(index),
            Fallback::SkipSeen => any_seen_only = true,
            Fallback::SkipRead => {}
        }
    }
    keep.sort_by(|&a, &b| items[b].0.cmp(&items[a].0));
    match keep.is_empty() {
        false => DigestContent::Send(keep),
        true if any_seen_only => DigestContent::Empty(Fallback::SkipSeen),
        true => DigestContent::Empty(Fallback::SkipRead),
    }
}

fn item_state(item: Position, marks: &Watermarks, read_one_by_one: bool) -> ItemState {
    let read = item <= marks.read || read_one_by_one;
    ItemState {
        seen: read || item <= marks.seen,
        read,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadgeCount {
    pub count: u32,
    /// True when there are more than `count` (the badge reads "cap+").
    pub capped: bool,
}

/// Counts positions above `mark` that are not in `individually_read`,
/// stopping at `cap`: when more than `cap` qualify the result is
/// `count == cap, capped == true`; exactly `cap` is not capped. Each position
/// in the input counts once per occurrence; the feed never repeats one.
///
/// Unread: `mark` is the read watermark. Unseen: `mark` is
/// [`Watermarks::effective_seen`], with the same read set — an item read one
/// by one is seen too ([`classify`]), and the server's badge SQL counts it as
/// neither.
pub fn unread_count(
    positions: impl IntoIterator<Item = Position>,
    mark: Position,
    individually_read: &ReadSet,
    cap: u32,
) -> BadgeCount {
    let mut count = 0u32;
    for p in positions {
        if p <= mark || individually_read.contains(p) {
            continue;
        }
        if count >= cap {
            return BadgeCount {
                count,
                capped: true,
            };
        }
        count += 1;
    }
    BadgeCount {
        count,
        capped: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const fn p(tx: i64, id: i64) -> Position {
        Position::new(tx, id)
    }

    #[test]
    fn advance_never_moves_back_and_never_passes_the_head() {
        assert_eq!(advance(p(5, 5), p(3, 9), p(9, 9)), p(5, 5), "late request");
        assert_eq!(advance(p(5, 5), p(7, 1), p(9, 9)), p(7, 1), "normal");
        assert_eq!(advance(p(5, 5), p(12, 0), p(9, 9)), p(9, 9), "beyond head");
        // A head behind the current mark (a replica lagging) must not pull back.
        assert_eq!(advance(p(5, 5), p(9, 9), p(4, 0)), p(5, 5));
    }

    #[test]
    fn advance_reports_whether_anything_changed() {
        let mut m = Watermarks::default();
        assert!(m.advance_seen(p(2, 1), p(3, 0)));
        assert!(!m.advance_seen(p(1, 0), p(3, 0)));
        assert!(m.advance_read(p(1, 0), p(3, 0)));
        assert_eq!(
            m,
            Watermarks {
                seen: p(2, 1),
                read: p(1, 0)
            }
        );
        assert_eq!(m.effective_seen(), p(2, 1));
    }

    #[test]
    fn reading_implies_seeing() {
        let marks = Watermarks {
            seen: p(1, 0),
            read: p(2, 0),
        };
        let mut set = ReadSet::new();
        set.insert(p(5, 0)).expect("room");
        assert_eq!(
            classify(p(2, 0), &marks, &set),
            ItemState {
                seen: true,
                read: true
            }
        );
        assert_eq!(
            classify(p(5, 0), &marks, &set),
            ItemState {
                seen: true,
                read: true
            }
        );
        assert_eq!(
            classify(p(4, 0), &marks, &set),
            ItemState {
                seen: false,
                read: false
            }
        );
        let marks = Watermarks {
            seen: p(9, 0),
            read: p(2, 0),
        };
        assert_eq!(
            classify(p(4, 0), &marks, &set),
            ItemState {
                seen: true,
                read: false
            }
        );
    }

    #[test]
    fn read_set_is_bounded_and_refuses_rather_than_forgets() {
        let mut set = ReadSet::new();
        for i in 0..MAX_INDIVIDUAL_READS as i64 {
            assert_eq!(set.insert(p(1, i)), Ok(true));
        }
        assert_eq!(
            set.insert(p(1, 0)),
            Ok(false),
            "duplicates are fine when full"
        );
        assert_eq!(
            set.insert(p(2, 0)),
            Err(WatermarkError::Full {
                max: MAX_INDIVIDUAL_READS
            })
        );
        assert!(set.contains(p(1, 0)));
        set.prune(p(1, 499));
        assert_eq!(set.len(), 500);
        assert!(!set.contains(p(1, 499)));
        assert!(set.contains(p(1, 500)));
        assert_eq!(set.insert(p(2, 0)), Ok(true));
    }

    #[test]
    fn read_set_deserialisation_enforces_the_bound() {
        let many: Vec<Position> = (0..=MAX_INDIVIDUAL_READS as i64).map(|i| p(0, i)).collect();
        let json = serde_json::to_string(&many).expect("serialise");
        assert!(serde_json::from_str::<ReadSet>(&json).is_err());
        let few = serde_json::to_string(&many[..3]).expect("serialise");
        assert_eq!(
            serde_json::from_str::<ReadSet>(&few)
                .expect("deserialise")
                .len(),
            3
        );
    }

    #[test]
    fn badge_caps_only_when_more_than_cap_exist() {
        let none = ReadSet::new();
        let items = |n: i64| (1..=n).map(|i| p(i, i));
        assert_eq!(
            unread_count(items(3), Position::ORIGIN, &none, 3),
            BadgeCount {
                count: 3,
                capped: false
            }
        );
        assert_eq!(
            unread_count(items(4), Position::ORIGIN, &none, 3),
            BadgeCount {
                count: 3,
                capped: true
            }
        );
        assert_eq!(
            unread_count(items(4), p(2, 2), &none, 3),
            BadgeCount {
                count: 2,
                capped: false
            }
        );
        let mut read = ReadSet::new();
        read.insert(p(4, 4)).expect("room");
        assert_eq!(
            unread_count(items(4), p(2, 2), &read, 3),
            BadgeCount {
                count: 1,
                capped: false
            }
        );
        assert_eq!(
            unread_count(items(1), Position::ORIGIN, &none, 0),
            BadgeCount {
                count: 0,
                capped: true
            }
        );
    }

    #[test]
    fn a_fallback_waits_on_its_own_mark() {
        let item = p(5, 0);
        let origin = Watermarks::default();
        assert_eq!(
            decide_fallback(item, Unless::Read, &origin, false),
            Fallback::Send,
            "no watermarks yet: unread"
        );
        let seen_only = Watermarks {
            seen: p(5, 0),
            read: p(4, 9),
        };
        assert_eq!(
            decide_fallback(item, Unless::Read, &seen_only, false),
            Fallback::Send
        );
        assert_eq!(
            decide_fallback(item, Unless::Seen, &seen_only, false),
            Fallback::SkipSeen
        );
        assert_eq!(
            decide_fallback(item, Unless::Seen, &seen_only, true),
            Fallback::SkipRead,
            "read one by one: read, so seen"
        );
        let read_at_item = Watermarks {
            seen: Position::ORIGIN,
            read: item,
        };
        assert_eq!(
            decide_fallback(item, Unless::Read, &read_at_item, false),
            Fallback::SkipRead,
            "a watermark at the item covers it"
        );
        assert_eq!(Unless::Seen.mark(&read_at_item), item);
        assert_eq!(Unless::parse("seen"), Some(Unless::Seen));
        assert_eq!(Unless::parse("opened"), None);
    }

    fn position() -> impl Strategy<Value = Position> {
        (0i64..6, 0i64..6).prop_map(|(tx, id)| p(tx, id))
    }

    proptest! {
        #[test]
        fn watermarks_are_monotonic_and_bounded_by_the_highest_head(
            calls in proptest::collection::vec((any::<bool>(), position(), position()), 0..40)
        ) {
            let mut marks = Watermarks::default();
            let mut max_head = Position::ORIGIN;
            for (is_read, proposed, head) in calls {
                let before = marks;
                max_head = max_head.max(head);
                let changed = if is_read {
                    marks.advance_read(proposed, head)
                } else {
                    marks.advance_seen(proposed, head)
                };
                prop_assert!(marks.seen >= before.seen && marks.read >= before.read);
                prop_assert!(marks.seen <= max_head && marks.read <= max_head);
                prop_assert_eq!(changed, marks != before);
            }
        }

        #[test]
        fn unread_count_matches_a_naive_model(
            positions in proptest::collection::btree_set(position(), 0..30),
            mark in position(),
            read in proptest::collection::vec(position(), 0..10),
            cap in 0u32..12,
        ) {
            let set = ReadSet::try_from(read.clone()).expect("small");
            let naive = positions
                .iter()
                .filter(|&&q| q > mark && !read.contains(&q))
                .count() as u32;
            let expected = BadgeCount { count: naive.min(cap), capped: naive > cap };
            prop_assert_eq!(unread_count(positions.iter().copied(), mark, &set, cap), expected);
        }

        #[test]
        fn a_fallback_is_sent_exactly_when_the_badge_still_counts_the_item(
            item in position(),
            seen in position(),
            read in position(),
            one_by_one in any::<bool>(),
        ) {
            let marks = Watermarks { seen, read };
            let mut set = ReadSet::new();
            if one_by_one {
                set.insert(item).expect("room");
            }
            let unread = unread_count([item], marks.read, &set, BADGE_CAP).count == 1;
            let unseen = unread_count([item], marks.effective_seen(), &set, BADGE_CAP).count == 1;
            let on_read = decide_fallback(item, Unless::Read, &marks, one_by_one);
            let on_seen = decide_fallback(item, Unless::Seen, &marks, one_by_one);
            prop_assert_eq!(on_read == Fallback::Send, unread);
            prop_assert_eq!(on_seen == Fallback::Send, unseen);
            // Seen is the weaker condition: whatever waits on `read` and is
            // skipped is skipped when waiting on `seen` too.
            prop_assert!(on_read == Fallback::Send || on_seen != Fallback::Send);
            // Skipped only when the recorded mark covers the item or it was
            // read one by one: what `GET /v1/alerts/{id}` explains.
            if on_read == Fallback::Send {
                prop_assert!(item > Unless::Read.mark(&marks));
            } else {
                prop_assert!(item <= Unless::Read.mark(&marks) || one_by_one);
            }
        }

        #[test]
        fn a_later_watermark_never_turns_a_skip_into_a_send(
            item in position(),
            first in position(),
            proposed in position(),
            head in position(),
            unless in prop_oneof![Just(Unless::Read), Just(Unless::Seen)],
        ) {
            let mut marks = Watermarks { seen: first, read: first };
            let before = decide_fallback(item, unless, &marks, false);
            marks.advance_read(proposed, head);
            marks.advance_seen(proposed, head);
            let after = decide_fallback(item, unless, &marks, false);
            prop_assert!(before == Fallback::Send || after != Fallback::Send);
        }

        #[test]
        fn prune_removes_exactly_what_the_mark_covers(
            read in proptest::collection::btree_set(position(), 0..20),
            mark in position(),
        ) {
            let mut set = ReadSet::try_from(read.iter().copied().collect::<Vec<_>>()).expect("small");
            set.prune(mark);
            let kept: Vec<Position> = read.iter().copied().filter(|&q| q > mark).collect();
            prop_assert_eq!(set.iter().collect::<Vec<_>>(), kept);
        }
    }

    #[test]
    fn a_digest_keeps_the_unread_items_newest_first_and_says_why_it_is_empty() {
        let p = |tx, id| Position::new(tx, id);
        let marks = Watermarks {
            seen: p(20, 1),
            read: p(10, 1),
        };
        let items = [
            (p(5, 1), false),
            (p(30, 1), false),
            (p(15, 1), false),
            (p(40, 1), true),
        ];
        // Read: 5 (below the read mark) and 40 (one by one); 15 is only seen.
        assert_eq!(
            decide_digest(&items, Unless::Read, &marks),
            DigestContent::Send(vec![1, 2])
        );
        assert_eq!(
            decide_digest(&items, Unless::Seen, &marks),
            DigestContent::Send(vec![1])
        );
        let read = [(p(5, 1), false), (p(40, 1), true)];
        assert_eq!(
            decide_digest(&read, Unless::Seen, &marks),
            DigestContent::Empty(Fallback::SkipRead)
        );
        let seen = [(p(5, 1), false), (p(15, 1), false)];
        assert_eq!(
            decide_digest(&seen, Unless::Seen, &marks),
            DigestContent::Empty(Fallback::SkipSeen)
        );
        // No watermarks yet (the user never opened the app): all unread.
        assert_eq!(
            decide_digest(&seen, Unless::Read, &Watermarks::default()),
            DigestContent::Send(vec![1, 0])
        );
    }
}
