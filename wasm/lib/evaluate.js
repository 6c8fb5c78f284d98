// Runs one shared test case (format: core/tests/support/cases.rs) against the
// WebAssembly package `t` and returns {ok: value} or {error: message} in
// exactly the JSON shape Rust produces, so the two compare with deepEqual.
// Plain script, no imports: Node requires it, the browser check injects it.
(function (root) {
  'use strict';

  function evaluate(t, op, input) {
    const pos = (p) => new t.Position(BigInt(p.tx), BigInt(p.id));
    const posJson = (p) => ({ tx: p.tx.toString(), id: p.id.toString() });
    const readSet = (list) => {
      const set = new t.ReadSet();
      for (const p of list) set.insert(pos(p));
      return set;
    };
    switch (op) {
      case 'derive_key': {
        const k = t.deriveKey(input.tenant, input.event_type, input.entity_id, input.recipient_id, input.channel);
        return { readable: k.readable, digest_hex: k.digestHex };
      }
      case 'parse_readable': {
        const p = t.parseReadableKey(input.readable);
        return {
          tenant: p.tenant, event_type: p.eventType, entity_id: p.entityId,
          recipient_id: p.recipientId, channel: p.channel,
        };
      }
      case 'lock_key':
        return t.stableLockKey(input.parts).toString();
      case 'encode_cursor':
        return pos(input).toCursor();
      case 'decode_cursor':
        return posJson(t.Position.fromCursor(input.cursor));
      case 'advance':
        return posJson(t.advanceWatermark(pos(input.current), pos(input.proposed), pos(input.head)));
      case 'classify': {
        const s = t.classifyItem(pos(input.item), pos(input.seen), pos(input.read), readSet(input.read_set));
        return { seen: s.seen, read: s.read };
      }
      case 'unread_count': {
        const txs = BigInt64Array.from(input.positions, (p) => BigInt(p.tx));
        const ids = BigInt64Array.from(input.positions, (p) => BigInt(p.id));
        const b = t.unreadCount(txs, ids, pos(input.mark), readSet(input.read_set), input.cap);
        return { count: b.count, capped: b.capped };
      }
      case 'fanout': {
        const r = input.rates;
        const th = input.thresholds;
        const d = t.decideFanout(
          input.kind, input.audience,
          r ? r.producer_events_per_sec : undefined, r ? r.consumer_reads_per_sec : undefined,
          th.inline_max, th.batch_size, th.write_max_for_events, th.push_above_reads_per_event,
        );
        return { strategy: d.strategy, batch_size: d.batchSize ?? null, reason: d.reason };
      }
      case 'resolve_preference': {
        const rules = (list) => {
          const out = new t.PreferenceRules();
          for (const r of list) out.add(r.scope, r.key, r.channel, r.setting, r.locked);
          return out;
        };
        const cat = input.category;
        const r = t.resolvePreference(
          input.event_type ?? undefined, input.channel,
          cat ? cat.key : undefined, cat ? cat.critical : false, cat ? cat.defaults[input.channel] : undefined,
          rules(input.user), rules(input.tenant),
        );
        return { setting: r.setting, level: r.level };
      }
      case 'retry': {
        const s = input.schedule;
        const ms = t.retryNext(input.attempt, input.random, s.base_ms, s.factor, s.max_delay_ms, s.max_attempts, s.jitter);
        return ms === undefined ? null : ms;
      }
      default:
        throw new Error(`unknown op ${op}`);
    }
  }

  function run(t, c) {
    try {
      return { ok: evaluate(t, c.op, c.input) };
    } catch (e) {
      // A wasm trap (RuntimeError) is a bug, never an expected error.
      if (e instanceof WebAssembly.RuntimeError) throw e;
      return { error: e.message };
    }
  }

  const api = { evaluate, run };
  if (typeof module === 'object' && module.exports) module.exports = api;
  else root.tidingsCases = api;
})(globalThis);
