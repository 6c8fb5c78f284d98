// <tidings-inbox>: the inbox as a custom element, for any page, on any origin
// the server allows (TIDINGS_CORS_ORIGINS). No framework, no build step:
//
//   <script type="module" src="https://tidings.example/inbox/tidings-inbox.js"></script>
//   <tidings-inbox token="<user token>" limit="20"></tidings-inbox>
//
// Attributes:
//   api     the server's base URL (default: the origin this module came from)
//   token   a user token; or set the `getToken` property to a function that
//           returns one (string or promise), asked before every request, so
//           the host page can refresh tokens without touching the element
//   limit   items per page (default 20)
//   open    present: the panel stays open (a page of its own) instead of
//           dropping down from the bell
// It lives in a shadow root, so the host page's styles and its own do not
// meet. Theme it with the --tidings-* custom properties (inbox.css) and style
// its parts: ::part(bell), ::part(badge) (its text is the unread count,
// "1000+" when capped), ::part(panel), ::part(mark-all), ::part(item).
// Events (they bubble out of the element): `tidings:item` (detail.item, an
// item that arrived live) and `tidings:read` (detail.upTo after "mark all as
// read", detail.id after one item, with detail.marks, the server's answer).
// `element.inbox` is the mounted inbox's handle once `tidings:ready` fired.
import { mountInbox } from "./inbox.js";

const STYLES = new URL("./inbox.css", import.meta.url);
const DEFAULT_API = new URL(import.meta.url).origin;

export class TidingsInbox extends HTMLElement {
  // `getToken` (a function returning a user token, string or promise; it
  // beats `token`) is read at each request and is deliberately not a class
  // field: a host page may set it before this module defines the element,
  // and a field's initializer would overwrite it at the upgrade.
  /** The mounted inbox's handle (badge(), stats(), markAllRead(), …). */
  inbox = null;
  #mounting = null;

  connectedCallback() {
    if (this.#mounting) return;
    const shadow = this.shadowRoot ?? this.attachShadow({ mode: "open" });
    const styles = document.createElement("link");
    styles.rel = "stylesheet";
    styles.href = STYLES.href;
    const host = document.createElement("div");
    if (this.hasAttribute("open")) host.classList.add("tdg-inbox--page");
    shadow.replaceChildren(styles, host);
    const limit = Number(this.getAttribute("limit"));
    this.#mounting = mountInbox(host, {
      baseUrl: this.getAttribute("api") ?? DEFAULT_API,
      getToken: () => (typeof this.getToken === "function" ? this.getToken() : this.getAttribute("token")),
      pageSize: Number.isInteger(limit) && limit > 0 ? limit : undefined,
      open: this.hasAttribute("open"),
    }).then((inbox) => {
      this.inbox = inbox;
      this.dispatchEvent(new CustomEvent("tidings:ready", { detail: { inbox } }));
      return inbox;
    });
  }

  disconnectedCallback() {
    // Moving the element within the page disconnects and connects it at once:
    // only an element still detached after the move is closed.
    queueMicrotask(() => {
      if (this.isConnected || !this.#mounting) return;
      const mounting = this.#mounting;
      this.#mounting = null;
      this.inbox = null;
      mounting.then((inbox) => inbox.close(), () => {});
    });
  }
}

if (!customElements.get("tidings-inbox")) customElements.define("tidings-inbox", TidingsInbox);
