// Types of @tidings/client/element: the <tidings-inbox> custom element
// (server/inbox/tidings-inbox.js, copied into the package by build.mjs with
// the modules it loads and the WebAssembly core). Importing the module
// defines the element.
import type { components } from "./schema.js";

type Schemas = components["schemas"];

/** The mounted inbox, once `tidings:ready` fired. */
export interface InboxHandle {
  /** The badge as shown: the server's counts, moved at once by own marks. */
  badge(): { unread: number; unseen: number; capped: boolean };
  items(): Schemas["FeedItemOut"][];
  head(): string | null;
  markAllRead(): Promise<void>;
  markRead(id: number): Promise<void>;
  reload(): Promise<void>;
  open(): void;
  close(): void;
}

export interface TidingsInboxEventMap {
  /** The element mounted its inbox. */
  "tidings:ready": CustomEvent<{ inbox: InboxHandle }>;
  /** An item arrived live (stream or poll). */
  "tidings:item": CustomEvent<{ item: Schemas["FeedItemOut"] }>;
  /** The user marked all read (`upTo`) or one item (`id`); `marks` is the server's answer. */
  "tidings:read": CustomEvent<{ upTo?: string; id?: number; marks: Schemas["WatermarksOut"] }>;
}

export class TidingsInbox extends HTMLElement {
  /** The mounted inbox, once `tidings:ready` fired; null before and after. */
  inbox: InboxHandle | null;
  /** Asked for a user token before each request; beats the `token` attribute. */
  getToken?: () => string | Promise<string>;
  addEventListener<K extends keyof TidingsInboxEventMap>(
    type: K,
    listener: (this: TidingsInbox, event: TidingsInboxEventMap[K]) => void,
    options?: boolean | AddEventListenerOptions,
  ): void;
  addEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject,
    options?: boolean | AddEventListenerOptions,
  ): void;
}

declare global {
  interface HTMLElementTagNameMap {
    "tidings-inbox": TidingsInbox;
  }
}
