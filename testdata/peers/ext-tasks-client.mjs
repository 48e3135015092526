// The MCP Tasks client of @modelcontextprotocol/ext-tasks (on the TypeScript SDK v2 client, 2025-11-25 handshake)
// for the Go tests: it calls TOOL as a task (preference "require": it fails unless the server offers tasks and the
// tool may run as one), settles it, then starts it again, hands the task over, disconnects, and resumes it on a new
// connection, and finally starts SLOW_TOOL as a task and cancels it. Prints one JSON line:
// {"kind", "taskId", "status", "text", "listed", "resumedStatus", "resumedText", "cancelledStatus", "notified"}
// (notified: "taskId status" of each notifications/tasks/status the client heard)
// or {"error": ...}.
// Usage: node ext-tasks-client.mjs URL TOOL ARGS_JSON SLOW_TOOL SLOW_ARGS_JSON
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { createTaskSessionFromClient, resultFromTaskOutcome } from '@modelcontextprotocol/ext-tasks/client';

const [url, tool, argsJSON, slowTool, slowArgsJSON] = process.argv.slice(2);

const notified = []; // "taskId status" of each notifications/tasks/status heard, on any connection

async function connect() {
  const client = new Client({ name: 'ext-tasks-client', version: '1.0.0' },
    { capabilities: {}, versionNegotiation: { mode: 'legacy' } });
  client.fallbackNotificationHandler = async (n) => {
    if (n.method === 'notifications/tasks/status') notified.push(`${n.params?.taskId} ${n.params?.status}`);
  };
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const session = createTaskSessionFromClient(client, { endpointId: 'aggregator-under-test' });
  return { client, session };
}

const textOf = (result) => (result?.content || []).find((c) => c.type === 'text')?.text ?? null;

try {
  const out = {};
  let { client, session } = await connect();
  const execution = await session.callTool(tool, JSON.parse(argsJSON), { task: { preference: 'require' } });
  out.kind = execution.kind;
  out.taskId = execution.handle?.taskId ?? null;
  const { outcome } = await execution.settle();
  out.status = outcome.status;
  out.text = outcome.status === 'completed' ? textOf(resultFromTaskOutcome(outcome)) : null;
  out.listed = (await session.listTasks()).tasks.map((t) => t.taskId);

  // Durable: the client goes away while the task runs and comes back on another connection.
  const second = await session.callTool(tool, JSON.parse(argsJSON), { task: { preference: 'require' } });
  let reference;
  await second.handoff((ref) => { reference = ref; });
  await session.close();
  await client.close();
  ({ client, session } = await connect());
  const resumed = await session.resumeTask(reference);
  const settled = await resumed.settle();
  out.resumedStatus = settled.outcome.status;
  out.resumedText = settled.outcome.status === 'completed' ? textOf(resultFromTaskOutcome(settled.outcome)) : null;

  const slow = await session.callTool(slowTool, JSON.parse(slowArgsJSON), { task: { preference: 'require' } });
  await slow.cancel();
  out.cancelledStatus = (await slow.settle()).outcome.status;

  await session.close();
  await client.close();
  out.notified = notified;
  console.log(JSON.stringify(out));
} catch (err) {
  console.log(JSON.stringify({ error: String(err && err.stack || err) }));
  process.exit(1); // an open connection would keep the process alive
}
