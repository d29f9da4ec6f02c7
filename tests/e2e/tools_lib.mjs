// Fixtures of the tool-call tests (tools*.test.mjs), one per API: the same
// two tools in each API's shape, the question they answer, the check of a
// call's arguments, and the servers they run on (a random-weight model
// under the shared chat templates, through --chat-template-file). Not a
// test file itself (the runner takes *.test.mjs).
import assert from 'node:assert/strict';
import path from 'node:path';

import { env, startServer } from './lib.mjs';

// Bounded values, so that a random model's call must finish.
const weatherSchema = {
  type: 'object',
  properties: {
    city: { type: 'string', enum: ['Paris', 'Oslo', 'Lima'] },
    days: { type: 'integer', minimum: 1, maximum: 7 },
  },
  required: ['city', 'days'],
  additionalProperties: false,
};
const searchSchema = {
  type: 'object',
  properties: { q: { type: 'string', maxLength: 12 }, safe: { type: 'boolean' } },
  required: ['q', 'safe'],
  additionalProperties: false,
};
const weatherTool = { name: 'get_weather', description: 'Get the weather for a city' };
const searchTool = { name: 'search', description: 'Search the web' };

/** OpenAI chat's (and Ollama's) tools: {type, function: {name, description, parameters}}. */
export const chatTools = {
  weather: { type: 'function', function: { ...weatherTool, parameters: weatherSchema } },
  search: { type: 'function', function: { ...searchTool, parameters: searchSchema } },
};
/** Anthropic's custom tools: {name, description, input_schema}. */
export const anthropicTools = {
  weather: { ...weatherTool, input_schema: weatherSchema },
  search: { ...searchTool, input_schema: searchSchema },
};
/** The Responses API's flat function tools; get_weather strict, search not. */
export const responsesTools = {
  weather: { type: 'function', ...weatherTool, parameters: weatherSchema, strict: true },
  search: { type: 'function', ...searchTool, parameters: searchSchema, strict: false },
};

export const question = 'What is the weather in Paris for 3 days?';
export const msgs = [{ role: 'user', content: question }];

/** A call's arguments v (an object) valid for its tool; show: the message of a failure. */
export function checkToolArgs(name, v, show = JSON.stringify(v)) {
  assert.equal(typeof v, 'object', show);
  if (name === 'get_weather') {
    assert.deepEqual(Object.keys(v).sort(), ['city', 'days'], show);
    assert.ok(['Paris', 'Oslo', 'Lima'].includes(v.city), show);
    assert.ok(Number.isInteger(v.days) && v.days >= 1 && v.days <= 7, show);
  } else {
    assert.equal(name, 'search');
    assert.deepEqual(Object.keys(v).sort(), ['q', 'safe'], show);
    assert.equal(typeof v.q, 'string');
    assert.ok([...v.q].length <= 12, show);
    assert.equal(typeof v.safe, 'boolean');
  }
  return v;
}

// The chat templates the servers run under (null: the model's own, which
// has no tool-call format).
const templates = {
  hermes: 'Qwen-Qwen2.5-7B-Instruct.jinja', // Qwen2.5's <tool_call> JSON
  coder: 'Qwen3-Coder.jinja', // <function=...><parameter=...>
  qwen3: 'Qwen-Qwen3-0.6B.jinja', // <think> reasoning, enable_thinking
  mistral: 'mistralai-Mistral-Nemo-Instruct-2407.jinja', // [TOOL_CALLS], ids of 9 alphanumerics
  plain: null,
};

/** Starts syn-qwen2 servers, one per name (hermes, coder, qwen3, mistral, plain), as {name: server}. */
export async function startToolServers(names) {
  const tdir = path.join(env().shared, 'chat-templates');
  const servers = await Promise.all(names.map((n) => startServer({
    model: 'syn-qwen2-Q4_K_M.gguf',
    args: templates[n] ? ['--chat-template-file', path.join(tdir, templates[n])] : [],
  })));
  return Object.fromEntries(names.map((n, i) => [n, servers[i]]));
}

/** Stops the servers that started; each must exit 0. */
export async function stopToolServers(servers) {
  const r = await Promise.all(servers.map((s) => s?.stop()));
  for (const x of r) if (x) assert.equal(x.code, 0, `power serve exit ${JSON.stringify(x)}`);
}
