// The official TypeScript SDK v2 client (@modelcontextprotocol/client,
// installed in ../mcp-peers/node_modules from its committed lockfile),
// pinned to MCP 2026-07-28, driving a server over streamable HTTP.
//
// Usage: node client2026.mjs URL TOKEN PLAN.json
//
// The plan is {"calls": [{"name", "arguments"}], "elicitation": {...}}:
// the client declares form elicitation and accepts every elicitation
// request with the plan's content (the SDK fulfils a 2026-07-28
// input_required answer through that handler and retries the call). It
// prints one JSON object: {"protocolVersion", "tools": [names],
// "calls": [{"name", "result"} or {"name", "error"}], "asked": [messages]}.
import { readFileSync } from 'node:fs';
import { Client, StreamableHTTPClientTransport } from '../mcp-peers/node_modules/@modelcontextprotocol/client/dist/index.mjs';

const [url, token, planFile] = process.argv.slice(2);
const plan = JSON.parse(readFileSync(planFile, 'utf8'));
const client = new Client(
  { name: 'ts-sdk-v2-client', version: '2.4.0' },
  { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: { pin: '2026-07-28' } } },
);
const asked = [];
client.setRequestHandler('elicitation/create', async (req) => {
  asked.push(req.params.message);
  return { action: 'accept', content: plan.elicitation ?? {} };
});
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
const out = { protocolVersion: client.getNegotiatedProtocolVersion(), calls: [] };
out.tools = (await client.listTools()).tools.map((t) => t.name);
for (const c of plan.calls ?? []) {
  try {
    out.calls.push({ name: c.name, result: await client.callTool({ name: c.name, arguments: c.arguments }) });
  } catch (e) {
    out.calls.push({ name: c.name, error: { code: e.code, message: String(e.message ?? e) } });
  }
}
out.asked = asked;
console.log(JSON.stringify(out));
await client.close();
