// Signs in to the operators' console (/ui/) through a real OpenID provider (oidc-provider.mjs) in a real headless
// Chromium (playwright-core): the page sends the browser to the provider (authorization code + PKCE), the provider
// logs the user in and sends it back, the page redeems the code and shows who signed in. Run by cmd/aggregator's
// TestConsoleSignsInThroughTheProvider, which passes:
//   BASE_URL   the daemon's REST origin (http://127.0.0.1:PORT)
//   ISSUER     the provider's issuer (http://127.0.0.1:PORT)
//   CHROMIUM   the browser binary
//   SHOTS      a directory for screenshots
// Requests outside the daemon and the provider are refused and fail the run, and so does any error the page logs
// (a CSP violation, an exception). Prints "console oidc OK" at the end.
import { chromium } from 'playwright-core';
import path from 'node:path';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const BASE = env('BASE_URL');
const ISSUER = env('ISSUER');
const SHOTS = env('SHOTS');
const problems = [];

const browser = await chromium.launch({ executablePath: env('CHROMIUM'), args: ['--no-sandbox', '--disable-gpu', '--no-first-run'] });
try {
  const ctx = await browser.newContext({ viewport: { width: 1200, height: 800 } });
  await ctx.route('**/*', (route) => {
    const url = route.request().url();
    if (url.startsWith(BASE + '/') || url.startsWith(ISSUER + '/')) return route.continue();
    problems.push('request outside the daemon and the provider: ' + url);
    return route.abort();
  });
  const page = await ctx.newPage();
  page.setDefaultTimeout(30000);
  page.on('console', (m) => { if (m.type() === 'error' && !/status of 401/.test(m.text())) problems.push('console error: ' + m.text()); });
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  const tid = (id) => page.getByTestId(id);

  // 1. The page offers the provider's sign-in beside the token form.
  await page.goto(BASE + '/ui/');
  await tid('oidc-sign-in').waitFor();
  await tid('token').waitFor();
  await page.screenshot({ path: path.join(SHOTS, '01-login.png'), fullPage: true });

  // 2. Through the provider and back: the page shows the signed-in user with the admin role.
  const toProvider = page.waitForRequest((r) => r.url().startsWith(ISSUER + '/auth'));
  await tid('oidc-sign-in').click();
  const auth = new URL((await toProvider).url());
  for (const [k, v] of [['response_type', 'code'], ['code_challenge_method', 'S256']]) {
    if (auth.searchParams.get(k) !== v) problems.push(`authorization request: ${k}=${auth.searchParams.get(k)}`);
  }
  for (const k of ['code_challenge', 'state', 'client_id', 'resource', 'redirect_uri']) {
    if (!auth.searchParams.get(k)) problems.push(`authorization request without ${k}`);
  }
  await tid('whoami').filter({ hasText: 'admin' }).waitFor();
  const who = await tid('whoami').textContent();
  console.log('whoami', who);
  if (!who.includes('alice')) problems.push('whoami does not name the user: ' + who);
  if (new URL(page.url()).search !== '') problems.push('the code stayed in the URL: ' + page.url());
  const token = await page.evaluate(() => sessionStorage.getItem('mcp-aggregator.token'));
  if (!token || token.split('.').length !== 3) problems.push('no JWT access token kept for the tab');
  if (await page.evaluate(() => sessionStorage.getItem('mcp-aggregator.login'))) problems.push('the PKCE verifier was kept');
  await tid('tab-servers').waitFor();
  await page.screenshot({ path: path.join(SHOTS, '02-signed-in.png'), fullPage: true });

  // 3. A callback whose state does not match is refused, and nothing is redeemed.
  await page.evaluate(() => sessionStorage.removeItem('mcp-aggregator.token'));
  await page.goto(BASE + '/ui/?code=forged&state=forged');
  await tid('login-error').filter({ hasText: 'state' }).waitFor();
  await page.screenshot({ path: path.join(SHOTS, '03-forged.png'), fullPage: true });
} finally {
  await browser.close();
}
if (problems.length) {
  console.error('problems:\n' + problems.join('\n'));
  process.exit(1);
}
console.log('console oidc OK');
