// The live stream over fetch, not EventSource: fetch can send the
// Authorization header and Last-Event-ID itself, reads the problem body of a
// refused connection, and runs the same in browsers and in Node >= 18.
//
// What it keeps: the cursor of the last item received, so a connection that
// drops (the server restarts, a proxy times out, the network blinks) resumes
// after it, with no gap and no duplicate (the server replays from the
// cursor); a `reset`, after which the server cannot replay, becomes a
// refetch of the feed's first page (`resync`) and a new stream after its
// head; the consistency token of `marks`, forwarded on the next reads.
//
// It loads neither the REST client nor openapi-fetch (a page with only the
// stream, like <tidings-inbox>, downloads neither): the one read it makes
// itself, the first page after a reset, goes through `client` when given,
// else through fetch with the stream's token.
import type { Credential, TidingsClient } from "./client.js";
import { ConsistencyTokens } from "./consistency.js";
import { ok, readJson, TidingsError } from "./errors.js";
import { sleep } from "./retry.js";
import type { components } from "./schema.js";

type Schemas = components["schemas"];
export type FeedItem = Schemas["FeedItemOut"];
export type FeedPage = Schemas["FeedOut"];
/** Data of `marks`: the watermarks and counts, and with standbys the change's consistency token. */
export type MarksEvent = Schemas["MarksEventOut"];
export type MembershipEvent = Schemas["MembershipEventOut"];
export type ResetEvent = Schemas["ResetEventOut"];
export type ResetReason = Schemas["ResetReasonOut"];

/** What a stream tells its listeners, by name. */
export interface StreamEventMap {
  /** A new feed item, in position order, each once. */
  item: FeedItem;
  /** The user's watermarks and counts changed (any tab, device or instance). */
  marks: MarksEvent;
  /** The user left a team: drop its items. */
  membership: MembershipEvent;
  /** The server ended the stream; a `resync` follows unless the stream stops. */
  reset: ResetEvent;
  /** After a reset: the feed's first page, refetched. Replace what is shown with it. */
  resync: FeedPage;
  /** A connection was opened; `after` is the cursor it resumed from. */
  open: { after: string | undefined };
  /** A connection failed or dropped. `willRetry`: the stream reconnects by itself. */
  error: { error: unknown; willRetry: boolean };
}

export type StreamEventName = keyof StreamEventMap;

export interface StreamOptions {
  /** Where Tidings listens. */
  baseUrl: string;
  /** The user token (or a function asked before each connection), sent as
   * `Authorization`. Either this or `ticket`. */
  token?: Credential;
  /** A fresh stream ticket for each connection (tickets are single use),
   * sent as `?ticket=`. For pages that must keep the token out of script. */
  ticket?: () => Promise<string>;
  /** Resume after this cursor (e.g. the head of the page on screen). Without
   * it only items newer than the connection are sent. */
  after?: string;
  /** Refetches the first page after a reset; by default a plain fetch
   * with `token`. A stream opened with `ticket` needs it (a ticket opens the
   * stream only). Its consistency tokens are the stream's unless
   * `consistency` is given. */
  client?: TidingsClient;
  /** Where the `marks` consistency tokens go; by default `client`'s. */
  consistency?: ConsistencyTokens;
  /** Items on the page refetched after a reset (default: the server's). */
  resyncLimit?: number;
  /** Reconnect pauses: doubling from `initialMs` (default 250) up to `maxMs`
   * (default 15,000), each with jitter, and at least what Retry-After asks. */
  backoff?: { initialMs?: number; maxMs?: number };
  fetch?: typeof globalThis.fetch;
}

/** Resets after which reconnecting would only repeat the reset. */
const FINAL_RESETS: ReadonlySet<ResetReason> = new Set<ResetReason>([
  // Reopening would close another of the user's streams, which would
  // reopen and close this one: the user has too many tabs open.
  "superseded",
]);

type Listener<K extends StreamEventName> = (data: StreamEventMap[K]) => void;

/** Reads `text/event-stream` from a body, one event at a time. */
async function* sseEvents(
  body: ReadableStream<Uint8Array>,
): AsyncGenerator<{ event: string; data: string; id: string | undefined }> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "";
  let data: string[] = [];
  let id: string | undefined;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let newline: number;
      while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + (buffer.startsWith("\r\n", newline) ? 2 : 1));
        if (line === "") {
          if (data.length > 0) yield { event: event || "message", data: data.join("\n"), id };
          event = "";
          data = [];
          id = undefined;
          continue;
        }
        if (line.startsWith(":")) continue; // the heartbeat
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let text = colon < 0 ? "" : line.slice(colon + 1);
        if (text.startsWith(" ")) text = text.slice(1);
        if (field === "event") event = text;
        else if (field === "data") data.push(text);
        else if (field === "id") id = text;
      }
    }
  } finally {
    // Left early (a reset, close()): let the connection go.
    await reader.cancel().catch(() => undefined);
  }
}

export class TidingsStream {
  readonly #options: StreamOptions;
  readonly #client: TidingsClient | undefined;
  readonly #consistency: ConsistencyTokens;
  readonly #listeners = new Map<StreamEventName, Set<Listener<StreamEventName>>>();
  readonly #abort = new AbortController();
  #lastEventId: string | undefined;
  #closed = false;
  /** Settles when the stream has stopped: `close()`, a final reset, or a refusal no retry mends. */
  readonly done: Promise<void>;

  constructor(options: StreamOptions) {
    if ((options.token === undefined) === (options.ticket === undefined)) {
      throw new TypeError("a stream takes a token or a ticket function, one of the two");
    }
    if (options.ticket !== undefined && options.client === undefined) {
      throw new TypeError("a stream opened with a ticket needs `client` to refetch the feed after a reset");
    }
    this.#options = options;
    this.#client = options.client;
    this.#consistency =
      options.consistency ??
      (options.client as (TidingsClient & { consistency?: ConsistencyTokens }) | undefined)
        ?.consistency ??
      new ConsistencyTokens();
    this.#lastEventId = options.after;
    // Listeners are added right after construction; start once they are.
    this.done = Promise.resolve().then(() => this.#run());
  }

  /** The cursor the next connection resumes after. */
  get lastEventId(): string | undefined {
    return this.#lastEventId;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Listens to one kind of event; returns the function that stops listening. */
  on<K extends StreamEventName>(name: K, listener: Listener<K>): () => void {
    let set = this.#listeners.get(name);
    if (!set) {
      set = new Set();
      this.#listeners.set(name, set);
    }
    set.add(listener as Listener<StreamEventName>);
    return () => set.delete(listener as Listener<StreamEventName>);
  }

  /** Ends the stream and its connection; no reconnect follows. */
  close(): Promise<void> {
    this.#closed = true;
    this.#abort.abort(new DOMException("the stream was closed", "AbortError"));
    return this.done;
  }

  #emit<K extends StreamEventName>(name: K, data: StreamEventMap[K]): void {
    for (const listener of this.#listeners.get(name) ?? []) {
      try {
        (listener as Listener<K>)(data);
      } catch (error) {
        // A listener's bug must not end the stream; report it where it shows.
        queueMicrotask(() => {
          throw error;
        });
      }
    }
  }

  #pause(attempt: number, retryAfterSeconds?: number): Promise<void> {
    const initial = this.#options.backoff?.initialMs ?? 250;
    const max = this.#options.backoff?.maxMs ?? 15_000;
    const ceiling = Math.min(max, initial * 2 ** Math.min(attempt, 20));
    // Equal jitter: at least half the step, so a crowd of clients spreads
    // out without any of them retrying at once.
    const wait = Math.max(ceiling / 2 + (Math.random() * ceiling) / 2, (retryAfterSeconds ?? 0) * 1000);
    return sleep(wait, this.#abort.signal).catch(() => undefined);
  }

  async #connect(): Promise<Response> {
    const url = new URL(`${this.#options.baseUrl.replace(/\/$/, "")}/v1/feed/stream`);
    const headers = new Headers({ Accept: "text/event-stream" });
    const { token, ticket } = this.#options;
    if (token !== undefined) {
      headers.set("Authorization", `Bearer ${typeof token === "function" ? await token() : token}`);
    }
    if (ticket !== undefined) url.searchParams.set("ticket", await ticket());
    if (this.#lastEventId !== undefined) headers.set("Last-Event-ID", this.#lastEventId);
    const fetch = this.#options.fetch ?? globalThis.fetch;
    return fetch(url, { headers, signal: this.#abort.signal, cache: "no-store" });
  }

  async #run(): Promise<void> {
    let failures = 0;
    while (!this.#closed) {
      let response: Response;
      try {
        response = await this.#connect();
      } catch (error) {
        if (this.#closed) break;
        this.#emit("error", { error, willRetry: true });
        await this.#pause(failures++);
        continue;
      }
      if (!response.ok || response.body === null) {
        const error = await TidingsError.read(response);
        // Capacity (429, 503) passes; a refused credential or request does not.
        const willRetry = error.status === 429 || error.status >= 500;
        this.#emit("error", { error, willRetry });
        if (!willRetry) break;
        await this.#pause(failures++, error.retryAfterSeconds);
        continue;
      }
      failures = 0;
      this.#emit("open", { after: this.#lastEventId });
      let reset: ResetEvent | undefined;
      try {
        for await (const message of sseEvents(response.body)) {
          reset = this.#dispatch(message);
          if (reset) break;
        }
      } catch (error) {
        if (this.#closed) break;
        this.#emit("error", { error, willRetry: true });
      }
      if (this.#closed) break;
      if (reset === undefined) {
        // The connection ended without a reset: resume after the last item.
        await this.#pause(failures++);
        continue;
      }
      if (FINAL_RESETS.has(reset.reason)) break;
      try {
        await this.#resync();
      } catch (error) {
        if (this.#closed) break;
        this.#emit("error", { error, willRetry: true });
        await this.#pause(failures++);
      }
    }
    this.#closed = true;
  }

  /** Hands one event to its listeners; the reset, if it was one. */
  #dispatch(message: { event: string; data: string; id: string | undefined }): ResetEvent | undefined {
    const data: unknown = JSON.parse(message.data);
    switch (message.event) {
      case "item": {
        this.#lastEventId = message.id ?? (data as FeedItem).cursor;
        this.#emit("item", data as FeedItem);
        return undefined;
      }
      case "marks": {
        const marks = data as MarksEvent;
        this.#consistency.remember(marks.consistency_token);
        this.#emit("marks", marks);
        return undefined;
      }
      case "membership":
        this.#emit("membership", data as MembershipEvent);
        return undefined;
      case "reset": {
        const reset = data as ResetEvent;
        this.#emit("reset", reset);
        return reset;
      }
      default:
        // An event a newer server sends and this client does not know.
        return undefined;
    }
  }

  /** The first page again, then the next stream after its head. */
  async #resync(): Promise<void> {
    const page = await this.#firstPage();
    // An empty feed has no head: the next stream starts live.
    this.#lastEventId = page.head ?? undefined;
    this.#emit("resync", page);
  }

  async #firstPage(): Promise<FeedPage> {
    const limit = this.#options.resyncLimit;
    const signal = this.#abort.signal;
    if (this.#client !== undefined) {
      return ok(
        await this.#client.GET("/v1/feed", {
          params: { query: limit === undefined ? {} : { limit } },
          signal,
        }),
      );
    }
    const url = new URL(`${this.#options.baseUrl.replace(/\/$/, "")}/v1/feed`);
    if (limit !== undefined) url.searchParams.set("limit", String(limit));
    const token = this.#options.token as Credential;
    const request = new Request(url, {
      headers: {
        Accept: "application/json",
        Authorization: `Bearer ${typeof token === "function" ? await token() : token}`,
      },
      signal,
      cache: "no-store",
    });
    this.#consistency.attachTo(request);
    const fetch = this.#options.fetch ?? globalThis.fetch;
    const response = await fetch(request);
    this.#consistency.rememberFrom(response);
    return readJson<FeedPage>(response);
  }
}

/** Opens the user's live stream; `close()` ends it. */
export function openStream(options: StreamOptions): TidingsStream {
  return new TidingsStream(options);
}
