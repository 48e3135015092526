// The operators' console of the MCP aggregator. Plain ES modules: Preact + hooks + htm, vendored (vendor/VERSIONS);
// no build step. It talks only to the daemon's REST API on this origin, with the token the operator types, kept in
// sessionStorage (this tab only, gone when the tab closes). Live status: GET /servers every POLL_MS (the daemon
// has no event stream on its REST listener); a server whose status changed is read again in detail.
import { h, render } from './vendor/preact.js';
import { useState, useEffect, useRef, useCallback } from './vendor/hooks.js';
import htm from './vendor/htm.js';

const html = htm.bind(h);
const API = '/api/v1/aggregator';
const POLL_MS = 2000;
const TOKEN_KEY = 'mcp-aggregator.token';
const TRANSPORTS = ['STDIO', 'SSE', 'HTTP'];

// ---- API ----------------------------------------------------------------------------------------------------

class APIError extends Error {
  constructor(status, body) {
    const d = body && body.detail;
    super(typeof d === 'string' ? d : (body && body.error_code) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
    this.fields = Array.isArray(d) ? d : [];
  }
}

async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = 'Bearer ' + token;
  const init = { method, headers };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  const r = await fetch(path, init);
  const text = await r.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = text; }
  }
  if (!r.ok) throw new APIError(r.status, data);
  return data;
}

const fmtTime = (t) => (t ? new Date(t).toLocaleString() : '—');
const json = (v) => JSON.stringify(v, null, 2);
const Status = ({ s }) => html`<span class=${'badge s-' + s} data-testid="status">${s}</span>`;
const Skills = ({ ids }) => (ids || []).map((s) => html`<span class="skill">${s}</span>`);

// ---- app shell ----------------------------------------------------------------------------------------------

function App() {
  const [me, setMe] = useState(null);
  const [authError, setAuthError] = useState(null);
  const [tab, setTab] = useState('servers');

  const whoami = useCallback(async () => {
    try {
      setMe(await api('GET', '/api/v1/whoami'));
      setAuthError(null);
    } catch (e) {
      setMe(null);
      setAuthError(e);
    }
  }, []);
  useEffect(() => { whoami(); }, [whoami]);

  if (authError && (authError.status === 401 || authError.status === 403)) {
    return html`<${Login} error=${sessionStorage.getItem(TOKEN_KEY) ? authError.message : null} onToken=${(t) => {
      sessionStorage.setItem(TOKEN_KEY, t);
      whoami();
    }} />`;
  }
  if (authError) return html`<main><div class="card error">Cannot reach the daemon: ${authError.message}</div></main>`;
  if (!me) return html`<main><p class="muted">Loading…</p></main>`;

  const admin = me.scope === 'admin';
  const tabs = [['servers', 'Servers'], ['search', 'Search'], ...(admin ? [['register', 'Register'], ['import', 'Import / export'], ['audit', 'Audit log']] : [])];
  return html`
    <header>
      <h1>MCP aggregator</h1>
      <nav>${tabs.map(([id, label]) => html`<button class=${tab === id ? 'active' : ''} data-testid=${'tab-' + id} onClick=${() => setTab(id)}>${label}</button>`)}</nav>
      <span class="spacer"></span>
      <span class="muted" data-testid="whoami">${me.name} · ${me.scope}${me.auth_enabled ? '' : ' (auth off)'}</span>
      ${me.auth_enabled && html`<button class="btn" onClick=${() => { sessionStorage.removeItem(TOKEN_KEY); whoami(); }}>Sign out</button>`}
    </header>
    <main>
      ${!admin && html`<div class="notice" data-testid="read-only">Read-only: this token has client scope. Registering and changing servers and the audit log need an admin token.</div>`}
      ${tab === 'servers' && html`<${Servers} admin=${admin} />`}
      ${tab === 'search' && html`<${Search} />`}
      ${tab === 'register' && admin && html`<div class="card"><h2>Register a server</h2><${ServerForm} onDone=${() => setTab('servers')} /></div>`}
      ${tab === 'import' && admin && html`<${ImportExport} />`}
      ${tab === 'audit' && admin && html`<${Audit} />`}
    </main>`;
}

function Login({ error, onToken }) {
  const [token, setToken] = useState('');
  return html`<main><div class="card narrow">
    <h2>Sign in</h2>
    <p class="muted">The daemon requires a bearer token (MCP_AGGREGATOR_ADMIN_TOKENS or MCP_AGGREGATOR_CLIENT_TOKENS). It is kept for this tab only.</p>
    ${error && html`<p class="error" data-testid="login-error">${error}</p>`}
    <form onSubmit=${(e) => { e.preventDefault(); if (token) onToken(token.trim()); }}>
      <label for="token">Token</label>
      <input id="token" type="password" autocomplete="off" data-testid="token" value=${token} onInput=${(e) => setToken(e.target.value)} />
      <div class="actions"><button class="btn primary" type="submit" data-testid="sign-in">Sign in</button></div>
    </form></div></main>`;
}

// ---- servers ------------------------------------------------------------------------------------------------

// usePoll calls fn now and every ms until unmounted; it reports whether the last call succeeded and when.
function usePoll(fn, ms) {
  const [state, setState] = useState({ ok: true, at: null, error: null });
  const fnRef = useRef(fn);
  fnRef.current = fn;
  useEffect(() => {
    let stop = false;
    let timer;
    const tick = async () => {
      try {
        await fnRef.current();
        if (!stop) setState({ ok: true, at: new Date(), error: null });
      } catch (e) {
        if (!stop) setState((s) => ({ ...s, ok: false, error: e.message }));
      }
      if (!stop) timer = setTimeout(tick, ms);
    };
    tick();
    return () => { stop = true; clearTimeout(timer); };
  }, [ms]);
  return state;
}

function Servers({ admin }) {
  const [servers, setServers] = useState(null);
  const [details, setDetails] = useState({});
  const [selected, setSelected] = useState(null);
  const seen = useRef({});

  const poll = async () => {
    const list = await api('GET', API + '/servers?limit=1000');
    setServers(list.servers);
    // Re-read in detail (error_message, failures) every server that is new or changed status.
    const changed = list.servers.filter((s) => seen.current[s.id] !== s.status + '|' + s.tool_count + '|' + s.last_health_check);
    for (const s of list.servers) seen.current[s.id] = s.status + '|' + s.tool_count + '|' + s.last_health_check;
    await Promise.all(changed.map(async (s) => {
      try {
        const d = await api('GET', API + '/servers/' + s.id);
        setDetails((prev) => ({ ...prev, [s.id]: d }));
      } catch { /* removed meanwhile */ }
    }));
  };
  const live = usePoll(poll, POLL_MS);
  const current = servers && servers.find((s) => s.id === selected);

  return html`<div class="grid">
    <div class="card">
      <div class="row"><h2>Servers</h2>
        <span class=${'live fixed' + (live.ok ? '' : ' stale')} data-testid="live">
          ${live.ok ? 'live · updated ' + (live.at ? live.at.toLocaleTimeString() : '') : 'not updating: ' + live.error}</span></div>
      ${servers === null ? html`<p class="muted">Loading…</p>` : servers.length === 0 ? html`<p class="muted" data-testid="no-servers">No server registered yet.</p>` : html`
      <table data-testid="servers">
        <thead><tr><th>Name</th><th>Status</th><th>Transport</th><th>Tools</th><th>Last health check</th><th>Last error</th></tr></thead>
        <tbody>${servers.map((s) => html`
          <tr class=${'selectable' + (s.id === selected ? ' selected' : '')} data-testid=${'server-' + s.name} onClick=${() => setSelected(s.id)}>
            <td><strong>${s.name}</strong>${s.description && html`<div class="muted">${s.description}</div>`}</td>
            <td><${Status} s=${s.status} /></td>
            <td>${s.transport_type}</td>
            <td data-testid="tool-count">${s.tool_count}</td>
            <td>${fmtTime(s.last_health_check)}</td>
            <td class="error" data-testid="last-error">${(details[s.id] && details[s.id].error_message) || ''}</td>
          </tr>`)}</tbody>
      </table>`}
    </div>
    <div>${current ? html`<${ServerDetail} key=${current.id} server=${current} admin=${admin} onGone=${() => setSelected(null)} />`
      : html`<div class="card muted">Select a server to see its details, state history and tools.</div>`}</div>
  </div>`;
}

function ServerDetail({ server, admin, onGone }) {
  const [detail, setDetail] = useState(null);
  const [history, setHistory] = useState([]);
  const [tools, setTools] = useState([]);
  const [msg, setMsg] = useState(null);
  const [confirming, setConfirming] = useState(false);
  const [editing, setEditing] = useState(false);
  const [trying, setTrying] = useState(null);

  const load = useCallback(async () => {
    try {
      const [d, hist, t] = await Promise.all([
        api('GET', API + '/servers/' + server.id),
        api('GET', API + '/servers/' + server.id + '/history?limit=20'),
        api('GET', API + '/servers/' + server.id + '/tools?limit=1000'),
      ]);
      setDetail(d); setHistory(hist.history); setTools(t.tools);
    } catch (e) {
      if (e.status === 404) onGone(); else setMsg({ error: e.message });
    }
  }, [server.id]);
  // Reload when the list shows a change of this server.
  useEffect(() => { load(); }, [load, server.status, server.tool_count, server.name]);

  const act = async (label, method, path, body) => {
    setMsg(null);
    try {
      const r = await api(method, API + '/servers/' + server.id + path, body);
      setMsg({ ok: label + ': ' + ((r && r.message) || 'done') });
      load();
    } catch (e) { setMsg({ error: label + ': ' + e.message }); }
  };
  const remove = async () => {
    try {
      await api('DELETE', API + '/servers/' + server.id);
      onGone();
    } catch (e) { setMsg({ error: 'Delete: ' + e.message }); setConfirming(false); }
  };
  if (!detail) return html`<div class="card muted">Loading ${server.name}…</div>`;
  if (editing) {
    return html`<div class="card"><h2>Edit ${detail.name}</h2>
      <${ServerForm} existing=${detail} onDone=${() => { setEditing(false); load(); }} onCancel=${() => setEditing(false)} /></div>`;
  }
  return html`<div class="card" data-testid="server-detail">
    <h2>${detail.name} <${Status} s=${detail.status} /></h2>
    ${admin && html`<div class="actions">
      <button class="btn" data-testid="connect" onClick=${() => act('Connect', 'POST', '/connect')}>Connect</button>
      <button class="btn" data-testid="disconnect" onClick=${() => act('Disconnect', 'POST', '/disconnect', {})}>Disconnect</button>
      <button class="btn" data-testid="refresh" onClick=${() => act('Refresh', 'POST', '/tools/refresh')}>Refresh tools</button>
      <button class="btn" data-testid="edit" onClick=${() => setEditing(true)}>Edit</button>
      <button class="btn danger" data-testid="delete" onClick=${() => setConfirming(true)}>Delete</button>
    </div>`}
    ${confirming && html`<div class="confirm" data-testid="confirm-delete">Delete <strong>${detail.name}</strong>? It is disconnected and removed with its tools and history.
      <div class="actions"><button class="btn danger" data-testid="confirm-delete-yes" onClick=${remove}>Delete ${detail.name}</button>
      <button class="btn" onClick=${() => setConfirming(false)}>Cancel</button></div></div>`}
    ${msg && html`<p class=${msg.error ? 'error' : 'muted'} data-testid="action-message">${msg.error || msg.ok}</p>`}
    <dl class="kv">
      <dt>Transport</dt><dd>${detail.transport_type}</dd>
      <dt>Description</dt><dd>${detail.description || '—'}</dd>
      <dt>Registered</dt><dd>${fmtTime(detail.registered_at)}</dd>
      <dt>Connected</dt><dd>${fmtTime(detail.connected_at)}</dd>
      <dt>Last health check</dt><dd>${fmtTime(detail.last_health_check)}${detail.health_response_time_ms != null ? ` (${detail.health_response_time_ms} ms)` : ''}</dd>
      <dt>Consecutive failures</dt><dd>${detail.consecutive_failures}</dd>
      <dt>Last error</dt><dd class="error" data-testid="error-message">${detail.error_message || ''}</dd>
      <dt>Auto-connect</dt><dd>${String(detail.auto_connect)}</dd>
      <dt>Health URL</dt><dd>${detail.health_check_url || '—'}</dd>
    </dl>
    <h3>Connection (secrets masked)</h3>
    <pre data-testid="connection-config">${json(detail.connection_config)}</pre>
    <h3>Tools (${tools.length})</h3>
    ${trying && html`<${TryTool} key=${trying} serverId=${server.id} tool=${trying} onClose=${() => setTrying(null)} />`}
    ${tools.length === 0 ? html`<p class="muted">No tools discovered.</p>` : html`<table data-testid="tools">
      <thead><tr><th>Tool</th><th>Skills</th><th></th></tr></thead>
      <tbody>${tools.map((t) => html`<tr data-testid=${'tool-' + t.name}>
        <td><code>${t.name}</code><div class="muted">${t.description}</div></td>
        <td><${Skills} ids=${t.skill_ids} /></td>
        <td><button class="btn" data-testid=${'try-' + t.original_name} onClick=${() => setTrying(t.name)}>Try</button></td></tr>`)}</tbody></table>`}
    <h3>State history</h3>
    <table data-testid="history"><thead><tr><th>When</th><th>Event</th><th>Details</th></tr></thead>
      <tbody>${history.map((e) => html`<tr><td>${fmtTime(e.timestamp)}</td><td>${e.event_type}</td><td><code>${e.details ? JSON.stringify(e.details) : ''}</code></td></tr>`)}</tbody></table>
  </div>`;
}

// ---- try a tool ---------------------------------------------------------------------------------------------

// fieldKind is how a property of an input schema is edited.
function fieldKind(p) {
  const t = Array.isArray(p.type) ? p.type.find((x) => x !== 'null') : p.type;
  if (Array.isArray(p.enum)) return 'enum';
  if (t === 'boolean') return 'boolean';
  if (t === 'integer' || t === 'number') return 'number';
  if (t === 'string') return 'string';
  return 'json';
}

function TryTool({ serverId, tool, onClose }) {
  const [info, setInfo] = useState(null);
  const [values, setValues] = useState({});
  const [errors, setErrors] = useState({});
  const [result, setResult] = useState(null);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    api('GET', API + '/servers/' + serverId + '/tools/' + encodeURIComponent(tool)).then(setInfo, (e) => setResult({ error: e.message }));
  }, [serverId, tool]);
  if (!info) return html`<div class="card">${result ? html`<p class="error">${result.error}</p>` : 'Loading…'}</div>`;

  const schema = info.input_schema || {};
  const props = schema.properties || {};
  const required = new Set(schema.required || []);
  const run = async (e) => {
    e.preventDefault();
    const args = {};
    const errs = {};
    for (const [name, p] of Object.entries(props)) {
      const v = values[name];
      const kind = fieldKind(p);
      if (v === undefined || v === '') {
        if (kind === 'boolean' && v !== undefined) args[name] = false;
        else if (required.has(name)) errs[name] = 'Required';
        continue;
      }
      if (kind === 'number') {
        const n = Number(v);
        if (Number.isNaN(n)) errs[name] = 'Not a number'; else args[name] = n;
      } else if (kind === 'json') {
        try { args[name] = JSON.parse(v); } catch { errs[name] = 'Not valid JSON'; }
      } else if (kind === 'enum') {
        args[name] = p.enum.find((x) => String(x) === v) ?? v;
      } else args[name] = v;
    }
    setErrors(errs);
    if (Object.keys(errs).length) return;
    setBusy(true);
    try {
      setResult({ ok: await api('POST', '/api/v1/tools/call', { name: info.name, arguments: args }) });
    } catch (err) {
      setResult({ error: err.message, body: err.body });
      const fe = {};
      for (const f of err.fields) if (f.loc && f.loc[0] === 'arguments' && f.loc.length > 1) fe[f.loc[1]] = f.msg;
      setErrors(fe);
    }
    setBusy(false);
  };
  const texts = result && result.ok && (result.ok.content || []).filter((c) => c.type === 'text').map((c) => c.text);
  return html`<div class="card" data-testid="try-tool">
    <h2>Try <code>${info.name}</code></h2>
    <p class="muted">${info.description}</p>
    <form onSubmit=${run}>
      ${Object.keys(props).length === 0 && html`<p class="muted">This tool takes no arguments.</p>`}
      ${Object.entries(props).map(([name, p]) => {
        const kind = fieldKind(p);
        const set = (v) => setValues({ ...values, [name]: v });
        const id = 'arg-' + name;
        const cls = errors[name] ? 'invalid' : '';
        let input;
        if (kind === 'boolean') input = html`<input id=${id} data-testid=${id} type="checkbox" checked=${values[name] === true} onChange=${(e) => set(e.target.checked)} />`;
        else if (kind === 'enum') input = html`<select id=${id} data-testid=${id} class=${cls} onChange=${(e) => set(e.target.value)}><option value="">—</option>${p.enum.map((x) => html`<option value=${String(x)}>${String(x)}</option>`)}</select>`;
        else if (kind === 'json') input = html`<textarea id=${id} data-testid=${id} class=${cls} placeholder="JSON" value=${values[name] || ''} onInput=${(e) => set(e.target.value)}></textarea>`;
        else input = html`<input id=${id} data-testid=${id} class=${cls} type=${kind === 'number' ? 'number' : 'text'} step="any" value=${values[name] ?? (p.default ?? '')} onInput=${(e) => set(e.target.value)} />`;
        return html`<div><label for=${id}>${name}${required.has(name) ? ' *' : ''} <span class="muted">${kind === 'json' ? (p.type || 'any') : ''}</span></label>
          ${input}${p.description && html`<div class="muted">${p.description}</div>`}
          ${errors[name] && html`<div class="field-error" data-testid=${'arg-error-' + name}>${errors[name]}</div>`}</div>`;
      })}
      <div class="actions"><button class="btn primary" type="submit" data-testid="run-tool" disabled=${busy}>${busy ? 'Running…' : 'Run'}</button>
        <button class="btn" type="button" onClick=${onClose}>Close</button></div>
    </form>
    ${result && result.error && html`<p class="error" data-testid="tool-error">${result.error}</p>`}
    ${result && result.ok && html`<div data-testid="tool-result">
      <p class=${result.ok.isError ? 'error' : 'muted'}>${result.ok.isError ? 'The tool reported an error' : 'Result'}
        ${result.ok.metadata ? ` · ${result.ok.metadata.total_time_ms} ms via ${result.ok.metadata.routed_to}` : ''}</p>
      ${texts.map((t) => html`<pre data-testid="tool-text">${t}</pre>`)}
      <details><summary>Full result</summary><pre>${json(result.ok)}</pre></details></div>`}
  </div>`;
}

// ---- register / edit ----------------------------------------------------------------------------------------

// Lines of "KEY=VALUE" (env) or "Name: value" (headers) to an object, and back.
const parsePairs = (text, sep) => {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    const i = line.indexOf(sep);
    if (i < 0) out[line.trim()] = '';
    else out[line.slice(0, i).trim()] = line.slice(i + sep.length).trim();
  }
  return out;
};
const formatPairs = (obj, sep) => Object.entries(obj || {}).map(([k, v]) => k + sep + v).join('\n');

// fieldOf maps a 422 location to the form field that shows it.
function fieldOf(loc) {
  const l = loc[0] === 'body' ? loc.slice(1) : loc;
  if (l[0] === 'connection_config') {
    const k = l[1];
    if (k === undefined) return 'connection_config';
    if (k === 'base_url' || k === 'url') return 'url';
    return k;
  }
  return l[0] === undefined ? 'form' : String(l[0]);
}

function ServerForm({ existing, onDone, onCancel }) {
  const cc = (existing && existing.connection_config) || {};
  const [f, setF] = useState({
    name: existing ? existing.name : '',
    description: (existing && existing.description) || '',
    transport_type: existing ? existing.transport_type : 'STDIO',
    command: cc.command || '',
    args: (cc.args || []).join('\n'),
    env: formatPairs(cc.env, '='),
    cwd: cc.cwd || '',
    url: cc.url || cc.base_url || '',
    headers: formatPairs(cc.headers, ': '),
    allow_insecure_http: !!cc.allow_insecure_http,
    health_check_url: (existing && existing.health_check_url) || '',
    auto_connect: existing ? existing.auto_connect : true,
  });
  const [initial] = useState(f);
  const [errors, setErrors] = useState({});
  const [formError, setFormError] = useState(null);
  const [busy, setBusy] = useState(false);
  const set = (k) => (e) => setF({ ...f, [k]: e.target.type === 'checkbox' ? e.target.checked : e.target.value });
  const stdio = f.transport_type === 'STDIO';

  const connectionConfig = () => {
    const c = {};
    if (stdio) {
      c.command = f.command;
      if (f.args.trim()) c.args = f.args.split('\n').map((s) => s.trim()).filter((s) => s);
      if (f.env.trim()) c.env = parsePairs(f.env, '=');
      if (f.cwd.trim()) c.cwd = f.cwd.trim();
    } else {
      c[f.transport_type === 'SSE' ? 'url' : 'base_url'] = f.url.trim();
      if (f.headers.trim()) c.headers = parsePairs(f.headers, ':');
    }
    if (f.allow_insecure_http) c.allow_insecure_http = true;
    return c;
  };
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true); setErrors({}); setFormError(null);
    try {
      if (existing) {
        const patch = {};
        if (f.name !== initial.name) patch.name = f.name;
        if (f.description !== initial.description) patch.description = f.description || null;
        if (['command', 'args', 'env', 'cwd', 'url', 'headers', 'allow_insecure_http'].some((k) => f[k] !== initial[k])) {
          patch.connection_config = connectionConfig();
          // A masked value sent back would replace the secret with "***": make the operator type it again.
          const masked = ['args', 'env', 'url', 'headers'].filter((k) => f[k].includes('***'));
          if (masked.length) {
            setErrors(Object.fromEntries(masked.map((k) => [k, 'Still masked (***): type the secret again, or undo the connection changes'])));
            setFormError('The connection settings still hold masked secrets.');
            return;
          }
        }
        if (f.health_check_url !== initial.health_check_url) patch.health_check_url = f.health_check_url || null;
        if (Object.keys(patch).length === 0) { onDone(); return; }
        await api('PATCH', API + '/servers/' + existing.id, patch);
      } else {
        const body = { name: f.name, transport_type: f.transport_type, connection_config: connectionConfig(), auto_connect: f.auto_connect };
        if (f.description) body.description = f.description;
        if (f.health_check_url) body.health_check_url = f.health_check_url;
        await api('POST', API + '/servers', body);
      }
      onDone();
    } catch (err) {
      const fe = {};
      for (const x of err.fields) {
        const k = fieldOf(x.loc || []);
        fe[k] = (fe[k] ? fe[k] + '; ' : '') + x.msg;
      }
      setErrors(fe);
      const placed = new Set(['name', 'description', 'transport_type', 'command', 'args', 'env', 'cwd', 'url', 'headers', 'health_check_url', 'allow_insecure_http', 'auto_connect']);
      const rest = Object.entries(fe).filter(([k]) => !placed.has(k)).map(([k, v]) => k + ': ' + v);
      setFormError(err.fields.length ? (rest.length ? rest.join('; ') : 'Please correct the fields marked below.') : err.message);
    } finally { setBusy(false); }
  };
  const Err = ({ k }) => errors[k] ? html`<div class="field-error" data-testid=${'error-' + k}>${errors[k]}</div>` : null;
  const cls = (k) => (errors[k] ? 'invalid' : '');
  return html`<form onSubmit=${submit} data-testid="server-form">
    ${formError && html`<p class="error" data-testid="form-error">${formError}</p>`}
    ${existing && html`<p class="muted">Secrets are shown masked (***). Leave the connection fields as they are to keep them; if you change any of them, type every secret again.</p>`}
    <div class="row">
      <div><label for="f-name">Name</label><input id="f-name" data-testid="f-name" type="text" class=${cls('name')} value=${f.name} onInput=${set('name')} /><${Err} k="name" /></div>
      <div><label for="f-transport">Transport</label>
        <select id="f-transport" data-testid="f-transport" value=${f.transport_type} disabled=${!!existing} onChange=${set('transport_type')}>
          ${TRANSPORTS.map((t) => html`<option value=${t}>${t === 'HTTP' ? 'HTTP (streamable)' : t}</option>`)}</select><${Err} k="transport_type" /></div>
    </div>
    <label for="f-description">Description</label><input id="f-description" data-testid="f-description" type="text" class=${cls('description')} value=${f.description} onInput=${set('description')} /><${Err} k="description" />
    ${stdio ? html`
      <label for="f-command">Command</label><input id="f-command" data-testid="f-command" type="text" class=${cls('command')} value=${f.command} onInput=${set('command')} /><${Err} k="command" />
      <label for="f-args">Arguments (one per line)</label><textarea id="f-args" data-testid="f-args" class=${cls('args')} value=${f.args} onInput=${set('args')}></textarea><${Err} k="args" />
      <label for="f-env">Environment (KEY=value per line; \${VAR} reads the daemon's environment)</label><textarea id="f-env" data-testid="f-env" class=${cls('env')} value=${f.env} onInput=${set('env')}></textarea><${Err} k="env" />
      <label for="f-cwd">Working directory</label><input id="f-cwd" data-testid="f-cwd" type="text" class=${cls('cwd')} value=${f.cwd} onInput=${set('cwd')} /><${Err} k="cwd" />` : html`
      <label for="f-url">${f.transport_type === 'SSE' ? 'SSE endpoint URL' : 'Streamable HTTP endpoint URL'}</label><input id="f-url" data-testid="f-url" type="text" class=${cls('url')} value=${f.url} onInput=${set('url')} /><${Err} k="url" />
      <label for="f-headers">Headers (Name: value per line)</label><textarea id="f-headers" data-testid="f-headers" class=${cls('headers')} value=${f.headers} onInput=${set('headers')}></textarea><${Err} k="headers" />`}
    <label for="f-health">Health check URL (optional)</label><input id="f-health" data-testid="f-health" type="text" class=${cls('health_check_url')} value=${f.health_check_url} onInput=${set('health_check_url')} /><${Err} k="health_check_url" />
    <label><input type="checkbox" checked=${f.allow_insecure_http} onChange=${set('allow_insecure_http')} /> Allow plain http to a non-loopback host</label><${Err} k="allow_insecure_http" />
    ${!existing && html`<label><input type="checkbox" data-testid="f-auto-connect" checked=${f.auto_connect} onChange=${set('auto_connect')} /> Connect now</label>`}
    <div class="actions"><button class="btn primary" type="submit" data-testid="f-submit" disabled=${busy}>${existing ? 'Save' : 'Register'}</button>
      ${onCancel && html`<button class="btn" type="button" onClick=${onCancel}>Cancel</button>`}</div>
  </form>`;
}

// ---- search -------------------------------------------------------------------------------------------------

function Search() {
  const [q, setQ] = useState('');
  const [res, setRes] = useState(null);
  const [err, setErr] = useState(null);
  const run = async (e) => {
    e.preventDefault();
    setErr(null);
    try { setRes(await api('POST', '/api/v1/search', { query: q, limit: 20 })); } catch (x) { setErr(x.fields.length ? x.fields.map((f) => f.msg).join('; ') : x.message); }
  };
  return html`<div class="card">
    <h2>Search the tool catalogue</h2>
    <form class="row" onSubmit=${run}>
      <input type="text" data-testid="search-query" placeholder="e.g. add two numbers" value=${q} onInput=${(e) => setQ(e.target.value)} />
      <div class="fixed"><button class="btn primary" data-testid="search-run" type="submit">Search</button></div>
    </form>
    ${err && html`<p class="error">${err}</p>`}
    ${res && html`<div data-testid="search-results">
      <p class="muted">${res.tools.length} tools · strategy ${res.metadata.strategy_used}${res.metadata.fallback ? ' (fallback)' : ''} · ${res.metadata.total_time_ms} ms</p>
      ${res.matched_skills.length > 0 && html`<h3>Matched skills</h3><table data-testid="matched-skills"><thead><tr><th>Skill</th><th>Score</th><th>Tools</th></tr></thead>
        <tbody>${res.matched_skills.map((s) => html`<tr><td>${s.name}<div class="muted">${s.description}</div></td><td>${s.score.toFixed(3)}</td><td>${s.tool_count}</td></tr>`)}</tbody></table>`}
      <h3>Tools</h3>
      <table data-testid="search-tools"><thead><tr><th>Tool</th><th>Score</th><th>Skills</th><th>Server</th></tr></thead>
        <tbody>${res.tools.map((t) => html`<tr data-testid=${'hit-' + t.name}><td><code>${t.name}</code><div class="muted">${t.description}</div></td>
          <td data-testid="score">${t.score.toFixed(3)}</td><td><${Skills} ids=${t.skill_ids} /></td>
          <td>${t.source_server.name} <${Status} s=${t.source_server.status} /></td></tr>`)}</tbody></table>
    </div>`}
  </div>`;
}

// ---- audit --------------------------------------------------------------------------------------------------

function Audit() {
  const [page, setPage] = useState(0);
  const [data, setData] = useState(null);
  const [err, setErr] = useState(null);
  const size = 50;
  useEffect(() => {
    api('GET', API + '/audit?limit=' + size + '&offset=' + page * size).then(setData, (e) => setErr(e.message));
  }, [page]);
  if (err) return html`<div class="card error">${err}</div>`;
  if (!data) return html`<div class="card muted">Loading…</div>`;
  return html`<div class="card"><h2>Audit log (${data.total})</h2>
    <table data-testid="audit"><thead><tr><th>When</th><th>Event</th><th>Server</th><th>Actor</th><th>IP</th><th>Details</th></tr></thead>
      <tbody>${data.records.map((r) => html`<tr><td>${fmtTime(r.timestamp)}</td><td>${r.event}</td><td>${r.server_name || ''}</td>
        <td>${r.actor}</td><td>${r.ip_address}</td><td><code>${r.details ? JSON.stringify(r.details) : ''}</code></td></tr>`)}</tbody></table>
    <div class="actions"><button class="btn" disabled=${page === 0} onClick=${() => setPage(page - 1)}>Newer</button>
      <button class="btn" disabled=${(page + 1) * size >= data.total} onClick=${() => setPage(page + 1)}>Older</button></div></div>`;
}

// ---- import / export ----------------------------------------------------------------------------------------

function ImportExport() {
  const [text, setText] = useState('');
  const [report, setReport] = useState(null);
  const [err, setErr] = useState(null);
  const [exported, setExported] = useState(null);
  const run = (dry) => async () => {
    setErr(null);
    try { setReport(await api('POST', API + '/import' + (dry ? '?dry_run=true' : ''), text)); } catch (e) {
      setReport(null);
      setErr(e.fields.length ? e.fields.map((f) => f.loc.join('.') + ': ' + f.msg).join('; ') : e.message);
    }
  };
  return html`<div class="card"><h2>Import an mcpServers file</h2>
    <p class="muted">Paste Claude Desktop's or Cursor's <code>{"mcpServers": …}</code> or VS Code's <code>{"servers": …}</code>.</p>
    <textarea data-testid="import-text" class="tall" value=${text} onInput=${(e) => setText(e.target.value)}></textarea>
    <div class="actions"><button class="btn" data-testid="import-dry" onClick=${run(true)}>Dry run</button>
      <button class="btn primary" data-testid="import-run" onClick=${run(false)}>Import</button></div>
    ${err && html`<p class="error">${err}</p>`}
    ${report && html`<div data-testid="import-report"><p>${report.dry_run ? 'Dry run: ' : ''}${report.counts.created} created, ${report.counts.skipped} skipped, ${report.counts.invalid} invalid, ${report.counts.failed} failed</p>
      <table><thead><tr><th>Status</th><th>Name</th><th>From</th><th>Transport</th><th>Reason</th></tr></thead>
      <tbody>${report.results.map((r) => html`<tr><td>${r.status}</td><td>${r.name}</td><td>${r.renamed ? r.source_name : ''}</td><td>${r.transport_type || ''}</td>
        <td class=${r.status === 'invalid' || r.status === 'failed' ? 'error' : ''}>${r.reason || ''}${r.ignored_fields ? html`<div class="muted">ignored: ${r.ignored_fields.join(', ')}</div>` : ''}</td></tr>`)}</tbody></table></div>`}
  </div>
  <div class="card"><h2>Export</h2>
    <p class="muted">Every server in the mcpServers format; secrets are masked as the API masks them.</p>
    <div class="actions"><button class="btn" data-testid="export-run" onClick=${async () => setExported(await api('GET', API + '/export'))}>Export (mcpServers)</button>
      <button class="btn" onClick=${async () => setExported(await api('GET', API + '/export?format=vscode'))}>Export (VS Code)</button></div>
    ${exported && html`<pre data-testid="export-text">${json(exported)}</pre>`}
  </div>`;
}

const root = document.getElementById('app');
root.textContent = ''; // the "Loading" placeholder
render(html`<${App} />`, root);
