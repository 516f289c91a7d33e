'use strict';
// Client for the sandbox broker channel. No dependencies.
//
// `sandbox run` announces the channel as NODE_CHANNEL_FD with JSON
// serialization, so Node itself already speaks line-delimited JSON on it:
// requests go out with process.send() and answers arrive as 'message'
// events. The channel is unref'd while nothing is pending, so a script
// exits normally when its work is done.
//
//   const sandbox = require('./clients/node');
//   const text = await sandbox.fs.read('README.md');

let nextId = 1;
const pending = new Map();

class SandboxError extends Error {
  constructor(error) {
    super(`${error.message} (code ${error.code})`);
    this.code = error.code;
    this.rule = error.data && error.data.rule;
  }
}

function channel() {
  if (typeof process.send !== 'function' || !process.channel) {
    throw new SandboxError({ code: -32603, message: 'no broker channel: not running inside `sandbox run`' });
  }
  return process.channel;
}

function onMessage(message) {
  // Requests from the supervisor (skill.invoke) carry a method and are
  // handled by onInvoke; their ids may look like ours.
  if (!message || message.jsonrpc !== '2.0' || 'method' in message || !pending.has(message.id)) return;
  const { resolve, reject } = pending.get(message.id);
  pending.delete(message.id);
  if (pending.size === 0 && !serving) channel().unref();
  if (message.error) reject(new SandboxError(message.error));
  else resolve(message.result);
}

let listening = false;
function call(method, params) {
  const ch = channel();
  if (!listening) {
    process.on('message', onMessage);
    listening = true;
  }
  const id = nextId++;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject });
    ch.ref();
    process.send({ jsonrpc: '2.0', id, method, params: params || {} });
  });
}

const fs = {
  async read(path) {
    const r = await call('fs.read', { path });
    return r.encoding === 'base64' ? Buffer.from(r.content, 'base64') : r.content;
  },
  write(path, content, { append = false } = {}) {
    if (Buffer.isBuffer(content)) {
      return call('fs.write', { path, content: content.toString('base64'), encoding: 'base64', append });
    }
    return call('fs.write', { path, content, append });
  },
  async list(path = '.') { return (await call('fs.list', { path })).entries; },
  stat(path) { return call('fs.stat', { path }); },
  mkdir(path) { return call('fs.mkdir', { path }); },
  delete(path) { return call('fs.delete', { path }); },
};

// Serve invocations: `handler(params)` (sync or async) returns the result;
// a throw becomes an error answer. The channel stays referenced, so the
// process lives until the supervisor closes it (on-demand skills after
// their answer, persistent ones when they are stopped).
let serving = false;
function onInvoke(handler) {
  serving = true;
  const ch = channel();
  ch.ref();
  process.on('message', async (message) => {
    if (!message || message.jsonrpc !== '2.0' || message.method !== 'skill.invoke') return;
    const reply = (body) => process.send({ jsonrpc: '2.0', id: message.id, ...body });
    try {
      reply({ result: (await handler(message.params || {})) ?? null });
    } catch (err) {
      reply({ error: { code: err instanceof SandboxError ? err.code : -32000, message: String(err && err.message || err) } });
    }
  });
  process.on('disconnect', () => process.exit(0));
}

module.exports = {
  call,
  onInvoke,
  fs,
  query: (action) => call('permission.query', { action }),
  SandboxError,
};
