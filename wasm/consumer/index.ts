// Uses @tidings/core as an installed package (not a path into the repo),
// type-checked under --strict, then run by Node: the `node` export condition
// must give the CommonJS build and its types.
import assert from "node:assert/strict";
import * as core from "@tidings/core";

const a = new core.Position(10n, 1n);
const b = core.Position.fromCursor(new core.Position(12n, 7n).toCursor());
assert.equal(a.compare(b), -1);
const head = new core.Position(11n, 3n);
const mark: core.Position = core.advanceWatermark(a, b, head);
assert.equal(mark.toString(), head.toString());

const readSet = new core.ReadSet();
readSet.insert(b);
const state = core.classifyItem(b, a, a, readSet);
assert.deepEqual([state.seen, state.read], [true, true]);
const badge = core.unreadCount(BigInt64Array.of(12n, 13n), BigInt64Array.of(7n, 8n), a, readSet, core.badgeCap());
assert.equal(badge.count, 1);

const key = core.deriveKey("acme", "invoice.overdue", "inv-42", "alice", "email");
assert.match(key.digestHex, /^[0-9a-f]{64}$/);
assert.equal(core.parseReadableKey(key.readable).recipientId, "alice");
console.log("@tidings/core installed from its tarball works under tsc --strict");
