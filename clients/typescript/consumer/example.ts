// @tidings/client as a user gets it: installed from its tarball into this
// project, compiled with `tsc --strict`, run against a live server
// (scripts/with-server: TIDINGS_URL, TIDINGS_ADMIN_TOKEN; rate limits on and
// webhooks to loopback allowed, as consumer/run asks for).
//
// The flow of the README: a backend mints a user token and posts events and
// an alert with idempotency keys; a front end pages the feed, marks all
// read and streams. Then what the stream and the retries promise: an item
// within a second, a resume without gap or duplicate after the connection is
// closed under it, a reset turned into a refetch, 429 Retry-After honoured
// and retries bounded; and a real webhook verified.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import {
  createTidingsClient,
  feedItems,
  ok,
  openStream,
  TidingsError,
  type FeedItem,
  type FeedPage,
  type MarksEvent,
  type ProblemCode,
  type RetryNotice,
  type TidingsClient,
} from "@tidings/client";
import {
  createBackendClient,
  mintUserToken,
  postAlert,
  postEvent,
  verifyWebhook,
  WebhookVerificationError,
} from "@tidings/client/server";
import { Relay } from "./relay.js";

const baseUrl = process.env.TIDINGS_URL ?? "";
const adminToken = process.env.TIDINGS_ADMIN_TOKEN ?? "";
assert.ok(baseUrl && adminToken, "run through scripts/with-server (consumer/run does)");
const admin = createTidingsClient({ baseUrl, token: adminToken });

/** Waits until `check` holds, polling; fails after `ms`. */
async function until(what: string, check: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

async function newTenant(name: string) {
  const tenant = ok(await admin.POST("/v1/admin/tenants", { body: { name } }));
  const backend = createBackendClient({ baseUrl, apiKey: tenant.api_key });
  const tokenFor = (userId: string) =>
    mintUserToken({
      signingSecret: tenant.signing_secret,
      tenantId: tenant.tenant_id,
      userId,
      ttlSeconds: 600,
    }).token;
  return { tenant, backend, tokenFor };
}

async function join(backend: TidingsClient, team: string, user: string): Promise<void> {
  ok(
    await backend.PUT("/v1/teams/{team_id}/members/{user_id}", {
      params: { path: { team_id: team, user_id: user } },
    }),
  );
}

let posted = 0;
async function post(backend: TidingsClient, team = "design"): Promise<number> {
  posted++;
  const { event } = await postEvent(
    backend,
    { team_id: team, type: "comment.created", actor_id: "bob", payload: { n: posted } },
    `comment-${posted}`,
  );
  return event.id;
}

// --- The backend: a token minted here, events and an alert posted once ---
const { tenant, backend, tokenFor } = await newTenant("consumer");
await join(backend, "design", "alice");
assert.throws(
  () => mintUserToken({ signingSecret: "s", tenantId: tenant.tenant_id, userId: "a", ttlSeconds: 86_401 }),
  RangeError,
  "a lifetime the server refuses is refused when minting",
);
const alice = createTidingsClient({ baseUrl, token: () => tokenFor("alice") });
const first = [await post(backend), await post(backend), await post(backend)];
const replay = await postEvent(
  backend,
  { team_id: "design", type: "comment.created", actor_id: "bob", payload: { n: 1 } },
  "comment-1",
);
assert.equal(replay.replayed, true, "the same idempotency key stores nothing new");

// --- The front end: page the feed, mark all read ---
const paged: FeedItem[] = [];
for await (const item of feedItems(alice, { limit: 2 })) paged.push(item);
assert.deepEqual(
  paged.map((i) => i.id),
  [...first].reverse(),
  "every item once, newest first, across pages of 2",
);
const page: FeedPage = ok(await alice.GET("/v1/feed"));
assert.equal(page.unread_count, 3);
const head = page.head;
assert.ok(head !== null);
ok(await alice.POST("/v1/feed/read", { body: { up_to: head } }));
assert.deepEqual(ok(await alice.GET("/v1/feed/counts")), { unread: 0, unseen: 0, capped: false });

const alert = {
  event_type: "invoice.overdue",
  entity_id: "inv-42",
  recipients: ["alice"],
  channels: ["in_app" as const],
  subject: "Invoice 42 is overdue",
  payload: { amount: "120.00" },
};
const sent = await postAlert(backend, alert, "inv-42-overdue");
const again = await postAlert(backend, alert, "inv-42-overdue");
assert.equal(sent.replayed, false);
assert.equal(again.replayed, true);
assert.equal(again.alert.alert_id, sent.alert.alert_id);

const problem = await alice.GET("/v1/feed", { params: { query: { before: "not-a-cursor" } } });
try {
  ok(problem);
  assert.fail("a bad cursor is refused");
} catch (error) {
  assert.ok(error instanceof TidingsError);
  const code: ProblemCode = error.code;
  assert.equal(code, "invalid_cursor");
  assert.equal(error.status, 400);
  assert.match(error.problem.instance ?? "", /^urn:tidings:request:/);
}

// --- The stream, through a relay that can close its connections ---
const relay = new Relay(baseUrl);
const relayUrl = await relay.listen();
const startAt: FeedPage = ok(await alice.GET("/v1/feed"));
const received: FeedItem[] = [];
const marks: MarksEvent[] = [];
const resyncs: FeedPage[] = [];
const opens: (string | undefined)[] = [];
const stream = openStream({
  baseUrl: relayUrl,
  token: () => tokenFor("alice"),
  after: startAt.head ?? undefined,
  client: alice,
  backoff: { initialMs: 100, maxMs: 1_000 },
});
stream.on("item", (item) => received.push(item));
stream.on("marks", (m) => marks.push(m));
stream.on("resync", (p) => resyncs.push(p));
stream.on("open", ({ after }) => opens.push(after));
await until("the stream to open", () => opens.length === 1);

const postedAt = Date.now();
const live = await post(backend);
await until("the live item", () => received.length === 1, 5_000);
const latency = Date.now() - postedAt;
assert.equal(received[0]?.id, live);
assert.ok(latency < 1_000, `an item arrives within 1 s (took ${latency} ms)`);
console.log(`stream: an item arrived ${latency} ms after its post`);

const expected: number[] = [live];
for (let i = 0; i < 5; i++) expected.push(await post(backend));
await until("5 items before the cut", () => received.length === 6);
const lastBeforeCut = received.at(-1)?.cursor;
relay.cutAndHold();
for (let i = 0; i < 10; i++) expected.push(await post(backend));
await until("the client to reconnect", () => relay.connections >= 2);
relay.release();
for (let i = 0; i < 5; i++) expected.push(await post(backend));
await until("every item after the cut", () => received.length >= expected.length);
await new Promise((resolve) => setTimeout(resolve, 300)); // a duplicate would show by now
assert.deepEqual(
  received.map((i) => i.id),
  expected,
  "after the connection closed: every item once, in order",
);
assert.equal(opens.length, 2, "one reconnect");
assert.equal(opens[1], lastBeforeCut, "resumed with Last-Event-ID = the last item received");
console.log(`stream: resumed after ${lastBeforeCut} with no gap and no duplicate (${expected.length} items)`);

const newest = received.at(-1);
assert.ok(newest);
ok(await alice.POST("/v1/feed/read", { body: { up_to: newest.cursor } }));
await until("a marks event", () => marks.some((m) => m.read === newest.cursor));
assert.equal(alice.consistency.latest, undefined, "no standbys: no consistency token to forward");

// Joining a team ends the stream with `reset`: refetch, then a new stream.
await join(backend, "ops", "alice");
await until("the refetched first page", () => resyncs.length === 1);
assert.equal(resyncs[0]?.head, newest.cursor);
await until("the stream reopened", () => opens.length === 3);
const ops = await post(backend, "ops");
await until("the new team's item", () => received.at(-1)?.id === ops);
await stream.close();
assert.equal(stream.closed, true);
await relay.close();
console.log("stream: reset became a refetch of the first page and a new stream; close() ended it");

// A ticket instead of the token (what a page that keeps the token out of
// script uses): a fresh one for each connection, since tickets are single use.
let tickets = 0;
const byTicket = openStream({
  baseUrl,
  ticket: async () => {
    tickets++;
    return ok(await alice.POST("/v1/feed/stream-tickets")).ticket;
  },
  client: alice,
});
const byTicketItems: FeedItem[] = [];
byTicket.on("item", (item) => byTicketItems.push(item));
const ticketOpens: (string | undefined)[] = [];
byTicket.on("open", ({ after }) => ticketOpens.push(after));
await until("the ticket stream to open", () => ticketOpens.length === 1);
const viaTicket = await post(backend);
await until("an item on the ticket stream", () => byTicketItems.at(-1)?.id === viaTicket);
await byTicket.close();
assert.equal(tickets, 1);
console.log("stream: opened with a ticket");

// --- 429: Retry-After honoured, retries bounded ---
const limited = await newTenant("limited");
ok(
  await admin.PUT("/v1/admin/tenants/{tenant_id}/rate-limits", {
    params: { path: { tenant_id: limited.tenant.tenant_id } },
    body: { user_reads: { per_second: 1, burst: 1 } },
  }),
);
const impatient = createTidingsClient({
  baseUrl,
  token: limited.tokenFor("carol"),
  retry: { maxRetries: 0 },
});
ok(await impatient.GET("/v1/feed/counts"));
try {
  ok(await impatient.GET("/v1/feed/counts"));
  assert.fail("the second read in the same second is refused");
} catch (error) {
  assert.ok(error instanceof TidingsError, String(error));
  assert.equal(error.status, 429);
  assert.equal(error.code, "rate_limited");
  assert.ok((error.retryAfterSeconds ?? 0) >= 1);
}
const notices: { notice: RetryNotice; at: number }[] = [];
const patient = createTidingsClient({
  baseUrl,
  token: limited.tokenFor("dave"),
  retry: { onRetry: (notice) => notices.push({ notice, at: Date.now() }) },
});
ok(await patient.GET("/v1/feed/counts"));
ok(await patient.GET("/v1/feed/counts"));
assert.equal(notices.length, 1, "one 429, then the retry after Retry-After passed");
const waited = notices[0];
assert.ok(waited);
assert.equal(waited.notice.status, 429);
assert.ok(waited.notice.waitMs >= waited.notice.retryAfterSeconds * 1000);
ok(
  await admin.PUT("/v1/admin/tenants/{tenant_id}/rate-limits", {
    params: { path: { tenant_id: limited.tenant.tenant_id } },
    body: { user_reads: { per_second: 0.001, burst: 1 } },
  }),
);
const erin = createTidingsClient({
  baseUrl,
  token: limited.tokenFor("erin"),
  retry: { onRetry: (notice) => notices.push({ notice, at: Date.now() }) },
});
ok(await erin.GET("/v1/feed/counts"));
const refusedAt = Date.now();
const refused = await erin.GET("/v1/feed/counts");
assert.equal(refused.response.status, 429);
assert.equal(notices.length, 1, "a Retry-After beyond maxWaitSeconds is not waited out");
assert.ok(Date.now() - refusedAt < 10_000);
console.log(
  `429: waited ${Math.round(waited.notice.waitMs)} ms for Retry-After ${waited.notice.retryAfterSeconds} s; ` +
    `no retries with maxRetries 0 or a Retry-After beyond the cap`,
);

// --- A webhook the server signed, verified on receipt ---
const deliveries: { headers: Record<string, string | string[] | undefined>; body: string }[] = [];
const receiver = createServer((request, response) => {
  let body = "";
  request.setEncoding("utf8");
  request.on("data", (chunk: string) => (body += chunk));
  request.on("end", () => {
    deliveries.push({ headers: request.headers, body });
    response.writeHead(204).end();
  });
});
await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
const address = receiver.address();
assert.ok(address !== null && typeof address !== "string");
const endpoint = ok(
  await backend.POST("/v1/webhook-endpoints", {
    body: { url: `http://127.0.0.1:${address.port}/hook`, event_types: ["invoice.paid"] },
  }),
);
await postAlert(
  backend,
  {
    event_type: "invoice.paid",
    entity_id: "inv-43",
    recipients: ["alice"],
    channels: ["webhook"],
    payload: { amount: "80.00" },
  },
  "inv-43-paid",
);
await until("the webhook", () => deliveries.length === 1, 20_000);
receiver.close();
const delivery = deliveries[0];
assert.ok(delivery);
const verified = verifyWebhook(endpoint.secret, delivery.headers, delivery.body) as {
  type: string;
  data: { entity_id: string };
};
assert.equal(verified.type, "invoice.paid");
assert.equal(verified.data.entity_id, "inv-43");
assert.throws(
  () => verifyWebhook(endpoint.secret, delivery.headers, delivery.body.replace("80.00", "8000")),
  WebhookVerificationError,
  "a changed body does not verify",
);
console.log("webhook: the server's signature verified; a changed body did not");
console.log("@tidings/client consumer: ok");
