// A real MCP client that no one here wrote, driving `backplane serve`: the
// official TypeScript SDK client (@modelcontextprotocol/sdk, installed in
// ../mcp-peers/node_modules from its committed lockfile), imported by
// relative path so that no install step is needed here.
//
// Usage:
//   node client.mjs --plan PLAN.json --stdio -- COMMAND [ARG...]
//   node client.mjs --plan PLAN.json --http URL [--token TOKEN]
//
// The plan is {"client": {...}, "calls": [{"name": TOOL, "arguments": {...}}, ...],
// "steps": [{"op": ..., ...}, ...]}. The client connects, lists every tool
// (following cursors), makes the calls in order, then the steps (op
// templates, resources, read {uri}, complete {ref, argument}, subscribe {uri},
// unsubscribe {uri}), and prints one JSON object on stdout:
//   {"protocolVersion", "serverInfo", "capabilities", "tools": [...],
//    "calls": [{"name", "result"} or {"name", "error": {"code", "message"}},
//              with "progress": [...] when the call asked for it],
//    "steps": [{"op", "result"} or {"op", "error"}],
//    "requests": [{"method", "params"}]}
// or, when it cannot connect, {"connectError": {"code", "message"}}, exit 3.
//
// "client" declares capabilities and the fixed answers to the server's
// requests (each request is recorded in "requests"):
//   "sampling": {"model", "text"}    sampling/createMessage answered with text
//   "elicitation": {"content": {...}, "byPrefix": [{"prefix", "content"}]}
//                                    elicitation/create accepted with content,
//                                    or with the content of the first entry
//                                    whose prefix starts the request's message
//   "roots": [{"uri", "name"}]       roots/list answered with these roots
// A call may also say:
//   "progress": true           collect its progress notifications, as the
//       SDK hands them over ("progress") and as they arrived ("wire":
//       {"progress": [values], "afterAnswer": N})
//   "cancelAfterProgress": N   abort it (AbortController) at the Nth progress
//   "resumeAfterProgress": N   (--http only) at the Nth progress, drop the
//       connection (close the transport), then resume on a new transport of
//       the same session with the last event id (Last-Event-ID) as the
//       resumption token; the call's record gets "resumedWith": TOKEN and
//       "progressBeforeDrop": N, and later calls and steps use the new
//       connection. Just before resuming it writes "mcp-client: resuming
//       TOOL from event TOKEN" on stderr.
//   "abandonAfterMs": N       (--http only) start the call, wait N ms (and,
//       with "abandonWhenFile": PATH, until that file exists: a test says
//       when the server has the call), close the transport
//       (transport.close(): its fetches are aborted) and stop: the report
//       is printed with the calls so far, this one's record says
//       "abandoned": true, and the process exits at once, as a client that
//       gives up and quits does. Just before closing it writes
//       "mcp-client: abandoning TOOL" on stderr.
import { existsSync, readFileSync } from 'node:fs';
import { Client } from '../mcp-peers/node_modules/@modelcontextprotocol/sdk/dist/esm/client/index.js';
import { StdioClientTransport } from '../mcp-peers/node_modules/@modelcontextprotocol/sdk/dist/esm/client/stdio.js';
import { StreamableHTTPClientTransport } from '../mcp-peers/node_modules/@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js';
import {
  CallToolResultSchema, CreateMessageRequestSchema, ElicitRequestSchema, ListRootsRequestSchema,
} from '../mcp-peers/node_modules/@modelcontextprotocol/sdk/dist/esm/types.js';

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

function transportFor(opts, sessionId) {
  if (opts.command) {
    const [command, ...args] = opts.command;
    // The server's stderr (its log) goes to ours; stdout is the protocol.
    return new StdioClientTransport({ command, args, cwd: process.cwd(), env: { ...process.env }, stderr: 'inherit' });
  }
  const headers = opts.token ? { Authorization: `Bearer ${opts.token}` } : {};
  return new StreamableHTTPClientTransport(new URL(opts.http), { requestInit: { headers }, sessionId });
}

// tapWire records the messages a connected transport sends and delivers,
// so that a call's progress can be reported as it arrived on the wire:
// the SDK hands notifications to their handlers a microtask later than
// answers, and drops a progress notification read in the same chunk as
// its call's answer (1.32.2, shared/protocol.js _onnotification and
// _onresponse), which says nothing of the server.
function tapWire(transport) {
  const sent = [];
  const received = [];
  const send = transport.send.bind(transport);
  transport.send = (msg, options) => { sent.push(msg); return send(msg, options); };
  const deliver = transport.onmessage;
  transport.onmessage = (msg, extra) => { received.push(msg); deliver?.(msg, extra); };
  return {
    sent,
    // progressOf reports the progress of the first tools/call sent at or
    // after index mark: {"progress": [values in arrival order],
    // "afterAnswer": how many arrived after the call's answer}.
    progressOf(mark) {
      const call = sent.slice(mark).find((m) => m.method === 'tools/call');
      const out = { progress: [], afterAnswer: 0 };
      if (!call) return out;
      let answered = false;
      for (const m of received) {
        if (m.id === call.id && m.method === undefined) answered = true;
        else if (m.method === 'notifications/progress' && m.params?.progressToken === call.params?._meta?.progressToken) {
          out.progress.push(m.params.progress);
          if (answered) out.afterAnswer++;
        }
      }
      return out;
    },
  };
}

// newClient is a client with the plan's capabilities and request handlers;
// every request the server makes of it is pushed onto requests.
function newClient(spec, requests) {
  const capabilities = {};
  if (spec.sampling) capabilities.sampling = {};
  if (spec.elicitation) capabilities.elicitation = {};
  if (spec.roots) capabilities.roots = {};
  const client = new Client({ name: 'backplane-ts-test-client', version: '0.0.0' }, { capabilities });
  if (spec.sampling) {
    client.setRequestHandler(CreateMessageRequestSchema, (req) => {
      requests.push({ method: req.method, params: req.params });
      return { model: spec.sampling.model, role: 'assistant', content: { type: 'text', text: spec.sampling.text } };
    });
  }
  if (spec.elicitation) {
    client.setRequestHandler(ElicitRequestSchema, (req) => {
      requests.push({ method: req.method, params: req.params });
      const special = (spec.elicitation.byPrefix ?? []).find((a) => req.params.message?.startsWith(a.prefix));
      return { action: 'accept', content: special ? special.content : spec.elicitation.content };
    });
  }
  if (spec.roots) {
    client.setRequestHandler(ListRootsRequestSchema, (req) => {
      requests.push({ method: req.method, params: req.params ?? null });
      return { roots: spec.roots };
    });
  }
  return client;
}

function errorOf(e) {
  return { code: e?.code ?? null, message: String(e?.message ?? e) };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const spec = opts.plan.client ?? {};
  const requests = [];
  let client = newClient(spec, requests);
  let transport = transportFor(opts);
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
  const wire = tapWire(transport);
  const out = {
    protocolVersion,
    serverInfo: client.getServerVersion(),
    capabilities: client.getServerCapabilities(),
    tools: [],
    calls: [],
    steps: [],
    requests,
  };
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    out.tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  for (const c of opts.plan.calls ?? []) {
    const rec = { name: c.name };
    if (c.resumeAfterProgress) {
      const r = await callDropAndResume(opts, spec, requests, client, transport, protocolVersion, c, rec);
      client = r.client;
      transport = r.transport;
      out.calls.push(rec);
      continue;
    }
    if (c.abandonAfterMs) {
      if (!opts.http) throw new Error('abandonAfterMs needs --http');
      // The call's promise is left unsettled on purpose: the client quits.
      client.callTool({ name: c.name, arguments: c.arguments }).catch(() => {});
      await new Promise((resolve) => setTimeout(resolve, c.abandonAfterMs));
      while (c.abandonWhenFile && !existsSync(c.abandonWhenFile)) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      process.stderr.write(`mcp-client: abandoning ${c.name}\n`);
      await transport.close();
      rec.abandoned = true;
      out.calls.push(rec);
      process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0));
      return;
    }
    const options = {};
    const abort = new AbortController();
    if (c.progress || c.cancelAfterProgress) {
      rec.progress = [];
      options.onprogress = (p) => {
        rec.progress.push(p);
        if (rec.progress.length === c.cancelAfterProgress) abort.abort(new Error('cancelled by the plan'));
      };
    }
    if (c.cancelAfterProgress) options.signal = abort.signal;
    const mark = wire.sent.length;
    try {
      rec.result = await client.callTool({ name: c.name, arguments: c.arguments }, undefined, options);
    } catch (e) {
      rec.error = errorOf(e);
    }
    if (rec.progress) rec.wire = wire.progressOf(mark);
    out.calls.push(rec);
  }
  const ops = {
    templates: () => client.listResourceTemplates({}),
    resources: () => client.listResources({}),
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

// callDropAndResume makes the call c over HTTP and, at its
// c.resumeAfterProgress-th progress notification, drops the connection by
// closing the transport (its fetches are aborted: the server sees the
// request's connection end), then opens a new transport on the same session
// and resumes the call's stream from the last event id it saw. It returns
// the new client and transport.
async function callDropAndResume(opts, spec, requests, client, transport, protocolVersion, c, rec) {
  if (!opts.http) throw new Error('resumeAfterProgress needs --http');
  let token;
  let dropped;
  const drop = new Promise((resolve) => { dropped = resolve; });
  rec.progress = [];
  const first = client.callTool({ name: c.name, arguments: c.arguments }, undefined, {
    onresumptiontoken: (t) => { token = t; },
    onprogress: (p) => {
      rec.progress.push(p);
      if (rec.progress.length === c.resumeAfterProgress) dropped();
    },
  });
  // The first call's promise is rejected when its connection closes (or
  // fulfilled, if the answer came before the drop: the record says so).
  const firstOutcome = first.then((result) => ({ result }), (e) => ({ error: errorOf(e) }));
  const raced = await Promise.race([drop.then(() => null), firstOutcome]);
  if (raced) {
    rec.answeredBeforeDrop = raced;
    return { client, transport };
  }
  rec.progressBeforeDrop = rec.progress.length;
  const sessionId = transport.sessionId;
  await transport.close();
  rec.firstConnection = await firstOutcome;
  rec.resumedWith = token ?? null;
  const next = newClient(spec, requests);
  const nextTransport = transportFor(opts, sessionId);
  await next.connect(nextTransport); // the session exists: no initialize
  if (protocolVersion) nextTransport.setProtocolVersion(protocolVersion);
  try {
    if (!token) throw new Error('no resumption token was seen before the drop');
    // A test that must act only once the call has resumed waits for this.
    process.stderr.write(`mcp-client: resuming ${c.name} from event ${token}\n`);
    rec.result = await next.request({ method: 'tools/call', params: { name: c.name, arguments: c.arguments } },
      CallToolResultSchema, { resumptionToken: token });
  } catch (e) {
    rec.error = errorOf(e);
  }
  return { client: next, transport: nextTransport };
}

main().catch((e) => {
  process.stderr.write(`mcp-client: ${e?.stack ?? e}\n`);
  process.exitCode = 2;
});
