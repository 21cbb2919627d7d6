// Package logutil is the logging package of Go Pulsar Functions on Magnetar,
// with the public shape of Apache Pulsar's
// github.com/apache/pulsar/pulsar-function-go/logutil, so that a function
// ports by changing its import path only:
//
//	log "github.com/magnetar-dev/magnetar/client/functions/logutil"
//
// Info, Infof, Debug, Debugf, Warn, Warnf, Error, Errorf, Fatal and Fatalf
// write one line each to stderr, "2006/01/02 15:04:05.000 [level] message",
// at or above the level named by the LOGGING_LEVEL environment variable
// (trace, debug, info, warn, error, fatal; default info). Fatal and Fatalf
// then end the process with status 1. When the function has a log topic,
// the running instance (package pf) also publishes every written line there,
// one message per line.
//
// Differences from Pulsar's logutil: it is not built on logrus, so the
// logrus-specific exports (TextFormatter, the StrEntry buffer the instance
// drains) are not provided, and lines carry no file:line.
//
// All functions are safe for concurrent use.
package logutil
