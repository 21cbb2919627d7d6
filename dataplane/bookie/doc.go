// Package bookie is the bookie server: a storage node that stores ledger
// entries for ledger clients over the wire protocol (package wire), into a
// storage.Storage (the disk storage in package storage, or memstorage in
// tests). cmd/magnetar's "bookie" subcommand builds one from flags; tests
// start them in-process on loopback ports.
//
// # Serving
//
// Each connection has a reader goroutine that decodes requests and executes
// them, and a writer goroutine that encodes responses and flushes when its
// queue drains. ADD is asynchronous: the storage's done callback queues the
// response, so adds complete in durability order, not request order. READ,
// READ_LAC, FENCE and DELETE_LEDGER are executed by the reader in order; a
// fencing READ and FENCE wait for the fence to be durable (storage.Fence)
// before answering. A connection holds at most Config.MaxInflightPerConn
// requests between reading and answering; at the limit its reader stops
// reading, which back-pressures that client only.
//
// The server verifies each ADD's checksum (wire.Checksum) before storing it.
// Storage errors map to wire errors in one table (errors.go).
//
// A frame that cannot be decoded is answered with an error frame (with its
// request id when the header was intact, 0 otherwise) after in-flight
// requests are answered, and the connection is closed; other connections
// are unaffected.
//
// With Config.TLS the listener serves TLS only: the reader goroutine first
// runs the TLS handshake (at most TLSHandshakeTimeout) and closes the
// connection when it fails. TLS is all or nothing per cluster: the
// registration carries no TLS flag, because ledger metadata names bookies
// by their one address (see package wire).
//
// # Stored entry format
//
// The data the server hands to the storage for one entry is, big-endian:
//
//	lac i64 | checksum u32 | payload
//
// so a read returns the entry's LAC, checksum and payload as written.
//
// # Cookie and registration
//
// With a metadata store, Start first checks the instance cookie (Cookie):
// JSON in <DataDir>/COOKIE.json and at /bookies/cookies/<id>. A new bookie
// writes both; a start where only one exists, or they differ, fails with
// ErrCookie naming the problem (wiped disk, disk of another bookie or
// instance, metadata reset). Then it registers an ephemeral key
// /bookies/available/<id> (a Registration) bound to a metadata session; a
// goroutine republishes it when the storage turns read-only (or writable),
// re-registers with a new session when the session is lost, and closes the
// session (removing the key) on Shutdown. ListAvailable reads the
// registrations.
//
// # Lifecycle and concurrency
//
// New validates; Start listens, checks the cookie, registers and starts the
// accept loop; Shutdown stops accepting, withdraws the registration, drains
// connections (until its context ends, then cuts them) and waits for every
// goroutine it started. The server does not close the storage or the
// metadata store. Server.mu guards the connection set; each connection's
// mu guards its response queue; neither is held while calling the storage.
package bookie
