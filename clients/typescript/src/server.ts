// The part for a tenant's backend (Node): user tokens minted locally from the
// signing secret, events and alerts posted with idempotency keys, and
// webhook signatures checked. Never ship this to a browser: it holds the
// signing secret and the API key.
import { createHmac, timingSafeEqual } from "node:crypto";
import { createTidingsClient, type ClientOptions, type TidingsClient } from "./client.js";
import { ok } from "./errors.js";
import type { components } from "./schema.js";

type Schemas = components["schemas"];

/** The server's default cap on `exp - iat` (`TIDINGS_USER_TOKEN_MAX_LIFETIME_SECS`). */
export const DEFAULT_MAX_TOKEN_LIFETIME_SECONDS = 86_400;
/** The lifetime of a token when none is asked for, as `POST /v1/user-tokens` does. */
export const DEFAULT_TOKEN_LIFETIME_SECONDS = 3_600;
/** The server's limit on ids, in UTF-8 bytes (`tidings_core::MAX_ID_BYTES`). */
const MAX_ID_BYTES = 255;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface MintOptions {
  /** The tenant's signing secret, as `POST /v1/admin/tenants` or a rotation returned it. */
  signingSecret: string;
  /** The tenant's id (the token's `tid`). */
  tenantId: string;
  /** The user the token speaks for (`sub`): 1 to 255 bytes, no control or format characters. */
  userId: string;
  /** Seconds from now, 1 to `maxLifetimeSeconds` (default 3,600). */
  ttlSeconds?: number;
  /** The server's cap, if it was configured other than the default of a day. */
  maxLifetimeSeconds?: number;
  /** The signing secret's key id (`kid`). Left out, the server tries both
   * secrets of a rotation's overlap. */
  keyId?: string;
  /** Valid only from this Unix second on (`nbf`). */
  notBefore?: number;
  /** The clock, in milliseconds (tests). */
  now?: () => number;
}

export interface MintedToken {
  token: string;
  /** `exp`, as a Date. */
  expiresAt: Date;
}

function base64url(data: Buffer | string): string {
  return Buffer.from(data).toString("base64url");
}

/**
 * Whether the server would accept `id` as a user, team or event id: 1 to 255
 * UTF-8 bytes, no control characters (Cc) and no format characters (Cf).
 */
export function isValidId(id: string): boolean {
  const bytes = Buffer.byteLength(id, "utf8");
  return bytes >= 1 && bytes <= MAX_ID_BYTES && !/[\p{Cc}\p{Cf}]/u.test(id);
}

/**
 * A user token signed here, exactly as the server checks it
 * (server/src/http/auth.rs): HS256 keyed with the secret's UTF-8 bytes,
 * claims `sub`, `tid`, `iat`, `exp` (and `nbf` when asked), `exp - iat` within
 * the server's cap, `iat` from this clock (the server allows 5 s of skew).
 * Refuses what the server would refuse, here rather than on first use.
 */
export function mintUserToken(options: MintOptions): MintedToken {
  const ttl = options.ttlSeconds ?? DEFAULT_TOKEN_LIFETIME_SECONDS;
  const max = options.maxLifetimeSeconds ?? DEFAULT_MAX_TOKEN_LIFETIME_SECONDS;
  if (!Number.isInteger(ttl) || ttl < 1 || ttl > max) {
    throw new RangeError(`ttlSeconds must be a whole number from 1 to ${max}, not ${ttl}`);
  }
  if (!UUID.test(options.tenantId)) {
    throw new TypeError(`tenantId must be the tenant's UUID, not ${JSON.stringify(options.tenantId)}`);
  }
  if (!isValidId(options.userId)) {
    throw new TypeError("userId must be 1 to 255 bytes without control or format characters");
  }
  if (options.signingSecret === "") throw new TypeError("the signing secret is empty");
  if (options.notBefore !== undefined && !Number.isInteger(options.notBefore)) {
    throw new TypeError("notBefore must be a whole number of seconds");
  }
  const iat = Math.floor((options.now ?? Date.now)() / 1000);
  const exp = iat + ttl;
  const header = { alg: "HS256", typ: "JWT", ...(options.keyId ? { kid: options.keyId } : {}) };
  const claims = {
    sub: options.userId,
    tid: options.tenantId.toLowerCase(),
    iat,
    exp,
    ...(options.notBefore === undefined ? {} : { nbf: options.notBefore }),
  };
  const signed = `${base64url(JSON.stringify(header))}.${base64url(JSON.stringify(claims))}`;
  const signature = createHmac("sha256", Buffer.from(options.signingSecret, "utf8"))
    .update(signed)
    .digest();
  return { token: `${signed}.${base64url(signature)}`, expiresAt: new Date(exp * 1000) };
}

export interface BackendOptions extends Omit<ClientOptions, "token"> {
  /** The tenant's API key (`tdk_…`). */
  apiKey: string;
}

/** A client with the tenant's API key, retrying 429 and 409-in-flight. */
export function createBackendClient(options: BackendOptions): TidingsClient {
  const { apiKey, ...rest } = options;
  return createTidingsClient({ ...rest, token: apiKey });
}

export type EventIn = Schemas["EventIn"];
export type AlertIn = Schemas["AlertIn"];

/**
 * Posts one activity event. The idempotency key goes in the body
 * (`idempotency_key`): a retry with the same key stores nothing new and
 * answers the first event (`replayed: true`).
 */
export async function postEvent(
  client: TidingsClient,
  event: Omit<EventIn, "idempotency_key">,
  idempotencyKey: string,
): Promise<{ event: Schemas["EventCreatedOut"]; replayed: boolean }> {
  const answer = await client.POST("/v1/events", {
    body: { ...event, idempotency_key: idempotencyKey },
  });
  return { event: ok(answer), replayed: answer.response.status === 200 };
}

/**
 * Posts an alert with `Idempotency-Key`: a retry with the same key and body
 * answers the first result (`replayed: true`); while the first is still in
 * flight the server answers 409 with Retry-After, which the client waits out.
 */
export async function postAlert(
  client: TidingsClient,
  alert: AlertIn,
  idempotencyKey: string,
): Promise<{ alert: Schemas["AlertCreatedOut"]; replayed: boolean }> {
  const answer = await client.POST("/v1/alerts", {
    body: alert,
    params: { header: { "Idempotency-Key": idempotencyKey } },
  });
  return {
    alert: ok(answer),
    replayed: answer.response.headers.get("Idempotency-Replayed") === "true",
  };
}

export class WebhookVerificationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "WebhookVerificationError";
  }
}

/** How far a webhook's timestamp may be from this clock (Standard Webhooks' default). */
export const WEBHOOK_TOLERANCE_SECONDS = 300;

export interface WebhookHeaders {
  get(name: string): string | null | undefined;
}

function headerOf(headers: WebhookHeaders | Record<string, string | string[] | undefined>, name: string) {
  if (typeof (headers as WebhookHeaders).get === "function") {
    return (headers as WebhookHeaders).get(name) ?? undefined;
  }
  const record = headers as Record<string, string | string[] | undefined>;
  const value = record[name] ?? record[name.toLowerCase()];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * Checks a webhook as Standard Webhooks signs it (the server's
 * workers/channels/webhook.rs): HMAC-SHA256 over `id.timestamp.body`, keyed
 * with the base64 after `whsec_`, any of the space-separated `v1,…`
 * signatures (two during a secret's rotation), the timestamp within
 * `toleranceSeconds`. Pass the body exactly as received, before any JSON
 * parsing. Returns the parsed body; throws WebhookVerificationError.
 */
export function verifyWebhook(
  secret: string,
  headers: WebhookHeaders | Record<string, string | string[] | undefined>,
  body: string | Uint8Array,
  options: { toleranceSeconds?: number; now?: () => number } = {},
): unknown {
  const id = headerOf(headers, "webhook-id");
  const timestamp = headerOf(headers, "webhook-timestamp");
  const signatures = headerOf(headers, "webhook-signature");
  if (!id || !timestamp || !signatures) {
    throw new WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature");
  }
  if (!/^\d+$/.test(timestamp)) throw new WebhookVerificationError("webhook-timestamp is not a number");
  const now = Math.floor((options.now ?? Date.now)() / 1000);
  const tolerance = options.toleranceSeconds ?? WEBHOOK_TOLERANCE_SECONDS;
  if (Math.abs(now - Number(timestamp)) > tolerance) {
    throw new WebhookVerificationError("webhook-timestamp is outside the tolerance");
  }
  const key = Buffer.from(secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret, "base64");
  if (key.length === 0) throw new WebhookVerificationError("the secret is empty or not base64");
  const payload = typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body);
  const expected = createHmac("sha256", key)
    .update(`${id}.${timestamp}.`)
    .update(payload)
    .digest();
  const matches = signatures.split(" ").some((entry) => {
    const [version, value] = entry.split(",", 2);
    if (version !== "v1" || value === undefined) return false;
    const given = Buffer.from(value, "base64");
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
  if (!matches) throw new WebhookVerificationError("no signature matches");
  return JSON.parse(payload.toString("utf8"));
}
