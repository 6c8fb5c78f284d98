// The inbox's state and badge arithmetic, on the WebAssembly core: the same
// positions, watermark advance and classification the server computes.
// No DOM and no network here, so the arithmetic is what the tests compare.
//
// What the page knows: the items it has loaded (newest first), the watermarks
// it has been told or has moved itself, the items it read one by one, and the
// server's counts at the last full load. The badge is
//   (unread items among those loaded, by the core's classification)
// + (unread items older than the oldest loaded: the "tail", known only as a
//    count: the server's count at load time minus what the page counted).
// Marks move the tail to zero (a mark covers everything below the head).

/** @typedef {{unread: number, unseen: number, capped: boolean}} Badge */

export class InboxModel {
  /** @param {any} core the initialised wasm module (wasm/pkg/web) */
  constructor(core) {
    this.core = core;
    /** Checks of the optimistic badge against the server's after own marks;
     * kept across reloads, so drift over a whole session is counted. */
    this.stats = { checks: 0, drift: 0, lastMismatch: null };
    this.reset();
  }

  reset() {
    const { Position, ReadSet } = this.core;
    /** Loaded items, newest first: {item, pos, serverRead, serverSeen}. */
    this.entries = [];
    this.byId = new Map();
    this.seenMark = new Position(0n, 0n);
    this.readMark = new Position(0n, 0n);
    this.readSet = new ReadSet();
    this.head = null; // cursor string
    this.nextBefore = null;
    this.tail = { unread: 0, unseen: 0 };
    this.capped = false;
  }

  position(cursor) {
    return this.core.Position.fromCursor(cursor);
  }

  /** The first page of a full (re)load: items, head, counts. */
  load(page) {
    this.reset();
    this.merge(page.items);
    this.head = page.head;
    this.nextBefore = page.next_before;
    this.capped = page.counts_capped;
    this.retail(page.unread_count, page.unseen_count);
  }

  /** An older page (infinite scroll). Its items were in the tail. */
  appendOlder(page) {
    const before = this.loadedBadge();
    this.merge(page.items);
    const after = this.loadedBadge();
    this.tail.unread = Math.max(0, this.tail.unread - (after.unread - before.unread));
    this.tail.unseen = Math.max(0, this.tail.unseen - (after.unseen - before.unseen));
    this.nextBefore = page.next_before;
  }

  /** New items (a poll with `after`, or the stream). Returns those added. */
  merge(items) {
    const added = [];
    for (const item of items) {
      if (this.byId.has(item.id)) continue;
      const entry = {
        item,
        pos: this.position(item.cursor),
        serverRead: item.read,
        serverSeen: item.seen,
      };
      this.byId.set(item.id, entry);
      this.entries.push(entry);
      added.push(entry);
      if (this.head === null || entry.pos.compare(this.position(this.head)) > 0) {
        this.head = item.cursor;
      }
    }
    if (added.length) this.entries.sort((a, b) => b.pos.compare(a.pos));
    return added;
  }

  /** Whether `cursor` (a snapshot's head) is the newest position loaded. */
  isHead(cursor) {
    if (cursor === null || this.head === null) return cursor === this.head;
    return this.position(cursor).compare(this.position(this.head)) === 0;
  }

  /** Drops a team's items (left the team). The tail cannot say how many of
   * its items were the team's: the caller reloads. */
  dropTeam(teamId) {
    this.entries = this.entries.filter((e) => e.item.team_id !== teamId);
    this.byId = new Map(this.entries.map((e) => [e.item.id, e]));
  }

  state(entry) {
    const s = this.core.classifyItem(entry.pos, this.seenMark, this.readMark, this.readSet);
    const state = { seen: entry.serverSeen || s.seen || entry.serverRead, read: entry.serverRead || s.read };
    s.free();
    return state;
  }

  /** Counts over loaded items, with the core's `unreadCount`. */
  loadedBadge() {
    const { core } = this;
    const cap = core.badgeCap();
    const count = (filter, mark) => {
      const picked = this.entries.filter(filter);
      const txs = BigInt64Array.from(picked.map((e) => e.pos.tx));
      const ids = BigInt64Array.from(picked.map((e) => e.pos.id));
      const b = core.unreadCount(txs, ids, mark, this.readSet, cap);
      const n = b.count;
      b.free();
      return n;
    };
    const effectiveSeen =
      this.seenMark.compare(this.readMark) >= 0 ? this.seenMark : this.readMark;
    return {
      unread: count((e) => !e.serverRead, this.readMark),
      unseen: count((e) => !e.serverRead && !e.serverSeen, effectiveSeen),
    };
  }

  /** @returns {Badge} the optimistic badge */
  badge() {
    const loaded = this.loadedBadge();
    const cap = this.core.badgeCap();
    const unread = loaded.unread + this.tail.unread;
    const unseen = loaded.unseen + this.tail.unseen;
    return {
      unread: Math.min(unread, cap),
      unseen: Math.min(unseen, cap),
      capped: this.capped || unread > cap,
    };
  }

  /** Sets the tail so that the badge equals the server's counts. */
  retail(unread, unseen) {
    const loaded = this.loadedBadge();
    this.tail = { unread: Math.max(0, unread - loaded.unread), unseen: Math.max(0, unseen - loaded.unseen) };
  }

  // Local actions: the badge changes at once; the server's answer follows.

  markAllRead() {
    if (this.head === null) return null;
    const head = this.position(this.head);
    this.readMark = this.core.advanceWatermark(this.readMark, head, head);
    this.readSet.prune(this.readMark);
    this.tail = { unread: 0, unseen: 0 };
    return this.head;
  }

  markAllSeen() {
    if (this.head === null) return null;
    const head = this.position(this.head);
    this.seenMark = this.core.advanceWatermark(this.seenMark, head, head);
    this.tail.unseen = 0;
    return this.head;
  }

  markItemRead(id) {
    const entry = this.byId.get(id);
    if (!entry || this.state(entry).read) return false;
    if (entry.pos.compare(this.readMark) > 0) this.readSet.insert(entry.pos);
    return true;
  }

  /** Watermarks from the server (an answer to a mark, or the stream's
   * `marks`): they only move forward. */
  adoptMarks(marks) {
    const zero = () => new this.core.Position(0n, 0n);
    const seen = marks.seen ? this.position(marks.seen) : zero();
    const read = marks.read ? this.position(marks.read) : zero();
    if (seen.compare(this.seenMark) > 0) this.seenMark = seen;
    if (read.compare(this.readMark) > 0) {
      this.readMark = read;
      this.readSet.prune(read);
    }
  }

  /** The server's counts after one of this page's own marks: the optimistic
   * badge must already equal them (a mismatch is drift, then corrected). */
  checkAgainst(server) {
    if (server.counts_capped || this.capped) {
      this.capped = server.counts_capped;
      this.retail(server.unread_count, server.unseen_count);
      return true;
    }
    const mine = this.badge();
    this.stats.checks += 1;
    const same = mine.unread === server.unread_count && mine.unseen === server.unseen_count;
    if (!same) {
      this.stats.drift += 1;
      this.stats.lastMismatch = { optimistic: mine, server: { unread: server.unread_count, unseen: server.unseen_count } };
      this.retail(server.unread_count, server.unseen_count);
    }
    return same;
  }

  /** Counts that may include changes made elsewhere (other tabs, a poll):
   * adopted without counting drift. Zero means everything loaded is read
   * (or seen): the marks another tab moved, as far as this page can tell.
   * Returns false when the page must reload (see the body). */
  adoptCounts(server) {
    this.capped = server.counts_capped;
    const loaded = this.loadedBadge();
    if (!server.counts_capped && (loaded.unread > server.unread_count || loaded.unseen > server.unseen_count)) {
      // Fewer than the page holds: items left the feed (a team was left).
      return false;
    }
    if (!server.counts_capped && this.head !== null) {
      const head = this.position(this.head);
      if (server.unread_count === 0) {
        this.readMark = this.core.advanceWatermark(this.readMark, head, head);
        this.readSet.prune(this.readMark);
      }
      if (server.unseen_count === 0) {
        this.seenMark = this.core.advanceWatermark(this.seenMark, head, head);
      }
    }
    this.retail(server.unread_count, server.unseen_count);
    return true;
  }

  items() {
    return this.entries.map((e) => ({ ...e.item, ...this.state(e) }));
  }
}
