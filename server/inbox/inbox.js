// The Tidings inbox: a bell with the unread/unseen badge and a panel with the
// feed, newest first. Plain ES module, no framework, no build step.
//
//   import { mountInbox } from "https://tidings.example/inbox/inbox.js";
//   const inbox = await mountInbox(element, { baseUrl, getToken });
//
// `getToken()` returns a user token (string or promise); it is asked before
// every request, so a host page can refresh tokens. It is built on
// @tidings/client's browser parts, served beside it (compiled from
// clients/typescript/src by scripts/gen-clients): the live stream
// (`GET /v1/feed/stream` over fetch, resumed after the last item, refetched
// after a reset), its problem errors, bounded retries of 429 and the
// consistency token; where the server has no stream, it polls `after=head`.
import initCore, * as core from "./core/tidings_core.js";
import { ConsistencyTokens } from "./consistency.js";
import { readJson, TidingsError } from "./errors.js";
import { InboxModel } from "./model.js";
import { PreferencePanel } from "./preferences.js";
import { retryingFetch } from "./retry.js";
import { openStream } from "./stream.js";

const PAGE_SIZE = 20;
const DEFAULT_POLL_MS = 500;

/**
 * @param {HTMLElement} element where the bell and the panel go
 * @param {{baseUrl?: string, getToken: () => string | Promise<string>,
 *   open?: boolean, pollMs?: number, pageSize?: number}} options
 *   `open`: the panel stays open (a page of its own) instead of dropping
 *   down from the bell; `pollMs`: the poll interval where there is no stream.
 */
export async function mountInbox(element, options) {
  await initCore({ module_or_path: new URL("./core/tidings_core_bg.wasm", import.meta.url) });
  const inbox = new Inbox(element, options);
  await inbox.start();
  return inbox.handle();
}

class Inbox {
  constructor(element, options) {
    this.root = element;
    this.baseUrl = (options.baseUrl ?? location.origin).replace(/\/$/, "");
    this.getToken = options.getToken;
    this.pollMs = options.pollMs ?? DEFAULT_POLL_MS;
    this.pageSize = options.pageSize ?? PAGE_SIZE;
    this.model = new InboxModel(core);
    this.consistency = new ConsistencyTokens();
    this.fetch = retryingFetch((request) => fetch(request));
    // `open: true` pins the panel open (the standalone page): the bell then
    // only marks what is shown as seen.
    this.pinned = options.open ?? false;
    this.open = this.pinned;
    this.live = "connecting"; // "stream" | "polling" | "offline"
    this.closed = false;
    this.loadingOlder = false;
    this.pending = 0;
    // Own marks in flight, and how many were ever started: counts read while
    // one was in flight, or read before one started and answered after, may
    // not include it, and adopting them would undo its optimistic badge.
    this.marksInFlight = 0;
    this.markGeneration = 0;
    this.refreshing = false;
    this.refreshAgain = false;
    this.timings = {};
    this.render = this.render.bind(this);
    this.build();
  }

  // ---- network -----------------------------------------------------------

  /** One API call: its JSON, or a TidingsError with the problem body. */
  async call(method, path, body) {
    this.pending += 1;
    try {
      const headers = new Headers({ Authorization: `Bearer ${await this.getToken()}` });
      if (body !== undefined) headers.set("Content-Type", "application/json");
      const request = new Request(this.baseUrl + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      this.consistency.attachTo(request);
      const response = await this.fetch(request);
      this.consistency.rememberFrom(response);
      return await readJson(response);
    } finally {
      this.pending -= 1;
    }
  }

  feedPath(query) {
    const params = new URLSearchParams({ limit: String(this.pageSize) });
    for (const [k, v] of Object.entries(query)) if (v) params.set(k, v);
    return `/v1/feed?${params}`;
  }

  async reload() {
    const started = performance.now();
    const generation = this.markGeneration;
    const page = await this.call("GET", this.feedPath({}));
    if (generation !== this.markGeneration || this.marksInFlight > 0) {
      // An own mark started meanwhile: this page may predate it. Load again
      // once the marks are answered.
      this.afterMarks(() => this.reload());
      return;
    }
    this.model.load(page);
    this.render();
    this.watchForOlder();
    if (this.timings.firstRenderMs === undefined) {
      this.timings.firstRenderMs = performance.now() - started;
      // Since navigation start: what a user waits for, module and wasm included.
      this.timings.firstRenderAt = performance.now();
    }
    this.setStatus("");
  }

  async loadOlder() {
    const before = this.model.nextBefore;
    if (!before || this.loadingOlder) return;
    this.loadingOlder = true;
    try {
      const page = await this.call("GET", this.feedPath({ before }));
      if (this.model.nextBefore === before) this.model.appendOlder(page);
      this.render();
    } catch (err) {
      // Scrolling again retries.
      this.setStatus(`Could not load older items: ${err.message}`);
      return;
    } finally {
      this.loadingOlder = false;
    }
    this.watchForOlder();
  }

  /**
   * Brings items and counts up to date from one consistent source: pages
   * `after=head` (each page's items and counts come from one snapshot) until
   * one is short. Counts are adopted only when they describe exactly what the
   * page holds: no own mark started since the read (it might not be in them),
   * and no stream item newer than the snapshot's head arrived meanwhile (it
   * would be counted twice). Otherwise it runs again later. Used by polling,
   * by the stream's `marks` (changes made elsewhere) and after own marks whose
   * answer could not be checked.
   */
  async refresh() {
    if (this.marksInFlight > 0) {
      this.refreshAgain = true;
      return;
    }
    if (this.refreshing) {
      this.refreshAgain = true;
      return;
    }
    this.refreshing = true;
    this.refreshAgain = false;
    try {
      const generation = this.markGeneration;
      const limit = 100;
      let page;
      for (;;) {
        const head = this.model.head;
        const params = new URLSearchParams({ limit: String(limit) });
        if (head) params.set("after", head);
        page = await this.call("GET", `/v1/feed?${params}`);
        if (!head) {
          // Nothing was loaded yet: this is a first page.
          if (generation === this.markGeneration && this.marksInFlight === 0) {
            this.model.load(page);
          } else {
            this.refreshAgain = true;
          }
          this.render();
          return;
        }
        this.announceNew(this.model.merge(page.items));
        if (page.items.length < limit) break;
      }
      const consistent =
        generation === this.markGeneration &&
        this.marksInFlight === 0 &&
        this.model.isHead(page.head);
      if (!consistent) {
        this.refreshAgain = true;
      } else if (!this.model.adoptCounts(page)) {
        await this.reload();
      }
      this.render();
    } finally {
      this.refreshing = false;
      if (this.refreshAgain && this.marksInFlight === 0 && !this.closed) {
        this.refreshAgain = false;
        setTimeout(() => this.refresh().catch((err) => this.setStatus(err.message)), 50);
      }
    }
  }

  /** Runs `then` once no own mark is in flight (now, or when the last ends). */
  afterMarks(then) {
    if (this.marksInFlight === 0) {
      setTimeout(then, 0);
    } else {
      (this.whenMarksDone ??= []).push(then);
    }
  }

  async pollLoop() {
    this.live = "polling";
    this.render();
    while (!this.closed && this.live === "polling") {
      try {
        await this.refresh();
        this.setStatus("");
      } catch (err) {
        this.setStatus(`Offline: ${err.message}`);
      }
      await new Promise((r) => setTimeout(r, this.pollMs));
    }
  }

  /** Opens the stream; falls back to polling where the server has none. */
  connect() {
    if (this.closed) return;
    const stream = openStream({
      baseUrl: this.baseUrl,
      token: () => this.getToken(),
      after: this.model.head ?? undefined,
      consistency: this.consistency,
      resyncLimit: this.pageSize,
    });
    this.stream = stream;
    stream.on("open", () => {
      this.live = "stream";
      this.setStatus("");
      this.render();
      // The stream resumes items after the head, not marks: a mark made in
      // another tab while it was down would otherwise stay unseen until the
      // next one. Refresh reads the counts as of now.
      this.refresh().catch((err) => this.setStatus(err.message));
    });
    stream.on("item", (item) => {
      this.announceNew(this.model.merge([item]));
      this.render();
    });
    stream.on("marks", (marks) => {
      // Watermarks only move forward: adopting them is always safe. The
      // counts were read at some moment after the change, which may lie
      // before an own mark in flight or before an item still on its way;
      // refresh reads counts that match what the page holds.
      this.model.adoptMarks(marks);
      this.render();
      this.refresh().catch((err) => this.setStatus(err.message));
    });
    // A team left, or a reset the stream recovered from (it refetched the
    // first page and reopened after it): the page loads its first page again.
    const reload = () => this.reload().catch((err) => this.setStatus(err.message));
    stream.on("membership", reload);
    stream.on("resync", reload);
    stream.on("reset", ({ reason }) => {
      if (reason === "superseded") this.setStatus("Live updates stopped: this account has too many open tabs.");
    });
    stream.on("error", ({ error, willRetry }) => {
      if (stream !== this.stream || this.closed) return;
      if (!willRetry && error instanceof TidingsError && (error.status === 404 || error.status === 405)) {
        this.pollLoop();
        return;
      }
      this.live = willRetry ? "connecting" : "offline";
      this.setStatus(willRetry ? `Offline: ${error.message}; retrying` : `Live updates stopped: ${error.message}`);
      this.render();
    });
  }

  async start() {
    try {
      await this.reload();
    } catch (err) {
      this.setStatus(`Could not load the inbox: ${err.message}`);
    }
    this.connect();
  }

  // ---- actions -------------------------------------------------------------

  /**
   * One own mark: the badge changed at once (the model did it); the server's
   * answer must equal it. Marks in flight together commit in any order, so
   * an answer may lack the others: only a mark that was alone from start to
   * answer is checked; the rest is settled by a refresh once all are answered.
   */
  async ownMark(method, path, body, read = null) {
    const alone = this.marksInFlight === 0;
    const generation = ++this.markGeneration;
    this.marksInFlight += 1;
    this.render();
    let check = false;
    try {
      const marks = await this.call(method, path, body);
      this.model.adoptMarks(marks);
      if (read) this.emit("tidings:read", { ...read, marks });
      if (alone && generation === this.markGeneration) {
        check = this.model.checkAgainst(marks);
      }
    } catch (err) {
      this.setStatus(`Could not mark: ${err.message}`);
      this.refreshAgain = true;
      this.afterMarks(() => this.reload().catch((e) => this.setStatus(e.message)));
    } finally {
      this.marksInFlight -= 1;
    }
    if (!check) this.refreshAgain = true;
    this.render();
    if (this.marksInFlight === 0) {
      const waiting = this.whenMarksDone ?? [];
      this.whenMarksDone = [];
      for (const then of waiting) setTimeout(then, 0);
      if (this.refreshAgain && !waiting.length) {
        await this.refresh().catch((err) => this.setStatus(err.message));
      }
    }
  }

  async markAllRead() {
    const upTo = this.model.markAllRead();
    // The button is disabled once nothing is unread, and a disabled button
    // drops the focus: a keyboard user keeps it on the list.
    const hadFocus = this.activeElement() === this.readAll;
    this.render();
    if (hadFocus) (this.list.querySelector("li") ?? this.bell).focus();
    if (upTo === null) return;
    await this.ownMark("POST", "/v1/feed/read", { up_to: upTo }, { upTo });
  }

  async markSeen() {
    const upTo = this.model.markAllSeen();
    this.render();
    if (upTo === null) return;
    await this.ownMark("POST", "/v1/feed/seen", { up_to: upTo });
  }

  async markRead(id) {
    if (!this.model.markItemRead(id)) return;
    this.render();
    await this.ownMark("POST", `/v1/feed/items/${id}/read`, undefined, { id });
  }

  toggle(open = !this.open) {
    this.open = this.pinned || open;
    this.render();
    if (this.open) {
      this.markSeen();
      if (!this.pinned) this.list.querySelector("li")?.focus();
    } else {
      this.bell.focus();
    }
  }

  async toggleSettings() {
    const open = this.settings.getAttribute("aria-expanded") !== "true";
    this.settings.setAttribute("aria-expanded", String(open));
    try {
      await this.preferences.show(open);
    } catch (e) {
      this.setStatus(`Settings could not be loaded: ${e.message}`);
    }
  }

  handle() {
    return {
      badge: () => this.model.badge(),
      stats: () => ({
        ...this.model.stats,
        live: this.live,
        pending: this.pending,
        preferenceDrift: this.preferences.drift,
        ...this.timings,
      }),
      settings: () => this.toggleSettings(),
      items: () => this.model.items(),
      head: () => this.model.head,
      markAllRead: () => this.markAllRead(),
      markRead: (id) => this.markRead(id),
      reload: () => this.reload(),
      open: () => this.toggle(true),
      close: () => {
        this.closed = true;
        this.stream?.close();
        this.root.replaceChildren();
      },
    };
  }

  // ---- view ----------------------------------------------------------------

  build() {
    const el = (tag, attrs = {}, ...children) => {
      const node = document.createElement(tag);
      for (const [k, v] of Object.entries(attrs)) {
        if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
        else node.setAttribute(k, v);
      }
      node.append(...children);
      return node;
    };
    this.el = el;
    const panelId = `tidings-panel-${Math.random().toString(36).slice(2)}`;
    this.count = el("span", { class: "tdg-badge", part: "badge", "aria-hidden": "true" });
    this.bell = el(
      "button",
      {
        class: "tdg-bell",
        part: "bell",
        type: "button",
        "aria-haspopup": "true",
        "aria-controls": panelId,
        onclick: () => this.toggle(),
      },
      bellIcon(),
      this.count,
    );
    this.announce = el("span", { class: "tdg-visually-hidden", role: "status", "aria-live": "polite" });
    this.summary = el("span", { class: "tdg-summary" });
    this.readAll = el(
      "button",
      { class: "tdg-read-all", part: "mark-all", type: "button", onclick: () => this.markAllRead() },
      "Mark all as read",
    );
    this.liveDot = el("span", { class: "tdg-live" });
    this.preferences = new PreferencePanel(core, (m, p, b) => this.call(m, p, b), el);
    this.settings = el(
      "button",
      {
        class: "tdg-settings",
        type: "button",
        "aria-expanded": "false",
        onclick: () => this.toggleSettings(),
      },
      "Settings",
    );
    this.list = el("ul", { class: "tdg-list", role: "feed", "aria-label": "Notifications" });
    this.list.addEventListener("keydown", (e) => this.onKey(e));
    this.sentinel = el("div", { class: "tdg-sentinel", "aria-hidden": "true" });
    this.statusLine = el("p", { class: "tdg-status", role: "alert" });
    this.empty = el("p", { class: "tdg-empty" }, "You're all caught up.");
    this.panel = el(
      "section",
      { class: "tdg-panel", part: "panel", id: panelId, "aria-label": "Inbox" },
      el(
        "header",
        { class: "tdg-head" },
        el("h2", {}, "Inbox"),
        this.summary,
        this.liveDot,
        this.settings,
        this.readAll,
      ),
      this.preferences.node,
      this.statusLine,
      this.list,
      this.empty,
      this.sentinel,
    );
    this.panel.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && !this.pinned) this.toggle(false);
    });
    this.root.classList.add("tdg-inbox");
    this.root.replaceChildren(el("div", { class: "tdg-bar" }, this.bell, this.announce), this.panel);
    this.olderObserver = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) this.loadOlder();
    }, { root: null, rootMargin: "200px" });
    this.olderObserver.observe(this.sentinel);
  }

  /** After a page is shown: an observer reports only changes, so a page
   * too short to push the sentinel out of view would never load the next
   * one. Observing again reports where the sentinel is now. */
  watchForOlder() {
    this.olderObserver.unobserve(this.sentinel);
    this.olderObserver.observe(this.sentinel);
  }

  onKey(e) {
    const items = [...this.list.querySelectorAll("li")];
    const at = items.indexOf(this.activeElement());
    if (e.key === "ArrowDown" || e.key === "j") {
      items[Math.min(at + 1, items.length - 1)]?.focus();
      e.preventDefault();
    } else if (e.key === "ArrowUp" || e.key === "k") {
      items[Math.max(at - 1, 0)]?.focus();
      e.preventDefault();
    } else if (e.key === "Home") {
      items[0]?.focus();
      e.preventDefault();
    } else if (e.key === "End") {
      items.at(-1)?.focus();
      e.preventDefault();
    } else if ((e.key === "r" || e.key === "Enter") && at >= 0) {
      this.markRead(Number(items[at].dataset.id));
      e.preventDefault();
    }
  }

  /** The focused element, also when the inbox lives in a shadow root (the
   * document's active element is then the shadow host). */
  activeElement() {
    return this.root.getRootNode().activeElement;
  }

  /** A DOM event for the host page: it bubbles out of a shadow root too. */
  emit(type, detail) {
    this.root.dispatchEvent(new CustomEvent(type, { detail, bubbles: true, composed: true }));
  }

  /** Items that arrived live (stream or poll), newest last, as `tidings:item`
   * events; the first page and older pages are not news. */
  announceNew(added) {
    for (const entry of [...added].reverse()) this.emit("tidings:item", { item: entry.item });
  }

  setStatus(text) {
    this.statusLine.textContent = text;
    this.statusLine.hidden = !text;
  }

  render() {
    const badge = this.model.badge();
    const shown = badge.capped ? `${badge.unread}+` : String(badge.unread);
    this.count.textContent = badge.unread ? shown : "";
    this.count.dataset.unseen = String(badge.unseen);
    this.count.classList.toggle("tdg-badge--unseen", badge.unseen > 0);
    this.count.hidden = badge.unread === 0;
    const label = `Notifications: ${shown} unread, ${badge.unseen}${badge.capped ? "+" : ""} new`;
    this.bell.setAttribute("aria-label", label);
    this.bell.setAttribute("aria-expanded", String(this.open));
    if (this.announce.textContent !== label) this.announce.textContent = label;
    this.bell.dataset.unread = String(badge.unread);
    this.summary.textContent = badge.unread ? `${shown} unread` : "";
    this.readAll.disabled = badge.unread === 0;
    this.liveDot.dataset.state = this.live;
    this.liveDot.title = { stream: "Live", polling: "Live (polling)", connecting: "Connecting…", offline: "Offline" }[this.live] ?? "";
    this.panel.hidden = !this.open;
    const items = this.model.items();
    this.empty.hidden = items.length > 0;
    this.list.setAttribute("aria-busy", String(this.loadingOlder));
    const focusedId = this.activeElement()?.closest?.("li")?.dataset.id;
    const existing = new Map([...this.list.children].map((li) => [li.dataset.id, li]));
    const next = items.map((item, index) => {
      const li = existing.get(String(item.id)) ?? this.itemNode(item);
      this.updateItem(li, item, index + 1, items.length);
      return li;
    });
    if (next.length !== this.list.children.length || next.some((li, i) => this.list.children[i] !== li)) {
      this.list.replaceChildren(...next);
      if (focusedId) this.list.querySelector(`li[data-id="${focusedId}"]`)?.focus();
    }
    this.sentinel.hidden = !this.model.nextBefore;
  }

  itemNode(item) {
    const { el } = this;
    const titleId = `tdg-item-${item.id}-${Math.random().toString(36).slice(2, 7)}`;
    const button = el("button", { class: "tdg-mark", type: "button", tabindex: "-1" }, "Mark read");
    button.addEventListener("click", (e) => {
      e.stopPropagation();
      this.markRead(item.id);
    });
    const li = el(
      "li",
      { class: "tdg-item", part: "item", tabindex: "0", role: "article", "aria-labelledby": titleId, "data-id": String(item.id) },
      el("span", { class: "tdg-avatar", "aria-hidden": "true", style: `--tdg-hue: ${hue(item)}` }, initials(item)),
      el(
        "div",
        { class: "tdg-body" },
        el("p", { class: "tdg-title", id: titleId }, describe(item)),
        el("p", { class: "tdg-meta" }, el("time", { datetime: item.created_at }, relativeTime(item.created_at)), " · ", meta(item)),
      ),
      button,
    );
    li.addEventListener("click", () => this.markRead(item.id));
    return li;
  }

  updateItem(li, item, position, size) {
    li.classList.toggle("tdg-item--unread", !item.read);
    li.classList.toggle("tdg-item--unseen", !item.seen);
    li.setAttribute("aria-posinset", String(position));
    li.setAttribute("aria-setsize", this.model.nextBefore ? "-1" : String(size));
    li.dataset.read = String(item.read);
    const mark = li.querySelector(".tdg-mark");
    mark.hidden = item.read;
    mark.setAttribute("aria-label", `Mark "${describe(item)}" as read`);
  }
}

function describe(item) {
  if (item.subject) return item.subject;
  const text = typeof item.payload?.text === "string" ? item.payload.text : null;
  const verb = item.type.replace(/[._-]+/g, " ");
  const who = item.actor_id ?? "Someone";
  const what = item.object_id ? ` on ${item.object_id}` : "";
  return text ? `${who}: ${text}` : `${who} · ${verb}${what}`;
}

function meta(item) {
  return item.source === "alert" ? item.type : `${item.team_id ?? ""} · ${item.type}`;
}

function initials(item) {
  const name = item.actor_id ?? (item.source === "alert" ? "!" : "?");
  return name.slice(0, 2).toUpperCase();
}

/** A stable hue for the item's actor (alerts share one). */
function hue(item) {
  const name = item.actor_id ?? item.type;
  let h = 0;
  for (const c of name) h = (h * 31 + c.codePointAt(0)) % 360;
  return h;
}

function relativeTime(iso) {
  const seconds = Math.round((Date.now() - Date.parse(iso)) / 1000);
  const units = [["year", 31536000], ["month", 2592000], ["day", 86400], ["hour", 3600], ["minute", 60]];
  const format = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  for (const [unit, size] of units) {
    if (Math.abs(seconds) >= size) return format.format(-Math.round(seconds / size), unit);
  }
  return "just now";
}

function bellIcon() {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  svg.innerHTML =
    '<path d="M12 22a2.5 2.5 0 0 0 2.45-2h-4.9A2.5 2.5 0 0 0 12 22Zm7-6V11a7 7 0 0 0-5.5-6.84V3.5a1.5 1.5 0 0 0-3 0v.66A7 7 0 0 0 5 11v5l-2 2v1h18v-1Z"/>';
  return svg;
}
