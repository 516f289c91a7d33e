'use strict';
// A persistent skill: one process serves every invocation. The client
// library is offered to every skill at /run/sandbox/lib (NODE_PATH).
const sandbox = require('sandbox-ipc');

sandbox.onInvoke(async ({ op, path, content }) => {
  switch (op) {
    case 'read':
      return { path, content: (await sandbox.fs.read(path)).toString() };
    case 'list':
      return { path, entries: await sandbox.fs.list(path) };
    case 'write': {
      const dir = path.split('/').slice(0, -1).join('/');
      if (dir) {
        try { await sandbox.fs.mkdir(dir); } catch (err) { if (!/exists/.test(err.message)) throw err; }
      }
      return sandbox.fs.write(path, content || '');
    }
    default:
      throw new Error(`unknown op ${op}`);
  }
});
