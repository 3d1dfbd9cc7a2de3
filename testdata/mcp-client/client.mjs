// A real MCP client that no one here wrote, driving `backplane serve`: the
// official TypeScript SDK client (@modelcontextprotocol/sdk, installed in
// ../mcp-peers/node_modules from its committed lockfile), imported by
// relative path so that no install step is needed here.
//
// Usage:
//   node client.mjs --plan PLAN.json --stdio -- COMMAND [ARG...]
//   node client.mjs --plan PLAN.json --http URL [--token TOKEN]
//
// The plan is {"calls": [{"name": TOOL, "arguments": {...}}, ...],
// "steps": [{"op": ..., ...}, ...]}. The client connects, lists every tool
// (following cursors), makes the calls in order, then the steps (op
// templates, read {uri}, complete {ref, argument}, subscribe {uri},
// unsubscribe {uri}), and prints one JSON object on stdout:
//   {"protocolVersion", "serverInfo", "capabilities", "tools": [...],
//    "calls": [{"name", "result"} or {"name", "error": {"code", "message"}}],
//    "steps": [{"op", "result"} or {"op", "error"}]}
// or, when it cannot connect, {"connectError": {"code", "message"}}, exit 3.
import { readFileSync } from 'node:fs';
import { Client } from '../mcp-peers/node_modules/@modelcontextprotocol/sdk/dist/esm/client/index.js';
import { StdioClientTransport } from '../mcp-peers/node_modules/@modelcontextprotocol/sdk/dist/esm/client/stdio.js';
import { StreamableHTTPClientTransport } from '../mcp-peers/node_modules/@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js';

function parseArgs(argv) {
  const opts = { plan: { calls: [] } };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--plan') opts.plan = JSON.parse(readFileSync(argv[++i], 'utf8'));
    else if (a === '--http') opts.http = argv[++i];
    else if (a === '--token') opts.token = argv[++i];
    else if (a === '--stdio') {
      if (argv[i + 1] !== '--') throw new Error('--stdio -- COMMAND [ARG...]');
      opts.command = argv.slice(i + 2);
      break;
    } else throw new Error(`unknown argument ${a}`);
  }
  if (!opts.http && !opts.command) throw new Error('--http URL or --stdio -- COMMAND is required');
  return opts;
}

function transportFor(opts) {
  if (opts.command) {
    const [command, ...args] = opts.command;
    // The server's stderr (its log) goes to ours; stdout is the protocol.
    return new StdioClientTransport({ command, args, cwd: process.cwd(), env: { ...process.env }, stderr: 'inherit' });
  }
  const headers = opts.token ? { Authorization: `Bearer ${opts.token}` } : {};
  return new StreamableHTTPClientTransport(new URL(opts.http), { requestInit: { headers } });
}

function errorOf(e) {
  return { code: e?.code ?? null, message: String(e?.message ?? e) };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const client = new Client({ name: 'backplane-ts-test-client', version: '0.0.0' }, { capabilities: {} });
  const transport = transportFor(opts);
  // The negotiated version is handed to the transport; record it on the way.
  let protocolVersion = null;
  const setVersion = transport.setProtocolVersion?.bind(transport);
  transport.setProtocolVersion = (v) => { protocolVersion = v; setVersion?.(v); };
  try {
    await client.connect(transport);
  } catch (e) {
    process.stdout.write(JSON.stringify({ connectError: errorOf(e) }) + '\n');
    process.exitCode = 3;
    try { await transport.close(); } catch {}
    return;
  }
  const out = {
    protocolVersion,
    serverInfo: client.getServerVersion(),
    capabilities: client.getServerCapabilities(),
    tools: [],
    calls: [],
    steps: [],
  };
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    out.tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  for (const c of opts.plan.calls ?? []) {
    try {
      const result = await client.callTool({ name: c.name, arguments: c.arguments });
      out.calls.push({ name: c.name, result });
    } catch (e) {
      out.calls.push({ name: c.name, error: errorOf(e) });
    }
  }
  const ops = {
    templates: () => client.listResourceTemplates({}),
    read: (s) => client.readResource({ uri: s.uri }),
    complete: (s) => client.complete({ ref: s.ref, argument: s.argument }),
    subscribe: (s) => client.subscribeResource({ uri: s.uri }),
    unsubscribe: (s) => client.unsubscribeResource({ uri: s.uri }),
  };
  for (const s of opts.plan.steps ?? []) {
    try {
      if (!ops[s.op]) throw new Error(`unknown step ${s.op}`);
      out.steps.push({ op: s.op, result: await ops[s.op](s) });
    } catch (e) {
      out.steps.push({ op: s.op, error: errorOf(e) });
    }
  }
  await client.close();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => {
  process.stderr.write(`mcp-client: ${e?.stack ?? e}\n`);
  process.exitCode = 2;
});
