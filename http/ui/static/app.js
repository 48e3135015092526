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

// ---- sign-in through the OpenID provider ---------------------------------------------------------------------
// When the daemon trusts an OpenID provider and names the console's client (login.json), the console signs in
// with the authorization code flow and PKCE (S256) as a public client: the verifier and state wait in
// sessionStorage while the operator is at the provider, the code is redeemed at the provider's token endpoint, and
// the access token is then used like a pasted one (kept for this tab only).

const LOGIN_KEY = 'mcp-aggregator.login';
const b64url = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
const randomString = () => b64url(crypto.getRandomValues(new Uint8Array(32)));
const redirectURI = () => location.origin + '/ui/';

// loginSettings is login.json (null when the daemon has no provider sign-in: the console asks for a token).
async function loginSettings() {
  const r = await fetch('/ui/login.json', { headers: { Accept: 'application/json' } });
  if (!r.ok) return null;
  return r.json();
}

// startProviderLogin sends the operator to the provider's authorization endpoint.
async function startProviderLogin(cfg) {
  const verifier = randomString();
  const state = randomString();
  const challenge = b64url(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)));
  sessionStorage.setItem(LOGIN_KEY, JSON.stringify({ verifier, state }));
  const u = new URL(cfg.authorization_endpoint);
  const params = { response_type: 'code', client_id: cfg.client_id, redirect_uri: redirectURI(), scope: cfg.scope, state,
    code_challenge: challenge, code_challenge_method: 'S256', resource: cfg.resource };
  for (const [k, v] of Object.entries(params)) u.searchParams.set(k, v);
  location.assign(u.toString());
}

// finishProviderLogin redeems the code the provider sent the operator back with, if the page's URL has one, and
// keeps the access token; it throws what went wrong (a refusal, a state that does not match, no token).
async function finishProviderLogin() {
  const q = new URLSearchParams(location.search);
  if (!q.has('code') && !q.has('error')) return;
  history.replaceState(null, '', location.pathname); // the code is single-use: keep it out of the history
  let pending = null;
  try { pending = JSON.parse(sessionStorage.getItem(LOGIN_KEY) || 'null'); } catch { pending = null; }
  sessionStorage.removeItem(LOGIN_KEY);
  if (q.has('error')) throw new Error('The provider refused the sign-in: ' + (q.get('error_description') || q.get('error')));
  if (!pending || q.get('state') !== pending.state) throw new Error('The sign-in could not be checked (its state does not match): sign in again');
  const cfg = await loginSettings();
  if (!cfg) throw new Error('Sign-in through the provider is not configured');
  const r = await fetch(cfg.token_endpoint, {
    method: 'POST',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded', Accept: 'application/json' },
    body: new URLSearchParams({ grant_type: 'authorization_code', code: q.get('code'), redirect_uri: redirectURI(),
      client_id: cfg.client_id, code_verifier: pending.verifier, resource: cfg.resource }),
  });
  const body = await r.json().catch(() => ({}));
  if (!r.ok || !body.access_token) throw new Error('The provider issued no token: ' + (body.error_description || body.error || 'HTTP ' + r.status));
  sessionStorage.setItem(TOKEN_KEY, body.access_token);
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
  const [credentialFor, setCredentialFor] = useState(credentialTarget());
  const [oauthState, setOAuthState] = useState(oauthTarget());
  useEffect(() => {
    const onHash = () => { setCredentialFor(credentialTarget()); setOAuthState(oauthTarget()); };
    window.addEventListener('hashchange', onHash);
    return () => window.removeEventListener('hashchange', onHash);
  }, []);

  const whoami = useCallback(async () => {
    try {
      setMe(await api('GET', '/api/v1/whoami'));
      setAuthError(null);
    } catch (e) {
      setMe(null);
      setAuthError(e);
    }
  }, []);
  const [loginError, setLoginError] = useState(null);
  useEffect(() => {
    // Back from the provider: redeem the code first, then ask who we are.
    finishProviderLogin().catch((e) => setLoginError(e.message)).finally(whoami);
  }, [whoami]);

  if (authError && (authError.status === 401 || authError.status === 403)) {
    return html`<${Login} error=${loginError || (sessionStorage.getItem(TOKEN_KEY) ? authError.message : null)} onToken=${(t) => {
      sessionStorage.setItem(TOKEN_KEY, t);
      setLoginError(null);
      whoami();
    }} />`;
  }
  if (authError) return html`<main><div class="card error">Cannot reach the daemon: ${authError.message}</div></main>`;
  if (!me) return html`<main><p class="muted">Loading…</p></main>`;

  const admin = me.scope === 'admin';
  const tabs = [['servers', 'Servers'], ['search', 'Search'], ...(admin ? [['register', 'Register'], ['profiles', 'Profiles'], ['import', 'Import / export'], ['audit', 'Audit log'], ['actors', 'Actors']] : [])];
  return html`
    <header>
      <h1>MCP aggregator</h1>
      <nav>${tabs.map(([id, label]) => html`<button class=${tab === id ? 'active' : ''} data-testid=${'tab-' + id} onClick=${() => setTab(id)}>${label}</button>`)}</nav>
      <span class="spacer"></span>
      <span class="muted" data-testid="whoami">${me.name} · ${me.scope}${me.auth_enabled ? '' : ' (auth off)'}</span>
      ${me.auth_enabled && html`<button class="btn" onClick=${() => { sessionStorage.removeItem(TOKEN_KEY); whoami(); }}>Sign out</button>`}
    </header>
    <main>
      ${credentialFor && html`<${CredentialPage} serverId=${credentialFor} onDone=${() => { history.replaceState(null, '', location.pathname); setCredentialFor(null); }} />`}
      ${oauthState && html`<${OAuthCompletePage} flowState=${oauthState} onDone=${() => { history.replaceState(null, '', location.pathname); setOAuthState(null); }} />`}
      ${!admin && html`<div class="notice" data-testid="read-only">Read-only: this token has client scope. Registering and changing servers, tool curation, profiles and the audit log need an admin token.</div>`}
      ${tab === 'servers' && html`<${Servers} admin=${admin} />`}
      ${tab === 'search' && html`<${Search} />`}
      ${tab === 'register' && admin && html`<div class="card"><h2>Register a server</h2><${ServerForm} onDone=${() => setTab('servers')} /></div>`}
      ${tab === 'profiles' && admin && html`<${Profiles} />`}
      ${tab === 'import' && admin && html`<${ImportExport} />`}
      ${tab === 'audit' && admin && html`<${Audit} />`}
      ${tab === 'actors' && admin && html`<${Actors} />`}
    </main>`;
}

function Login({ error, onToken }) {
  const [token, setToken] = useState('');
  const [provider, setProvider] = useState(null);
  const [startError, setStartError] = useState(null);
  useEffect(() => { loginSettings().then(setProvider, () => setProvider(null)); }, []);
  const shown = startError || error;
  return html`<main><div class="card narrow">
    <h2>Sign in</h2>
    ${shown && html`<p class="error" data-testid="login-error">${shown}</p>`}
    ${provider && html`
      <p class="muted">Sign in with your organisation's account (${provider.issuer}).</p>
      <div class="actions"><button class="btn primary" type="button" data-testid="oidc-sign-in"
        onClick=${() => startProviderLogin(provider).catch((e) => setStartError(e.message))}>Sign in with your organisation</button></div>
      <p class="muted">Or paste a token:</p>`}
    <p class="muted">The daemon requires a bearer token (MCP_AGGREGATOR_ADMIN_TOKENS or MCP_AGGREGATOR_CLIENT_TOKENS). It is kept for this tab only.</p>
    <form onSubmit=${(e) => { e.preventDefault(); if (token) onToken(token.trim()); }}>
      <label for="token">Token</label>
      <input id="token" type="password" autocomplete="off" data-testid="token" value=${token} onInput=${(e) => setToken(e.target.value)} />
      <div class="actions"><button class="btn primary" type="submit" data-testid="sign-in">Sign in</button></div>
    </form></div></main>`;
}

// ---- a caller's own credential ------------------------------------------------------------------------------
// A per_user server runs each caller's calls with the caller's own secret. A client that supports URL-mode
// elicitation is sent here (#credential=<server id>&elicitation=<id>) when a call needs one; the call goes on once
// the secret is stored. The secret goes to PUT .../credentials/me and is never shown again.

function credentialTarget() {
  const m = /^#credential=([^&]+)/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

// oauthTarget is the state of the caller's OAuth flow the daemon's callback sent the browser back with
// (#oauth=<state>).
function oauthTarget() {
  const m = /^#oauth=([^&]+)/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

// OAuthCompletePage completes the signed-in user's own OAuth flow of a backend (POST /oauth/complete): the daemon
// exchanges the code and keeps the tokens; only the user who started the flow can complete it.
function OAuthCompletePage({ flowState, onDone }) {
  const [state, setState] = useState({});
  useEffect(() => {
    api('POST', '/api/v1/aggregator/oauth/complete', { state: flowState })
      .then((r) => setState({ ok: r }), (err) => setState({ error: err.message }));
  }, [flowState]);
  return html`<div class="card narrow" data-testid="oauth-complete-page">
    <h2>Authorization</h2>
    ${!state.ok && !state.error && html`<p class="muted">Completing the authorization…</p>`}
    ${state.ok && html`<p data-testid="oauth-authorized">Authorized for ${state.ok.server}. Return to your client: the call that asked for it goes on.</p>`}
    ${state.error && html`<p class="error" data-testid="oauth-error">${state.error}</p>`}
    <div class="actions"><button class="btn" type="button" onClick=${onDone}>Close</button></div>
  </div>`;
}

// OAuthStart starts the user's OAuth authorization of a backend and sends the browser to its authorization server.
function OAuthStart({ server }) {
  const [error, setError] = useState(null);
  const go = async () => {
    try {
      const r = await api('POST', `/api/v1/aggregator/servers/${encodeURIComponent(server.id)}/credentials/me/oauth`);
      location.assign(r.authorization_url);
    } catch (err) {
      setError(err.message);
    }
  };
  return html`<div>
    <p class="muted">This server's backend asks each user to authorize it with their own account. You will sign in at
      its authorization server and come back here; the tokens are kept encrypted, used only for your calls, and never
      shown.</p>
    <div class="actions"><button class="btn primary" type="button" data-testid="oauth-start" onClick=${go}>Authorize ${server.name}</button></div>
    ${error && html`<p class="error" data-testid="oauth-error">${error}</p>`}
  </div>`;
}

function CredentialPage({ serverId, onDone }) {
  const [secret, setSecret] = useState('');
  const [server, setServer] = useState(null);
  const [state, setState] = useState({});
  useEffect(() => {
    api('GET', `/api/v1/aggregator/servers/${encodeURIComponent(serverId)}`).then(setServer, () => setServer(null));
  }, [serverId]);
  if (server && server.user_credential && server.user_credential.oauth) {
    return html`<div class="card narrow" data-testid="credential-page">
      <h2>Your authorization for ${server.name}</h2>
      <${OAuthStart} server=${server} />
      <div class="actions"><button class="btn" type="button" onClick=${onDone}>Close</button></div>
    </div>`;
  }
  const save = async (e) => {
    e.preventDefault();
    if (!secret) return;
    try {
      await api('PUT', `/api/v1/aggregator/servers/${encodeURIComponent(serverId)}/credentials/me`, { secret });
      setSecret('');
      setState({ ok: true });
    } catch (err) {
      setState({ error: err.message });
    }
  };
  return html`<div class="card narrow" data-testid="credential-page">
    <h2>Your credential for ${server ? server.name : 'this server'}</h2>
    <p class="muted">This server works with each user's own credential (an API key or token of yours for it). It is
      stored encrypted, used only for your calls, and never shown again; you can replace or remove it at any time.</p>
    ${state.ok
      ? html`<p data-testid="credential-stored">Stored. Return to your client: the call that asked for it goes on.</p>`
      : html`<form onSubmit=${save}>
          <label for="credential-secret">Secret</label>
          <input id="credential-secret" type="password" autocomplete="off" data-testid="credential-secret" value=${secret}
            onInput=${(e) => setSecret(e.target.value)} />
          <div class="actions"><button class="btn primary" type="submit" data-testid="credential-save">Store my credential</button></div>
        </form>`}
    ${state.error && html`<p class="error" data-testid="credential-error">${state.error}</p>`}
    <div class="actions"><button class="btn" type="button" onClick=${onDone}>Close</button></div>
  </div>`;
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
  // Admins also read the server's curation: its tool filter (to mark hidden tools) and its overrides (to show the
  // exposed names beside the originals). Client tokens never ask (those routes are admin-only).
  const [cur, setCur] = useState({ filter: null, overrides: {} });
  const [overriding, setOverriding] = useState(null);

  const load = useCallback(async () => {
    try {
      const [d, hist, t, filter, ovs] = await Promise.all([
        api('GET', API + '/servers/' + server.id),
        api('GET', API + '/servers/' + server.id + '/history?limit=20'),
        api('GET', API + '/servers/' + server.id + '/tools?limit=1000'),
        // The detail must not depend on them: a failing curation read leaves the section out.
        admin ? api('GET', API + '/servers/' + server.id + '/tool-filter').catch(() => null) : null,
        admin ? api('GET', API + '/servers/' + server.id + '/tools/overrides').catch(() => null) : null,
      ]);
      setDetail(d); setHistory(hist.history); setTools(t.tools);
      if (admin) setCur({ filter, overrides: Object.fromEntries(((ovs && ovs.overrides) || []).map((o) => [o.tool, o])) });
    } catch (e) {
      if (e.status === 404) onGone(); else setMsg({ error: e.message });
    }
  }, [server.id, admin]);
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
    <${ServerFigures} key=${'figures-' + server.id} server=${detail} />
    <h3>Connection (secrets masked)</h3>
    <pre data-testid="connection-config">${json(detail.connection_config)}</pre>
    ${admin && html`<${Curation} key=${server.id} server=${detail} filter=${cur.filter} onChanged=${load} />`}
    <h3>Tools (${tools.length})</h3>
    ${trying && html`<${TryTool} key=${trying} serverId=${server.id} tool=${trying} onClose=${() => setTrying(null)} />`}
    ${admin && html`<p class="muted">As the backend lists them: an override's exposed name and description are what clients see, and a held definition change (Curation) is served as approved until decided.</p>`}
    ${tools.length === 0 ? html`<p class="muted">No tools discovered.</p>` : html`<table data-testid="tools">
      <thead><tr><th>Tool</th><th>Skills</th><th></th></tr></thead>
      <tbody>${tools.map((t) => {
        const ov = cur.overrides[t.original_name];
        const hidden = admin && filterHides(cur.filter, t.original_name);
        return [html`<tr data-testid=${'tool-' + t.name}>
        <td><code>${t.name}</code>${ov && ov.exposed_name && html` <span class="muted">exposed as</span> <code data-testid="exposed-name">${ov.exposed_name}</code>`}
          ${hidden && html` <span class="badge hidden" data-testid="hidden-badge">hidden by filter</span>`}
          ${ov && ov.description ? html`<div>${ov.description}</div><div class="muted">Backend: ${t.description}</div>` : html`<div class="muted">${t.description}</div>`}
          ${ov && ov.annotations && html`<div class="muted">${hintText(ov.annotations)}</div>`}</td>
        <td><${Skills} ids=${t.skill_ids} /></td>
        <td><div class="actions"><button class="btn" data-testid=${'try-' + t.original_name} onClick=${() => setTrying(t.name)}>Try</button>
          ${admin && html`<button class="btn" data-testid=${'override-' + t.original_name} onClick=${() => setOverriding(overriding === t.original_name ? null : t.original_name)}>${ov ? 'Edit override' : 'Override'}</button>`}</div></td></tr>`,
        admin && overriding === t.original_name && html`<tr><td colspan="3">
          <${OverrideForm} key=${t.original_name} serverId=${server.id} tool=${t} existing=${ov} onDone=${() => { setOverriding(null); load(); }} onCancel=${() => setOverriding(null)} /></td></tr>`];
      })}</tbody></table>`}
    <${ServerSearch} server=${detail.name} />
    <h3>State history</h3>
    <table data-testid="history"><thead><tr><th>When</th><th>Event</th><th>Details</th></tr></thead>
      <tbody>${history.map((e) => html`<tr><td>${fmtTime(e.timestamp)}</td><td>${e.event_type}</td><td><code>${e.details ? JSON.stringify(e.details) : ''}</code></td></tr>`)}</tbody></table>
  </div>`;
}

// ---- tool curation (admin) ------------------------------------------------------------------------------------

// fieldErrorsOf maps a 422's list to messages keyed by location without its leading "body", joined by dots
// ("patterns.1", "selectors.0.tools.2"; a path parameter keeps "path": "path.name").
function fieldErrorsOf(err) {
  const out = {};
  for (const x of (err && err.fields) || []) {
    const loc = x.loc || [];
    const k = (loc[0] === 'body' ? loc.slice(1) : loc).join('.') || 'form';
    out[k] = (out[k] ? out[k] + '; ' : '') + x.msg;
  }
  return out;
}
// errorsAt is every message at key (and, unless exact, below it).
const errorsAt = (errs, key, exact) => Object.entries(errs)
  .filter(([k]) => k === key || (!exact && k.startsWith(key + '.'))).map(([, v]) => v).join('; ');
const FieldErr = ({ errs, k, id, exact }) => {
  const m = errorsAt(errs, k, exact);
  return m ? html`<div class="field-error" data-testid=${'error-' + id}>${m}</div>` : null;
};
// lines splits a textarea into its non-empty trimmed lines; words splits on commas and white space.
const lines = (text) => text.split('\n').map((s) => s.trim()).filter((s) => s);
const words = (text) => text.split(/[\s,]+/).filter((s) => s);

// globRegExp is Go's path.Match pattern as a RegExp (* and ? do not cross '/', [...] classes, \ escapes). The
// console uses it only to mark the tools a filter hides; the daemon decides.
function globRegExp(p) {
  const esc = (c) => c.replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&');
  let re = '';
  for (let i = 0; i < p.length; i++) {
    const c = p[i];
    if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else if (c === '\\' && i + 1 < p.length) re += esc(p[++i]);
    else if (c === '[') {
      let j = i + 1;
      let body = '';
      if (p[j] === '^') { body = '^'; j++; }
      for (; j < p.length && p[j] !== ']'; j++) {
        if (p[j] === '\\' && j + 1 < p.length) body += esc(p[++j]);
        else body += p[j] === '-' ? '-' : esc(p[j]);
      }
      re += '[' + body + ']';
      i = j;
    } else re += esc(c);
  }
  return new RegExp('^' + re + '$');
}
function filterHides(filter, name) {
  if (!filter || filter.mode === 'none' || !filter.patterns.length) return false;
  const hit = filter.patterns.some((p) => { try { return globRegExp(p).test(name); } catch { return false; } });
  return filter.mode === 'deny' ? hit : !hit;
}
const hintText = (a) => Object.entries(a).filter(([, v]) => v !== null && v !== undefined).map(([k, v]) => k + ': ' + v).join(' · ');

// A hint select: the backend's value (not overridden), true or false.
const HINTS = [['readOnlyHint', 'Read-only hint'], ['destructiveHint', 'Destructive hint']];
const hintValue = (v) => (v === true ? 'true' : v === false ? 'false' : '');

function OverrideForm({ serverId, tool, existing, onDone, onCancel }) {
  const ann = (existing && existing.annotations) || {};
  const [f, setF] = useState({
    exposed_name: (existing && existing.exposed_name) || '',
    description: (existing && existing.description) || '',
    readOnlyHint: hintValue(ann.readOnlyHint),
    destructiveHint: hintValue(ann.destructiveHint),
  });
  const [errs, setErrs] = useState({});
  const [formError, setFormError] = useState(null);
  const [busy, setBusy] = useState(false);
  const path = API + '/servers/' + serverId + '/tools/' + encodeURIComponent(tool.original_name) + '/override';
  const set = (k) => (e) => setF({ ...f, [k]: e.target.value });
  const save = async (e) => {
    e.preventDefault();
    setBusy(true); setErrs({}); setFormError(null);
    const body = {};
    if (f.exposed_name.trim()) body.exposed_name = f.exposed_name.trim();
    if (f.description.trim()) body.description = f.description;
    // Keep the override's other annotations (title, idempotent, open-world hints set through the API).
    const annotations = { ...ann };
    for (const [k] of HINTS) {
      if (f[k] === '') delete annotations[k]; else annotations[k] = f[k] === 'true';
    }
    if (Object.values(annotations).some((v) => v !== null && v !== undefined)) body.annotations = annotations;
    try {
      await api('PUT', path, body);
      onDone();
    } catch (err) {
      if (err.body && err.body.error_code === 'TOOL_NAME_TAKEN') {
        setErrs({ exposed_name: err.message });
      } else {
        const fe = fieldErrorsOf(err);
        setErrs(fe);
        setFormError(err.fields.length ? null : err.message);
      }
    } finally { setBusy(false); }
  };
  const remove = async () => {
    setFormError(null);
    try { await api('DELETE', path); onDone(); } catch (err) { setFormError('Remove: ' + err.message); }
  };
  const cls = (k) => (errorsAt(errs, k) ? 'invalid' : '');
  return html`<form class="inset" onSubmit=${save} data-testid="override-form">
    <strong>Override <code>${tool.original_name}</code></strong> <span class="muted">(empty fields keep the backend's value)</span>
    ${formError && html`<p class="error" data-testid="override-error">${formError}</p>`}
    <div class="row">
      <div><label for="o-exposed">Exposed name</label>
        <input id="o-exposed" data-testid="o-exposed" type="text" class=${cls('exposed_name')} placeholder="a-z, A-Z, 0-9, _ and -" value=${f.exposed_name} onInput=${set('exposed_name')} />
        <${FieldErr} errs=${errs} k="exposed_name" id="o-exposed" /></div>
      ${HINTS.map(([k, label]) => html`<div><label for=${'o-' + k}>${label}</label>
        <select id=${'o-' + k} data-testid=${'o-' + k} class=${cls('annotations')} value=${f[k]} onChange=${set(k)}>
          <option value="">backend's</option><option value="true">true</option><option value="false">false</option></select>
        <${FieldErr} errs=${errs} k=${'annotations.' + k} id=${'o-' + k} /></div>`)}
    </div>
    <label for="o-description">Description</label>
    <textarea id="o-description" data-testid="o-description" class=${cls('description')} placeholder=${tool.description} value=${f.description} onInput=${set('description')}></textarea>
    <${FieldErr} errs=${errs} k="description" id="o-description" />
    <${FieldErr} errs=${errs} k="annotations" id="o-annotations" exact=${true} />
    <div class="actions"><button class="btn primary" type="submit" data-testid="o-save" disabled=${busy}>Save override</button>
      ${existing && html`<button class="btn danger" type="button" data-testid="o-remove" onClick=${remove}>Remove override</button>`}
      <button class="btn" type="button" onClick=${onCancel}>Cancel</button></div>
  </form>`;
}

// ServerSearch searches one server's tools as clients see them (filters and overrides applied).
function ServerSearch({ server }) {
  const [q, setQ] = useState('');
  const [res, setRes] = useState(null);
  const [err, setErr] = useState(null);
  const runs = useRef(0);
  const run = async (e) => {
    e.preventDefault();
    setErr(null);
    try {
      const r = await api('POST', '/api/v1/search', { query: q, server_filter: [server], limit: 50 });
      runs.current++;
      setRes(r);
    } catch (x) {
      setRes(null);
      setErr(x.fields.length ? x.fields.map((f) => f.msg).join('; ') : x.message);
    }
  };
  return html`<h3>Search this server's tools</h3>
    <p class="muted">What clients find: hidden tools are left out, overrides applied.</p>
    <form class="row" onSubmit=${run}>
      <input type="text" data-testid="server-search-query" placeholder="e.g. echo a message" value=${q} onInput=${(e) => setQ(e.target.value)} />
      <div class="fixed"><button class="btn" data-testid="server-search-run" type="submit">Search</button></div>
    </form>
    ${err && html`<p class="error">${err}</p>`}
    ${res && html`<table data-testid="server-search-results" data-run=${runs.current}><thead><tr><th>Tool (${res.tools.length})</th><th>Alias</th><th>Score</th></tr></thead>
      <tbody>${res.tools.map((t) => html`<tr data-testid=${'server-hit-' + t.original_name}><td><code>${t.name}</code><div class="muted">${t.description}</div></td>
        <td><code>${t.alias}</code></td><td>${t.score.toFixed(3)}</td></tr>`)}</tbody></table>`}`;
}

// Curation is a server's filter, pinning and pending definition changes (admins only).
function Curation({ server, filter, onChanged }) {
  const [pinning, setPinning] = useState(null);
  const [changes, setChanges] = useState(null);
  const [err, setErr] = useState(null);
  const loadPins = useCallback(async () => {
    try {
      const [p, c] = await Promise.all([
        api('GET', API + '/servers/' + server.id + '/pinning'),
        api('GET', API + '/servers/' + server.id + '/tools/changes'),
      ]);
      setPinning(p); setChanges(c.changes); setErr(null);
    } catch (e) { setErr(e.message); }
  }, [server.id]);
  // Live: a held change shows up while the panel is open.
  usePoll(loadPins, POLL_MS);
  return html`<div data-testid="curation">
    <h3>Curation</h3>
    ${err && html`<p class="error">${err}</p>`}
    ${filter && html`<${FilterEditor} serverId=${server.id} filter=${filter} onSaved=${onChanged} />`}
    ${pinning && html`<${PinningEditor} serverId=${server.id} pinning=${pinning} onSaved=${() => { loadPins(); onChanged(); }} />`}
    ${changes && html`<${Changes} serverId=${server.id} pinning=${pinning} changes=${changes} onDecided=${() => { loadPins(); onChanged(); }} />`}
  </div>`;
}

function FilterEditor({ serverId, filter, onSaved }) {
  const [mode, setMode] = useState(filter.mode);
  const [patterns, setPatterns] = useState(filter.patterns.join('\n'));
  const [errs, setErrs] = useState({});
  const [msg, setMsg] = useState(null);
  // Follow the stored filter when it changes (saved here, or by another admin).
  const stored = JSON.stringify(filter);
  useEffect(() => { setMode(filter.mode); setPatterns(filter.patterns.join('\n')); }, [stored]);
  const save = async (e) => {
    e.preventDefault();
    setErrs({}); setMsg(null);
    const body = mode === 'none' ? { mode } : { mode, patterns: lines(patterns) };
    try {
      await api('PUT', API + '/servers/' + serverId + '/tool-filter', body);
      setMsg({ ok: 'Filter saved' });
      onSaved();
    } catch (err) {
      setErrs(fieldErrorsOf(err));
      setMsg({ error: err.fields.length ? 'Please correct the fields marked below.' : err.message });
    }
  };
  // A pattern's error names its line (patterns.N): show it with the line number.
  const patternErrs = Object.entries(errs).filter(([k]) => k.startsWith('patterns.')).map(([k, v]) => 'line ' + (Number(k.split('.')[1]) + 1) + ': ' + v);
  return html`<form onSubmit=${save} data-testid="filter-form" class="inset">
    <strong>Tool filter</strong> <span class="muted">(hidden tools are not listed, searched or callable; globs on the backend's names)</span>
    <div class="row">
      <div class="fixed"><label for="cf-mode">Mode</label>
        <select id="cf-mode" data-testid="cf-mode" class=${errs.mode ? 'invalid' : ''} value=${mode} onChange=${(e) => setMode(e.target.value)}>
          <option value="none">none (every tool)</option><option value="allow">allow only these</option><option value="deny">deny these</option></select>
        <${FieldErr} errs=${errs} k="mode" id="cf-mode" /></div>
      <div><label for="cf-patterns">Patterns (one per line)</label>
        <textarea id="cf-patterns" data-testid="cf-patterns" class=${errorsAt(errs, 'patterns') ? 'invalid' : ''} disabled=${mode === 'none'} placeholder="e.g. get-*" value=${patterns} onInput=${(e) => setPatterns(e.target.value)}></textarea>
        <${FieldErr} errs=${errs} k="patterns" id="cf-patterns" exact=${true} />
        ${patternErrs.length > 0 && html`<div class="field-error" data-testid="error-cf-pattern">${patternErrs.join('; ')}</div>`}</div>
    </div>
    <div class="actions"><button class="btn primary" type="submit" data-testid="cf-save">Save filter</button>
      ${msg && html`<span class=${msg.error ? 'error' : 'muted'} data-testid="cf-message">${msg.error || msg.ok}</span>`}</div>
  </form>`;
}

function PinningEditor({ serverId, pinning, onSaved }) {
  const [enabled, setEnabled] = useState(pinning.enabled);
  const [pinNew, setPinNew] = useState(pinning.pin_new_tools);
  const [errs, setErrs] = useState({});
  const [msg, setMsg] = useState(null);
  useEffect(() => { setEnabled(pinning.enabled); setPinNew(pinning.pin_new_tools); }, [pinning.enabled, pinning.pin_new_tools]);
  const save = async (e) => {
    e.preventDefault();
    setErrs({}); setMsg(null);
    try {
      await api('PUT', API + '/servers/' + serverId + '/pinning', { enabled, pin_new_tools: pinNew });
      setMsg({ ok: 'Pinning saved' });
      onSaved();
    } catch (err) {
      setErrs(fieldErrorsOf(err));
      setMsg({ error: err.fields.length ? 'Please correct the fields marked below.' : err.message });
    }
  };
  return html`<form onSubmit=${save} data-testid="pinning-form" class="inset">
    <strong>Definition pinning</strong> <span class="muted">(a changed tool definition is held until approved; the approved one keeps being served)</span>
    <div class="row">
      <div><label><input type="checkbox" data-testid="pin-enabled" checked=${enabled} onChange=${(e) => setEnabled(e.target.checked)} /> Pinning on</label>
        <${FieldErr} errs=${errs} k="enabled" id="pin-enabled" />
        <div class="muted">${pinning.baseline_at ? 'Baseline approved ' + fmtTime(pinning.baseline_at) : 'No baseline yet'} · ${pinning.pending_changes} pending</div></div>
      <div><label for="pin-new">New tools (never approved)</label>
        <select id="pin-new" data-testid="pin-new" value=${pinNew} onChange=${(e) => setPinNew(e.target.value)}>
          <option value="serve">serve (approve on first sight)</option><option value="withhold">withhold until approved</option></select>
        <${FieldErr} errs=${errs} k="pin_new_tools" id="pin-new" /></div>
    </div>
    <div class="actions"><button class="btn primary" type="submit" data-testid="pin-save">Save pinning</button>
      ${msg && html`<span class=${msg.error ? 'error' : 'muted'} data-testid="pin-message">${msg.error || msg.ok}</span>`}</div>
  </form>`;
}

// diffValue shows a diff side compactly (absent: an em dash).
const diffValue = (v) => (v === undefined ? '—' : typeof v === 'string' ? JSON.stringify(v) : JSON.stringify(v, null, 1));

function Changes({ serverId, pinning, changes, onDecided }) {
  const [msg, setMsg] = useState(null);
  const decide = (c, action) => async () => {
    setMsg(null);
    try {
      await api('POST', API + '/servers/' + serverId + '/tools/changes/' + encodeURIComponent(c.tool) + '/' + action, { hash: c.pending_hash });
      setMsg({ ok: (action === 'approve' ? 'Approved ' : 'Rejected ') + c.tool });
    } catch (err) {
      setMsg({ error: c.tool + ': ' + err.message + (err.body && err.body.error_code === 'CHANGE_OUTDATED' ? ' (the list is reloaded: review the newer change)' : '') });
    }
    onDecided();
  };
  return html`<div data-testid="changes" class="inset">
    <strong>Pending definition changes (${changes.length})</strong>
    ${msg && html`<p class=${msg.error ? 'error' : 'muted'} data-testid="change-message">${msg.error || msg.ok}</p>`}
    ${changes.length === 0 ? html`<p class="muted" data-testid="no-changes">No pending changes${pinning && !pinning.enabled ? ' (pinning is off: every definition is served as listed)' : ': every tool is served as approved'}.</p>`
      : changes.map((c) => html`<div class="change" data-testid=${'change-' + c.tool}>
        <div><code>${c.tool}</code> <span class="badge">${c.kind}</span> <span class="muted">since ${fmtTime(c.pending_since)} · pending <code title=${c.pending_hash}>${c.pending_hash.slice(0, 12)}</code>${c.approved_hash ? html` · approved <code title=${c.approved_hash}>${c.approved_hash.slice(0, 12)}</code>` : ''}</span></div>
        <table class="diff" data-testid="diff"><thead><tr><th>Path</th><th>Op</th><th>From</th><th>To</th></tr></thead>
          <tbody>${c.diff.map((d) => html`<tr class=${'op-' + d.op}><td><code>${d.path || '/'}</code></td><td>${d.op}</td><td><code>${diffValue(d.from)}</code></td><td><code>${diffValue(d.to)}</code></td></tr>`)}</tbody></table>
        <div class="actions"><button class="btn primary" data-testid=${'approve-' + c.tool} onClick=${decide(c, 'approve')}>Approve</button>
          <button class="btn danger" data-testid=${'reject-' + c.tool} onClick=${decide(c, 'reject')}>Reject</button></div></div>`)}
  </div>`;
}

// ---- profiles (admin) -----------------------------------------------------------------------------------------

function Profiles() {
  const [list, setList] = useState(null);
  const [err, setErr] = useState(null);
  const [selected, setSelected] = useState(null);
  const [editing, setEditing] = useState(null); // null, 'new' or a profile
  // Live like the server list: a profile's tool count follows the routing table (servers connecting, filters).
  const load = useCallback(async () => {
    try { setList((await api('GET', API + '/profiles')).profiles); setErr(null); } catch (e) { setErr(e.message); }
  }, []);
  usePoll(load, POLL_MS);
  const current = list && list.find((p) => p.name === selected);
  return html`<div class="grid">
    <div class="card">
      <div class="row"><h2>Profiles</h2><div class="fixed"><button class="btn primary" data-testid="profile-new" onClick=${() => { setSelected(null); setEditing('new'); }}>New profile</button></div></div>
      <p class="muted">A profile is a named subset of tools, served at its own MCP endpoint on the MCP listener (MCP_AGGREGATOR_MCP_LISTEN). Client tokens bound to it see only its tools.</p>
      ${err && html`<p class="error">${err}</p>`}
      ${list === null ? html`<p class="muted">Loading…</p>` : list.length === 0 ? html`<p class="muted" data-testid="no-profiles">No profile yet.</p>` : html`
      <table data-testid="profiles">
        <thead><tr><th>Name</th><th>Tools</th><th>Token budget</th><th>Clients</th><th>MCP endpoint</th></tr></thead>
        <tbody>${list.map((p) => html`<tr class=${'selectable' + (p.name === selected ? ' selected' : '')} data-testid=${'profile-' + p.name} onClick=${() => { setEditing(null); setSelected(p.name); }}>
          <td><strong>${p.name}</strong>${p.description && html`<div class="muted">${p.description}</div>`}</td>
          <td data-testid="profile-tool-count">${p.tool_count}</td>
          <td data-testid="profile-budget">${p.token_budget == null ? html`<span class="muted">default</span>` : p.token_budget}</td>
          <td>${p.clients.length ? p.clients.join(', ') : html`<span class="muted">none</span>`}</td>
          <td><${Endpoint} path=${p.mcp_endpoint} /></td></tr>`)}</tbody></table>`}
    </div>
    <div>${editing ? html`<div class="card"><h2>${editing === 'new' ? 'New profile' : 'Edit ' + editing.name}</h2>
        <${ProfileForm} key=${editing === 'new' ? '' : editing.name} existing=${editing === 'new' ? null : editing}
          onDone=${(name) => { setEditing(null); setSelected(name); load(); }} onCancel=${() => setEditing(null)} /></div>`
      : current ? html`<${ProfileDetail} key=${current.name} profile=${current} onEdit=${() => setEditing(current)}
          onGone=${() => { setSelected(null); load(); }} />`
      : html`<div class="card muted">Select a profile to see its tools, or create one.</div>`}</div>
  </div>`;
}

// Endpoint shows an MCP path with a button that copies it (the clipboard needs a secure context: on a plain-http
// non-loopback origin the field is selected instead, for the operator to copy).
function Endpoint({ path }) {
  const [copied, setCopied] = useState(false);
  const ref = useRef(null);
  const copy = async (e) => {
    e.stopPropagation();
    try { await navigator.clipboard.writeText(path); setCopied(true); } catch { ref.current.select(); }
  };
  return html`<div class="row endpoint"><input type="text" readonly ref=${ref} data-testid="profile-endpoint" value=${path} onClick=${(e) => { e.stopPropagation(); e.target.select(); }} />
    <div class="fixed"><button class="btn" type="button" data-testid="copy-endpoint" onClick=${copy}>${copied ? 'Copied' : 'Copy'}</button></div></div>`;
}

function ProfileDetail({ profile, onEdit, onGone }) {
  const [tools, setTools] = useState(null);
  const [err, setErr] = useState(null);
  const [confirming, setConfirming] = useState(false);
  const [delErr, setDelErr] = useState(null);
  useEffect(() => {
    api('GET', API + '/profiles/' + encodeURIComponent(profile.name) + '/tools').then((r) => setTools(r.tools), (e) => setErr(e.message));
  }, [profile.name, profile.updated_at, profile.tool_count]);
  const remove = async () => {
    setDelErr(null);
    try {
      await api('DELETE', API + '/profiles/' + encodeURIComponent(profile.name));
      onGone();
    } catch (e) {
      setConfirming(false);
      setDelErr(e.body && e.body.error_code === 'PROFILE_IN_USE'
        ? { title: 'Not deleted: the profile is in use (PROFILE_IN_USE)', text: `${e.message}. Bound client tokens: ${profile.clients.join(', ')}. Edit the profile to unbind them, then delete it.` }
        : { title: 'Not deleted', text: e.message });
    }
  };
  return html`<div class="card" data-testid="profile-detail">
    <h2>${profile.name}</h2>
    <div class="actions"><button class="btn" data-testid="profile-edit" onClick=${onEdit}>Edit</button>
      <button class="btn danger" data-testid="profile-delete" onClick=${() => setConfirming(true)}>Delete</button></div>
    ${confirming && html`<div class="confirm" data-testid="confirm-profile-delete">Delete the profile <strong>${profile.name}</strong>? Its endpoint closes.
      <div class="actions"><button class="btn danger" data-testid="confirm-profile-delete-yes" onClick=${remove}>Delete ${profile.name}</button>
      <button class="btn" onClick=${() => setConfirming(false)}>Cancel</button></div></div>`}
    ${delErr && html`<div class="confirm error" data-testid="profile-delete-error"><strong>${delErr.title}</strong><div>${delErr.text}</div></div>`}
    <dl class="kv">
      <dt>Description</dt><dd>${profile.description || '—'}</dd>
      <dt>MCP endpoint</dt><dd><code>${profile.mcp_endpoint}</code> (streamable HTTP; <code>/sse/profiles/${profile.name}</code> legacy SSE; <code>aggregator stdio --profile ${profile.name}</code>)</dd>
      <dt>Token budget</dt><dd data-testid="profile-token-budget">${budgetText(profile.token_budget)}</dd>
      <dt>Clients</dt><dd>${profile.clients.length ? profile.clients.join(', ') : 'none (admins and unbound client tokens may use it)'}</dd>
      <dt>OAuth bindings</dt><dd data-testid="profile-bindings">${profile.bindings && profile.bindings.length ? profile.bindings.map((b) => (b.subject ? 'subject ' + b.subject : b.claim + ' = ' + b.value)).join(', ') : 'none'}</dd>
      <dt>Selectors</dt><dd>${profile.selectors.map((s) => html`<div>${[s.server && 'server ' + s.server, s.tools && s.tools.length && 'tools ' + s.tools.join(' '), s.skills && s.skills.length && 'skills ' + s.skills.join(' ')].filter((x) => x).join(' · ')}</div>`)}</dd>
    </dl>
    <h3>Tools now (${tools ? tools.length : '…'})</h3>
    ${err && html`<p class="error">${err}</p>`}
    ${tools && (tools.length === 0 ? html`<p class="muted" data-testid="profile-no-tools">No tool matches now (a server it names may not exist or be connected yet).</p>` : html`
      <table data-testid="profile-tools"><thead><tr><th>Tool</th><th>Alias</th><th>Server</th></tr></thead>
        <tbody>${tools.map((t) => html`<tr><td><code>${t.name}</code><div class="muted">${t.description}</div></td><td><code>${t.alias}</code></td>
          <td>${t.server}${t.callable ? '' : html` <span class="muted">(not connected)</span>`}</td></tr>`)}</tbody></table>`)}
  </div>`;
}

// budgetText says what a profile's token_budget does to its endpoint's tools/list.
const budgetText = (b) => (b == null
  ? "the daemon's (MCP_AGGREGATOR_MCP_TOKEN_BUDGET)"
  : b === 0 ? '0: none, the whole toolset is listed' : `${b} tokens: when the toolset costs more, tools/list lists the meta-tools and the most useful tools that fit`);

// budgetValue is the token_budget a form field sends: null when empty (the daemon's), a number when it reads as
// one, else the text as typed, for the API's 422 to say what is wrong next to the field.
const budgetValue = (v) => {
  const t = v.trim();
  if (t === '') return null;
  const n = Number(t);
  return Number.isFinite(n) ? n : t;
};

const emptySelector = () => ({ server: '', tools: '', skills: '' });

function ProfileForm({ existing, onDone, onCancel }) {
  const [name, setName] = useState(existing ? existing.name : '');
  const [description, setDescription] = useState((existing && existing.description) || '');
  const [selectors, setSelectors] = useState(existing && existing.selectors.length
    ? existing.selectors.map((s) => ({ server: s.server || '', tools: (s.tools || []).join(' '), skills: (s.skills || []).join(' ') }))
    : [emptySelector()]);
  const [clients, setClients] = useState(existing ? existing.clients.join('\n') : '');
  const [budget, setBudget] = useState(existing && existing.token_budget != null ? String(existing.token_budget) : '');
  const [servers, setServers] = useState([]);
  const [errs, setErrs] = useState({});
  const [formError, setFormError] = useState(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => { api('GET', API + '/servers?limit=1000').then((r) => setServers(r.servers.map((s) => s.name)), () => {}); }, []);
  const setSel = (i, k) => (e) => setSelectors(selectors.map((s, j) => (j === i ? { ...s, [k]: e.target.value } : s)));
  const submit = async (e) => {
    e.preventDefault();
    setErrs({}); setFormError(null);
    if (!name.trim()) { setErrs({ 'path.name': 'Name is required' }); setFormError('Please correct the fields marked below.'); return; }
    const body = {
      selectors: selectors.map((s) => {
        const out = {};
        if (s.server.trim()) out.server = s.server.trim();
        if (words(s.tools).length) out.tools = words(s.tools);
        if (words(s.skills).length) out.skills = words(s.skills);
        return out;
      }),
      clients: lines(clients),
      // OAuth subject and claim bindings are set through the API; a save here keeps them as they are.
      bindings: (existing && existing.bindings) || [],
      // PUT replaces the profile: an empty field sends null, the daemon's budget.
      token_budget: budgetValue(budget),
    };
    if (description.trim()) body.description = description;
    const path = API + '/profiles/' + encodeURIComponent(name.trim());
    setBusy(true);
    try {
      if (!existing) {
        // PUT replaces a profile of that name: refuse to overwrite one by creating it again.
        const taken = await api('GET', path).then(() => true, (x) => (x.status === 404 ? false : Promise.reject(x)));
        if (taken) { setErrs({ 'path.name': 'A profile of that name exists: edit it instead' }); setFormError('Please correct the fields marked below.'); return; }
      }
      await api('PUT', path, body);
      onDone(name.trim());
    } catch (err) {
      const fe = fieldErrorsOf(err);
      setErrs(err.status === 404 && !err.fields.length ? { 'path.name': err.message } : fe);
      setFormError(err.fields.length || err.status === 404 ? 'Please correct the fields marked below.' : err.message);
    } finally { setBusy(false); }
  };
  const cls = (k, exact) => (errorsAt(errs, k, exact) ? 'invalid' : '');
  return html`<form onSubmit=${submit} data-testid="profile-form">
    ${formError && html`<p class="error" data-testid="p-form-error">${formError}</p>`}
    <datalist id="server-names">${servers.map((n) => html`<option value=${n}></option>`)}</datalist>
    <label for="p-name">Name</label>
    <input id="p-name" data-testid="p-name" type="text" class=${cls('path.name')} disabled=${!!existing} placeholder="a-z, A-Z, 0-9, _ and -" value=${name} onInput=${(e) => setName(e.target.value)} />
    <${FieldErr} errs=${errs} k="path.name" id="p-name" />
    <label for="p-description">Description</label>
    <input id="p-description" data-testid="p-description" type="text" class=${cls('description')} value=${description} onInput=${(e) => setDescription(e.target.value)} />
    <${FieldErr} errs=${errs} k="description" id="p-description" />
    <label>Selectors <span class="muted">(a tool is in the profile when it matches any selector; a selector's parts must all match)</span></label>
    <${FieldErr} errs=${errs} k="selectors" id="p-selectors" exact=${true} />
    ${selectors.map((s, i) => html`<div class=${'inset selector' + (errorsAt(errs, 'selectors.' + i) ? ' invalid' : '')} data-testid=${'p-selector-' + i}>
      <div class="row">
        <div><label for=${'p-server-' + i}>Server</label>
          <input id=${'p-server-' + i} data-testid=${'p-server-' + i} type="text" list="server-names" class=${cls('selectors.' + i + '.server')} value=${s.server} onInput=${setSel(i, 'server')} />
          <${FieldErr} errs=${errs} k=${'selectors.' + i + '.server'} id=${'p-server-' + i} /></div>
        <div><label for=${'p-tools-' + i}>Tool globs</label>
          <input id=${'p-tools-' + i} data-testid=${'p-tools-' + i} type="text" placeholder="e.g. get-* echo" class=${cls('selectors.' + i + '.tools')} value=${s.tools} onInput=${setSel(i, 'tools')} />
          <${FieldErr} errs=${errs} k=${'selectors.' + i + '.tools'} id=${'p-tools-' + i} /></div>
        <div><label for=${'p-skills-' + i}>Skills</label>
          <input id=${'p-skills-' + i} data-testid=${'p-skills-' + i} type="text" placeholder="skill ids" class=${cls('selectors.' + i + '.skills')} value=${s.skills} onInput=${setSel(i, 'skills')} />
          <${FieldErr} errs=${errs} k=${'selectors.' + i + '.skills'} id=${'p-skills-' + i} /></div>
        <div class="fixed"><label> </label><button class="btn" type="button" data-testid=${'p-remove-selector-' + i} onClick=${() => setSelectors(selectors.filter((_, j) => j !== i))}>Remove</button></div>
      </div>
      <${FieldErr} errs=${errs} k=${'selectors.' + i} id=${'p-selector-' + i} exact=${true} />
    </div>`)}
    <div class="actions"><button class="btn" type="button" data-testid="p-add-selector" onClick=${() => setSelectors([...selectors, emptySelector()])}>Add selector</button></div>
    <label for="p-clients">Bound client tokens (token names, one per line)</label>
    <textarea id="p-clients" data-testid="p-clients" class=${cls('clients')} value=${clients} onInput=${(e) => setClients(e.target.value)}></textarea>
    <${FieldErr} errs=${errs} k="clients" id="p-clients" />
    <label for="p-token-budget">Token budget <span class="muted">(tokens a tools/list answer of the profile's endpoint may cost; empty: the daemon's, 0: none)</span></label>
    <input id="p-token-budget" data-testid="p-token-budget" type="text" inputmode="numeric" placeholder="default" class=${cls('token_budget')} value=${budget} onInput=${(e) => setBudget(e.target.value)} />
    <${FieldErr} errs=${errs} k="token_budget" id="p-token-budget" />
    <div class="actions"><button class="btn primary" type="submit" data-testid="p-submit" disabled=${busy}>${existing ? 'Save' : 'Create'}</button>
      <button class="btn" type="button" onClick=${onCancel}>Cancel</button></div>
  </form>`;
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

// ---- live figures and actors (issue 29) ---------------------------------------------------------------------
// Everything of the live figures and the actor view is in this section: ServerFigures (in a server's detail) and
// Actors (a tab for admins). Both poll the daemon's own counters (GET .../timeseries, GET .../actors); the charts
// are small SVGs drawn here, no library.

const FIGURES_POLL_MS = 5000;
const ACTORS_POLL_MS = 3000;
const CHART_W = 420;
const CHART_H = 84;
const CHART_PAD = { l: 40, r: 6, t: 6, b: 14 };
const STATE_COLORS = { CONNECTED: '#1a7f37', DEGRADED: '#9a6700', CONNECTING: '#9a6700', DISCONNECTING: '#9a6700', ERROR: '#c62828', DISCONNECTED: '#9aa3ad' };

// niceMax rounds a chart's top up to 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}
const fmtNum = (v) => (Number.isInteger(v) ? String(v) : v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v >= 1 ? v.toFixed(2) : v.toFixed(3));
const clockTime = (ms) => new Date(ms).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });

// Chart draws series over the window [t0, t1] (ms): 'line' series break where a value is null, 'bar' series are
// columns per step. lines: [{ name, color, kind, values }]. The SVG carries data-max (the largest value drawn),
// so a test can read what it shows.
function Chart({ testid, title, unit, t0, t1, step, lines }) {
  const w = CHART_W - CHART_PAD.l - CHART_PAD.r;
  const hgt = CHART_H - CHART_PAD.t - CHART_PAD.b;
  const all = lines.flatMap((l) => l.values.map((p) => p.v)).filter((v) => v != null);
  const top = niceMax(Math.max(0, ...all));
  const x = (t) => CHART_PAD.l + ((t - t0) / (t1 - t0)) * w;
  const y = (v) => CHART_PAD.t + hgt - (v / top) * hgt;
  const barW = Math.max(1, (step / (t1 - t0)) * w - 0.5);
  const shapes = lines.map((l) => {
    if (l.kind === 'bar') {
      return l.values.filter((p) => p.v > 0).map((p) => html`<rect x=${x(p.t)} y=${y(p.v)} width=${barW} height=${CHART_PAD.t + hgt - y(p.v)} fill=${l.color} />`);
    }
    let d = '';
    let pen = false;
    for (const p of l.values) {
      if (p.v == null) { pen = false; continue; }
      d += (pen ? 'L' : 'M') + x(p.t + step / 2).toFixed(1) + ' ' + y(p.v).toFixed(1);
      pen = true;
    }
    // A dot on every point, so that a step between two without answered calls shows too.
    const dots = l.values.filter((p) => p.v != null).map((p) => html`<circle cx=${x(p.t + step / 2)} cy=${y(p.v)} r="1.8" fill=${l.color} />`);
    return html`<path d=${d} fill="none" stroke=${l.color} stroke-width="1.5" />${dots}`;
  });
  return html`<div class="chart">
    <div class="chart-title">${title} ${lines.map((l) => html`<span class="legend"><svg width="10" height="10"><rect width="10" height="10" fill=${l.color} /></svg>${l.name}</span>`)}</div>
    <svg data-testid=${testid} data-max=${Math.max(0, ...all)} viewBox=${`0 0 ${CHART_W} ${CHART_H}`} width="100%" class="chart-svg">
      <line x1=${CHART_PAD.l} y1=${CHART_PAD.t + hgt} x2=${CHART_W - CHART_PAD.r} y2=${CHART_PAD.t + hgt} stroke="#d9dee4" />
      <line x1=${CHART_PAD.l} y1=${CHART_PAD.t} x2=${CHART_W - CHART_PAD.r} y2=${CHART_PAD.t} stroke="#eef1f5" />
      <text x=${CHART_PAD.l - 4} y=${CHART_PAD.t + 8} text-anchor="end" class="axis">${fmtNum(top)}${unit}</text>
      <text x=${CHART_PAD.l - 4} y=${CHART_PAD.t + hgt} text-anchor="end" class="axis">0</text>
      <text x=${CHART_PAD.l} y=${CHART_H - 2} class="axis">${clockTime(t0)}</text>
      <text x=${CHART_W - CHART_PAD.r} y=${CHART_H - 2} text-anchor="end" class="axis">${clockTime(t1)}</text>
      ${shapes}
    </svg></div>`;
}

// StateBand shows the server's state over the same window: one colored span per state, a tick at each change.
function StateBand({ t0, t1, initial, states }) {
  const w = CHART_W - CHART_PAD.l - CHART_PAD.r;
  const x = (t) => CHART_PAD.l + ((Math.min(Math.max(t, t0), t1) - t0) / (t1 - t0)) * w;
  const spans = [];
  let from = t0;
  let cur = initial || null;
  for (const s of states) {
    const at = Date.parse(s.t);
    if (cur) spans.push({ from, to: at, state: cur });
    from = at;
    cur = s.state;
  }
  if (cur) spans.push({ from, to: t1, state: cur });
  return html`<div class="chart">
    <div class="chart-title">State ${states.length ? html`<span class="muted">(${states.length} change${states.length === 1 ? '' : 's'})</span>` : ''}</div>
    <svg data-testid="state-band" data-changes=${states.length} viewBox=${`0 0 ${CHART_W} 22`} width="100%" class="chart-svg">
      ${spans.map((s) => html`<rect x=${x(s.from)} y="4" width=${Math.max(0.5, x(s.to) - x(s.from))} height="10" fill=${STATE_COLORS[s.state] || '#9aa3ad'}><title>${s.state} from ${new Date(s.from).toLocaleTimeString()}</title></rect>`)}
      ${states.map((s) => html`<line x1=${x(Date.parse(s.t))} y1="1" x2=${x(Date.parse(s.t))} y2="17" stroke="#1d232b" stroke-width="1" />`)}
      ${!spans.length && html`<text x=${CHART_PAD.l} y="13" class="axis">no state change recorded</text>`}
    </svg>
    <div class="legend-row">${Object.entries(STATE_COLORS).filter(([k]) => spans.some((s) => s.state === k)).map(([k, c]) => html`<span class="legend"><svg width="10" height="10"><rect width="10" height="10" fill=${c} /></svg>${k}</span>`)}</div>
  </div>`;
}

// ServerFigures: one server's calls/s, p50/p95 latency and errors over the last minutes, with its state changes.
function ServerFigures({ server }) {
  const [data, setData] = useState(null);
  const live = usePoll(async () => {
    const r = await api('GET', API + '/servers/' + server.id + '/timeseries');
    setData(r);
  }, FIGURES_POLL_MS);
  if (!data) return html`<div data-testid="figures" class="muted">${live.ok ? 'Loading the live figures…' : 'Live figures unavailable: ' + live.error}</div>`;
  const s = data.servers[0];
  const step = data.step_seconds * 1000;
  const pts = s.points.map((p) => ({ ...p, ms: Date.parse(p.t) }));
  const t0 = pts[0].ms;
  const t1 = pts[pts.length - 1].ms + step;
  const series = (f) => pts.map((p) => ({ t: p.ms, v: f(p) }));
  const last = pts.slice(-12); // the last minute
  const calls = last.reduce((n, p) => n + p.calls, 0);
  const errors = last.reduce((n, p) => n + p.errors, 0);
  const totalCalls = pts.reduce((n, p) => n + p.calls, 0);
  const totalErrors = pts.reduce((n, p) => n + p.errors + p.tool_errors, 0);
  const p95s = pts.filter((p) => p.p95_ms != null);
  const lastP95 = p95s.length ? p95s[p95s.length - 1].p95_ms : null;
  return html`<div data-testid="figures">
    <h3>Live figures <span class=${'live' + (live.ok ? '' : ' stale')}>${live.ok ? 'every ' + data.step_seconds + ' s' : 'not updating: ' + live.error}</span></h3>
    <p class="muted">The last ${Math.round(data.window_seconds / 60)} minutes in ${data.step_seconds} s steps, from ${data.node ? 'node ' + data.node + "'s" : "the daemon's"} own counters (calls run where the server's actor runs).</p>
    <dl class="kv figures-kv">
      <dt>Calls, last minute</dt><dd data-testid="fig-calls-minute">${calls}</dd>
      <dt>Errors, last minute</dt><dd data-testid="fig-errors-minute">${errors}</dd>
      <dt>Calls in the window</dt><dd data-testid="fig-calls-window">${totalCalls}</dd>
      <dt>Errors and tool errors in the window</dt><dd data-testid="fig-errors-window">${totalErrors}</dd>
      <dt>Latest p95</dt><dd data-testid="fig-p95">${lastP95 == null ? '—' : fmtNum(lastP95) + ' ms'}</dd>
    </dl>
    <${Chart} testid="chart-calls" title="Calls/s" unit="/s" t0=${t0} t1=${t1} step=${step}
      lines=${[{ name: 'calls/s', color: '#2457c5', kind: 'bar', values: series((p) => p.calls_per_second) }]} />
    <${Chart} testid="chart-latency" title="Latency" unit=" ms" t0=${t0} t1=${t1} step=${step}
      lines=${[{ name: 'p50', color: '#2457c5', values: series((p) => p.p50_ms) }, { name: 'p95', color: '#9a6700', values: series((p) => p.p95_ms) }]} />
    <${Chart} testid="chart-errors" title="Errors" unit="" t0=${t0} t1=${t1} step=${step}
      lines=${[{ name: 'tool errors (stacked)', color: '#e39b9b', kind: 'bar', values: series((p) => p.errors + p.tool_errors) }, { name: 'errors', color: '#c62828', kind: 'bar', values: series((p) => p.errors) }]} />
    <${StateBand} t0=${t0} t1=${t1} initial=${s.initial_state} states=${s.states || []} />
  </div>`;
}

// ActorNode is one actor of the tree with its children.
function ActorNode({ a }) {
  return html`<li data-testid=${'actor-' + a.kind + (a.server_name ? '-' + a.server_name : '')} data-id=${a.id}>
    <span class="actor-name"><code>${a.name}</code></span>
    <span class="skill">${a.kind}</span>
    ${a.server_name && html`<span class="muted">${a.server_name}</span>`}
    <span class=${'badge s-' + a.state} data-testid="actor-state">${a.state}</span>
    <span class="muted">mailbox <span data-testid="actor-mailbox">${a.mailbox_depth == null ? 'n/a' : a.mailbox_depth}</span></span>
    <span class=${a.restarts > 0 ? 'error' : 'muted'}>restarts <span data-testid="actor-restarts">${a.restarts}</span></span>
    ${a.children.length > 0 && html`<ul>${a.children.map((c) => html`<${ActorNode} key=${c.id} a=${c} />`)}</ul>`}
  </li>`;
}

// Actors: the node's supervision tree and where each server is served (admin).
function Actors() {
  const [view, setView] = useState(null);
  const [showAnon, setShowAnon] = useState(false);
  const live = usePoll(async () => setView(await api('GET', API + '/actors')), ACTORS_POLL_MS);
  if (!view) return html`<div class="card muted">${live.ok ? 'Loading the actors…' : 'Cannot read the actors: ' + live.error}</div>`;
  const shown = view.actors.filter((a) => showAnon || a.kind !== 'anonymous');
  const count = (list) => list.reduce((n, a) => n + 1 + count(a.children), 0);
  return html`<div class="grid">
    <div class="card">
      <div class="row"><h2>Actors of node ${view.node || '(single node)'}</h2>
        <span class=${'live fixed' + (live.ok ? '' : ' stale')} data-testid="actors-live">${live.ok ? 'live · ' + new Date(view.at).toLocaleTimeString() : 'not updating: ' + live.error}</span></div>
      <p class="muted">${view.cluster ? `Cluster member at ${view.address}, seeing ${view.members} member${view.members === 1 ? '' : 's'}. ` : ''}Top-level actors are supervised by ${view.supervisor}. ${count(view.actors)} actors.
        Mailbox: user messages waiting now; restarts: since the node started.</p>
      <label class="inline"><input type="checkbox" checked=${showAnon} onChange=${(e) => setShowAnon(e.target.checked)} /> show short-lived helper actors</label>
      <ul class="tree" data-testid="actor-tree">${shown.map((a) => html`<${ActorNode} key=${a.id} a=${a} />`)}</ul>
    </div>
    <div class="card">
      <h2>Servers and their owners</h2>
      <table data-testid="actor-servers"><thead><tr><th>Server</th><th>Status</th><th>Owner node</th><th>Actor here</th></tr></thead>
        <tbody>${view.servers.map((s) => html`<tr data-testid=${'owner-' + s.name}>
          <td>${s.name}</td><td><${Status} s=${s.status} /></td>
          <td data-testid="owner">${s.owner || html`<span class="muted">none</span>`}${s.local ? html` <span class="muted">(this node)</span>` : s.owner_address ? html` <span class="muted">${s.owner_address}</span>` : ''}</td>
          <td><code>${s.actor || ''}</code></td></tr>`)}</tbody></table>
    </div>
  </div>`;
}

const root = document.getElementById('app');
root.textContent = ''; // the "Loading" placeholder
render(html`<${App} />`, root);
