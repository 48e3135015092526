// A real TypeScript SDK (v2) client for the Go tests: connects to an MCP endpoint over streamable HTTP in the
// revision asked for ("legacy": the 2025 handshake; or a pinned revision such as 2026-07-28), answers elicitation
// with {name: "ts"}, lists the tools, calls one, and prints one JSON line:
// {"protocolVersion": ..., "tools": [...], "text": <first text content of the result>, "isError": bool}.
// Usage: node ts-client.mjs URL MODE TOOL [ARGS_JSON]
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, mode, tool, argsJSON] = process.argv.slice(2);
const versionNegotiation = mode === 'legacy' ? { mode: 'legacy' } : { mode: { pin: mode } };
const client = new Client({ name: 'ts-client', version: '1.0.0' },
  { capabilities: { elicitation: {} }, versionNegotiation });
client.setRequestHandler('elicitation/create', async () => ({ action: 'accept', content: { name: 'ts' } }));
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const listed = await client.listTools();
  const res = await client.callTool({ name: tool, arguments: argsJSON ? JSON.parse(argsJSON) : {} });
  const text = (res.content || []).find((c) => c.type === 'text')?.text ?? null;
  console.log(JSON.stringify({
    protocolVersion: client.getNegotiatedProtocolVersion?.() ?? client.protocolVersion ?? null,
    tools: listed.tools.map((t) => t.name), text, isError: !!res.isError,
  }));
  await client.close();
} catch (err) {
  console.log(JSON.stringify({ error: String(err && err.stack || err) }));
  process.exitCode = 1;
}
