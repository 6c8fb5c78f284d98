// The consistency token, on its own so that the stream client (and the
// <tidings-inbox> element, which loads only the stream) can carry it without
// the REST client and openapi-fetch.

export const CONSISTENCY_HEADER = "Tidings-Consistency-Token";

/** Reads that take the token: the feed and its counts. */
const TAKES_CONSISTENCY_TOKEN = /\/v1\/feed(\/counts)?$/;

/**
 * The newest consistency token a write (or the stream's `marks` event)
 * handed out. With hot standbys, a read that sends it reflects that write on
 * any instance; without standbys the server sends none and this stays empty.
 * One per user session: share it between the REST client and the stream.
 */
export class ConsistencyTokens {
  #latest: string | undefined;

  get latest(): string | undefined {
    return this.#latest;
  }

  remember(token: string | null | undefined): void {
    if (token) this.#latest = token;
  }

  /** Keeps the token an answer carries, if any. */
  rememberFrom(response: Response): void {
    this.remember(response.headers.get(CONSISTENCY_HEADER));
  }

  /** Sends the latest token with `request` when it is a read that takes one
   * (a GET of the feed or its counts) and carries none yet. */
  attachTo(request: Request): void {
    if (
      this.#latest !== undefined &&
      request.method === "GET" &&
      TAKES_CONSISTENCY_TOKEN.test(new URL(request.url).pathname) &&
      !request.headers.has(CONSISTENCY_HEADER)
    ) {
      request.headers.set(CONSISTENCY_HEADER, this.#latest);
    }
  }
}
