// Async iterators over every paged list. The lists share one page shape,
// `data` and `next_cursor`; the feed keeps its own (`items`, `next_before`,
// beside its head and counts) and an alert nests its first deliveries.
// A failed page throws a TidingsError; retries of 429 are the client's.
import type { TidingsClient } from "./client.js";
import { ok } from "./errors.js";
import type { components, operations } from "./schema.js";

type Schemas = components["schemas"];

/** Every item of every page, fetching a page when the previous one is used up. */
async function* pagesOf<Page, Item>(
  fetchPage: (cursor: string | undefined) => Promise<Page>,
  itemsOf: (page: Page) => Item[],
  nextOf: (page: Page) => string | null | undefined,
): AsyncGenerator<Item, void, undefined> {
  let cursor: string | undefined;
  for (;;) {
    const page = await fetchPage(cursor);
    yield* itemsOf(page);
    const next = nextOf(page);
    if (next === null || next === undefined || next === cursor) return;
    cursor = next;
  }
}

export interface FeedPaging {
  /** Items per page, 1 to 100 (the server's default when left out). */
  limit?: number;
  /** Start below this cursor instead of at the newest item. */
  before?: string;
}

/** The user's feed, newest first, down to the oldest item (user token). */
export function feedItems(
  client: TidingsClient,
  paging: FeedPaging = {},
): AsyncGenerator<Schemas["FeedItemOut"], void, undefined> {
  return pagesOf(
    async (before) =>
      ok(
        await client.GET("/v1/feed", {
          params: { query: { limit: paging.limit, before: before ?? paging.before } },
        }),
      ),
    (page) => page.items,
    (page) => page.next_before,
  );
}

/** A team's members (API key). */
export function teamMembers(
  client: TidingsClient,
  teamId: string,
  paging: { limit?: number } = {},
): AsyncGenerator<Schemas["MemberOut"], void, undefined> {
  return pagesOf(
    async (cursor) =>
      ok(
        await client.GET("/v1/teams/{team_id}/members", {
          params: { path: { team_id: teamId }, query: { limit: paging.limit, cursor } },
        }),
      ),
    (page) => page.data,
    (page) => page.next_cursor,
  );
}

/** The deliveries of one alert (API key). */
export function alertDeliveries(
  client: TidingsClient,
  alertId: string,
  paging: { limit?: number } = {},
): AsyncGenerator<Schemas["DeliveryOut"], void, undefined> {
  return pagesOf(
    async (cursor) =>
      ok(
        await client.GET("/v1/alerts/{alert_id}", {
          params: { path: { alert_id: alertId }, query: { limit: paging.limit, cursor } },
        }),
      ),
    (page) => page.deliveries,
    (page) => page.next_cursor,
  );
}

type DeliveriesQuery = NonNullable<operations["deliveries.list"]["parameters"]["query"]>;

/** The tenant's deliveries, optionally of one status (API key). */
export function deliveries(
  client: TidingsClient,
  filter: Omit<DeliveriesQuery, "cursor"> = {},
): AsyncGenerator<Schemas["DeliveryOut"], void, undefined> {
  return pagesOf(
    async (cursor) =>
      ok(await client.GET("/v1/deliveries", { params: { query: { ...filter, cursor } } })),
    (page) => page.data,
    (page) => page.next_cursor,
  );
}

/** The tenant's webhook endpoints (API key). */
export function webhookEndpoints(
  client: TidingsClient,
  paging: { limit?: number } = {},
): AsyncGenerator<Schemas["WebhookEndpointOut"], void, undefined> {
  return pagesOf(
    async (cursor) =>
      ok(
        await client.GET("/v1/webhook-endpoints", {
          params: { query: { limit: paging.limit, cursor } },
        }),
      ),
    (page) => page.data,
    (page) => page.next_cursor,
  );
}

/** The tenant's templates (API key). */
export function templates(
  client: TidingsClient,
  paging: { limit?: number } = {},
): AsyncGenerator<Schemas["TemplateOut"], void, undefined> {
  return pagesOf(
    async (cursor) =>
      ok(await client.GET("/v1/templates", { params: { query: { limit: paging.limit, cursor } } })),
    (page) => page.data,
    (page) => page.next_cursor,
  );
}
