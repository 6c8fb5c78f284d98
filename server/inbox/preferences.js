// The inbox's preference panel: the user's categories × channels, each cell
// on or off as the server decides it at fan-out. A toggle is resolved at once
// with the WebAssembly core (`resolvePreference`, the code the server runs)
// over the user's rows with the change, the tenant's defaults and the
// category's own defaults; then it is saved (`PATCH /v1/me/preferences`), and
// the server's grid must agree with what the page showed: a cell that does not
// is counted (`drift`) and the server's answer is adopted. Critical
// categories and locked tenant defaults show as locked.

const CHANNELS = ["in_app", "email", "webhook"];
const CHANNEL_LABELS = { in_app: "In app", email: "Email", webhook: "Webhook" };

export class PreferencePanel {
  /**
   * @param core the initialised WebAssembly core
   * @param call `(method, path, body) => Promise<json>`, the inbox's one request path
   * @param el the inbox's element factory
   */
  constructor(core, call, el) {
    this.core = core;
    this.call = call;
    this.el = el;
    this.state = null;
    this.drift = 0;
    this.saving = 0;
    this.node = el("section", { class: "tdg-prefs", "aria-label": "Notification settings", hidden: "" });
  }

  async show(visible) {
    this.node.hidden = !visible;
    if (visible) {
      this.state = await this.call("GET", "/v1/me/preferences");
      this.render();
    }
  }

  rules(rows) {
    const out = new this.core.PreferenceRules();
    for (const r of rows) out.add(r.scope, r.key ?? undefined, r.channel, r.setting, r.locked);
    return out;
  }

  /** One cell as the core resolves it from the state the page holds. */
  resolve(category, channel) {
    const r = this.core.resolvePreference(
      undefined, channel, category.key, category.critical,
      category.defaults[channel] ?? undefined,
      this.rules(this.state.settings), this.rules(this.state.tenant_defaults),
    );
    return { setting: r.setting, level: r.level };
  }

  async toggle(category, channel, on) {
    const row = { scope: "category", key: category.key, channel, setting: on ? "on" : "off" };
    const same = (r) => r.scope === "category" && r.key === category.key && r.channel === channel;
    this.state.settings = this.state.settings.filter((r) => !same(r)).concat([{ ...row, locked: false }]);
    const shown = this.render();
    this.saving += 1;
    try {
      const answer = await this.call("PATCH", "/v1/me/preferences", { settings: [row] });
      for (const { category: c, channels } of answer.categories) {
        for (const cell of channels) {
          const mine = shown.get(`${c.key}/${cell.channel}`);
          if (mine !== undefined && mine !== cell.setting) this.drift += 1;
        }
      }
      this.state = answer;
    } finally {
      this.saving -= 1;
      this.render();
    }
  }

  /** Draws the grid from the core's resolution; returns what each cell shows. */
  render() {
    const el = this.el;
    const shown = new Map();
    if (!this.state) return shown;
    const head = el("tr", {}, el("th", { scope: "col" }, "Category"),
      ...CHANNELS.map((c) => el("th", { scope: "col" }, CHANNEL_LABELS[c])));
    const rows = this.state.categories.map(({ category }) => {
      const cells = CHANNELS.map((channel) => {
        const { setting, level } = this.resolve(category, channel);
        shown.set(`${category.key}/${channel}`, setting);
        const locked = level === "critical" || level === "locked";
        const box = el("input", {
          type: "checkbox",
          "aria-label": `${category.label}: ${CHANNEL_LABELS[channel]}`,
          "data-category": category.key,
          "data-channel": channel,
          onchange: (e) => this.toggle(category, channel, e.target.checked),
        });
        box.checked = setting === "on";
        box.disabled = locked;
        return el("td", { class: locked ? "tdg-locked" : "" }, box,
          locked ? el("span", { class: "tdg-lock", title: level === "critical" ? "Always sent" : "Set by your organisation" }, lockIcon()) : "");
      });
      return el("tr", {}, el("th", { scope: "row" }, category.label), ...cells);
    });
    const body = this.state.categories.length
      ? el("table", { class: "tdg-prefs-grid" }, el("thead", {}, head), el("tbody", {}, ...rows))
      : el("p", { class: "tdg-empty" }, "No categories to choose from.");
    this.node.replaceChildren(el("h3", {}, "Notification settings"), body);
    return shown;
  }
}

function lockIcon() {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  for (const [k, v] of Object.entries({ viewBox: "0 0 16 16", width: "11", height: "11", "aria-hidden": "true" })) {
    svg.setAttribute(k, v);
  }
  const path = document.createElementNS(ns, "path");
  path.setAttribute("d", "M4 7V5a4 4 0 0 1 8 0v2h1v8H3V7h1zm2 0h4V5a2 2 0 0 0-4 0v2z");
  path.setAttribute("fill", "currentColor");
  svg.append(path);
  return svg;
}
