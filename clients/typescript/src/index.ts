// @tidings/client: the typed REST client, paging, errors and the live stream,
// for browsers and Node >= 18. The tenant's backend part (tokens, posting
// with idempotency keys, webhook signatures) is @tidings/client/server.
export type { components, operations, paths } from "./schema.js";
export {
  CONSISTENCY_HEADER,
  ConsistencyTokens,
  createTidingsClient,
  type ClientOptions,
  type Credential,
  type TidingsClient,
} from "./client.js";
export {
  isProblemCode,
  ok,
  parseRetryAfter,
  PROBLEM_CODES,
  readJson,
  TidingsError,
  type Problem,
  type ProblemCode,
} from "./errors.js";
export {
  alertDeliveries,
  deliveries,
  feedItems,
  teamMembers,
  templates,
  webhookEndpoints,
  type FeedPaging,
} from "./paging.js";
export { retryingFetch, type RetryNotice, type RetryOptions } from "./retry.js";
export {
  openStream,
  TidingsStream,
  type FeedItem,
  type FeedPage,
  type MarksEvent,
  type MembershipEvent,
  type ResetEvent,
  type ResetReason,
  type StreamEventMap,
  type StreamEventName,
  type StreamOptions,
} from "./stream.js";

import type { components } from "./schema.js";
export type Schemas = components["schemas"];
/** The feed page, as `GET /v1/feed` answers it (the same type as FeedPage). */
export type FeedOut = Schemas["FeedOut"];
export type Counts = Schemas["CountsOut"];
export type Watermarks = Schemas["WatermarksOut"];
