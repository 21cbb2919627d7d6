// Package logsink passes the function's log lines from package logutil to
// the running instance, which publishes them to the function's log topic.
// logutil writes every line it emits here; pf installs the sink while a log
// topic producer is open. Set and Write are safe for concurrent use; the
// sink must not block.
package logsink
