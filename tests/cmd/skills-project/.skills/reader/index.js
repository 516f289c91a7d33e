process.on('message', () => {});
