// The MCP Tasks client of @modelcontextprotocol/ext-tasks over revision 2026-07-28 (the tasks extension,
// io.modelcontextprotocol/tasks), on the TypeScript SDK v2 client pinned to 2026-07-28, for the Go tests.
// A V2 task session needs the host's raw request path (rawDispatch) and the request framing the SDK client was
// initialised with (v2RequestFraming): rawDispatch here POSTs the framed JSON-RPC request to the endpoint as the
// revision's streamable HTTP says (Mcp-Protocol-Version, Mcp-Method, and the Mcp-Name the extension sets) and
// reads the answer (JSON or an SSE stream).
// Steps, each through the ext-tasks client: (1) TOOL as a task (preference "require": it fails unless the server
// answers with a task), settled; (2) the same, handed over, the connection closed, resumed on a new one; (3)
// INPUT_TOOL as a task whose backend asks for input: the input handler reads the task from a second connection
// (a snapshot: input_required with the question), then answers ANSWER_JSON through tasks/update; (4) TOOL as a
// task cancelled at once. Prints one JSON line:
// {"discovered", "kind", "taskId", "status", "text", "resumedStatus", "resumedText", "asked", "askedTaskId",
//  "seenStatus", "seenMessage", "inputStatus", "inputText", "cancelledStatus"} or {"error": ...}.
// Usage: node ext-tasks-v2-client.mjs URL TOOL ARGS_JSON INPUT_TOOL INPUT_ARGS_JSON ANSWER_JSON
// Optional environment: EXT_TASKS_TOKEN, a bearer token sent on every request; EXT_TASKS_CALL_URL, where the
// tools/call requests go instead of URL (another node of a cluster: the tasks then run there, while the client
// reads, answers and cancels them through URL).
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import {
  createApplicationInputHandler, createTaskSessionFromClient, resultFromTaskOutcome,
} from '@modelcontextprotocol/ext-tasks/client';

const [url, tool, argsJSON, inputTool, inputArgsJSON, answerJSON] = process.argv.slice(2);
const protocolVersion = '2026-07-28';
const clientInfo = { name: 'ext-tasks-v2-client', version: '1.0.0' };
const auth = process.env.EXT_TASKS_TOKEN ? { authorization: `Bearer ${process.env.EXT_TASKS_TOKEN}` } : {};
const callURL = process.env.EXT_TASKS_CALL_URL || url;

let nextId = 1;
// rawDispatch sends one framed request and answers {kind: "result", result} or {kind: "error", error}.
async function rawDispatch(request, options = {}) {
  const id = `raw-${nextId++}`;
  const headers = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': protocolVersion,
    'mcp-method': request.method,
    ...(options.context?.headers ?? {}),
    ...auth,
  };
  if (request.method === 'tools/call') headers['mcp-name'] = request.params.name;
  const res = await fetch(request.method === 'tools/call' ? callURL : url, {
    method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id, ...request }), signal: options.signal,
  });
  const text = await res.text();
  let msg;
  if ((res.headers.get('content-type') || '').includes('text/event-stream')) {
    for (const event of text.split(/\r?\n\r?\n/)) {
      const data = event.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
      if (!data) continue;
      const m = JSON.parse(data);
      if (m.id === id) msg = m;
    }
  } else if (text) {
    msg = JSON.parse(text);
  }
  if (process.env.RAW_DEBUG) console.error('RAW', request.method, JSON.stringify(request.params?.taskId ?? request.params?.name), '->', JSON.stringify(msg).slice(0, 3000));
  if (!msg) throw new Error(`HTTP ${res.status} without an answer to ${request.method}: ${text.slice(0, 300)}`);
  return msg.error ? { kind: 'error', error: msg.error } : { kind: 'result', result: msg.result };
}

async function connect(clientCapabilities, onInputRequest) {
  const client = new Client(clientInfo, { capabilities: clientCapabilities, versionNegotiation: { mode: { pin: protocolVersion } } });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: auth } }));
  const session = createTaskSessionFromClient(client, {
    endpointId: 'aggregator-under-test', onInputRequest, rawDispatch,
    v2RequestFraming: { protocolVersion, clientInfo, clientCapabilities },
  });
  return { client, session };
}

const textOf = (result) => (result?.content || []).find((c) => c.type === 'text')?.text ?? null;
const closeAll = async (...conns) => {
  for (const c of conns) {
    await c.session.close();
    await c.client.close();
  }
};

try {
  const out = {};
  let main = await connect({});
  out.discovered = Object.keys(main.client.getServerCapabilities()?.extensions ?? {});

  // (1) a task to its end
  const execution = await main.session.callTool(tool, JSON.parse(argsJSON), { task: { preference: 'require' } });
  out.kind = execution.kind;
  out.taskId = execution.handle?.taskId ?? null;
  const { outcome } = await execution.settle();
  out.status = outcome.status;
  out.text = outcome.status === 'completed' ? textOf(resultFromTaskOutcome(outcome)) : String(outcome.error?.stack ?? outcome.status);

  // (2) durable: the client goes away while the task runs and comes back on another connection
  const second = await main.session.callTool(tool, JSON.parse(argsJSON), { task: { preference: 'require' } });
  let reference;
  await second.handoff((ref) => { reference = ref; });
  await second.result().catch(() => {}); // detached: closing the session now does not cancel the task
  await closeAll(main);
  main = await connect({});
  const resumed = await (await main.session.resumeTask(reference)).settle();
  out.resumedStatus = resumed.outcome.status;
  out.resumedText = resumed.outcome.status === 'completed' ? textOf(resultFromTaskOutcome(resumed.outcome)) : null;

  // (3) the backend asks for input while the task runs: tasks/get's inputRequests, answered by tasks/update
  // (skipped when INPUT_TOOL is "-")
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
  });
  if (inputTool !== '-') {
    const asking = await connect({ elicitation: {} }, onInputRequest);
    observer = await connect({});
    const inputExecution = await asking.session.callTool(inputTool, JSON.parse(inputArgsJSON), { task: { preference: 'require' } });
    const inputSettled = await inputExecution.settle();
    out.inputStatus = inputSettled.outcome.status;
    out.inputText = inputSettled.outcome.status === 'completed' ? textOf(resultFromTaskOutcome(inputSettled.outcome)) : String(inputSettled.outcome.error?.stack ?? inputSettled.outcome.status);
    await closeAll(asking, observer);
  }

  // (4) cancelled
  const slow = await main.session.callTool(tool, JSON.parse(argsJSON), { task: { preference: 'require' } });
  await slow.cancel();
  out.cancelledStatus = (await slow.settle()).outcome.status;

  await closeAll(main);
  console.log(JSON.stringify(out));
} catch (err) {
  console.log(JSON.stringify({ error: String(err && err.stack || err) }));
  process.exit(1); // an open connection would keep the process alive
}
