// A real MCP client completing the MCP authorization flow, for the Go tests: the TypeScript SDK (v2) client with
// its own OAuth support against an MCP endpoint that answers 401. The SDK finds the protected-resource metadata from
// the WWW-Authenticate challenge, discovers the authorization server, registers itself (dynamic client
// registration), and builds the authorization URL (code + PKCE S256 + resource indicator). This script plays the
// browser: it follows that URL's redirects (oidc-provider.mjs answers its login and consent at once) to the
// callback, hands the callback to the SDK, which redeems the code, then reconnects, lists the tools, calls one and
// prints one JSON line:
// {"tools": [...], "text": <first text of the result>, "isError": bool, "scope": <granted>, "client_id": <registered>}.
// Usage: node oauth-client.mjs URL TOOL [ARGS_JSON]
import { Client, StreamableHTTPClientTransport, UnauthorizedError } from '@modelcontextprotocol/client';

const [url, tool, argsJSON] = process.argv.slice(2);
const redirect = 'http://127.0.0.1:9/callback'; // never reached: the "browser" stops at it

const state = {};
const provider = {
  get redirectUrl() { return redirect; },
  get clientMetadata() {
    return { client_name: 'oauth-client.mjs', redirect_uris: [redirect], grant_types: ['authorization_code'],
      response_types: ['code'], token_endpoint_auth_method: 'none' };
  },
  clientInformation: () => state.client,
  saveClientInformation: (c) => { state.client = c; },
  tokens: () => state.tokens,
  saveTokens: (t) => { state.tokens = t; },
  redirectToAuthorization: (u) => { state.authorizationUrl = u; },
  saveCodeVerifier: (v) => { state.verifier = v; },
  codeVerifier: () => state.verifier,
};

// browse follows redirects from start, keeping cookies, until one points at the callback; it returns that URL.
async function browse(start) {
  const jar = new Map();
  let next = new URL(start);
  for (let i = 0; i < 20; i++) {
    if (next.href.startsWith(redirect)) return next;
    const res = await fetch(next, { redirect: 'manual', headers: { cookie: [...jar].map(([k, v]) => `${k}=${v}`).join('; ') } });
    for (const c of res.headers.getSetCookie()) {
      const pair = c.split(';')[0];
      const eq = pair.indexOf('=');
      jar.set(pair.slice(0, eq), pair.slice(eq + 1));
    }
    const loc = res.headers.get('location');
    if (!loc) throw new Error(`${next} answered ${res.status} without a redirect: ${(await res.text()).slice(0, 300)}`);
    next = new URL(loc, next);
  }
  throw new Error('too many redirects');
}

const newClient = () => new Client({ name: 'oauth-client', version: '1.0.0' });
try {
  let transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  try {
    await newClient().connect(transport);
    throw new Error('connected without authorization');
  } catch (err) {
    if (!(err instanceof UnauthorizedError) || !state.authorizationUrl) throw err;
  }
  const callback = await browse(state.authorizationUrl);
  await transport.finishAuth(callback.searchParams);
  transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  const client = newClient();
  await client.connect(transport);
  const listed = await client.listTools();
  const res = await client.callTool({ name: tool, arguments: argsJSON ? JSON.parse(argsJSON) : {} });
  const text = (res.content || []).find((c) => c.type === 'text')?.text ?? null;
  console.log(JSON.stringify({ tools: listed.tools.map((t) => t.name), text, isError: !!res.isError,
    scope: state.tokens?.scope ?? null, client_id: state.client?.client_id ?? null }));
  await client.close();
} catch (err) {
  console.log(JSON.stringify({ error: String((err && err.stack) || err) }));
  process.exitCode = 1;
}
