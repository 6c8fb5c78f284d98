// The typed client: `paths` and `components` are generated from
// openapi/openapi.json (src/schema.d.ts, by scripts/gen-clients); calls go
// through openapi-fetch, so a path, a parameter or a body the document does not
// declare is a compile error.
import createClient, { type Client, type Middleware } from "openapi-fetch";
import type { components, paths } from "./schema.js";

export type { components, paths } from "./schema.js";
export type Schemas = components["schemas"];
export type FeedOut = Schemas["FeedOut"];
export type FeedItem = Schemas["FeedItemOut"];
export type Counts = Schemas["CountsOut"];
export type Watermarks = Schemas["WatermarksOut"];
/** Data of the stream's `marks` event: the watermarks, and the change's consistency token with standbys. */
export type MarksEvent = Schemas["MarksEventOut"];
export type Problem = Schemas["Problem"];

export type TidingsClient = Client<paths>;

export interface ClientOptions {
  /** Where Tidings listens, e.g. `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** The credential for every call: the admin token, an API key or a user
   * token. A function is asked before each request (tokens expire). */
  token?: string | (() => string | Promise<string>);
  /** Another fetch (tests, proxies). */
  fetch?: typeof globalThis.fetch;
}

export function createTidingsClient(options: ClientOptions): TidingsClient {
  const client = createClient<paths>({
    baseUrl: options.baseUrl.replace(/\/$/, ""),
    ...(options.fetch ? { fetch: options.fetch } : {}),
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
  return client;
}
