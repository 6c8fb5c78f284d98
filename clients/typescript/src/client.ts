// The typed REST client: `paths` is generated from openapi/openapi.json
// (src/schema.d.ts, by scripts/gen-clients), and calls go through
// openapi-fetch, so a path, a parameter or a body the document does not
// declare is a compile error. Around it: the credential, bounded retries of
// 429 and 409-in-flight, and the consistency token carried from a write to
// the next reads.
import createClient, { type Client, type Middleware } from "openapi-fetch";
import type { paths } from "./schema.js";
import { retryingFetch, type RetryOptions } from "./retry.js";
import { ConsistencyTokens } from "./consistency.js";

export type TidingsClient = Client<paths>;

/** A credential, or a function asked before each request (tokens expire). */
export type Credential = string | (() => string | Promise<string>);

export { CONSISTENCY_HEADER, ConsistencyTokens } from "./consistency.js";

export interface ClientOptions {
  /** Where Tidings listens, e.g. `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** The admin token, an API key or a user token. */
  token?: Credential;
  /** Retries of 429 and 409-in-flight (default: 3, honouring Retry-After). */
  retry?: RetryOptions;
  /** Shared with a stream client, so `marks` tokens reach the next reads. */
  consistency?: ConsistencyTokens;
  /** Another fetch (tests, proxies). */
  fetch?: (input: Request) => Promise<Response>;
}

export function createTidingsClient(options: ClientOptions): TidingsClient & {
  consistency: ConsistencyTokens;
} {
  const base = options.fetch ?? ((input: Request) => globalThis.fetch(input));
  const client = createClient<paths>({
    baseUrl: options.baseUrl.replace(/\/$/, ""),
    fetch: retryingFetch(base, options.retry),
  });
  const { token } = options;
  if (token !== undefined) {
    const auth: Middleware = {
      async onRequest({ request }) {
        const value = typeof token === "function" ? await token() : token;
        request.headers.set("Authorization", `Bearer ${value}`);
        return request;
      },
    };
    client.use(auth);
  }
  const consistency = options.consistency ?? new ConsistencyTokens();
  const carry: Middleware = {
    onRequest({ request }) {
      consistency.attachTo(request);
      return request;
    },
    onResponse({ response }) {
      consistency.rememberFrom(response);
      return response;
    },
  };
  client.use(carry);
  return Object.assign(client, { consistency });
}
