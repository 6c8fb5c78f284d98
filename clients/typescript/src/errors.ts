// The one error of the package: an answer that is not 2xx, with the server's
// RFC 9457 problem body. The server sends a problem for every failure, its
// own and its framework's (server/src/http/error.rs), so `code` is always
// one of a known set; an answer that is not a problem (a proxy's HTML page)
// still becomes a TidingsError, with the code of its status.
import type { components } from "./schema.js";

/** The stable machine-readable codes the server puts in `Problem.code`:
 * the document's `ProblemCode` enum as a value, so a client can check one at
 * run time. The compiler keeps the two equal (below). */
export const PROBLEM_CODES = [
  // The request itself
  "invalid_request",
  "unreadable_body",
  "nul_character",
  "payload_too_large",
  "body_timeout",
  "unsupported_media_type",
  "method_not_allowed",
  "not_found",
  "invalid_id",
  "invalid_cursor",
  "conflicting_cursors",
  "invalid_limit",
  "invalid_consistency_token",
  "invalid_idempotency_key",
  "conflicting_idempotency_keys",
  "idempotency_key_on_batch",
  "invalid_payload",
  "invalid_batch_size",
  "invalid_alert",
  "alert_too_large",
  "invalid_channel",
  "invalid_delivery",
  "invalid_category",
  "unknown_category",
  "invalid_preferences",
  "invalid_template",
  "invalid_locale",
  "invalid_timezone",
  "invalid_quiet_hours",
  "invalid_email",
  "invalid_display_name",
  "invalid_ttl",
  "invalid_retention",
  "invalid_rate_limit",
  "invalid_webhook_endpoint",
  "webhook_url_refused",
  "not_one_click",
  "too_many_individual_reads",
  // Credentials
  "unauthorized",
  "forbidden",
  // Resources that do not exist in the tenant
  "tenant_not_found",
  "api_key_not_found",
  "user_not_found",
  "membership_not_found",
  "item_not_found",
  "alert_not_found",
  "delivery_not_found",
  "webhook_endpoint_not_found",
  "category_not_found",
  "template_not_found",
  "unsubscribe_link_not_found",
  // Conflicts and limits of the tenant's data
  "idempotency_key_in_flight",
  "idempotency_key_reused",
  "entity_busy",
  "delivery_in_flight",
  "delivery_not_retryable",
  "event_type_in_another_category",
  "membership_limit",
  "webhook_endpoint_limit",
  // Capacity and the server's state
  "rate_limited",
  "overloaded",
  "unavailable",
  "database_timeout",
  "inbox_core_missing",
  "internal",
] as const satisfies readonly components["schemas"]["ProblemCode"][];

export type ProblemCode = components["schemas"]["ProblemCode"];

// Fails to compile when the document has a code the list above lacks.
type Unlisted = Exclude<ProblemCode, (typeof PROBLEM_CODES)[number]>;
const everyCodeListed: [Unlisted] extends [never] ? true : Unlisted = true;
void everyCodeListed;

/** The problem body as the server documents it. */
export type Problem = components["schemas"]["Problem"];

const KNOWN_CODES: ReadonlySet<string> = new Set(PROBLEM_CODES);

export function isProblemCode(value: unknown): value is ProblemCode {
  return typeof value === "string" && KNOWN_CODES.has(value);
}

/** The code a status stands for when the body is not a problem of ours. */
function codeOfStatus(status: number): ProblemCode {
  switch (status) {
    case 401:
      return "unauthorized";
    case 403:
      return "forbidden";
    case 404:
      return "not_found";
    case 413:
      return "payload_too_large";
    case 415:
      return "unsupported_media_type";
    case 429:
      return "rate_limited";
    case 503:
      return "unavailable";
    default:
      return status >= 500 ? "internal" : "invalid_request";
  }
}

export class TidingsError extends Error {
  readonly status: number;
  readonly code: ProblemCode;
  readonly problem: Problem;
  /** Seconds the server asked to wait (`Retry-After`), when it did. */
  readonly retryAfterSeconds: number | undefined;
  /** The server's id of the request (`X-Request-Id`): quote it in reports. */
  readonly requestId: string | undefined;

  constructor(problem: Problem, init: { retryAfterSeconds?: number; requestId?: string } = {}) {
    super(`${problem.status} ${problem.code}: ${problem.detail ?? problem.title}`);
    this.name = "TidingsError";
    this.status = problem.status;
    this.code = problem.code;
    this.problem = problem;
    this.retryAfterSeconds = init.retryAfterSeconds;
    this.requestId = init.requestId;
  }

  /** The error of a failed answer whose body is still unread. */
  static async read(response: Response): Promise<TidingsError> {
    return TidingsError.fromResponse(response, parseBody(await response.text().catch(() => "")));
  }

  /** The error of a failed answer: its problem body, or one made from its status. */
  static fromResponse(response: Response, body: unknown): TidingsError {
    const retryAfterSeconds = parseRetryAfter(response.headers.get("Retry-After"));
    const requestId = response.headers.get("X-Request-Id") ?? undefined;
    const init = {
      ...(retryAfterSeconds === undefined ? {} : { retryAfterSeconds }),
      ...(requestId === undefined ? {} : { requestId }),
    };
    if (isProblemBody(body)) {
      return new TidingsError(body, init);
    }
    const code = codeOfStatus(response.status);
    return new TidingsError(
      {
        type: `urn:tidings:problem:${code}`,
        title: response.statusText || "Error",
        status: response.status,
        code,
        detail: typeof body === "string" && body !== "" ? body.slice(0, 200) : undefined,
        instance: null,
      },
      init,
    );
  }
}

function parseBody(text: string): unknown {
  try {
    return text === "" ? null : JSON.parse(text);
  } catch {
    return text; // not JSON (a proxy's page): the error is made from the status
  }
}

/**
 * The JSON of a plain `fetch` answer, or its TidingsError thrown: for code
 * that calls the API without the REST client (the stream, the element).
 */
export async function readJson<T>(response: Response): Promise<T> {
  if (!response.ok) throw await TidingsError.read(response);
  return parseBody(await response.text()) as T;
}

function isProblemBody(body: unknown): body is Problem {
  if (typeof body !== "object" || body === null) return false;
  const fields = body as Record<string, unknown>;
  return typeof fields["status"] === "number" && isProblemCode(fields["code"]);
}

/** `Retry-After` in seconds (the server sends delta-seconds; an HTTP date is read too). */
export function parseRetryAfter(value: string | null): number | undefined {
  if (value === null || value.trim() === "") return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, (at - Date.now()) / 1000);
}

/**
 * The data of an openapi-fetch answer, or its TidingsError thrown.
 * `const feed = ok(await client.GET("/v1/feed"))`.
 */
export function ok<T>(answer: { data?: T; error?: unknown; response: Response }): T {
  if (!answer.response.ok || answer.data === undefined && answer.response.status !== 204) {
    throw TidingsError.fromResponse(answer.response, answer.error);
  }
  return answer.data as T;
}
