// A real OpenID provider for the Go tests: panva's oidc-provider (a certified implementation), issuing JWT access
// tokens (RFC 9068) for one resource with the client_credentials grant, so a test can get tokens without a browser.
// Keys are made at each start (ES256 signs the access tokens; RS256 is there for ID tokens).
//
// Usage: PORT=9000 RESOURCE=http://127.0.0.1:8082/mcp node oidc-provider.mjs
// Prints "ready <issuer>" once it listens. Clients (secret = client id + "-secret-0123456789"):
//   admin-bot  may ask for aggregator:admin and aggregator:client
//   client-bot may ask for aggregator:client
//   plain-bot  may ask for neither (a token without the aggregator's scopes)
import { generateKeyPairSync } from 'node:crypto';
import Provider, { errors } from 'oidc-provider';

const port = Number(process.env.PORT || 0);
const resource = process.env.RESOURCE;
if (!port || !resource) {
  console.error('PORT and RESOURCE are required');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;
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
  clients: [client('admin-bot', scopes), client('client-bot', 'aggregator:client'), client('plain-bot', 'profile')],
  scopes: ['openid', 'profile', 'aggregator:admin', 'aggregator:client'],
  jwks: { keys: [key('ec', { namedCurve: 'P-256' }, 'ES256', 'es-1'), key('rsa', { modulusLength: 2048 }, 'RS256', 'rs-1')] },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
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
provider.on('server_error', (_ctx, err) => console.error('server_error', err));

const server = provider.listen(port, '127.0.0.1', () => console.log(`ready ${issuer}`));
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => server.close(() => process.exit(0)));
