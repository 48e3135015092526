// The authorization server of an OAuth-protected MCP backend, for the Go tests of the aggregator's OAuth to
// backends (issue 28): panva's oidc-provider issuing JWT access tokens (ES256) for one resource, the backend, with
// the authorization code flow and PKCE for clients registered dynamically (RFC 7591) or the pre-registered public
// client "agg-public" (redirect REDIRECT), refresh tokens for every client allowed the refresh_token grant, and
// no page: the interaction (login and consent) is answered at once for the user named by the authorization
// request's login_hint (default alice), granting what the client asked for. A headless "browser" only has to
// follow the redirects.
//
// With ORG_ISSUER set (an organisation's issuer, oidc-provider.mjs), it also offers the token exchange grant (RFC
// 8693) to clients registered with it: a subject_token that is a JWT access token of ORG_ISSUER (checked against
// its keys) is exchanged for an access token of RESOURCE for the same subject.
//
// ACCESS_TTL sets the access tokens' lifetime in seconds (default 300), for the tests of tokens that expire while a
// session runs.
//
// Token revocation (RFC 7009) is on. GET /_test/counts answers how many clients were registered and how many
// revocation requests succeeded, for the tests that check the aggregator registers once and revokes.
//
// Usage: PORT=9000 [ACCESS_TTL=300] RESOURCE=http://127.0.0.1:8082/mcp [ORG_ISSUER=http://127.0.0.1:9001] REDIRECT=http://127.0.0.1:8081/api/v1/aggregator/oauth/callback node oidc-backend-as.mjs
// Prints "ready <issuer>" once it listens.
import { generateKeyPairSync } from 'node:crypto';
import Provider, { errors } from 'oidc-provider';

const port = Number(process.env.PORT || 0);
const resource = process.env.RESOURCE;
const redirect = process.env.REDIRECT || 'http://127.0.0.1:9/callback';
if (!port || !resource) {
  console.error('PORT and RESOURCE are required');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;
const scopes = 'backend:read backend:write';
const accessTokenTTL = Number(process.env.ACCESS_TTL || 300);

function key(type, options, alg, kid) {
  const { privateKey } = generateKeyPairSync(type, options);
  return { ...privateKey.export({ format: 'jwk' }), alg, kid, use: 'sig' };
}

const provider = new Provider(issuer, {
  clients: [{ client_id: 'agg-public', token_endpoint_auth_method: 'none', redirect_uris: [redirect],
    grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'] }],
  scopes: ['openid', 'offline_access', 'backend:read', 'backend:write'],
  jwks: { keys: [key('ec', { namedCurve: 'P-256' }, 'ES256', 'es-1'), key('rsa', { modulusLength: 2048 }, 'RS256', 'rs-1')] },
  findAccount: (_ctx, sub) => ({ accountId: sub, claims: () => ({ sub, email: `${sub}@example.com`, name: sub }) }),
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo(_ctx, indicator) {
        if (indicator !== resource) throw new errors.InvalidTarget();
        return { scope: scopes, audience: resource, accessTokenTTL, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'ES256' } } };
      },
    },
  },
});
// Counts of what the tests check, and the route that answers them.
const counts = { registrations: 0, revocations: 0, exchanges: 0 };
provider.use(async (ctx, next) => {
  if (ctx.path === '/_test/counts') {
    ctx.body = counts;
    return;
  }
  await next();
  if (ctx.method === 'POST' && ctx.path === '/reg' && ctx.status === 201) counts.registrations++;
  if (ctx.method === 'POST' && ctx.path === '/token/revocation' && ctx.status === 200) counts.revocations++;
});
// The interaction: log in the user the request hinted at and grant whatever the client asked for, without a page.
provider.use(async (ctx, next) => {
  if (!/^\/interaction\/[^/]+$/.test(ctx.path)) return next();
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  const { prompt, params, session } = details;
  let result;
  if (prompt.name === 'login') {
    result = { login: { accountId: params.login_hint || 'alice' } };
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
// The token exchange grant (RFC 8693), when there is an organisation's issuer to trust.
const orgIssuer = process.env.ORG_ISSUER;
if (orgIssuer) {
  const { createRemoteJWKSet, jwtVerify } = await import('jose');
  const orgKeys = createRemoteJWKSet(new URL(`${orgIssuer}/jwks`));
  const accessTokenType = 'urn:ietf:params:oauth:token-type:access_token';
  provider.registerGrantType('urn:ietf:params:oauth:grant-type:token-exchange', async (ctx) => {
    const { params, client } = ctx.oidc;
    if (params.subject_token_type !== accessTokenType) throw new errors.InvalidRequest('unsupported subject_token_type');
    if (params.requested_token_type && params.requested_token_type !== accessTokenType) throw new errors.InvalidRequest('unsupported requested_token_type');
    if (params.resource !== resource) throw new errors.InvalidTarget();
    let payload;
    try {
      ({ payload } = await jwtVerify(params.subject_token, orgKeys, { issuer: orgIssuer }));
    } catch {
      throw new errors.InvalidGrant('subject_token is not an access token of the organisation');
    }
    const granted = (params.scope || scopes).split(' ').filter((sc) => scopes.split(' ').includes(sc)).join(' ');
    const token = new provider.AccessToken({ accountId: payload.sub, client, gty: 'token_exchange', scope: granted });
    token.resourceServer = new provider.ResourceServer(resource,
      { scope: scopes, audience: resource, accessTokenTTL, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'ES256' } } });
    const value = await token.save();
    counts.exchanges++;
    ctx.body = { access_token: value, issued_token_type: accessTokenType, token_type: 'Bearer', expires_in: token.expiration, scope: granted };
  }, ['subject_token', 'subject_token_type', 'requested_token_type', 'audience', 'resource', 'scope'], ['resource']);
}
provider.on('server_error', (_ctx, err) => console.error('server_error', err));

const server = provider.listen(port, '127.0.0.1', () => console.log(`ready ${issuer}`));
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => server.close(() => process.exit(0)));
