// The MCP Tasks client of @modelcontextprotocol/ext-tasks (on the TypeScript SDK v2 client, 2025-11-25 handshake)
// for the Go tests of a task's input: it calls TOOL as a task (preference "require") with an input handler that
// answers an elicitation with ANSWER_JSON; before answering, it reads the task from a second connection of the
// same caller (a task snapshot, tasks/get), and reads it again once the task settled. Prints one JSON line:
// {"kind", "taskId", "asked", "askedTaskId", "seenStatus", "seenMessage", "status", "text", "afterStatus"}
// or {"error": ...}.
// Usage: node ext-tasks-input-client.mjs URL TOOL ARGS_JSON ANSWER_JSON
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import {
  createApplicationInputHandler, createTaskSessionFromClient, resultFromTaskOutcome,
} from '@modelcontextprotocol/ext-tasks/client';

const [url, tool, argsJSON, answerJSON] = process.argv.slice(2);

async function connect(capabilities, onInputRequest) {
  const client = new Client({ name: 'ext-tasks-input-client', version: '1.0.0' },
    { capabilities, versionNegotiation: { mode: 'legacy' } });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const session = createTaskSessionFromClient(client, { endpointId: 'aggregator-under-test', onInputRequest });
  return { client, session };
}

const textOf = (result) => (result?.content || []).find((c) => c.type === 'text')?.text ?? null;

try {
  const out = {};
  let observer;
  const onInputRequest = createApplicationInputHandler({
    elicitation: async (request, context) => {
      out.asked = request.params?.message ?? null;
      out.askedTaskId = context.taskId ?? null;
      const view = await observer.session.task(context.taskId).snapshot();
      out.seenStatus = view.status;
      out.seenMessage = view.statusMessage ?? null;
      return JSON.parse(answerJSON);
    },
    sampling: async () => { throw new Error('this client does not sample'); },
    roots: async () => ({ roots: [] }),
  });
  const main = await connect({ elicitation: {} }, onInputRequest);
  observer = await connect({});
  const execution = await main.session.callTool(tool, JSON.parse(argsJSON), { task: { preference: 'require' } });
  out.kind = execution.kind;
  out.taskId = execution.handle?.taskId ?? null;
  const { outcome } = await execution.settle();
  out.status = outcome.status;
  out.text = outcome.status === 'completed' ? textOf(resultFromTaskOutcome(outcome)) : null;
  out.afterStatus = (await observer.session.task(out.taskId).snapshot()).status;
  for (const c of [main, observer]) {
    await c.session.close();
    await c.client.close();
  }
  console.log(JSON.stringify(out));
} catch (err) {
  console.log(JSON.stringify({ error: String(err && err.stack || err) }));
  process.exit(1);
}
