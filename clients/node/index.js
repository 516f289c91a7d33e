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
  if (!message || message.jsonrpc !== '2.0' || !pending.has(message.id)) return;
  const { resolve, reject } = pending.get(message.id);
  pending.delete(message.id);
  if (pending.size === 0) channel().unref();
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

module.exports = {
  call,
  fs,
  query: (action) => call('permission.query', { action }),
  SandboxError,
};
