// A streamable HTTP MCP server with tasks (MCP 2025-11-25), built on the TypeScript SDK that server-everything
// uses, for the Go tests of durable tasks. Unlike server-everything, whose tasks belong to the session that
// created them, its tasks live in one store shared by every session (created without a session): a client that
// lost its session (the aggregator node that followed the task died) follows the task from a new one, as a
// backend that keeps its tasks server-side allows.
//   countdown {ms, text}: taskSupport "required"; the task completes after ms with text.
//   quick {text}:         taskSupport "optional"; answers text at once, or as a task.
//   plain {text}:         no task support (execution absent).
// Usage: PORT=N node task-backend.mjs   (listens on 127.0.0.1:N, endpoint /mcp)
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryTaskStore, InMemoryTaskMessageQueue } from '@modelcontextprotocol/sdk/experimental/tasks';
import { z } from 'zod';

// SharedTaskStore creates every task without a session, so that any session may read, wait for or cancel it.
class SharedTaskStore extends InMemoryTaskStore {
  async createTask(taskParams, requestId, request) {
    return super.createTask(taskParams, requestId, request, undefined);
  }
}

const taskStore = new SharedTaskStore();
const queue = new InMemoryTaskMessageQueue();

function newServer() {
  const server = new McpServer({ name: 'task-backend', version: '1.0.0' }, {
    capabilities: { tools: {}, tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
    taskStore, taskMessageQueue: queue,
  });
  const text = (t) => ({ content: [{ type: 'text', text: t }] });
  server.experimental.tasks.registerToolTask('countdown', {
    description: 'Completes after ms milliseconds with text (a task only).',
    inputSchema: { ms: z.number().int().min(0), text: z.string() },
    execution: { taskSupport: 'required' },
  }, {
    createTask: async ({ ms, text: t }, extra) => {
      const task = await extra.taskStore.createTask({ ttl: 600000, pollInterval: 200 });
      setTimeout(() => {
        taskStore.storeTaskResult(task.taskId, 'completed', text(`countdown done: ${t}`)).catch(() => {});
      }, ms);
      return { task };
    },
    getTask: async (_args, extra) => extra.taskStore.getTask(extra.taskId),
    getTaskResult: async (_args, extra) => extra.taskStore.getTaskResult(extra.taskId),
  });
  server.experimental.tasks.registerToolTask('quick', {
    description: 'Answers text (as a task when asked).',
    inputSchema: { text: z.string() },
    execution: { taskSupport: 'optional' },
  }, {
    createTask: async ({ text: t }, extra) => {
      const task = await extra.taskStore.createTask({ ttl: 600000, pollInterval: 200 });
      await extra.taskStore.storeTaskResult(task.taskId, 'completed', text(`quick: ${t}`));
      return { task };
    },
    getTask: async (_args, extra) => extra.taskStore.getTask(extra.taskId),
    getTaskResult: async (_args, extra) => extra.taskStore.getTaskResult(extra.taskId),
  });
  server.registerTool('plain', { description: 'Answers text.', inputSchema: { text: z.string() } },
    async ({ text: t }) => text(`plain: ${t}`));
  return server;
}

const sessions = new Map();
const port = Number(process.env.PORT || 3011);
createServer(async (req, res) => {
  if (!req.url.startsWith('/mcp')) {
    res.writeHead(404).end();
    return;
  }
  const sid = req.headers['mcp-session-id'];
  let transport = sid ? sessions.get(sid) : undefined;
  if (!transport) {
    if (sid || req.method !== 'POST') {
      res.writeHead(404, { 'content-type': 'application/json' })
        .end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }));
      return;
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => sessions.set(id, transport),
    });
    transport.onclose = () => { if (transport.sessionId) sessions.delete(transport.sessionId); };
    await newServer().connect(transport);
  }
  await transport.handleRequest(req, res);
}).listen(port, '127.0.0.1', () => console.log(`task-backend listening on ${port}`));
