// The README's flow through the typed client, against a live server
// (scripts/with-server sets TIDINGS_URL and TIDINGS_ADMIN_TOKEN). Compiled
// with `tsc --strict` first: a call the document does not declare, or a field
// used with the wrong type, fails the build before anything runs.
import assert from "node:assert/strict";
import { test } from "node:test";
import { createTidingsClient, type FeedOut, type TidingsClient } from "../src/index.js";

const baseUrl = process.env.TIDINGS_URL ?? "";
const adminToken = process.env.TIDINGS_ADMIN_TOKEN ?? "";

/** The body of a successful answer, or a failed assertion naming the problem. */
function ok<T>(answer: { data?: T; error?: unknown; response: Response }): T {
  assert.ok(answer.response.ok, `${answer.response.status}: ${JSON.stringify(answer.error)}`);
  assert.ok(answer.data !== undefined);
  return answer.data;
}

async function setUp(): Promise<{ backend: TidingsClient; alice: TidingsClient }> {
  assert.ok(baseUrl && adminToken, "run through scripts/with-server");
  const admin = createTidingsClient({ baseUrl, token: adminToken });
  const tenant = ok(await admin.POST("/v1/admin/tenants", { body: { name: "acme" } }));
  const backend = createTidingsClient({ baseUrl, token: tenant.api_key });
  for (const user of ["alice", "bob"]) {
    const member = await backend.PUT("/v1/teams/{team_id}/members/{user_id}", {
      params: { path: { team_id: "design", user_id: user } },
    });
    assert.equal(member.response.status, 201);
  }
  const minted = ok(
    await backend.POST("/v1/user-tokens", { body: { user_id: "alice", ttl_seconds: 3600 } }),
  );
  // A function: asked before each request, as a front end refreshing tokens would.
  const alice = createTidingsClient({ baseUrl, token: () => minted.token });
  return { backend, alice };
}

test("the README flow: events, feed pages, marks, counts, alerts", async () => {
  const { backend, alice } = await setUp();
  for (let i = 0; i < 3; i++) {
    const stored = await backend.POST("/v1/events", {
      body: {
        team_id: "design",
        type: "comment.created",
        actor_id: "bob",
        object_id: `doc-${i}`,
        payload: { text: `comment ${i}` },
      },
    });
    assert.equal(stored.response.status, 201);
    assert.match(ok(stored).cursor, /^[A-Za-z0-9_-]+$/);
  }

  const first: FeedOut = ok(await alice.GET("/v1/feed", { params: { query: { limit: 2 } } }));
  assert.equal(first.items.length, 2);
  assert.equal(first.unread_count, 3);
  // Always present, typed `string | null`: passed on as `before` without a cast.
  const before = first.next_before;
  assert.ok(before !== null);
  const older = ok(await alice.GET("/v1/feed", { params: { query: { limit: 2, before } } }));
  assert.equal(older.items.length, 1);
  assert.equal(older.next_before, null);
  assert.equal(older.items[0]?.payload["text"], "comment 0");

  const head = first.head;
  assert.ok(head !== null);
  const marked = ok(await alice.POST("/v1/feed/read", { body: { up_to: head } }));
  assert.equal(marked.unread_count, 0);
  assert.equal(marked.read, head);
  const counts = ok(await alice.GET("/v1/feed/counts"));
  assert.deepEqual(counts, { unread: 0, unseen: 0, capped: false });

  const alert = {
    event_type: "invoice.overdue",
    entity_id: "inv-42",
    recipients: ["alice"],
    channels: ["in_app" as const],
    subject: "Invoice 42 is overdue",
    payload: { amount: "120.00" },
  };
  const headers = { "Idempotency-Key": "inv-42-overdue" };
  const sent = await backend.POST("/v1/alerts", { body: alert, params: { header: headers } });
  assert.equal(sent.response.status, 202);
  const created = ok(sent);
  assert.equal(created.deliveries[0]?.status, "created");
  const again = await backend.POST("/v1/alerts", { body: alert, params: { header: headers } });
  assert.equal(again.response.headers.get("Idempotency-Replayed"), "true");
  assert.deepEqual(ok(again), created);

  const stored = ok(
    await backend.GET("/v1/alerts/{alert_id}", {
      params: { path: { alert_id: created.alert_id } },
    }),
  );
  // Named recipients: nothing expanded in the background, and the field says so.
  assert.equal(stored.expansion, null);
  assert.deepEqual(stored.channels, ["in_app"]);
  const feed = ok(await alice.GET("/v1/feed"));
  assert.equal(feed.items[0]?.source, "alert");
  assert.equal(feed.items[0]?.subject, "Invoice 42 is overdue");
  assert.equal(feed.unread_count, 1);
});

test("problems are typed and carry the stable code", async () => {
  const { alice } = await setUp();
  const bad = await alice.GET("/v1/feed", { params: { query: { before: "not-a-cursor" } } });
  assert.equal(bad.response.status, 400);
  assert.equal(bad.error?.code, "invalid_cursor");
});
