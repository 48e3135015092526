// A real OpenID provider for the Go tests: panva's oidc-provider (a certified implementation), issuing JWT access
// tokens (RFC 9068) for one resource. Keys are made at each start (ES256 signs the access tokens; RS256 is there
// for ID tokens).
//
// Two ways to a token without a person at a browser:
//   - client_credentials, with the clients below (secret = client id + "-secret-0123456789"):
//       admin-bot  may ask for aggregator:admin and aggregator:client
//       client-bot may ask for aggregator:client
//       plain-bot  may ask for neither (a token without the aggregator's scopes)
//       group-bot  may ask for aggregator:client; its tokens carry the claim groups: ["eng", "staff"]
//   - authorization code with PKCE for any client registered dynamically (RFC 7591): the interaction (login and
//     consent) is answered at once for the user $USER_ID (default alice, email <user>@example.com), granting what the
//     client asked for; a headless "browser" only has to follow the redirects (oauth-client.mjs does).
//
// Usage: PORT=9000 RESOURCE=http://127.0.0.1:8082/mcp node oidc-provider.mjs
// Prints "ready <issuer>" once it listens.
import { generateKeyPairSync } from 'node:crypto';
import Provider, { errors } from 'oidc-provider';

const port = Number(process.env.PORT || 0);
const resource = process.env.RESOURCE;
if (!port || !resource) {
  console.error('PORT and RESOURCE are required');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;
const user = process.env.USER_ID || 'alice';
const scopes = 'aggregator:admin aggregator:client';

function key(type, options, alg, kid) {
  const { privateKey } = generateKeyPairSync(type, options);
  return { ...privateKey.export({ format: 'jwk' }), alg, kid, use: 'sig' };
}

const client = (id, scope) => ({
  client_id: id,
  client_secret: `${id}-secret-0123456789`,
  grant_types: ['client_credentials'],
  response_types: [],
  redirect_uris: [],
  token_endpoint_auth_method: 'client_secret_basic',
  scope,
});

const provider = new Provider(issuer, {
  clients: [client('admin-bot', scopes), client('client-bot', 'aggregator:client'), client('plain-bot', 'profile'),
    client('group-bot', 'aggregator:client')],
  scopes: ['openid', 'profile', 'aggregator:admin', 'aggregator:client'],
  jwks: { keys: [key('ec', { namedCurve: 'P-256' }, 'ES256', 'es-1'), key('rsa', { modulusLength: 2048 }, 'RS256', 'rs-1')] },
  findAccount: (_ctx, sub) => ({ accountId: sub, claims: () => ({ sub, email: `${sub}@example.com`, name: sub }) }),
  // A user's access token carries the user's email, so the aggregator can name the user in its audit log;
  // group-bot's carries a groups claim (profiles bound to a claim's values).
  extraTokenClaims: (_ctx, token) => {
    if (token.accountId) return { email: `${token.accountId}@example.com` };
    if (token.clientId === 'group-bot') return { groups: ['eng', 'staff'] };
    return undefined;
  },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    registration: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo(_ctx, indicator) {
        if (indicator !== resource) throw new errors.InvalidTarget();
        return { scope: scopes, audience: resource, accessTokenTTL: 300, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'ES256' } } };
      },
    },
  },
});
// The interaction: log the user in and grant whatever the client asked for, without a page.
provider.use(async (ctx, next) => {
  if (!/^\/interaction\/[^/]+$/.test(ctx.path)) return next();
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  const { prompt, params, session } = details;
  let result;
  if (prompt.name === 'login') {
    result = { login: { accountId: user } };
  } else {
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    const d = prompt.details;
    if (d.missingOIDCScope) grant.addOIDCScope(d.missingOIDCScope.join(' '));
    if (d.missingOIDCClaims) grant.addOIDCClaims(d.missingOIDCClaims);
    for (const [indicator, scope] of Object.entries(d.missingResourceScopes || {})) grant.addResourceScope(indicator, scope.join(' '));
    result = { consent: { grantId: await grant.save() } };
  }
  ctx.redirect(await provider.interactionResult(ctx.req, ctx.res, result, { mergeWithLastSubmission: true }));
});
provider.on('server_error', (_ctx, err) => console.error('server_error', err));

const server = provider.listen(port, '127.0.0.1', () => console.log(`ready ${issuer}`));
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => server.close(() => process.exit(0)));
