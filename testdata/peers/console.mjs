// Drives the operators' console (/ui/) in a real headless Chromium through playwright-core, against a running
// daemon. Run by cmd/aggregator's TestConsoleInBrowser, which starts the daemon and its backends and passes:
//   BASE_URL      the daemon's REST origin (http://127.0.0.1:PORT)
//   ADMIN_TOKEN   an admin token; CLIENT_TOKEN a client token
//   CHROMIUM      the browser binary (Debian's chromium)
//   SHOTS         a directory for screenshots
//   STDIO_COMMAND and STDIO_ARGS (newline-separated): a stdio MCP server (server-everything) to register
//   LISTED        the name of a server registered beforehand, which the page must list
//   BROKEN        the name of a server registered beforehand that cannot connect
//   PINNED        the name of a server registered beforehand (pinning on) whose tool "forecast" changes its
//                 description on a POST to CHANGE_URL
//   PER_USER      the id of a per_user server, whose credential page (#credential=<id>) the admin fills in
// Screenshots of every step go to SHOTS (the live figures and the actor view among them).
// Every request the page makes outside BASE_URL is refused and fails the run (the console must work offline), and
// so does any error the page logs (a CSP violation, an exception).
import { chromium } from 'playwright-core';
import path from 'node:path';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const BASE = env('BASE_URL');
const SHOTS = env('SHOTS');
const NAME = 'ui-everything';
const problems = [];
let step = 0;

const browser = await chromium.launch({ executablePath: env('CHROMIUM'), args: ['--no-sandbox', '--disable-gpu', '--no-first-run'] });
try {
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  // Nothing but the daemon: a request elsewhere (a CDN, a font) is refused and reported.
  await ctx.route('**/*', (route) => {
    const url = route.request().url();
    if (url.startsWith(BASE + '/')) return route.continue();
    problems.push('request outside the daemon: ' + url);
    return route.abort();
  });
  const page = await ctx.newPage();
  page.setDefaultTimeout(30000);
  page.on('console', (m) => { if (m.type() === 'error' && !/status of 4\d\d/.test(m.text())) problems.push('console error: ' + m.text()); });
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  const shot = async (name) => {
    step++;
    const file = path.join(SHOTS, `${String(step).padStart(2, '0')}-${name}.png`);
    await page.screenshot({ path: file, fullPage: true });
    console.log('screenshot', file);
  };
  const tid = (id) => page.getByTestId(id);

  // 1. The page loads and, with auth on, asks for a token.
  await page.goto(BASE + '/ui/');
  await tid('token').waitFor();
  await shot('login');
  await tid('token').fill('wrong-token-wrong-token');
  await tid('sign-in').click();
  await tid('login-error').waitFor();
  await tid('token').fill(env('ADMIN_TOKEN'));
  await tid('sign-in').click();
  await tid('whoami').filter({ hasText: 'admin' }).waitFor();
  if (await page.getByText('Loading the console').count()) problems.push('the loading placeholder stayed');

  // 2. It lists the servers registered beforehand, with their live status.
  const listed = tid('server-' + env('LISTED'));
  await listed.getByTestId('status').filter({ hasText: /^CONNECTED$/ }).waitFor();
  // A server that cannot connect shows ERROR and its last error in the list.
  const broken = tid('server-' + env('BROKEN'));
  await broken.getByTestId('status').filter({ hasText: /^ERROR$/ }).waitFor({ timeout: 60000 });
  await page.waitForFunction((name) => {
    const c = document.querySelector(`[data-testid="server-${name}"] [data-testid="last-error"]`);
    return c && c.textContent.trim().length > 0;
  }, env('BROKEN'), { timeout: 30000 });
  await shot('servers');

  // 2b. Live figures and actors (issue 29): calls to the listed server (five answered, one refused by the backend
  // for a missing argument) show in its detail as charts with real numbers, its state change on the same axis; the
  // Actors tab shows the supervision tree with the server's actor, its state, mailbox depth and owner.
  const callTool = async (args) => {
    for (let i = 0; i < 60; i++) {
      const r = await fetch(BASE + '/api/v1/tools/call', { method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + env('ADMIN_TOKEN') },
        body: JSON.stringify({ name: env('LISTED') + '.echo', arguments: args }) });
      if (r.status !== 404) return r.status; // 404: its tools are not routable yet
      await new Promise((res) => setTimeout(res, 500));
    }
    return 404;
  };
  for (let i = 0; i < 5; i++) {
    const status = await callTool({ message: 'figure ' + i });
    if (status !== 200) problems.push('call to echo answered ' + status);
  }
  await callTool({});
  await listed.click();
  await tid('figures').waitFor();
  await page.waitForFunction(() => {
    const n = (id) => Number((document.querySelector(`[data-testid="${id}"]`) || {}).textContent);
    const max = (id) => Number((document.querySelector(`[data-testid="${id}"]`) || { getAttribute: () => 0 }).getAttribute('data-max'));
    return n('fig-calls-window') >= 6 && max('chart-calls') > 0 && max('chart-latency') > 0 && n('fig-errors-window') >= 1;
  }, null, { timeout: 30000 });
  if (Number(await tid('state-band').getAttribute('data-changes')) < 1) problems.push('no state change on the state band of a server connected minutes ago');
  if ((await tid('chart-calls').locator('rect').count()) < 1) problems.push('the calls chart draws no bar');
  if ((await tid('chart-latency').locator('path').count()) !== 2) problems.push('the latency chart does not draw p50 and p95');
  const p95 = await tid('fig-p95').textContent();
  if (!/^[0-9.]+ ms$/.test(p95.trim())) problems.push('no p95 shown: ' + p95);
  await tid('figures').scrollIntoViewIfNeeded();
  await shot('live-figures');
  await tid('tab-actors').click();
  const sa = tid('actor-server-' + env('LISTED'));
  await sa.getByTestId('actor-state').filter({ hasText: /^CONNECTED$/ }).waitFor();
  if (!/^\d+$/.test((await sa.getByTestId('actor-mailbox').first().textContent()).trim())) problems.push('no mailbox depth for the server actor');
  for (const kind of ['router', 'discovery', 'placement', 'registry']) {
    if (!(await tid('actor-' + kind).count())) problems.push('the actor tree has no ' + kind);
  }
  if (!(await tid('actor-placement').locator(`[data-testid="actor-server-${env('LISTED')}"]`).count())) problems.push('the server actor is not under the placement');
  const owner = (await tid('owner-' + env('LISTED')).getByTestId('owner').textContent()).trim();
  if (!owner || owner.startsWith('none')) problems.push('no owner node for ' + env('LISTED'));
  await shot('actors');
  await tid('tab-servers').click();

  // 3. Register a server through the form: first a bad name, whose error shows next to the name field.
  await tid('tab-register').click();
  await tid('f-transport').selectOption('STDIO');
  await tid('f-name').fill('Not A Valid Name');
  await tid('f-command').fill(env('STDIO_COMMAND'));
  await tid('f-args').fill(env('STDIO_ARGS'));
  await tid('f-env').fill('CONSOLE_SECRET=s3cret-value');
  await tid('f-submit').click();
  await tid('error-name').waitFor();
  await shot('register-field-error');
  await tid('f-name').fill(NAME);
  await tid('f-submit').click();

  // 4. Back on the list, it becomes CONNECTED and its tools appear.
  const row = tid('server-' + NAME);
  await row.getByTestId('status').filter({ hasText: /^CONNECTED$/ }).waitFor({ timeout: 60000 });
  await page.waitForFunction((name) => {
    const r = document.querySelector(`[data-testid="server-${name}"] [data-testid="tool-count"]`);
    return r && Number(r.textContent) > 0;
  }, NAME, { timeout: 60000 });
  await row.click();
  await tid('server-detail').waitFor();
  const cfg = await tid('connection-config').textContent();
  if (cfg.includes('s3cret-value') || !cfg.includes('***')) problems.push('connection_config not masked in the detail view: ' + cfg);
  await tid('history').getByText('CONNECTED', { exact: true }).first().waitFor();
  await shot('server-detail');

  // 5. Search: the real search API, with scores.
  await tid('tab-search').click();
  await tid('search-query').fill('echo a message back');
  await tid('search-run').click();
  await tid('hit-' + NAME + '.echo').waitFor();
  const score = Number(await tid('hit-' + NAME + '.echo').getByTestId('score').textContent());
  if (!(score > 0)) problems.push('search score is not positive: ' + score);
  await shot('search');

  // 6. Try a tool: the form is built from the echo tool's input schema; the result is shown.
  await tid('tab-servers').click();
  await tid('server-' + NAME).click();
  await tid('try-echo').click();
  await tid('run-tool').click();
  await tid('arg-error-message').waitFor(); // message is required
  await tid('arg-message').fill('hello from the console');
  await tid('run-tool').click();
  await tid('tool-text').filter({ hasText: 'hello from the console' }).waitFor();
  await shot('try-tool');

  // 7. Disconnect and connect again: the list follows the status live; edit the description.
  await tid('disconnect').click();
  await row.getByTestId('status').filter({ hasText: /^DISCONNECTED$/ }).waitFor();
  await tid('connect').click();
  await row.getByTestId('status').filter({ hasText: /^CONNECTED$/ }).waitFor();
  await tid('refresh').click();
  await tid('action-message').filter({ hasText: 'Refresh: Tool discovery initiated' }).waitFor();
  await tid('edit').click();
  await tid('f-description').fill('registered from the console');
  // Changing a connection field while a secret is still masked is refused in the form, next to the field.
  await tid('f-cwd').fill('/tmp');
  await tid('f-submit').click();
  await tid('error-env').filter({ hasText: 'Still masked' }).waitFor();
  await tid('f-cwd').fill('');
  await tid('f-submit').click();
  await row.getByText('registered from the console').waitFor();
  await tid('server-detail').waitFor();
  const cfgAfter = await tid('connection-config').textContent();
  if (!cfgAfter.includes('CONSOLE_SECRET')) problems.push('editing the description changed connection_config: ' + cfgAfter);
  await shot('edited');

  // 8. Delete it, with confirmation.
  await tid('delete').click();
  await tid('confirm-delete').waitFor();
  await shot('confirm-delete');
  await tid('confirm-delete-yes').click();
  await row.waitFor({ state: 'detached' });
  await shot('deleted');

  // 9. Curation of a server (admin): a deny filter hides a tool from what clients find (the server's search box)
  // and marks it in the tool list; mode none brings it back. An override shows its exposed name beside the
  // original. Pinning is on (a server registered now) with no pending change.
  const LISTED = env('LISTED');
  await tid('tab-servers').click();
  await tid('server-' + LISTED).click();
  await tid('curation').waitFor();
  await tid('no-changes').waitFor();
  if (!(await tid('pin-enabled').isChecked())) problems.push('pinning is not on for a server registered now');
  // searchEcho searches the server's tools until the echo tool is (or is not) found, as the search index follows
  // the routing table.
  const searchEcho = async (want) => {
    for (let i = 0; i < 30; i++) {
      const run = Number((await tid('server-search-results').getAttribute('data-run').catch(() => null)) || 0);
      await tid('server-search-query').fill('echo a message back');
      await tid('server-search-run').click();
      await page.locator(`[data-testid="server-search-results"][data-run="${run + 1}"]`).waitFor();
      if ((await tid('server-hit-echo').count() > 0) === want) return;
      await page.waitForTimeout(300);
    }
    problems.push(`the echo tool is ${want ? 'still not' : 'still'} found after the filter change`);
  };
  await searchEcho(true);
  // A deny filter without patterns: the 422's error is shown next to the patterns.
  await tid('cf-mode').selectOption('deny');
  await tid('cf-patterns').fill('');
  await tid('cf-save').click();
  await tid('error-cf-patterns').waitFor();
  await tid('cf-patterns').fill('echo');
  await tid('cf-save').click();
  await tid('cf-message').filter({ hasText: 'Filter saved' }).waitFor();
  await tid('tool-' + LISTED + '.echo').getByTestId('hidden-badge').waitFor();
  await searchEcho(false);
  await shot('curation-filter');
  await tid('cf-mode').selectOption('none');
  await tid('cf-save').click();
  await tid('tool-' + LISTED + '.echo').getByTestId('hidden-badge').waitFor({ state: 'detached' });
  await searchEcho(true);
  // An override: a bad exposed name is refused next to its field; a good one shows beside the original name.
  await tid('override-echo').click();
  await tid('o-exposed').fill('not a name');
  await tid('o-save').click();
  await tid('error-o-exposed').waitFor();
  await shot('override-field-error');
  await tid('o-exposed').fill('say_back');
  await tid('o-readOnlyHint').selectOption('true');
  await tid('o-save').click();
  await tid('tool-' + LISTED + '.echo').getByTestId('exposed-name').filter({ hasText: 'say_back' }).waitFor();
  await shot('curation-override-and-changes');
  await tid('override-echo').click();
  await tid('o-remove').click();
  await tid('tool-' + LISTED + '.echo').getByTestId('exposed-name').waitFor({ state: 'detached' });
  // A backend changes a tool's description: the change is held (pinning), listed with its diff, and approved with
  // the hash shown.
  await tid('server-' + env('PINNED')).click();
  await tid('no-changes').waitFor();
  const changed = await fetch(env('CHANGE_URL'), { method: 'POST' });
  if (changed.status !== 204) problems.push('the backend did not change its tool: ' + changed.status);
  await tid('refresh').click();
  const change = tid('change-forecast');
  await change.getByTestId('diff').getByText('/description').waitFor({ timeout: 30000 });
  await change.getByTestId('diff').getByText('now sending your files elsewhere', { exact: false }).waitFor();
  await shot('pending-change');
  await tid('approve-forecast').click();
  await tid('change-message').filter({ hasText: 'Approved forecast' }).waitFor();
  await tid('no-changes').waitFor();

  // 10. Profiles: a selector with nothing in it and a negative token budget are refused next to them; the profile is
  // created with its tool count, token budget and tools; deleting it while a client token is bound is refused (409
  // PROFILE_IN_USE, shown); an edit of its clients keeps its budget, another clears it; then it goes.
  await tid('tab-profiles').click();
  await tid('profile-new').click();
  await tid('p-name').fill('ui-profile');
  await tid('p-description').fill('echo and the getters');
  await tid('p-clients').fill('viewer');
  await tid('p-token-budget').fill('-5');
  await tid('p-submit').click();
  await tid('error-p-selector-0').waitFor();
  await tid('error-p-token-budget').filter({ hasText: 'token_budget must be between 0 and' }).waitFor();
  await shot('profile-field-error');
  await tid('p-server-0').fill(LISTED);
  await tid('p-tools-0').fill('echo get-*');
  await tid('p-token-budget').fill('1200');
  await tid('p-submit').click();
  const prow = tid('profile-ui-profile');
  await page.waitForFunction(() => {
    const c = document.querySelector('[data-testid="profile-ui-profile"] [data-testid="profile-tool-count"]');
    return c && Number(c.textContent) > 1;
  }, null, { timeout: 30000 });
  if ((await prow.getByTestId('profile-endpoint').inputValue()) !== '/mcp/profiles/ui-profile') problems.push('profile endpoint not shown');
  if ((await prow.getByTestId('profile-budget').textContent()).trim() !== '1200') problems.push('profile token budget not listed');
  await tid('profile-token-budget').filter({ hasText: '1200 tokens' }).waitFor();
  await tid('profile-tools').getByText(LISTED + '.echo', { exact: true }).waitFor();
  await shot('profiles');
  await tid('profile-delete').click();
  await tid('confirm-profile-delete-yes').click();
  await tid('profile-delete-error').filter({ hasText: 'PROFILE_IN_USE' }).filter({ hasText: 'viewer' }).waitFor();
  await shot('profile-in-use');
  await tid('profile-edit').click();
  if ((await tid('p-token-budget').inputValue()) !== '1200') problems.push('the edit form does not show the token budget');
  await tid('p-clients').fill('');
  await tid('p-submit').click();
  await tid('profile-detail').waitFor();
  await tid('profile-token-budget').filter({ hasText: '1200 tokens' }).waitFor();
  await tid('profile-edit').click();
  await tid('p-token-budget').fill('');
  await tid('p-submit').click();
  await tid('profile-token-budget').filter({ hasText: "the daemon's" }).waitFor();
  await prow.getByTestId('profile-budget').filter({ hasText: 'default' }).waitFor();
  await shot('profile-budget-cleared');
  await tid('profile-delete').click();
  await tid('confirm-profile-delete-yes').click();
  await prow.waitFor({ state: 'detached' });

  // 11. The audit log shows what was done.
  await tid('tab-audit').click();
  for (const ev of ['server.registered', 'server.disconnected', 'server.connected', 'server.updated', 'server.removed',
    'server.tool_filter_updated', 'profile.created', 'profile.deleted']) {
    await tid('audit').getByText(ev).first().waitFor();
  }
  await shot('audit');

  // 12. Import: a dry run of a Claude Desktop file reports per entry, with the name mapping.
  await tid('tab-import').click();
  await tid('import-text').fill(JSON.stringify({ mcpServers: {
    'Imported One': { command: env('STDIO_COMMAND'), args: env('STDIO_ARGS').split('\n') },
    bad: { type: 'websocket', url: 'wss://example.invalid' },
  } }));
  await tid('import-dry').click();
  await tid('import-report').getByText('Dry run: 1 created, 0 skipped, 1 invalid, 0 failed').waitFor();
  await tid('import-report').getByText('imported-one').waitFor();
  await tid('import-report').getByText(/Unknown transport/).waitFor();
  await tid('export-run').click();
  await tid('export-text').getByText(/everything-sse/).waitFor();
  await shot('import-dry-run');

  // 12b. The page a URL elicitation opens for a per_user server: the caller stores their own credential.
  if (process.env.PER_USER) {
    await page.goto(BASE + '/ui/#credential=' + encodeURIComponent(process.env.PER_USER) + '&elicitation=e2e');
    await tid('credential-page').waitFor();
    await tid('credential-secret').fill('console-own-secret');
    await shot('credential');
    await tid('credential-save').click();
    await tid('credential-stored').waitFor();
    if (await tid('credential-secret').count()) problems.push('the secret field is still shown after storing it');
  }

  // 13. A client-scope token sees read-only views: no admin tab, no admin button, no curation control.
  const client = await browser.newContext();
  await client.route('**/*', (route) => (route.request().url().startsWith(BASE + '/') ? route.continue() : route.abort()));
  const cp = await client.newPage();
  cp.setDefaultTimeout(30000);
  await cp.goto(BASE + '/ui/');
  await cp.getByTestId('token').fill(env('CLIENT_TOKEN'));
  await cp.getByTestId('sign-in').click();
  await cp.getByTestId('read-only').waitFor();
  await cp.getByTestId('server-' + env('LISTED')).click();
  await cp.getByTestId('server-detail').waitFor();
  await cp.getByTestId('tools').waitFor();
  for (const id of ['tab-register', 'tab-audit', 'tab-profiles', 'tab-actors', 'delete', 'connect', 'curation', 'cf-save', 'pin-save', 'override-echo']) {
    if (await cp.getByTestId(id).count()) problems.push('client scope sees ' + id);
  }
  const clientShot = path.join(SHOTS, '99-client-read-only.png');
  await cp.screenshot({ path: clientShot, fullPage: true });
  console.log('screenshot', clientShot);
  await client.close();
} catch (e) {
  problems.push('step failed: ' + (e && e.stack ? e.stack : e));
} finally {
  await browser.close();
}
if (problems.length) {
  console.error(problems.join('\n'));
  process.exit(1);
}
console.log('console OK');
