// Several official TypeScript SDK clients, each its own connection, making
// one call each at the same time over streamable HTTP, where the server
// behind the tool asks its client for input (elicitation): each client
// answers with its own name, and only once every client has been asked, so
// that the calls are all in flight together. SDK "v1" is
// @modelcontextprotocol/sdk 1.32.2 (2025-11-25 sessions, the request comes
// as elicitation/create during the call); "v2" is
// @modelcontextprotocol/client 2.4.0 pinned to 2026-07-28 (it comes as an
// input_required answer, which the SDK fulfils and retries).
//
// Usage: node inflight.mjs v1|v2 URL TOKEN TOOL N
//
// Prints one JSON object: {"calls": [{"client", "protocolVersion",
// "result" or "error", "asked": [{"message", "meta"}]}]}.
import * as v1 from '../mcp-peers/node_modules/@modelcontextprotocol/sdk/dist/esm/client/index.js';
import * as v1http from '../mcp-peers/node_modules/@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js';
import { ElicitRequestSchema } from '../mcp-peers/node_modules/@modelcontextprotocol/sdk/dist/esm/types.js';
import * as v2 from '../mcp-peers/node_modules/@modelcontextprotocol/client/dist/index.mjs';

const [sdk, url, token, toolName, nText] = process.argv.slice(2);
const n = Number(nText);
let askedCount = 0;
let release;
const everyoneAsked = new Promise((resolve) => { release = resolve; });
const timeout = setTimeout(() => release(), 30000); // a client never asked must not hang the rest

async function one(i) {
  const name = `client-${i}`;
  const rec = { client: name, asked: [] };
  const handler = async (req) => {
    rec.asked.push({ message: req.params.message, meta: req.params._meta ?? null });
    if (++askedCount === n) release();
    await everyoneAsked;
    return { action: 'accept', content: { token: name } };
  };
  const headers = { Authorization: `Bearer ${token}` };
  let client;
  if (sdk === 'v1') {
    client = new v1.Client({ name, version: '1.32.2' }, { capabilities: { elicitation: { form: {} } } });
    client.setRequestHandler(ElicitRequestSchema, handler);
    await client.connect(new v1http.StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
    rec.protocolVersion = client.transport?.protocolVersion ?? null;
  } else {
    client = new v2.Client({ name, version: '2.4.0' },
      { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: { pin: '2026-07-28' } } });
    client.setRequestHandler('elicitation/create', handler);
    await client.connect(new v2.StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
    rec.protocolVersion = client.getNegotiatedProtocolVersion();
  }
  try {
    rec.result = sdk === 'v1'
      ? await client.callTool({ name: toolName, arguments: {} }, undefined, { timeout: 60000 })
      : await client.callTool({ name: toolName, arguments: {} }, { timeout: 60000 });
  } catch (e) {
    rec.error = { code: e.code, message: String(e.message ?? e) };
  }
  await client.close();
  return rec;
}

const calls = await Promise.all(Array.from({ length: n }, (_, i) => one(i + 1)));
clearTimeout(timeout);
console.log(JSON.stringify({ calls }));
