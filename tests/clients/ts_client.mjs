// Drive mcp-host with the official TypeScript SDK client (@modelcontextprotocol/sdk, 2025-11-25) and
// print a JSON report. Usage: node ts_client.mjs TARGET...  (an http URL, or a stdio command line)
// Run with NODE_PATH pointing at the node_modules holding the SDK.
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(path.resolve(process.env.NODE_PATH ?? '.', 'noop.js'));
const resolve = (m) => require.resolve(m);
const { Client } = await import(resolve('@modelcontextprotocol/sdk/client/index.js'));
const { StdioClientTransport } = await import(resolve('@modelcontextprotocol/sdk/client/stdio.js'));
const { StreamableHTTPClientTransport } = await import(resolve('@modelcontextprotocol/sdk/client/streamableHttp.js'));
const { CreateMessageRequestSchema, ElicitRequestSchema } = await import(resolve('@modelcontextprotocol/sdk/types.js'));

const target = process.argv.slice(2);
const transport = target[0].startsWith('http')
  ? new StreamableHTTPClientTransport(new URL(target[0]))
  : new StdioClientTransport({ command: target[0], args: target.slice(1), stderr: 'inherit' });
const client = new Client({ name: 'mcp-host-interop', version: '1.0.0' },
  { capabilities: { sampling: {}, elicitation: { form: {} } } });
client.setRequestHandler(CreateMessageRequestSchema, async (req) => ({
  role: 'assistant',
  content: { type: 'text', text: `ts sampled: ${req.params.messages.map((m) => m.content.text ?? '').join('')}` },
  model: 'ts-model',
  stopReason: 'endTurn',
}));
client.setRequestHandler(ElicitRequestSchema, async () => ({
  action: 'accept', content: { username: 'ts-user', email: 'ts@example.com' },
}));
client.onerror = (e) => console.error('client error:', e?.message ?? e);
// (A tool's progress must not arrive in the same read as its result: SDK v1 handles notifications on a
// microtask and responses synchronously, so it would drop them. `delay_ms` spaces them out, as real
// tools do.)
await client.connect(transport);
const report = { tools: [], calls: {}, progress: [] };
const { tools } = await client.listTools();
report.tools = tools.map((t) => t.name).sort();
const text = (r) => (r.content ?? []).map((c) => c.text ?? '').join('');
for (const [name, args] of Object.entries({
  current_time: { zone: 'Asia/Tokyo' },
  json_query: { json: '{"a":[1,2]}', path: '$.a[0]' },
  hash_text: { text: 'hello' },
  echo: { text: 'grüße ✓' },
})) {
  if (report.tools.includes(name)) {
    const r = await client.callTool({ name, arguments: args });
    report.calls[name] = { is_error: Boolean(r.isError), text: text(r).slice(0, 200) };
  }
}
if (report.tools.includes('count')) {
  const r = await client.callTool({ name: 'count', arguments: { steps: 2, delay_ms: 30 } }, undefined, {
    onprogress: (p) => report.progress.push([p.progress, p.total]),
  });
  report.calls.count = { is_error: Boolean(r.isError), text: text(r) };
}
if (report.tools.includes('test_elicitation')) {
  report.resources = (await client.listResources()).resources.map((r) => r.uri).sort();
  report.templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate).sort();
  report.reads = {};
  for (const uri of ['time://zones', 'test://static-text', 'test://template/123/data']) {
    const r = await client.readResource({ uri });
    report.reads[uri] = { uri: r.contents[0].uri, mime: r.contents[0].mimeType, text: (r.contents[0].text ?? '').slice(0, 200) };
  }
  try {
    await client.readResource({ uri: 'test://nonexistent' });
    report.missing = null;
  } catch (e) {
    report.missing = { code: e.code, data: e.data };
  }
  report.prompts = (await client.listPrompts()).prompts.map((p) => p.name).sort();
  const got = await client.getPrompt({ name: 'test_prompt_with_arguments', arguments: { arg1: 'a', arg2: 'b' } });
  report.prompt_text = got.messages.map((m) => m.content.text ?? '').join('');
  const done = await client.complete({ ref: { type: 'ref/prompt', name: 'test_prompt_with_arguments' },
    argument: { name: 'arg1', value: 'test' } });
  report.completion = done.completion.values;
  const asked = await client.callTool({ name: 'test_elicitation', arguments: { message: 'Who are you?' } });
  report.calls.test_elicitation = { is_error: Boolean(asked.isError), text: text(asked) };
  const sampled = await client.callTool({ name: 'test_sampling', arguments: { prompt: 'capital of France?' } });
  report.calls.test_sampling = { is_error: Boolean(sampled.isError), text: text(sampled) };
}
await client.close();
console.log(JSON.stringify(report));
