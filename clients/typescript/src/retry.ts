// Retrying the answers the server gives when nothing was done yet and it says
// when to come back: 429 (a rate limit, refused before the body was read) and
// 409 with Retry-After (the same Idempotency-Key, or the same entity, still
// in flight). Both are safe to send again as they are. Anything else, and a
// wait longer than the caller allows, is returned as it came.
import { parseRetryAfter } from "./errors.js";

export interface RetryOptions {
  /** Retries after the first attempt, at most (default 3; 0 turns retrying off). */
  maxRetries?: number;
  /** The longest `Retry-After` honoured, in seconds (default 30): a longer
   * one is returned to the caller at once rather than waited out. */
  maxWaitSeconds?: number;
  /** Told before each wait: for logs and tests. */
  onRetry?: (retry: RetryNotice) => void;
}

export interface RetryNotice {
  /** 1 for the first retry. */
  attempt: number;
  status: number;
  /** What the server asked for, in seconds. */
  retryAfterSeconds: number;
  /** What will be waited, in milliseconds: the server's ask plus a little jitter. */
  waitMs: number;
  method: string;
  url: string;
}

/** Without Retry-After on a 429 (a proxy's), this long. */
const DEFAULT_RETRY_AFTER_SECONDS = 1;
/** Spreads the retries of clients refused together over this much. */
const JITTER_MS = 250;

function retryAfterOf(response: Response): number | undefined {
  const asked = parseRetryAfter(response.headers.get("Retry-After"));
  if (response.status === 429) return asked ?? DEFAULT_RETRY_AFTER_SECONDS;
  // A 409 without Retry-After is a conflict no wait resolves.
  if (response.status === 409) return asked;
  return undefined;
}

export function sleep(ms: number, signal?: AbortSignal | null): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** `fetch`, sending a request again after a 429 or a 409 in flight. */
export function retryingFetch(
  base: (input: Request) => Promise<Response>,
  options: RetryOptions = {},
): (input: Request) => Promise<Response> {
  const maxRetries = options.maxRetries ?? 3;
  const maxWaitSeconds = options.maxWaitSeconds ?? 30;
  return async (request: Request) => {
    for (let attempt = 1; ; attempt++) {
      // A body can be sent once: every attempt sends a copy.
      const response = await base(attempt > maxRetries ? request : request.clone());
      const retryAfterSeconds = retryAfterOf(response);
      if (
        retryAfterSeconds === undefined ||
        attempt > maxRetries ||
        retryAfterSeconds > maxWaitSeconds
      ) {
        return response;
      }
      const waitMs = retryAfterSeconds * 1000 + Math.random() * JITTER_MS;
      options.onRetry?.({
        attempt,
        status: response.status,
        retryAfterSeconds,
        waitMs,
        method: request.method,
        url: request.url,
      });
      // Let the connection go back to the pool.
      await response.body?.cancel().catch(() => undefined);
      await sleep(waitMs, request.signal);
    }
  };
}
