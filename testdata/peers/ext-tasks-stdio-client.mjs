// The MCP Tasks client of @modelcontextprotocol/ext-tasks (on the TypeScript SDK v2 client, 2025-11-25 handshake)
// over stdio, for the Go tests of `aggregator stdio`: it starts COMMAND ARGS... as its server (with this process's
// whole environment), reads TOOL's execution.taskSupport from tools/list, calls TOOL as a task (preference
// "require") with an input handler that answers an elicitation with ANSWER_JSON, settles it (tasks/get until the
// end, then tasks/result), reads it once more (tasks/get), and waits (up to 10 s) for the notifications/tasks/status
// of its end. Prints one JSON line:
// {"taskSupport", "kind", "taskId", "asked", "askedTaskId", "status", "text", "afterStatus", "notified"}
// (notified: "taskId status" of each notifications/tasks/status heard) or {"error": ...}.
// Usage: node ext-tasks-stdio-client.mjs TOOL ARGS_JSON ANSWER_JSON COMMAND [ARGS...]
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import {
  createApplicationInputHandler, createTaskSessionFromClient, resultFromTaskOutcome,
} from '@modelcontextprotocol/ext-tasks/client';

const [tool, argsJSON, answerJSON, command, ...commandArgs] = process.argv.slice(2);

const textOf = (result) => (result?.content || []).find((c) => c.type === 'text')?.text ?? null;

try {
  const out = { notified: [] };
  const onInputRequest = createApplicationInputHandler({
    elicitation: async (request, context) => {
      out.asked = request.params?.message ?? null;
      out.askedTaskId = context.taskId ?? null;
      return JSON.parse(answerJSON);
    },
    sampling: async () => { throw new Error('this client does not sample'); },
    roots: async () => ({ roots: [] }),
  });
  const client = new Client({ name: 'ext-tasks-stdio-client', version: '1.0.0' },
    { capabilities: { elicitation: {} }, versionNegotiation: { mode: 'legacy' } });
  let heardEnd;
  const ended = new Promise((resolve) => { heardEnd = resolve; });
  client.fallbackNotificationHandler = async (n) => {
    if (n.method !== 'notifications/tasks/status') return;
    out.notified.push(`${n.params?.taskId} ${n.params?.status}`);
    if (n.params?.taskId === out.taskId && ['completed', 'failed', 'cancelled'].includes(n.params?.status)) heardEnd();
  };
  await client.connect(new StdioClientTransport({ command, args: commandArgs, env: { ...process.env }, stderr: 'inherit' }));
  const { tools } = await client.listTools();
  out.taskSupport = tools.find((t) => t.name === tool)?.execution?.taskSupport ?? null;
  const session = createTaskSessionFromClient(client, { endpointId: 'aggregator-under-test', onInputRequest });
  const execution = await session.callTool(tool, JSON.parse(argsJSON), { task: { preference: 'require' } });
  out.kind = execution.kind;
  out.taskId = execution.handle?.taskId ?? null;
  const { outcome } = await execution.settle();
  out.status = outcome.status;
  out.text = outcome.status === 'completed' ? textOf(resultFromTaskOutcome(outcome)) : null;
  out.afterStatus = (await session.task(out.taskId).snapshot()).status;
  if (!out.notified.some((n) => n.startsWith(`${out.taskId} `) && !n.endsWith(' working') && !n.endsWith(' input_required'))) {
    await Promise.race([ended, new Promise((resolve) => setTimeout(resolve, 10000))]);
  }
  await session.close();
  await client.close();
  console.log(JSON.stringify(out));
} catch (err) {
  console.log(JSON.stringify({ error: String(err && err.stack || err) }));
  process.exit(1); // an open connection would keep the process alive
}
