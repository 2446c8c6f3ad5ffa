// Runs dynalite's own command line (node_modules/dynalite/cli.js, the
// version package-lock.json pins) in a process that outlives a client
// going away mid-request: dynalite throws an 'aborted' ECONNRESET from a
// request's error event, uncaught, and the whole server exits — a test
// whose context ends while a 256 KiB item is still being sent would take
// every later test down with it. That error is logged and the server
// goes on; any other uncaught error still ends it.
'use strict'
process.on('uncaughtException', function (err) {
  if (err && (err.code === 'ECONNRESET' || err.message === 'aborted')) {
    console.error('dynalite: a client went away mid-request (' + err.message + '): ignored')
    return
  }
  console.error(err)
  process.exit(1)
})
require('dynalite/cli.js')
